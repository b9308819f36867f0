"""Capture on demand across a running job, through a real ``otel-profiler serve``: the ranks of one
run (plain processes with ``RANK``/``WORLD_SIZE``, and torchrun on CPU) report to the app, and after
``otel-profiler trigger --run RUN_ID --steps N`` every rank's window covers the same N steps. Another
team's member gets 404, a viewer 403, a run that finished one line; the request is in the audit log;
an app that cannot be reached changes nothing in the job but one warning line."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from app_support import AppServer, cli, stop_helpers, wait_until
from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import Kind
from ports import free_port

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "scripts" / "until_told.py"
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """A served empty store; alice is a member of vision, bob a viewer of vision, carol a member of nlp."""
    store = tmp_path_factory.mktemp("capture-app") / "store"
    store.mkdir()
    for team in ("vision", "nlp"):
        cli("teams", "add", team, "--store", str(store))
    tokens = {}
    for name, team, role in (("alice", "vision", "member"), ("bob", "vision", "viewer"), ("carol", "nlp", "member")):
        cli("users", "add", name, "--team", team, "--role", role, "--store", str(store), stdin=f"{name} pass 1\n")
        tokens[name] = cli("users", "token", name, "--store", str(store)).stdout.strip()
    server = AppServer(store)
    try:
        yield {"url": server.url, "store": store, "tokens": tokens}
    finally:
        server.stop()


def _env(app: dict, folder: Path, run_id: str, upload_url: str | None = None) -> dict[str, str]:
    from otel_profiler.bootstrap import SITE_DIR

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_ENABLED="true", PYTHONPATH=os.pathsep.join([SITE_DIR, str(REPO)]),
               OTEL_PROFILER_PROFILE_DIR=str(folder), OTEL_PROFILER_OUTPUT_DIR=str(folder.parent),
               OTEL_PROFILER_RUN_ID=run_id, OTEL_PROFILER_UPLOAD=upload_url or app["url"],
               OTEL_PROFILER_UPLOAD_TOKEN=app["tokens"]["alice"], OTEL_PROFILER_REMOTE_POLL_S="0.5",
               OTEL_PROFILER_STEPS="off", OTEL_PROFILER_SLOW_STEP_FACTOR="0", OTEL_PROFILER_SIGNAL="false",
               OTEL_PROFILER_ACTIVITIES="gpu,cpu_op", OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none",
               OTEL_RESOURCE_ATTRIBUTES="ml.team=vision,enduser.id=alice")
    return env


def _start(app: dict, tmp_path: Path, run_id: str, ranks: int, launcher: str) -> tuple[list[subprocess.Popen], Path]:
    folder, stop = tmp_path / run_id, tmp_path / "stop"  # named as a run's folder: uploaded under that id
    env = _env(app, folder, run_id)
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               str(JOB), str(stop)]
        return [subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)], stop
    jobs = [subprocess.Popen([sys.executable, str(JOB), str(stop)], cwd=tmp_path, text=True,
                             env=dict(env, RANK=str(r), WORLD_SIZE=str(ranks)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(ranks)]
    return jobs, stop


def _ranks(app: dict, run_id: str) -> dict:
    reply = requests.get(f"{app['url']}/api/runs/{run_id}/ranks", timeout=60,
                         headers={"Authorization": f"Bearer {app['tokens']['alice']}"})
    return reply.json() if reply.status_code == 200 else {}


def _trigger(app: dict, tmp_path: Path, who: str, run_id: str, steps: int = 3) -> subprocess.CompletedProcess:
    token_file = tmp_path / f"{who}.token"
    token_file.write_text(app["tokens"][who] + "\n")
    return subprocess.run([sys.executable, "-m", "otel_profiler", "trigger", "--run", run_id, "--steps", str(steps),
                           "--url", app["url"], "--token-file", str(token_file)],
                          capture_output=True, text=True, timeout=120)


def _finish(jobs: list[subprocess.Popen], stop: Path) -> list[tuple[int, str, str]]:
    stop.touch()
    out = []
    try:
        for job in jobs:
            stdout, stderr = job.communicate(timeout=TIMEOUT_S)
            out.append((job.returncode, stdout, stderr))
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
    return out


@pytest.fixture()
def helpers_stopped(tmp_path):
    """The detached summarizer and upload processes of the test's jobs end (or are stopped) after it."""
    yield
    stop_helpers(tmp_path)


