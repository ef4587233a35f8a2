"""Steps 5 and 6 of `validate`: one backend and host pool per reader on one emulated node,
and the lock-step replay (writes, then every reader's timed reads at once, every byte
verified). `xmemplan.validate.harness` runs the steps in order."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.errors import CheckFailedError
from xmemplan.validate.options import ValidateOptions
from xmemplan.validate.pages import Pattern, host_pool, page_view
from xmemplan.validate.probe import Calibrator
from xmemplan.validate.workload import Request

if TYPE_CHECKING:
    from xmemplan.validate.harness import ModeChoice, Workload

STORAGE_BATCH_PAGES = 128  # SGLang's STORAGE_BATCH_SIZE: pages per batched storage call
SCALE_MARGIN = 3.0  # emulated time must exceed the machine's own copy time by this factor


# -- step 5: backends ---------------------------------------------------------------------
@dataclass
class Rig:
    backends: list[Any]
    pools: list[Any]
    sink: Any  # CUDA destination of reader 0 (GPU runs have one reader), or None
    time_scale: float


def emulation_scale(device: Any, readers: int, part_bytes: int, banks: int,
                    machine_bw: float) -> float:
    """How much slower than the device the node must run so that its timing, not this
    machine's own copy speed, sets every load (all readers together)."""
    reader = device.reader_bytes_per_s(part_bytes, banks)
    aggregate = min(readers * reader, device.node_bytes_per_s)
    return max(1.0, SCALE_MARGIN * aggregate / machine_bw)


def build_rig(opts: ValidateOptions, mode: ModeChoice, device: Any, model: Any,
              work: Workload, page_bytes: int, time_scale: float, sink: Any) -> Rig:
    from xmemplan.backends import create_backend
    from xmemplan.backends.device import EmulatedNode

    node = EmulatedNode(device, time_scale) if mode.shaped else None
    backends, pools = [], []
    banks = len(device.bank_bytes_per_s) if device is not None else 4
    try:
        for reqs in work.readers:
            working_set = len({int(k) for r in reqs for k in r.keys}) * page_bytes
            capacity = opts.capacity_bytes or max(working_set * 1.25 + 2 * page_bytes,
                                                  8 * page_bytes)
            if not opts.capacity_bytes:  # whole pages in every bank (capacity // banks each)
                per_bank = -(-int(capacity) // (banks * page_bytes))
                capacity = per_bank * banks * page_bytes
            backend = create_backend(
                "xmem", mode=mode.mode, capacity_bytes=int(capacity), banks=banks,
                page_bytes=page_bytes, shaping=mode.shaped, model_name=model.name,
                page_size=opts.page_tokens, node=node,
                # The arena is not on the timed path (the pinned pool -> GPU copy is):
                # page-locking tens of GB of it would only slow the start.
                pin_host=False)
            backends.append(backend)
            pool = host_pool(model, work.max_pages, opts.page_tokens, layout=opts.layout,
                             pinned=sink is not None)
            backend.register_mem_pool_host(pool)
            pools.append(pool)
    except BaseException:
        for b in backends:
            b.close()
        raise
    return Rig(backends, pools, sink, time_scale)


# -- step 6: replay -------------------------------------------------------------------------
@dataclass
class Measured:
    reader: int
    request: Request
    hit_pages: int
    pages: int
    load_s: float
    compute_s: float | None = None


@dataclass
class Replay:
    measured: list[Measured]
    bytes_read: int
    bytes_written: int
    bad_pages: list[str]
    corrupt_pages: int


def _matcher_hits(reqs: list[Request]) -> np.ndarray:
    from xmemplan.prefix.matcher import match

    keys_all = np.concatenate([r.keys for r in reqs])
    offsets = np.zeros(len(reqs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r.keys) for r in reqs])
    resets = np.array([i == 0 or reqs[i].session != reqs[i - 1].session
                       for i in range(len(reqs))], dtype=np.bool_)
    # One radix tree per session (sessions do not share prefixes here).
    return np.asarray(match(keys_all, offsets, resets))


