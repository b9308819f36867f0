"""Every listening socket of a job bounded against other local users, on real training jobs.

- /metrics: 1,100 idle connections to a job limited to 1,024 file descriptors leave it running,
  writing its checkpoints, with its exit code, while a scrape is still served (before the limit,
  the job died of ``Too many open files``). The slow-drip and idle floods in-process are in
  ``test_metrics_endpoint.py``.
- The trigger socket: one request taken per interval; another user's datagrams refused by the
  folder's mode (a real other user) and dropped at the credentials check (forged credentials).
- Forked DataLoader workers hold neither the trigger socket nor the /metrics socket.

Other users are played by root: the tests that need one are skipped for anyone else.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fault_kit import REPO, job_env
from otlp_receiver import free_port

psutil = pytest.importorskip("psutil")
pytest.importorskip("torch")

SOCKET_JOB = str(REPO / "tests" / "socket_job.py")
POLL_S = 120  # how long a poll waits before the test fails (a busy machine is slow, not wrong)
NOBODY = 65534
EXIT_CODE = 3


def _wait(condition, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + POLL_S
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the job ended while waiting for {what}: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _accepting(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return True
    except OSError:
        return False


def _progress(out: Path) -> int:
    try:
        return int((out / "progress").read_text() or 0)
    except (OSError, ValueError):
        return 0


def _start(out: Path, fd_limit: int | None = None, **env: str) -> subprocess.Popen:
    """tests/socket_job.py profiled zero-code, writing its profile to OUT/prof."""
    out.mkdir(exist_ok=True)

    def limit() -> None:
        if fd_limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    return subprocess.Popen([sys.executable, SOCKET_JOB, str(out), "--exit-code", str(EXIT_CODE)],
                            env=job_env(out / "prof", **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=limit, start_new_session=True)


def _finish(proc: subprocess.Popen, out: Path) -> str:
    (out / "stop").touch()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_CODE, err[-3000:]
    assert "Traceback" not in err and "Too many open files" not in err, err[-3000:]
    return err


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.communicate()


# ------------------------------------------------------------------------ /metrics
def test_a_connection_flood_leaves_the_job_running(tmp_path: Path) -> None:
    from otel_profiler.metrics.sockets import MAX_CONNECTIONS

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.skip(f"this test opens 1,100 connections; the file limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    port, flood = free_port(), []
    proc = _start(tmp_path, fd_limit=1024, OTEL_PROFILER_PROMETHEUS_PORT=str(port),
                  OTEL_PROFILER_PROMETHEUS_BASIC_AUTH="scraper:s3cret")
    try:
        _wait(lambda: _accepting(port) and _progress(tmp_path) > 0, "/metrics", proc)
        job = psutil.Process(proc.pid)
        threads_before = job.num_threads()
        peak_threads = peak_conns = 0

        def sample() -> None:
            nonlocal peak_threads, peak_conns
            peak_threads = max(peak_threads, job.num_threads())
            peak_conns = max(peak_conns, sum(c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
                                             for c in job.net_connections("tcp")))

        for i in range(1100):  # held open by this test for the rest of it
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=POLL_S))
            except OSError as exc:
                raise AssertionError(f"connection {i}: {exc}; job: {proc.poll()}") from exc
            if i % 25 == 0:
                sample()
        steps = _progress(tmp_path)
        _wait(lambda: sample() or _progress(tmp_path) >= steps + 20, "20 checkpoints during the flood", proc)
        from test_metrics_endpoint import _scrape_soon

        assert "process_cpu_utilization_ratio" in _scrape_soon(f"http://127.0.0.1:{port}/metrics",
                                                               auth="scraper:s3cret")
        sample()
        # served connections stay within the limit; the one accept thread may hold one more for the
        # instant between accepting a connection over the limit and closing it
        assert peak_conns <= MAX_CONNECTIONS + 1, peak_conns
        assert peak_threads <= threads_before + MAX_CONNECTIONS + 2, (threads_before, peak_threads)
        _finish(proc, tmp_path)
    finally:
        for conn in flood:
            conn.close()
        _kill(proc)


# ------------------------------------------------------------------------ the trigger socket
@pytest.fixture
def trigger(monkeypatch):
    """A trigger on a free port and the requests it made; interval: 1 hour."""
    from otel_profiler.live.windows import triggers

    monkeypatch.setattr(triggers, "MIN_INTERVAL_S", 3600.0)
    requests: list[float] = []
    made = triggers.TriggerSocket(free_port(), lambda: requests.append(time.monotonic()))
    try:
        yield made, requests
    finally:
        made.close()


@pytest.mark.parametrize("hostile", ["writable", "another_user", "link"])
def test_a_trigger_folder_others_could_reach_is_refused(tmp_path, monkeypatch, hostile) -> None:
    """A folder pre-created in the temporary directory by someone else (or open to others): no
    socket is made there, and the error names it."""
    import tempfile

    from otel_profiler.live.windows import triggers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = triggers.trigger_folder()
    if hostile == "link":  # to a folder the other user can read
        os.mkdir(tmp_path / "elsewhere")
        os.chmod(tmp_path / "elsewhere", 0o777)
        os.symlink(tmp_path / "elsewhere", folder)
        if os.geteuid() == 0:
            os.lchown(folder, NOBODY, NOBODY)
    else:
        os.mkdir(folder)
        os.chmod(folder, 0o777)
        if hostile == "another_user":
            if os.geteuid() != 0:
                pytest.skip("only root can give a folder to another user")
            os.chmod(folder, 0o700)
            os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(OSError) as err:
        triggers.TriggerSocket(free_port(), lambda: None)
    assert folder in str(err.value)
    assert not [p for p in Path(folder).iterdir() if p.is_socket()]


def _received(t) -> int:
    return t.accepted + t.foreign + t.limited


def test_the_trigger_takes_one_request_per_interval(trigger) -> None:
    from otel_profiler.live.windows.triggers import send

    t, requests = trigger
    for _ in range(30):
        send(t.path)
    _wait(lambda: _received(t) == 30, "30 datagrams read")
    assert (t.accepted, t.limited, len(requests)) == (1, 29, 1)


def _send_as(cred_uid: int, path: str, count: int, every_s: float) -> None:
    """``count`` datagrams claiming to come from user ``cred_uid`` (only root may claim another)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect(path)
        for _ in range(count):
            creds = struct.pack("iII", os.getpid(), cred_uid, cred_uid)
            s.sendmsg([b"capture"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])
            time.sleep(every_s)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can send another user's credentials")
