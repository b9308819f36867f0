"""The app's HTML pages as Jinja templates (autoescaped): the frame, sign-in, the landing page of
runs, a run that cannot be opened, a running job, and the admin page."""

FRAME = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{{ title }} · otel-profiler</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{display:flex;gap:16px;align-items:center;padding:10px 20px;background:#1d2330;color:#fff}
header a{color:#cfe0ff;text-decoration:none} header .who{margin-left:auto}
header form{display:inline} main{padding:16px 20px}
table{border-collapse:collapse;width:100%;background:#fff} th,td{padding:6px 8px;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}
th a{color:inherit} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.corrupt td{color:#9a1c1c} tr.incomplete td{color:#8a6100}
form.filters{display:flex;flex-wrap:wrap;gap:8px;margin-bottom:12px} input,select,button{font:inherit;padding:4px 6px}
.flash{padding:8px 12px;margin-bottom:12px;background:#fff4d6;border:1px solid #e8c766}
.error{background:#fde2e2;border-color:#e79a9a} .pager{margin:10px 0;display:flex;gap:12px;align-items:center}
section{margin-bottom:24px} h2{font-size:16px}
</style></head><body>
<header><strong>otel-profiler</strong>
{% if caller %}<a href="{{ url_for('pages.landing') }}">Runs</a>
{% if caller.is_admin %}<a href="{{ url_for('pages.admin') }}">Admin</a>{% endif %}
<span class="who" id="who">{{ caller.name }} · {{ caller.team }} · {{ caller.role }}</span>
<form method="post" action="{{ url_for('pages.logout') }}"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<button id="sign-out">Sign out</button></form>{% endif %}
</header><main>
{% for category, message in get_flashed_messages(with_categories=true) %}<div class="flash {{ category }}">{{ message }}</div>{% endfor %}
{{ body | safe }}
</main></body></html>"""

LOGIN = """<h1>Sign in</h1>
<form method="post" id="login"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<p><label>User <input name="name" id="name" autocomplete="username" required></label></p>
<p><label>Password <input name="password" id="password" type="password" autocomplete="current-password" required></label></p>
<p><button type="submit" id="sign-in">Sign in</button></p></form>"""

LANDING = """<h1>Runs</h1>
<form class="filters" method="get" id="filters">
<input name="text" placeholder="search run, host, insight" value="{{ q.text }}">
<input name="user" placeholder="user" value="{{ q.user }}">
{% if caller.is_admin %}<input name="team" placeholder="team" value="{{ q.team }}">{% endif %}
<input name="service" placeholder="model / service" value="{{ q.service }}">
<label>from <input name="since" type="date" value="{{ q.since }}"></label>
<label>to <input name="until" type="date" value="{{ q.until }}"></label>
<select name="status"><option value="">any status</option>
{% for s in ("ok", "incomplete", "corrupt") %}<option {{ "selected" if q.status == s }}>{{ s }}</option>{% endfor %}</select>
<input type="hidden" name="sort" value="{{ q.sort }}"><input type="hidden" name="order" value="{{ "desc" if q.descending else "asc" }}">
<button>Filter</button></form>
<div class="pager"><span id="total">{{ total }} run{{ "" if total == 1 else "s" }}</span>
{% if q.page > 1 %}<a href="{{ link(page=q.page - 1) }}">previous</a>{% endif %}
<span>page {{ q.page }} of {{ pages }}</span>
{% if q.page < pages %}<a href="{{ link(page=q.page + 1) }}" id="next">next</a>{% endif %}</div>
{% if running %}<section id="running"><h2>Running now</h2><table><tr><th>Run</th><th>Team</th><th>Ranks</th><th>Step</th></tr>
{% for run_id, team, ranks, step in running %}<tr data-run="{{ run_id }}"><td><a href="{{ url_for('pages.live_job', run_id=run_id) }}">{{ run_id }}</a></td>
<td>{{ team }}</td><td class="num">{{ ranks }}</td><td class="num">{{ step }}</td></tr>{% endfor %}</table></section>{% endif %}
<form class="filters" method="get" action="{{ url_for('pages.diff_page') }}" id="compare">
<input name="base" placeholder="base run id" required> <input name="new" placeholder="new run id" required>
<button>Compare side by side</button></form>
<table id="runs"><thead><tr>
{% for key, label in columns %}<th>{% if key %}<a href="{{ link(sort=key, order='asc' if q.sort == key and q.descending else 'desc', page=1) }}">{{ label }}{% if q.sort == key %} {{ "▼" if q.descending else "▲" }}{% endif %}</a>{% else %}{{ label }}{% endif %}</th>{% endfor %}
</tr></thead><tbody>
{% for r in runs %}<tr class="{{ r.status }}" data-run="{{ r.run_id }}">
<td><a href="{{ url_for('pages.run_report', run_id=r.run_id) }}">{{ r.run_id }}</a></td>
<td>{{ r.user or "" }}</td><td>{{ r.team or "" }}</td><td>{{ r.host or "" }}</td><td>{{ r.start or "" }}</td>
<td class="num">{{ "%.2f s" % r.duration_s if r.duration_s is not none else "" }}</td>
<td class="num">{{ r.steps if r.steps is not none else "" }}</td><td class="num">{{ r.gpus if r.gpus is not none else "" }}</td>
<td>{% if r.status != "ok" %}<strong>{{ r.status }}</strong>: {{ r.reason }}{% else %}{{ r.top_insight }}{% endif %}
{% for label, href in r.links.items() %} <a class="link-{{ label }}" href="{{ href }}" rel="noopener noreferrer">{{ label }}</a>{% endfor %}</td></tr>
{% else %}<tr><td colspan="9">No runs{{ " match these filters" if filtered }}.</td></tr>{% endfor %}
</tbody></table>"""

RUN_PROBLEM = """<h1>{{ run_id }}</h1><div class="flash error" id="problem">This run's report cannot be built: {{ reason }}</div>
<p><a href="{{ url_for('pages.landing') }}">Back to the runs</a></p>"""

LIVE = """<h1>{{ job.run_id }}</h1>
<p id="state">{{ "Running" if job.running else "Not running" }}: team {{ job.team }}, {{ job.ranks | length }}
rank{{ "" if job.ranks | length == 1 else "s" }}, furthest step {{ job.step }}, last report {{ "%.0f" % job.seen_s }} s ago.</p>
{% if may_capture and job.running %}<form method="post" action="{{ url_for('pages.live_capture', run_id=job.run_id) }}" id="capture">
<input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<label>Capture <input name="steps" type="number" min="1" max="{{ max_steps }}" value="5" required> steps on every rank</label>
<button>Capture</button></form>{% endif %}
<section><h2>Ranks</h2><table id="ranks"><tr><th>Rank</th><th>Host</th><th>Step</th><th>Step time</th></tr>
{% for r in job.ranks %}<tr data-rank="{{ r.rank }}"><td class="num">{{ r.rank }}</td><td>{{ r.host }}</td><td class="num">{{ r.step }}</td>
<td class="num">{{ "%.1f ms" % (r.step_s * 1000) if r.step_s else "" }}</td></tr>{% endfor %}</table></section>
<section><h2>Capture requests</h2><table id="captures"><tr><th>Steps</th><th>Asked by</th><th>When (UTC)</th></tr>
{% for c in job.captures %}<tr data-capture="{{ c.id }}"><td>{{ c.first_step }}-{{ c.first_step + c.steps - 1 }}</td><td>{{ c.requested_by }}</td>
<td>{{ c.requested_at.isoformat(timespec="seconds") }}</td></tr>{% else %}<tr><td colspan="3">None yet.</td></tr>{% endfor %}</table></section>"""

ADMIN = """<h1>Admin</h1>
<section><h2>Teams</h2><table id="teams"><tr><th>Team</th><th>Users</th><th></th></tr>
{% for name, count in teams %}<tr data-team="{{ name }}"><td>{{ name }}</td><td>{{ count }}</td><td>
<form method="post" action="{{ url_for('pages.team_remove') }}"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<input type="hidden" name="name" value="{{ name }}"><button>Remove</button></form></td></tr>{% endfor %}</table>
<form method="post" action="{{ url_for('pages.team_add') }}" id="team-add"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<input name="name" placeholder="new team" required> <button>Add team</button></form></section>
<section><h2>Users</h2><table id="users"><tr><th>User</th><th>Team</th><th>Role</th><th>Password</th><th></th></tr>
{% for name, team, role, has_password in users %}<tr data-user="{{ name }}"><td>{{ name }}</td><td>{{ team }}</td><td>{{ role }}</td>
<td>{{ "set" if has_password else "none (tokens only)" }}</td><td>
<form method="post" action="{{ url_for('pages.user_role') }}"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<input type="hidden" name="name" value="{{ name }}"><select name="role">{% for r in roles %}<option {{ "selected" if r == role }}>{{ r }}</option>{% endfor %}</select> <button>Set role</button></form>
<form method="post" action="{{ url_for('pages.user_revoke') }}"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<input type="hidden" name="name" value="{{ name }}"><button>Revoke tokens</button></form>
<form method="post" action="{{ url_for('pages.user_remove') }}"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<input type="hidden" name="name" value="{{ name }}"><button class="remove">Remove</button></form></td></tr>{% endfor %}</table>
<form method="post" action="{{ url_for('pages.user_add') }}" id="user-add"><input type="hidden" name="csrf_token" value="{{ csrf_token() }}">
<input name="name" placeholder="user" required>
<select name="team">{% for name, _ in teams %}<option>{{ name }}</option>{% endfor %}</select>
<select name="role">{% for r in roles %}<option>{{ r }}</option>{% endfor %}</select>
<input name="password" type="password" placeholder="password (empty: tokens only)" autocomplete="new-password">
<button>Add user</button></form></section>
<section><h2>Audit log</h2><table id="audit"><tr><th>When (UTC)</th><th>Who</th><th>What</th><th>Whom</th><th>Detail</th></tr>
{% for e in audit %}<tr><td>{{ e.at.isoformat(timespec="seconds") }}</td><td>{{ e.actor }}</td><td>{{ e.action }}</td><td>{{ e.target }}</td><td>{{ e.detail }}</td></tr>{% endfor %}
</table></section>"""

PAGES = {"frame.html": FRAME, "login.html": LOGIN, "landing.html": LANDING, "run_problem.html": RUN_PROBLEM,
         "live.html": LIVE, "admin.html": ADMIN}
"""Template name -> source, for the app's Jinja loader (``.html`` names: autoescaped)."""