class _Reader:
    """One simulated GPU: its backend, its host pool, its requests."""

    def __init__(self, index: int, backend: Any, pool: Any, reqs: list[Request],
                 pattern: Pattern) -> None:
        from xmemplan.traces.keys import sglang_style_keys

        self.index, self.backend, self.pool, self.reqs = index, backend, pool, reqs
        self.pattern = pattern
        self.hits = _matcher_hits(reqs)
        self.keys = [sglang_style_keys(r.keys) for r in reqs]
        self.bytes_read = self.bytes_written = 0
        self.bad: list[str] = []
        self.measured: list[Measured] = []

    def _idx(self, start: int, end: int) -> np.ndarray:
        return np.concatenate([self.pool.page_indices(p) for p in range(start, end)])

    def write(self, i: int) -> int:
        """Check the backend's hits against the matcher, write the missed pages."""
        req, keys, hit_pages = self.reqs[i], self.keys[i], int(self.hits[i])
        found = self.backend.batch_exists(keys)
        if found != hit_pages:
            raise CheckFailedError(
                f"reader {self.index} request {i}: the backend holds {found} leading pages, "
                f"the radix matcher says {hit_pages}", "the backend lost or invented pages")
        n = len(keys)
        for p in range(hit_pages, n):
            self.pattern.fill(int(req.keys[p]), page_view(self.pool, p))
        for start in range(hit_pages, n, STORAGE_BATCH_PAGES):
            end = min(n, start + STORAGE_BATCH_PAGES)
            ok = self.backend.batch_set_v1(keys[start:end], self._idx(start, end))
            if not all(ok):
                raise CheckFailedError(f"request {i}: {ok.count(False)} page writes failed",
                                       "the tier is full or failing")
            self.bytes_written += (end - start) * self.pool.page_bytes
        if hit_pages:
            self.pool.kv_buffer.view(np.uint8).reshape(-1)[:] = 0xA5  # poison the target
        return hit_pages

    def read(self, i: int) -> float:
        """One timed read of request i's hit pages (wall seconds)."""
        keys, hit_pages = self.keys[i], int(self.hits[i])
        t0 = time.perf_counter()
        for start in range(0, hit_pages, STORAGE_BATCH_PAGES):
            end = min(hit_pages, start + STORAGE_BATCH_PAGES)
            ok = self.backend.batch_get_v1(keys[start:end], self._idx(start, end))
            if not all(ok):
                raise CheckFailedError(f"request {i}: {ok.count(False)} page reads failed")
        self.bytes_read += hit_pages * self.pool.page_bytes
        return time.perf_counter() - t0

    def verify(self, i: int) -> None:
        req = self.reqs[i]
        for p in range(int(self.hits[i])):
            if not self.pattern.check(int(req.keys[p]), page_view(self.pool, p)):
                self.bad.append(f"reader {self.index} request {i} page {p}")


def replay(opts: ValidateOptions, rig: Rig, work: Workload, pattern: Pattern, mode: ModeChoice,
           calibrator: Calibrator, on_progress: Any = None) -> Replay:
    """All readers in lock-step: writes, then every reader's timed reads at once."""
    # Pattern keeps a scratch buffer: one per reader thread (same contents).
    readers = [_Reader(i, b, p, reqs, pattern if i == 0 else Pattern(pattern.page_bytes,
                                                                        pattern.seed))
               for i, (b, p, reqs) in enumerate(zip(rig.backends, rig.pools, work.readers))]
    k = len(readers)
    barrier = threading.Barrier(k)
    # Where this machine's copy speed is the tier (--calibrate, or host DRAM without a GPU),
    # sample it between requests: on a shared machine it drifts, and the median of samples
    # taken through the replay is what the replay saw.
    sample_machine = opts.calibrate or (mode.mode == "dram" and not mode.gpu_sink)
    errors: list[BaseException] = []
    n_req = len(work.readers[0])

    def run(rd: _Reader) -> None:
        try:
            for i in range(n_req):
                hit_pages = rd.write(i)
                barrier.wait()  # nobody reads while anybody still writes
                times = []
                for _ in range(max(1, opts.repeats) if hit_pages else 1):
                    barrier.wait()  # all readers load at once: the node is shared
                    times.append(rd.read(i))
                # Best of N: on a shared machine other tenants' memory traffic comes in
                # bursts; the fastest read measures the tier, not them (--repeats 1: one shot).
                load = min(times) / rig.time_scale if hit_pages else 0.0
                if rig.sink is not None and hit_pages:
                    load = _gpu_load(opts, rd.pool, hit_pages, rig.sink, mode, load)
                rd.verify(i)
                if rd.reqs[i].measured:
                    rd.measured.append(Measured(rd.index, rd.reqs[i], hit_pages,
                                                len(rd.keys[i]), load))
                if rd.index == 0:
                    if sample_machine and hit_pages:
                        calibrator.sample()
                    if on_progress is not None:
                        on_progress(i + 1, n_req)
                barrier.wait()  # the next request's writes start after every read
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            errors.append(exc)
            barrier.abort()

    if k == 1:
        run(readers[0])
    else:
        threads = [threading.Thread(target=run, args=(rd,), daemon=True) for rd in readers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    corrupt = sum(b.stats().corrupt_pages for b in rig.backends)
    return Replay(
        measured=[m for rd in readers for m in rd.measured],
        bytes_read=sum(rd.bytes_read for rd in readers),
        bytes_written=sum(rd.bytes_written for rd in readers),
        bad_pages=[b for rd in readers for b in rd.bad], corrupt_pages=corrupt)


def _gpu_load(opts: ValidateOptions, pool: Any, hit_pages: int, sink: Any, mode: ModeChoice,
              load: float) -> float:
    """With a GPU: the hit pages copied host -> GPU (page_first: K and V are two runs).
    For the DRAM tier that copy IS the load; after a tier read it adds to it."""
    hit_tok = hit_pages * opts.page_tokens
    if opts.layout == "page_first":
        h2d = sink.copy(pool.kv_buffer[0, :hit_tok], pool.kv_buffer[1, :hit_tok])
    else:
        h2d = sink.copy(pool.kv_buffer[:, :, :hit_tok])
    return h2d if mode.mode == "dram" else load + h2d


def check_integrity(rep: Replay) -> None:
    if rep.bad_pages:
        raise CheckFailedError(
            f"{len(rep.bad_pages)} pages read back wrong ({', '.join(rep.bad_pages[:3])})",
            "the backend returned data that differs from what was written")
    if rep.corrupt_pages:
        raise CheckFailedError(f"{rep.corrupt_pages} pages failed their checksum")
