"""What a browser or a script sees: the web pages (``pages``, their Jinja ``templates``, the links to
traces and dashboards in ``links``), the JSON API (``json_api``), a run's HTML report built and cached
on first open (``reports``), and ``server``, which puts them together and serves them.

One room because only requests reach it: it stands on ``auth`` and ``storage`` and nothing of the app
imports it except the ``serve`` command."""
