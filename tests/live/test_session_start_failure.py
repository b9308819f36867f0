"""A session whose start fails half-way leaves nothing behind: recording off, one warning."""

from __future__ import annotations

import signal
import warnings

from otel_profiler.live import session
from otel_profiler.live.steps import markers


def test_a_failed_start_undoes_what_it_did(tmp_path, monkeypatch):
    def broken_thread_start(self):
        raise RuntimeError("can't start new thread")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(session.threading.Thread, "start", broken_thread_start)
    env = {"OTEL_PROFILER_OUTPUT_DIR": str(tmp_path), "OTEL_PROFILER_SUMMARY_AT_EXIT": "false"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = session.start_session("test", environ=env)
    assert started is None and session.current() is None
    assert markers.active is False
    assert signal.getsignal(signal.SIGTERM) == before
    messages = [str(w.message) for w in caught if issubclass(w.category, session.ProfilerWarning)]
    assert len(messages) == 1 and "could not start" in messages[0], messages
