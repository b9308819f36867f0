"""The embedded default output: one rank's parts and metadata in a profile folder, then the summary.

A profile folder (``OTEL_PROFILER_OUTPUT_DIR/<run id>/`` or ``OTEL_PROFILER_PROFILE_DIR``) is made
with user-only permissions and holds every rank's ``rank-<r>.<part>.events`` and ``rank-<r>.json``
(``cuda_tracer.profile.write_rank``). A process claims its rank with an exclusive lock file before it
writes its first part, so two live processes never write the same rank's files (the loser, e.g. a
spawned helper process, stays silent). A lock left by a dead process is taken over, and that
rank's old event files are removed: re-using a folder replaces the rank, never mixes two runs.
``write_summary`` reads the whole folder back and writes ``summary.json``. ``RankOutput`` (one per
session) is who the process writes as (rank learned from torch.distributed when no launcher said it)
and the metadata written next to each part.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from cuda_tracer.private_files import make_private_dir, write_in_private_dir
from cuda_tracer.model.events import MISSING, EventBatch
from cuda_tracer.profile import RankProfile, write_rank

from ..profiler_warnings import warn
from ..version import __version__
from .samples.compute import compute_resources

if TYPE_CHECKING:  # the analysis is imported only when a summary is made
    from ..analysis.summary_schema import Summary

log = logging.getLogger(__name__)


class RankWriter:
    """Writes one rank's parts into the profile folder, once it has claimed the rank."""

    def __init__(self, folder: str, rank: int) -> None:
        self.folder = folder
        self.rank = rank
        self.parts = 0
        self.events = 0
        self._claimed: bool | None = None

    def claim(self) -> bool:
        """Make the folder and take this rank; False when another live process already holds it."""
        if self._claimed is None:
            make_private_dir(self.folder)  # not a folder of another user or one others can write
            lock = os.path.join(self.folder, f"rank-{self.rank}.lock")
            self._claimed = _lock(lock) or (holder_dead(lock) and _replace_lock(lock))
            if self._claimed:
                prefix = f"rank-{self.rank}."
                for name in os.listdir(self.folder):
                    if name.startswith(prefix) and name.endswith(".events"):
                        os.unlink(os.path.join(self.folder, name))
        return self._claimed

    @classmethod
    def free_rank(cls, folder: str, first: int, tries: int = 4096) -> "RankWriter | None":
        """A writer of the lowest rank number from ``first`` up that no process has claimed (a
        multiprocessing child with no rank of its own), or None when none is free."""
        make_private_dir(folder)
        for rank in range(first, first + tries):
            if _lock(os.path.join(folder, f"rank-{rank}.lock")):
                writer = cls(folder, rank)
                writer._claimed = True
                return writer
        return None

    def write(self, meta: dict[str, Any], batch: EventBatch) -> bool:
        """Write ``batch`` as the next part (and the current metadata). False when not written."""
        if not self.claim():
            return False
        meta = dict(meta, parts=self.parts + 1, events=self.events + len(batch))
        write_rank(self.folder, RankProfile(meta=meta, batch=batch), part=self.parts)  # whole files or none
        self.parts += 1
        self.events += len(batch)
        return True


