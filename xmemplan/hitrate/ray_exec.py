"""`hitrate --executor ray`: the per-file read and replay as Ray tasks, local or on a cluster.

    from xmemplan.hitrate import HitrateOptions, analyze
    analyze([Path("traces/")], HitrateOptions(executor="ray", ray_address="auto"))

How the work and the results flow:
- the driver (where the command runs) discovers the files and sniffs their formats, as a
  local run does;
- each file becomes one task, `_read_job(path, format, options, scope)`, the very function a
  local worker process runs: read the file, and under session scope replay its complete
  sessions at once (one file = whole sessions for transcripts, block traces and Netpreme
  runs), returning only per-request figures (a few numbers per request);
- batches whose sessions may continue in another file (request logs, Mooncake) come back
  as batches: text prompts as their interned message trie, never materialised; the driver
  replays them, as a local run does. Under `--scope global` every request is in one cache
  ordered by time, a single sequential pass: it runs on the driver after the reads. That
  pass is the infinite radix tree (about 1e9 keys/s, docs/performance.md), so the reads are
  what is spread; the global replay is not sharded;
- results are taken in file order with a bounded window of tasks in flight, so the driver
  holds at most `window` results at once and the figures are identical to a local run
  (same functions, same order: tests compare them).

Tasks read their paths themselves: on a cluster every node must see the traces at the same
path (a shared file system) and have `xmemplan[ray]` installed. Ray places a task on any
node with a free CPU; it does not know which node holds a file.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from xmemplan.errors import NotAvailableError, UsageError

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import HitrateOptions, _FileResult


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise NotAvailableError(
            "--executor ray needs the 'ray' package",
            "pip install 'xmemplan[ray]' (on every node of the cluster)",
        ) from exc
    return ray


CONNECT_TIMEOUT_S = 10.0  # one TCP connection to the head (Ray's client retries for minutes)


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """UsageError unless a TCP connection to `address`'s host and port ('ray://HOST:PORT',
    'HOST:PORT') opens within `timeout` seconds: a refused or silent address fails now,
    instead of ray.init waiting on it. 'auto' and addresses without a port are left to
    Ray (it finds a local cluster from its own files)."""
    import socket

    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise UsageError(
            f"cannot reach Ray at {address} ({why}, within {timeout:g} s)",
            "check --ray-address (e.g. auto, or ray://HEAD:10001) and that the cluster is up",
        ) from None


def connect(address: str | None, cpus: int | None) -> bool:
    """Join the cluster at `address` ('auto', 'ray://host:10001', 'host:6379'; None: the
    RAY_ADDRESS variable, else a new local Ray). True if this call started Ray."""
    ray = _ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "configure_logging": False}
    if address is None:
        kwargs["num_cpus"] = cpus or None
    else:
        check_reachable(address)
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = address or "a new local Ray"
        raise UsageError(
            f"cannot start or reach Ray at {where} ({str(exc).splitlines()[0][:200]})",
            "check --ray-address (e.g. auto, or ray://HEAD:10001) and that the cluster is up",
        ) from exc
    return True


def iter_results(
    jobs: list[tuple[Any, str, HitrateOptions, str]], address: str | None, cpus: int | None
) -> Iterator[_FileResult]:
    """Run `_read_job` on every job as a Ray task; yield the results in job order."""
    from xmemplan.hitrate.pipeline import _read_job

    ray = _ray()
    started = connect(address, cpus)
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(_read_job)
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        pending: deque[Any] = deque()
        it = iter(jobs)
        for job in it:
            pending.append(task.remote(job))
            if len(pending) >= window:
                break
        while pending:
            ref = pending.popleft()
            result = ray.get(ref)
            del ref  # the object store may drop it once taken
            nxt = next(it, None)
            if nxt is not None:
                pending.append(task.remote(nxt))
            yield result
    finally:
        if started:
            ray.shutdown()
