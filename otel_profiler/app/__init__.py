"""The Profiler app (``otel-profiler serve``): a web application over a profile store.

``store`` scans the store's run folders, ``database`` opens (and migrates) the database whose tables
``models`` declares, ``accounts`` holds users, teams, tokens, sessions and the audit log, ``access``
decides who sees which run, ``runs_index`` keeps the runs table in step with the store and queries it,
``reports`` builds and caches a run's HTML report, ``pages`` and ``json_api`` are the web routes and
``server`` puts them together and serves them. Needs the ``app`` extra (``pip install
'otel-profiler[app]'``).
"""