def _lock(path: str) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def holder_dead(path: str) -> bool:
    """Whether the process whose pid a lock file holds is gone (a zombie, not yet reaped by its
    parent, counts as gone; an unreadable lock too)."""
    try:
        with open(path) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return True
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _replace_lock(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return _lock(path)


def summarize_folder(folder: str) -> Summary | None:
    """The summary document of the whole folder (every rank, with its insights); None when it
    holds no events."""
    from cuda_tracer.loading import load_profile  # the trace readers: only when summarizing
    from ..analysis.document import SummaryDocument

    try:
        profile = load_profile([folder])
    except ValueError:
        return None
    return SummaryDocument(profile).summary


def write_summary(folder: str) -> Summary | None:
    """Summarize the whole folder (every rank) into ``summary.json``; None when it holds no events.
    An OSError (full disk) leaves no temporary file behind."""
    summary = summarize_folder(folder)
    if summary is None:
        return None
    write_in_private_dir(folder, "summary.json", lambda f: json.dump(summary, f, indent=1, default=str))
    return summary


class RankOutput:
    """Who this process writes as (rank learned from torch.distributed when no launcher said it),
    where (the profile folder and its ``RankWriter``), and the metadata written next to its parts."""

    def __init__(self, folder: str, origin: str, run_id: str, position: dict[str, int],
                 resource: dict[str, Any], activities: frozenset[str], child_of_run: bool = False) -> None:
        self.folder = folder
        self.origin = origin
        self.run_id = run_id
        self.position = position
        self.rank = position["rank"]
        self.resource = resource  # shared with the metrics: a learned rank is theirs too
        self.activities = activities
        self.writer = RankWriter(folder, self.rank)
        self.rank_known = "RANK" in os.environ
        self.child_of_run = child_of_run  # a multiprocessing child writing into its parent's run
        self.free_rank = False  # its rank is the next free number, not one of a distributed world
        self._write_failed = False  # a part could not be written (said once)
        self.not_written: dict[str, Any] = {"parts": 0, "events": 0, "reason": ""}  # lost: a full disk, ...
        self._compute: dict[str, Any] | None = None  # read once, by the first flush

    def cannot_write(self, exc: OSError, events: int) -> None:
        """One warning the first time a part cannot be written; recording, metrics and OTLP
        export go on (later parts are tried again: a disk may get space back). The parts lost are
        counted (``parts_not_written`` of the rank's metadata, and the line at exit)."""
        lost = self.not_written
        lost["parts"] += 1
        lost["events"] += events
        lost["reason"] = lost["reason"] or str(exc.strerror or exc)
        if not self._write_failed:
            self._write_failed = True
            warn(f"cannot write the profile folder {self.folder} ({exc.strerror or exc}); "
                 "parts are not saved there, steps, metrics and OTLP export go on")

    def written_line(self) -> str:
        """The line at exit: where the profile is, or that it is incomplete and why."""
        lost, where = self.not_written, f"`otel-profiler summary {self.folder}`"
        if not lost["parts"]:
            return f"otel-profiler: profile of rank {self.rank} written to {self.folder} ({where})"
        return (f"otel-profiler: warning: the profile of rank {self.rank} in {self.folder} is incomplete: "
                f"{lost['parts']} of its parts ({lost['events']} events) could not be written "
                f"({lost['reason']}); what was written: {where}")

    def learn_rank(self) -> None:
        """Take rank and world size from torch.distributed when the launcher set no ``RANK``
        (``torch.multiprocessing.spawn`` jobs); checked at step boundaries until known."""
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return
            rank, world = dist.get_rank(), dist.get_world_size()
        except Exception:
            log.debug("reading the distributed rank failed", exc_info=True)
            return
        self.rank_known = True
        if self.writer.parts == 0:  # nothing written under the old number yet
            self.rank = rank
            self.position.update(rank=rank, world_size=world)
            self.resource.update({"ml.rank": rank, "ml.world_size": world})
            self.writer = RankWriter(self.folder, rank)

    def settle_identity(self, steps_recorded: bool) -> bool | None:
        """Before the first write: True to write as ``self.rank``; None, not yet. A multiprocessing
        child with no rank of its own (a DataLoader worker, a Hogwild trainer) writes only once it
        has recorded a step, as the next free rank from the world size up; until then it never
        takes rank 0 from the trainer."""
        if self.rank_known:
            return True
        self.learn_rank()
        mp = sys.modules.get("multiprocessing")
        child = self.child_of_run or (mp is not None and mp.parent_process() is not None)
        if self.rank_known or not child:
            return True
        if not steps_recorded:
            return None
        writer = RankWriter.free_rank(self.folder, self.position["world_size"])
        if writer is None:
            return None
        self.rank_known = self.child_of_run = self.free_rank = True
        self.rank = writer.rank
        self.position["rank"] = writer.rank
        self.resource["ml.rank"] = writer.rank
        self.writer = writer
        return True

    def meta(self, recording: dict[str, Any], trailer: dict[str, Any]) -> dict[str, Any]:
        """This rank's metadata (``rank-<r>.json``): who and where, then ``recording`` (what the
        session recorded: windows, steps, samples), the compute resources, then ``trailer``."""
        torch = sys.modules.get("torch")
        versions = {"otel_profiler": __version__, "python": sys.version.split()[0]}
        if torch is not None:  # a plain str: torch's own (TorchVersion) would make the exporter
            versions["torch"] = str(getattr(torch, "__version__", "?"))  # process import torch to unpickle it
        return {
            "source": f"live:{self.origin}",
            "format": "otel-profiler.live",
            "rank": self.rank,
            "local_rank": self.position["local_rank"],
            "world_size": MISSING if self.free_rank else self.position["world_size"],  # not one of a world
            "host_name": socket.gethostname(),
            "pid": os.getpid(),
            **({"parent_pid": os.getppid()} if self.child_of_run else {}),
            "run_id": self.run_id,
            "resource": self.resource,
            "versions": versions,
            "device_properties": device_properties(),
            "activities": sorted(self.activities),
            **recording,
            **({"parts_not_written": dict(self.not_written)} if self.not_written["parts"] else {}),
            "compute": self._compute_resources(),
            **trailer,
        }

    def _compute_resources(self) -> dict[str, Any]:
        """The machine's compute resources, read once (by the first flush)."""
        if self._compute is None:
            self._compute = compute_resources()
        return self._compute


def device_properties() -> list[dict[str, Any]]:
    from cuda_tracer.capture.kineto import cuda_available

    if not cuda_available():
        return []
    torch = sys.modules["torch"]
    out = []
    try:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append({"id": i, "name": p.name, "totalGlobalMem": p.total_memory,
                        "computeMajor": p.major, "computeMinor": p.minor,
                        "numSms": p.multi_processor_count})
    except Exception:
        log.debug("reading the CUDA device properties failed; none are recorded", exc_info=True)
    return out
