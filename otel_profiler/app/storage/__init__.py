"""Where the runs are and how the app keeps track of them: where a store and the app's own folder are
(``locations``), reading a store's run folders (``store``) and mirroring a store behind an fsspec URL
(``remote_store``), opening and migrating the database (``database``, with ``migrations/``), the runs
table kept in step with the store (``runs_index``) and an uploaded run received into the store
(``uploads``).

One room because these are the app's files and tables, read and written without a web request; it
stands on ``auth`` (the tables, the uploader's team) and the web side (``web``) stands on it.
``locations`` is its ground: every other module here may import it, and it imports none of them."""
