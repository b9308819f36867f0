"""Shared by the Profiler app's tests (test_app_*.py): real profile folders written by `otel-profiler
run`, the `otel-profiler` command line, and an `otel-profiler serve` process stopped afterwards."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port  # noqa: F401  (also for the modules importing it from here)

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "scripts" / "manual_sgd.py"
DEADLINE_S = 120.0

pytest.importorskip("flask")
pytest.importorskip("waitress")
pytest.importorskip("alembic")


def cli(*args: str, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "otel_profiler", *args], input=stdin, capture_output=True,
                          text=True, timeout=DEADLINE_S)
    if check and done.returncode != 0:
        raise AssertionError(f"otel-profiler {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done


def profile_run(folder: Path, team: str, user: str, service: str = "manual_sgd") -> Path:
    """A real profile folder of a short training job owned by ``user`` of ``team``."""
    env = dict(os.environ, OTEL_RESOURCE_ATTRIBUTES=f"ml.team={team},enduser.id={user}",
               OTEL_SERVICE_NAME=service)
    subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(folder), "--",
                    sys.executable, str(SCRIPT)], env=env, check=True, capture_output=True,
                   timeout=DEADLINE_S * 2)
    return folder


def live_job(output_dir: Path, team: str, user: str, upload: dict[str, str], profile_dir: Path | None = None,
             script: Path = SCRIPT) -> subprocess.CompletedProcess:
    """A short training job profiled zero-code (``OTEL_PROFILER_ENABLED`` and the bootstrap on
    ``PYTHONPATH``) in ``output_dir``, owned by ``user`` of ``team``; ``upload``: the
    ``OTEL_PROFILER_UPLOAD*`` variables (empty: none)."""
    from otel_profiler.bootstrap import SITE_DIR

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_ENABLED="true", PYTHONPATH=SITE_DIR, OTEL_PROFILER_OUTPUT_DIR=str(output_dir),
               OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
               OTEL_RESOURCE_ATTRIBUTES=f"ml.team={team},enduser.id={user}", **upload)
    if profile_dir is not None:
        env["OTEL_PROFILER_PROFILE_DIR"] = str(profile_dir)
    return subprocess.run([sys.executable, str(script)], env=env, cwd=output_dir.parent, capture_output=True,
                          text=True, timeout=DEADLINE_S * 2)


def wait_until(condition, what: str, deadline_s: float = DEADLINE_S):
    """Poll ``condition`` until it returns a true value (returned), or fail after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def helpers_of(path: Path) -> list[int]:
    """The pids of the detached summarizer and upload processes working on ``path`` or a folder in it
    (their command line names it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.startswith(str(path).encode()) for a in argv) and any(b"otel_profiler" in a for a in argv):
                pids.append(int(entry.name))
    return pids



def stop_helpers(path: Path, wait_s: float = DEADLINE_S) -> None:
    """Wait up to ``wait_s`` for the detached processes working on ``path`` to end, then stop any left."""
    try:
        if wait_s > 0:
            wait_until(lambda: not helpers_of(path), "the detached summarizer and upload processes to end", wait_s)
    finally:
        for pid in helpers_of(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class AppServer:
    """``otel-profiler serve`` on a free port of 127.0.0.1 in a child process."""

    def __init__(self, store: Path | str, database: str | None = None, extra: tuple[str, ...] = (),
                 log_folder: Path | None = None) -> None:
        """``store``: a folder, or a store URL (then ``log_folder`` says where the server's log goes)."""
        args = ["serve", "--store", str(store), "--port", "0", "--scan-interval", "0.5", *extra]
        if database:
            args += ["--database", database]
        self.log = (log_folder or Path(store).parent) / f"serve-{Path(store).name}.log"
        self._log_file = open(self.log, "w")
        self.process = subprocess.Popen([sys.executable, "-m", "otel_profiler", *args], stdout=self._log_file,
                                        stderr=subprocess.STDOUT, text=True)
        match = wait_until(lambda: self.process.poll() is None and
                           re.search(r"on http://127\.0\.0\.1:(\d+)/", self.log.read_text()) or self._died(),
                           "the server to listen")
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def _died(self):
        if self.process.poll() is not None:
            raise AssertionError(f"serve exited {self.process.returncode}: {self.log.read_text()}")
        return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()


def make_store(root: Path) -> tuple[Path, dict[str, str]]:
    """A store with one real run of team vision (alice), one of team nlp (bob) and a corrupt folder;
    returns it and {run id: team}."""
    store = root / "store"
    store.mkdir()
    profile_run(store / "vision-run", "vision", "alice", "resnet")
    profile_run(store / "nlp-run", "nlp", "bob", "bert")
    broken = store / "broken-run"
    broken.mkdir()
    (broken / "rank-0.json").write_text("{not json")
    return store, {"vision-run": "vision", "nlp-run": "nlp"}


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The store of ``make_store`` (two real profiled training runs and a corrupt folder), made once
    for every app test module that imports this fixture; each copies it (``copy_store``) first."""
    return make_store(tmp_path_factory.mktemp("app-runs"))


def copy_store(store: Path, root: Path, with_app: bool = False) -> Path:
    """A fresh copy of ``store`` without the app's folder (its own database), or (``with_app``)
    with it: the same teams, users and tokens."""
    target = root / f"store-{len(list(root.iterdir()))}"
    shutil.copytree(store, target, ignore=None if with_app else shutil.ignore_patterns(".otel-profiler-app"))
    return target


class PostgresCluster:
    """A throwaway PostgreSQL server (initdb + pg_ctl) in a temporary folder, on a free port of
    127.0.0.1, stopped and removed by ``stop``; run as the ``postgres`` account when we are root."""

    def __init__(self) -> None:
        import socket
        import tempfile

        import glob

        bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)  # Debian's packages
        path = os.pathsep.join([os.environ.get("PATH", ""), *bindirs])
        self.initdb, self.pg_ctl = shutil.which("initdb", path=path), shutil.which("pg_ctl", path=path)
        if not (self.initdb and self.pg_ctl):
            pytest.skip("PostgreSQL's initdb and pg_ctl are not installed")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            pytest.skip("psycopg is not installed")
        self.folder = Path(tempfile.mkdtemp(prefix="otel-app-pg-"))  # postgres must reach it
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.folder, "postgres")
        self.port = free_port()
        data = self.folder / "data"
        self._run([self.initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        self._run([self.pg_ctl, "-D", str(data), "-l", str(self.folder / "log"), "-w", "-t", "120", "-o",
                   f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1", "start"])
        self.data = data
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, args: list[str]) -> None:
        if self.as_postgres:
            args = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in args)]
        subprocess.run(args, check=True, capture_output=True, timeout=DEADLINE_S)

    def stop(self) -> None:
        try:
            self._run([self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"])
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