def test_another_users_datagrams_are_dropped_at_the_credentials_check(trigger) -> None:
    t, requests = trigger
    _send_as(NOBODY, t.path, 30, 0.0)
    _wait(lambda: _received(t) == 30, "30 datagrams read")
    assert (t.foreign, t.accepted, t.limited, requests) == (30, 0, 0, [])


def _flood_as_other_user(path: str, count: int, every_s: float) -> int:
    """Fork a process of user ``nobody`` sending ``count`` datagrams to ``path``; the number the
    system refused with a permission error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plain system calls only, then _exit
        refused = 0
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            for _ in range(count):
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                    try:
                        s.sendto(b"capture", path)
                    except PermissionError:
                        refused += 1
                time.sleep(every_s)
        finally:
            os.write(write, str(refused).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        refused = int(f.read() or -1)
    os.waitpid(pid, 0)
    return refused


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def _listening_inodes(metrics_port: int, trigger_path: str) -> dict[str, int]:
    found = {}
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == metrics_port and fields[3] == "0A":
                found["metrics"] = int(fields[9])
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split(None, 7)
            if len(fields) == 8 and fields[7] == trigger_path:
                found["trigger"] = int(fields[6])
    return found


def test_trigger_floods_and_forked_workers_in_a_live_job(tmp_path: Path) -> None:
    """A job with /metrics and the trigger socket: another user's flood (10 a second, as a real
    other user and with forged credentials, for 8 s after a request was taken) opens no window;
    the request of its own user does; DataLoader workers forked later hold neither socket."""
    from otel_profiler.cli import main
    from otel_profiler.live.windows.triggers import socket_name, trigger_folder

    metrics_port, trigger_port = free_port(), free_port()
    path = os.path.join(trigger_folder(), socket_name(trigger_port))
    proc = _start(tmp_path, OTEL_PROFILER_PROMETHEUS_PORT=str(metrics_port),
                  OTEL_PROFILER_TRIGGER_PORT=str(trigger_port),
                  OTEL_PROFILER_SLOW_STEP_FACTOR="0", OTEL_PROFILER_STEPS="off")  # no other window to take the request in
    try:
        _wait(lambda: _accepting(metrics_port) and os.path.exists(path) and _progress(tmp_path) > 0,
              "/metrics and the trigger socket", proc)
        assert main(["trigger", "--port", str(trigger_port)]) == 0
        if os.geteuid() == 0:
            forged = threading.Thread(target=_send_as, args=(NOBODY, path, 80, 0.1))
            forged.start()
            assert _flood_as_other_user(path, 80, 0.1) == 80  # not one reached the socket
            forged.join()
        ours = _listening_inodes(metrics_port, path)
        assert set(ours) == {"metrics", "trigger"} and set(ours.values()) <= _socket_inodes(proc.pid)
        (tmp_path / "fork").touch()
        _wait(lambda: len(list(tmp_path.glob("worker-*"))) == 2, "two DataLoader workers", proc)
        for marker in tmp_path.glob("worker-*"):
            held = _socket_inodes(int(marker.name.split("-")[1])) & set(ours.values())
            assert not held, f"worker {marker.name} holds the job's sockets {held}"
        _finish(proc, tmp_path)
    finally:
        _kill(proc)
    windows = json.loads((tmp_path / "prof" / "rank-0.json").read_text())["windows"]
    assert [w["reason"] for w in windows].count("trigger") == 1, windows
    assert not os.path.exists(path)  # removed at exit


def test_a_socket_left_by_a_killed_job_is_replaced_and_not_counted(capsys) -> None:
    from otel_profiler.cli import main
    from otel_profiler.live.windows.triggers import TriggerSocket, private_folder, socket_name, trigger_folder

    port = free_port()
    path = os.path.join(private_folder(trigger_folder()), socket_name(port))
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dead:  # closed, its file left behind
        dead.bind(path)
    assert main(["trigger", "--port", str(port)]) == 1
    assert f"nothing listens on trigger port {port}" in capsys.readouterr().err
    t = TriggerSocket(port, lambda: None)
    try:
        assert main(["trigger", "--port", str(port)]) == 0
        _wait(lambda: t.accepted == 1, "the request")
    finally:
        t.close()
    assert not os.path.exists(path)


def test_closing_in_a_forked_child_leaves_the_parents_sockets_alone() -> None:
    """A child that closes the trigger and the endpoint (as an inherited ``atexit`` would) returns
    at once, removes no socket file, and the parent's sockets go on serving."""
    from otel_profiler import config
    from otel_profiler.live.windows.triggers import TriggerSocket, send
    from otel_profiler.metrics.publisher import MetricsService
    from test_metrics_endpoint import _scrape_soon

    requests: list[int] = []
    t = TriggerSocket(free_port(), lambda: requests.append(1))
    service = MetricsService().start(config.load({"OTEL_PROFILER_PROMETHEUS_PORT": str(free_port())}),
                                     {"ml.local_rank": 0})
    try:
        pid = os.fork()
        if pid == 0:
            try:
                t.close()
                service.close()
            finally:
                os._exit(0)
        deadline = time.monotonic() + POLL_S
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            assert time.monotonic() < deadline, "the child hangs closing what it inherited"
            time.sleep(0.05)
        assert os.path.exists(t.path)
        send(t.path)
        _wait(lambda: requests == [1], "the request")
        assert "system_cpu_utilization_ratio" in _scrape_soon(service.url)
    finally:
        t.close()
        service.close()
