"""The client of a Dask scheduler, connected in one place: the address checked, then one bounded
probe (a single connection attempt, Dask's handshake and an ``identity`` call, without deserializing
anything, in a short-lived event loop with distributed's loggers quiet), and only then the
``Client``. Whatever answers at the address (nothing, an HTTP server, a frame header of 8 EiB,
garbage, a Dask worker) is one ``RuntimeError`` line within ``PROBE_TIMEOUT_S``, with no
connection, thread or event loop left behind. Imported only with a scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from distributed import Client

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30
"""How long the ``Client`` waits for a scheduler the probe found (a clear error, exit 2)."""
PROBE_TIMEOUT_S = 15
"""How long the probe waits for the connection, the handshake and the scheduler's identity."""
QUIET_LOGGERS = ("distributed", "tornado", "asyncio")
"""The loggers silenced during the probe: what goes wrong there is the one error line."""
OTHER_SERVERS = {"Worker": "a Dask worker", "Nanny": "a Dask nanny"}
"""Dask servers that are not a scheduler, as the error line names them."""


def connect_client(address: str) -> Client:
    """A client of the Dask scheduler at ``address`` (``tcp://HOST:PORT``); ``RuntimeError`` (its
    message one line, without the address) when there is none."""
    try:
        from distributed import Client
        from distributed.comm import parse_address, parse_host_port
    except ImportError:
        raise RuntimeError("a Dask scheduler needs the cluster extra: pip install -e '.[cluster]' in the "
                           "otel-profiler clone") from None
    try:
        parse_host_port(parse_address(address)[1])  # a malformed address: no client to clean up
    except ValueError as exc:
        raise RuntimeError(f"not a scheduler address ({exc}); give tcp://HOST:PORT") from None
    with _quiet(QUIET_LOGGERS), ThreadPoolExecutor(1, thread_name_prefix="scheduler-probe") as pool:
        problem = pool.submit(asyncio.run, _probe(address, PROBE_TIMEOUT_S)).result()
    if problem:
        raise RuntimeError(problem)
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise RuntimeError(f"cannot reach the Dask scheduler ({exc})") from None


async def _probe(address: str, timeout: float) -> str | None:
    """What is wrong with ``address`` as a Dask scheduler's (None: nothing), found within
    ``timeout`` seconds; the connection is closed whatever happens."""
    from distributed.comm import CommClosedError

    opened: list[Any] = []
    try:
        return await asyncio.wait_for(_connected(address, opened), timeout)
    except asyncio.TimeoutError:
        if not opened:
            return f"cannot connect (no answer within {timeout:g} s)"
        return f"not a Dask scheduler (no handshake within {timeout:g} s)"
    except CommClosedError:
        return "not a Dask scheduler (it closed the connection during the handshake)"
    except Exception:  # whatever its bytes made of the reader (MemoryError for 8 EiB): not Dask's
        log.debug("the reply at %s is not Dask's handshake", address, exc_info=True)
        return "not a Dask scheduler (its reply is not Dask's handshake)"
    finally:
        for comm in opened:
            comm.abort()


async def _connected(address: str, opened: list[Any]) -> str | None:
    """One connection attempt (a refused one is not retried, as ``distributed.comm.connect`` would
    until its timeout), added to ``opened``; then ``_not_a_scheduler``."""
    from distributed.comm import parse_address
    from distributed.comm.registry import get_backend
    from distributed.security import Security

    scheme, loc = parse_address(address)
    try:
        comm = await get_backend(scheme).get_connector().connect(
            loc, deserialize=False, **Security().get_connection_args("client"))
    except OSError as exc:
        return f"cannot connect ({_reason(exc)})"
    opened.append(comm)
    return await _not_a_scheduler(comm)


async def _not_a_scheduler(comm: Any) -> str | None:
    """Dask's handshake on ``comm`` (as ``distributed.comm.connect`` does it), then the server's
    ``identity``: why it is not a scheduler, or None. Nothing it sent is quoted."""
    local = comm.handshake_info()
    await comm.write(local)
    remote = await comm.read()
    comm.handshake_options = comm.handshake_configuration(local, remote)
    await comm.write({"op": "identity", "reply": True})
    identity = await comm.read()
    kind = identity.get("type") if isinstance(identity, dict) else None
    if kind == "Scheduler":
        await comm.write({"op": "close", "reply": False})
        return None
    if kind in OTHER_SERVERS:
        return f"not a Dask scheduler ({OTHER_SERVERS[kind]})"
    return "not a Dask scheduler (no scheduler's identity)"


def _reason(exc: BaseException) -> str:
    """The operating system's words for a failed connection (``connection refused``), from the
    innermost error that has them; else the error's type."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror[:1].lower() + seen.strerror[1:]
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


@contextlib.contextmanager
def _quiet(names: tuple[str, ...]) -> Iterator[None]:
    """The loggers ``names`` and their existing children silent for the block, as they were after."""
    loggers = [logging.getLogger(n) for n in logging.root.manager.loggerDict
               if any(n == name or n.startswith(name + ".") for name in names)]
    loggers += [logging.getLogger(name) for name in names]
    levels = [(lg, lg.level) for lg in loggers]
    for lg, _ in levels:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in levels:
            lg.setLevel(level)
