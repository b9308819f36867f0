"""Who is asking and what they may see: the database's tables (``models``), the accounts (users,
teams, passwords, API tokens, sign-in sessions, the audit log: ``accounts``) and the access rules
(``access``), with the roles (``roles``) the command line offers.

The app's ground floor: it imports nothing else of the app. The tables live here, with the accounts,
because the access rules are written against them (a caller sees the runs whose team is theirs); the
store's reading (``storage``) and the web side (``web``) stand on it."""
