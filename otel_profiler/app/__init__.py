"""The Profiler app (``otel-profiler serve``): a web application over a profile store. Needs the
``app`` extra (``pip install -e '.[app]' in the otel-profiler clone``).

Three rooms, each importing only the ones below it:

- ``auth`` (ground floor): the database's tables (``models``), users, teams, tokens, sessions and the
  audit log (``accounts``), and who sees which run (``access``).
- ``storage``: where a store and the app's folder are (``locations``), reading a store's run folders
  (``store``) or a remote store's local mirror (``remote_store``), opening and migrating the database
  (``database``, ``migrations/``), the runs table kept in step with the store (``runs_index``) and
  receiving an uploaded run (``uploads``).
- ``web``: the pages and the JSON API (``pages``, ``templates``, ``json_api``, ``links``), a run's
  cached HTML report (``reports``), and ``server``, which puts them together and serves them.
"""
