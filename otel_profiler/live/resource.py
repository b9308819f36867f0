"""Who is profiling: rank, host and job identity, as OpenTelemetry resource attributes.

Read from the environment the launchers set: torchrun (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``TORCHELASTIC_RUN_ID``), SLURM (``SLURM_JOB_ID``, ``SLURM_STEP_ID``, ``SLURM_PROCID``), Kubernetes
(``KUBERNETES_SERVICE_HOST`` marks a pod; pod name from ``POD_NAME`` or ``HOSTNAME``, namespace from
``POD_NAMESPACE`` or the service-account file), plus ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES``. Attribute names follow the OpenTelemetry semantic conventions where
one exists (``service.name``, ``host.name``, ``process.pid``, ``k8s.*``, ``enduser.id``); the rest use
``ml.*``.

Who ran it (access control, README "Who sees what"): ``enduser.id`` is the one given in
``OTEL_RESOURCE_ATTRIBUTES``, else the login name (``USER``, ``LOGNAME``); ``ml.team`` only when
given there (``OTEL_RESOURCE_ATTRIBUTES=ml.team=vision``).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any, Mapping

from ..config import Settings

log = logging.getLogger(__name__)

_K8S_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _int_env(env: Mapping[str, str], *names: str, default: int) -> int:
    for name in names:
        try:
            return int(env[name])
        except (KeyError, ValueError):
            continue
    return default


def distributed_position(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """rank, local_rank and world_size (0, 0, 1 outside a distributed launch)."""
    env = os.environ if env is None else env
    return {
        "rank": _int_env(env, "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", default=0),
        "local_rank": _int_env(env, "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                               default=0),
        "world_size": _int_env(env, "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", default=1),
    }


def run_id(configured: str, env: Mapping[str, str] | None = None) -> str:
    """The id shared by every rank of one job, so all ranks write into the same profile folder (the
    run-id rule as a whole: ``otel_profiler.shared.ids``).

    Order: the configured id (``otel-profiler run`` passes one down), torchrun's run id, SLURM's
    job and step ids, then (for torchrun without a run id) the launcher's pid and start time, which
    every local rank shares; a lone process gets its own time and pid.
    """
    env = os.environ if env is None else env
    if configured:
        return _safe(configured)
    torchrun = env.get("TORCHELASTIC_RUN_ID", "")
    if torchrun and torchrun != "none":
        return _safe(f"torchrun-{torchrun}")
    if env.get("SLURM_JOB_ID"):
        return _safe(f"slurm-{env['SLURM_JOB_ID']}-{env.get('SLURM_STEP_ID', '0')}")
    if "LOCAL_RANK" in env:
        parent = os.getppid()
        return f"{_stamp(_process_start(parent))}-{parent}"
    return f"{_stamp(time.time())}-{os.getpid()}"


def _stamp(seconds: float) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(seconds))


def _process_start(pid: int) -> float:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:
        log.debug("the process start time is unreadable; now is used", exc_info=True)
        return time.time()


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:120]


def attributes(settings: Settings, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The resource attributes of this process (``settings.service_name`` follows the one rule of
    ``shared.service_name``)."""
    env = os.environ if env is None else env
    pos = distributed_position(env)
    attrs: dict[str, Any] = dict(settings.otel_resource_attributes)
    attrs.update({
        "service.name": settings.service_name,
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        "ml.rank": pos["rank"],
        "ml.local_rank": pos["local_rank"],
        "ml.world_size": pos["world_size"],
    })
    user = attrs.get("enduser.id") or env.get("USER") or env.get("LOGNAME")
    if user:
        attrs["enduser.id"] = user
    for key, name in (("TORCHELASTIC_RUN_ID", "ml.torchrun.run_id"), ("SLURM_JOB_ID", "slurm.job.id"),
                      ("SLURM_STEP_ID", "slurm.step.id"), ("SLURM_JOB_NAME", "slurm.job.name")):
        if env.get(key):
            attrs[name] = env[key]
    if env.get("KUBERNETES_SERVICE_HOST"):
        attrs["k8s.pod.name"] = env.get("POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
        namespace = env.get("POD_NAMESPACE") or _read(_K8S_NAMESPACE_FILE)
        if namespace:
            attrs["k8s.namespace.name"] = namespace
    return attrs


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