@pytest.mark.parametrize("ranks, launcher", [(2, "plain"), (4, "torchrun")])
def test_every_rank_captures_the_same_steps(app, tmp_path, ranks, launcher, helpers_stopped):
    run_id = f"capture-{launcher}-{ranks}"
    assert _trigger(app, tmp_path, "alice", run_id).returncode == 1  # nothing reported yet: no such run
    jobs, stop = _start(app, tmp_path, run_id, ranks, launcher)
    try:
        wait_until(lambda: [r["step_s"] is not None for r in _ranks(app, run_id).get("ranks", [])] == [True] * ranks,
                   "every rank training and reporting its step time", deadline_s=TIMEOUT_S)
        other_team, viewer = _trigger(app, tmp_path, "carol", run_id), _trigger(app, tmp_path, "bob", run_id)
        assert other_team.returncode == 1 and "(404:" in other_team.stderr, other_team.stderr
        assert viewer.returncode == 1 and "(403:" in viewer.stderr, viewer.stderr
        asked = _trigger(app, tmp_path, "alice", run_id)
        assert asked.returncode == 0, asked.stderr
        first, last = map(int, re.search(r"captures steps (\d+)-(\d+)", asked.stderr).groups())
        assert last == first + 2
        wait_until(lambda: all(r["step"] > last + 1 for r in _ranks(app, run_id).get("ranks", [])),
                   "every rank past the captured steps", deadline_s=TIMEOUT_S)
    finally:
        done = _finish(jobs, stop)
    assert all(code == 0 for code, _, _ in done), [err[-2000:] for _, _, err in done]

    profile = load_profile([str(tmp_path / run_id)])
    assert sorted(r.rank for r in profile.ranks) == list(range(ranks))
    for rank in profile.ranks:
        windows = [(w["reason"], w["first_step"], w["last_step"], w["captured"]) for w in rank.meta["windows"]]
        assert windows == [("remote", first, last, True)], (rank.rank, windows)
        ops = rank.batch.of_kind(Kind.CPU_OP)
        assert "aten::addmm" in set(ops.names())  # the window captured the steps' operators
    with sqlite3.connect(next(app["store"].rglob("*.db"))) as db:
        audited = db.execute("SELECT actor, detail FROM audit_log WHERE action = 'capture.request' AND target = ?",
                             (run_id,)).fetchall()
    assert audited == [("alice", f"steps {first}-{last} on {ranks} rank(s)")]

    wait_until(lambda: requests.get(f"{app['url']}/api/runs/{run_id}", timeout=60, headers={
        "Authorization": f"Bearer {app['tokens']['alice']}"}).status_code == 200, "the run's upload at exit",
        deadline_s=TIMEOUT_S)
    late = _trigger(app, tmp_path, "alice", run_id)
    assert late.returncode == 1 and "has finished" in late.stderr and len(late.stderr.splitlines()) == 1, late.stderr


def test_an_app_that_cannot_be_reached_changes_nothing_in_the_job(app, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    args = [sys.executable, str(JOB), str(tmp_path / "never"), "60"]  # 60 steps, about 1.5 s: several polls
    plain = subprocess.run(args, env=plain_env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path)
    env = _env(app, tmp_path / "profile", "capture-dead-app", upload_url=dead)
    profiled = subprocess.run(args, env=dict(env, OTEL_PROFILER_REMOTE_POLL_S="0.2"), capture_output=True, text=True,
                              timeout=TIMEOUT_S, cwd=tmp_path)
    assert (profiled.returncode, profiled.stdout) == (plain.returncode, plain.stdout) == (0, "steps 60\n")
    ours = [line for line in profiled.stderr.splitlines() if line.startswith("otel-profiler")]
    assert len(ours) == len(profiled.stderr.splitlines()), profiled.stderr  # nothing but the profiler's lines
    assert sum("did not answer" in line for line in ours) == 1, ours  # said once, however many polls failed
    assert len(load_profile([str(tmp_path / "profile")]).ranks[0].batch.of_kind(Kind.STEP)) == 60
    stop_helpers(tmp_path, wait_s=0)  # its upload would be retried for 15 minutes


def _signed_in(app: dict, name: str) -> requests.Session:
    session = requests.Session()
    form = session.get(app["url"] + "/login", timeout=60).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    signed = session.post(app["url"] + "/login", data={"name": name, "password": f"{name} pass 1", "csrf_token": token},
                          allow_redirects=False, timeout=60)
    assert signed.status_code == 303
    return session


def _report(app: dict, run_id: str, rank: int, step: int, who: str = "alice") -> requests.Response:
    return requests.post(f"{app['url']}/api/runs/{run_id}/ranks/{rank}", timeout=60,
                         json={"step": step, "step_s": 0.01, "poll_s": 1.0, "host": "node-a"},
                         headers={"Authorization": f"Bearer {app['tokens'][who]}"})


def test_the_running_jobs_page_lists_its_ranks_and_asks_for_a_capture(app):
    run_id = "capture-page"
    assert _report(app, run_id, 0, 100).json() == {"captures": []}
    assert _report(app, run_id, 1, 99).json() == {"captures": []}
    assert _report(app, run_id, 0, 101, who="carol").status_code == 404  # another team cannot take the run id
    assert _report(app, run_id, 0, 101, who="bob").status_code == 403  # a viewer reports nothing

    viewer = _signed_in(app, "bob")
    assert run_id in viewer.get(app["url"] + "/", timeout=60).text  # "Running now" on the landing page
    assert 'id="capture"' not in viewer.get(f"{app['url']}/live/{run_id}", timeout=60).text
    assert _signed_in(app, "carol").get(f"{app['url']}/live/{run_id}", timeout=60).status_code == 404

    member = _signed_in(app, "alice")
    page = member.get(f"{app['url']}/live/{run_id}", timeout=60).text
    assert 'id="capture"' in page and 'data-rank="1"' in page and "node-a" in page
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert member.post(f"{app['url']}/live/{run_id}/capture", data={"steps": "5"}, timeout=60).status_code == 400
    done = member.post(f"{app['url']}/live/{run_id}/capture", data={"steps": "5", "csrf_token": csrf}, timeout=60)
    # two polls of 1 s and two seconds at 10 ms a step: 400 steps past the furthest rank (100)
    assert "Every rank captures steps 500-504" in done.text, done.text[-2000:]
    heard = _report(app, run_id, 1, 102).json()["captures"]
    assert [(c["first_step"], c["steps"]) for c in heard] == [(500, 5)]
    assert _report(app, run_id, 1, 505).json() == {"captures": []}  # done with it


def test_a_process_that_has_not_trained_reports_nothing():
    """torchrun's agent and other processes that never finish a step are not ranks of the job: their
    poll thread sends nothing (here a send would fail: nothing listens on the port)."""
    from otel_profiler.live.remote_capture import RemoteCapture

    heard = []
    remote = RemoteCapture(f"http://127.0.0.1:{free_port()}", "token", "run", 1.0, "host", lambda: None,
                           lambda first, steps: heard.append((first, steps)))
    remote.report_once()
    assert remote.reports == 0 and heard == []
