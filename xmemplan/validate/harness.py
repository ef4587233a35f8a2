"""`xmemplan validate`: push real KV pages through a HiCache backend, compare with the model.

`run_validate` runs these steps, each a function with a typed result:

1. `choose_mode`: which medium really runs (X-Mem hardware, the emulated node, host DRAM)
   and whether a GPU is the destination;
2. `build_workload`: the requests each reader (simulated GPU) replays, scaled to the
   machine (`validate.workload`);
3. `probe_machine`: this machine's copy speed (the time scale of the emulated node, and
   the tier itself under `--calibrate` or for `--backend dram` on a CPU);
4. `prediction_basis`: what the planner is given (its own catalog figures, or this
   machine's measured constants), said in words;
5. `build_rig`: one backend and one host pool per reader, all on one emulated node;
6. `replay`: the readers run in threads, request by request in lock-step: write the missed
   pages, then all read their hit pages at once (the timed load, best of `repeats`),
   verify every byte;
7. `predict`: the planner's prediction for every measured request, with the same page
   size, layout and number of concurrent readers (`xmemplan.sizing.model.ttft`);
8. `summarize`: load-time distribution per class (p50, p90), TTFT only where compute was
   measured on a GPU, and the verdict.

Emulation: the emulated node has its own device model (`xmemplan.backends.device`,
data/devices/*.toml), not the planner's catalog, so a wrong planner term (bandwidth, node
contention, transfer-size efficiency) makes the check fail. It runs `time_scale` times
slower than the device (a machine copies memory far slower than X-Mem) and measured loads
are divided by it.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from xmemplan.errors import CheckFailedError, UsageError
from xmemplan.validate.options import ValidateOptions
from xmemplan.validate.pages import Pattern, host_pool, page_view
from xmemplan.validate.probe import Calibrator, cuda_sink, gpu_matmul_seconds, memcpy_bandwidth
from xmemplan.validate.workload import Request, from_pairs, scale_to_budget, synthetic

STORAGE_BATCH_PAGES = 128  # SGLang's STORAGE_BATCH_SIZE: pages per batched storage call
CLASS_EDGE = 0.5  # hit ratio separating "cold" from "warm" requests
SCALE_MARGIN = 3.0  # emulated time must exceed the machine's own copy time by this factor
LAYOUTS = ("page_first", "layer_first")


# -- results ------------------------------------------------------------------------------
@dataclass
class RequestRow:
    reader: int
    session: int
    round: int
    prompt_tokens: int
    hit_tokens: int
    hit_pages: int
    written_pages: int
    load_s: float  # measured, device time (time scale divided out)
    predicted_load_s: float
    simulated_load_s: float | None  # xmemplan.sizing.sim, the same requests in lock-step
    compute_s: float | None  # measured on a GPU; None where not measured
    ttft_s: float | None  # measured load + measured compute; None without a GPU
    predicted_ttft_s: float
    klass: str


@dataclass
class ClassSummary:
    name: str
    requests: int
    load_p50_ms: float
    predicted_load_p50_ms: float
    load_error_p50: float
    load_p90_ms: float
    predicted_load_p90_ms: float
    load_error_p90: float
    ttft_p50_ms: float | None = None
    predicted_ttft_p50_ms: float | None = None
    ttft_error_p50: float | None = None
    simulated_load_p50_ms: float | None = None  # reported beside the planner, not judged
    simulated_load_p90_ms: float | None = None
    simulated_load_error_p50: float | None = None


@dataclass
class ValidateResult:
    note: str  # the first line: which medium really ran
    preamble: list[str]  # what was emulated, from which figures, what the verdict covers
    backend: str
    backend_mode: str
    tier: str
    model: str
    gpu: str
    device: str | None
    readers: int
    page_tokens: int
    layout: str
    calibrated: bool
    compute_measured: bool
    time_scale: float
    page_bytes: int
    predicted_bandwidth_bytes_per_s: float  # per reader, as the planner computes it
    achieved_bandwidth_bytes_per_s: float  # hit bytes / measured load, per reader
    machine_copy_bandwidth_bytes_per_s: float  # unshaped backend reads on this machine
    memcpy_bandwidth_bytes_per_s: float  # numpy single-thread copy, same page size
    bytes_read: int
    bytes_written: int
    wall_s: float
    tolerance: float
    error: float
    verdict_on: str  # what `error` is the largest of
    passed: bool
    classes: list[ClassSummary]
    requests: list[RequestRow]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- step 1: mode ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ModeChoice:
    mode: str  # real | emulate | dram
    shaped: bool  # the emulated node times the copies
    gpu_sink: bool  # hit pages are copied into a CUDA tensor (and compute is measured)
    medium: str  # words for the first line


def check_options(opts: ValidateOptions) -> None:
    if opts.backend not in ("xmem", "dram"):
        raise UsageError(f"unknown backend '{opts.backend}'", "use xmem or dram")
    if opts.real and opts.emulate:
        raise UsageError("--real and --emulate exclude each other")
    if opts.real and opts.backend != "xmem":
        raise UsageError("--real applies to --backend xmem")
    if not opts.tolerance > 0:
        raise UsageError("--tolerance must be positive")
    if opts.predict_bandwidth_bytes_per_s is not None and not (
            opts.predict_bandwidth_bytes_per_s > 0
            and math.isfinite(opts.predict_bandwidth_bytes_per_s)):
        raise UsageError("--predict-bandwidth must be a positive bandwidth",
                         "a zero bandwidth predicts loads that never end")
    if opts.readers < 1:
        raise UsageError("--readers must be at least 1")
    if opts.layout not in LAYOUTS:
        raise UsageError(f"unknown layout '{opts.layout}'", f"use {' or '.join(LAYOUTS)}")
    if opts.page_tokens < 1:
        raise UsageError("--page-tokens must be at least 1")


def choose_mode(opts: ValidateOptions) -> ModeChoice:
    from xmemplan.backends.media import xmem_installed

    gpu = cuda_sink(1) is not None and opts.readers == 1
    if opts.backend == "dram":
        medium = "host DRAM, real copies" + (
            ", pages then copied to the GPU" if gpu else " (no GPU on this machine)")
        return ModeChoice("dram", False, gpu, medium)
    if opts.real or (xmem_installed() and not opts.emulate):
        return ModeChoice("real", False, gpu, "real X-Mem hardware")
    medium = "emulated X-Mem node"
    if not opts.emulate:
        medium += " (no X-Mem hardware on this machine)"
    if opts.calibrate:
        return ModeChoice("emulate", False, False, medium + ", unshaped (--calibrate)")
    return ModeChoice("emulate", True, False, medium)


# -- step 2: workload ---------------------------------------------------------------------
@dataclass
class Workload:
    readers: list[list[Request]]  # one request list per reader, same shapes, own keys
    notes: list[str]
    max_pages: int


def build_workload(opts: ValidateOptions, page_bytes: int) -> Workload:
    notes: list[str] = []
    out: list[list[Request]] = []
    for r in range(opts.readers):
        o = _with_seed(opts, opts.seed + 1000 * r)
        reqs = synthetic(o) if not o.pairs else from_pairs(o)
        reqs, got = scale_to_budget(reqs, page_bytes, opts.page_tokens,
                                    opts.max_bytes / opts.readers, opts.max_requests)
        if r == 0:
            notes += [n + (f" per reader ({opts.readers} readers, {opts.max_bytes / 1e9:.3g} "
                           "GB in all)" if opts.readers > 1 and "scaled" in n else "")
                      for n in got]
        out.append(reqs)
    return Workload(out, notes, max(len(q.keys) for reqs in out for q in reqs))


def _with_seed(opts: ValidateOptions, seed: int) -> ValidateOptions:
    from dataclasses import replace

    return replace(opts, seed=seed)


# -- step 3: this machine --------------------------------------------------------------------
@dataclass
class MachineProbe:
    copy_bytes_per_s: float  # unshaped backend reads (or pinned H2D with a GPU)
    memcpy_bytes_per_s: float
    calibrator: Calibrator


def probe_machine(opts: ValidateOptions, mode: ModeChoice, model: Any, page_bytes: int,
                  max_pages: int, pattern: Pattern, sink: Any) -> MachineProbe:
    cal_pages = min(16, max_pages)  # 96 MiB of 6 MiB pages: more than the L3 cache
    calibrator = Calibrator("dram" if mode.mode == "dram" else "emulate", model,
                            opts.page_tokens, cal_pages, 4, pattern, sink, layout=opts.layout)
    copy_bw = calibrator.sample()
    return MachineProbe(copy_bw, memcpy_bandwidth(page_bytes, pages=cal_pages), calibrator)


# -- step 4: what the planner is given ------------------------------------------------------
@dataclass(frozen=True)
class PredictionBasis:
    bandwidth_bytes_per_s: float | None  # None: the planner's own effective bandwidth
    words: str


def prediction_basis(opts: ValidateOptions, mode: ModeChoice, machine_bw: float,
                     catalog: Any, tier: Any) -> PredictionBasis:
    if opts.predict_bandwidth_bytes_per_s:
        bw = opts.predict_bandwidth_bytes_per_s
        return PredictionBasis(bw, f"forced to {bw / 1e9:.4g} GB/s (--predict-bandwidth)")
    if mode.mode == "dram":
        spec = getattr(catalog, "calibrations", {}).get("sglang")
        host = (spec.values or {}).get("host_bandwidth") if spec is not None else None
        if host and mode.gpu_sink and not opts.calibrate:
            return PredictionBasis(float(host), f"host bandwidth {float(host) / 1e9:.4g} GB/s "
                                   "from the calibration overlay (--catalog)")
        if mode.gpu_sink and not opts.calibrate:
            return PredictionBasis(None, f"the planner's host-DRAM tier {tier.name} "
                                   "(shipped calibration)")
        return PredictionBasis(machine_bw, f"this machine's copy bandwidth "
                               f"{machine_bw / 1e9:.4g} GB/s (probe: median of samples "
                               "through the run)")
    if opts.calibrate:
        return PredictionBasis(machine_bw, f"this machine's copy bandwidth "
                               f"{machine_bw / 1e9:.4g} GB/s (--calibrate)")
    return PredictionBasis(None, f"the planner's catalog tier {tier.name}")


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


# -- step 7: prediction -----------------------------------------------------------------------
def predict(opts: ValidateOptions, rep: Replay, model: Any, gpu: Any, tier: Any,
            basis: PredictionBasis, calibration: Any, measure_compute: bool
            ) -> list[RequestRow]:
    from xmemplan.sizing.model import Transfer, combine, ttft

    transfer = Transfer(page_tokens=opts.page_tokens, layout=opts.layout,  # type: ignore[arg-type]
                        io="kernel")
    rows = []
    compute_cache: dict[float, float] = {}
    simulated = simulate_loads(opts, rep, model, gpu, tier, basis, calibration, transfer)
    for j, m in enumerate(rep.measured):
        prompt = m.request.prompt_tokens
        hit_tokens = min(m.hit_pages * opts.page_tokens, prompt)
        pred = ttft(model, gpu, tier, prompt, hit_tokens, overlap=opts.overlap,
                    transfer=transfer, gpus_loading=opts.readers, loaders=opts.readers,
                    calibration=calibration, bandwidth_bytes_per_s=basis.bandwidth_bytes_per_s)
        compute = measured = None
        if measure_compute:
            flops = float(pred.linear_flops + pred.attention_flops)
            if flops not in compute_cache:
                compute_cache[flops] = gpu_matmul_seconds(flops)
            compute = compute_cache[flops]
            measured = float(pred.fixed_s) + float(
                combine(m.load_s, compute, opts.overlap, model.layers))
        ratio = hit_tokens / prompt if prompt else 0.0
        rows.append(RequestRow(
            reader=m.reader, session=m.request.session, round=m.request.round,
            prompt_tokens=int(prompt), hit_tokens=int(hit_tokens), hit_pages=m.hit_pages,
            written_pages=m.pages - m.hit_pages, load_s=m.load_s,
            predicted_load_s=float(pred.load_s),
            simulated_load_s=None if simulated is None else float(simulated[j]),
            compute_s=compute, ttft_s=measured,
            predicted_ttft_s=float(pred.single_s),
            klass="warm" if ratio >= CLASS_EDGE else "cold"))
    return rows


def simulate_loads(opts: ValidateOptions, rep: Replay, model: Any, gpu: Any, tier: Any,
                   basis: PredictionBasis, calibration: Any, transfer: Any
                   ) -> np.ndarray | None:
    """The serving simulator's load time of every measured request, replayed as it ran:
    round by round, the readers' requests arrive together, one per GPU (replica), and
    their loads share the node (fluid sharing; `sum` overlap, so ready - arrival is the
    load). None for tiers the simulator has no load path for."""
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing.sim import Traffic, simulate
    from xmemplan.sizing.simmodel import Setup, engine_for

    if not rep.measured or tier.kind not in ("xmem", "host"):
        return None
    cat = load_catalog(list(opts.catalog_files))
    host = tier if tier.kind == "host" else cat.tier("host-dram-pcie5")
    xmem = tier if tier.kind == "xmem" else cat.tier("xmem")
    setup = Setup(model, gpu, host, xmem, calibration=calibration, transfer=transfer,
                  overlap="sum")
    engine = engine_for(setup, replicas=opts.readers, nodes=1,
                        load_tier="xmem" if tier.kind == "xmem" else "host")
    bw = basis.bandwidth_bytes_per_s
    if bw is not None:
        engine = engine.replace(**({"xmem_bandwidth": bw} if tier.kind == "xmem"
                                   else {"dram_bandwidth": bw, "switch_bandwidth": math.inf}))
    n = len(rep.measured)
    position: dict[int, int] = {}
    rounds = np.zeros(n)
    for j, m in enumerate(rep.measured):  # the k-th measured request of each reader
        rounds[j] = position.get(m.reader, 0)
        position[m.reader] = int(rounds[j]) + 1
    hits = np.array([min(m.hit_pages * opts.page_tokens, m.request.prompt_tokens)
                     for m in rep.measured], dtype=np.float64)
    prompts = np.array([m.request.prompt_tokens for m in rep.measured], dtype=np.float64)
    zero = np.zeros(n)
    traffic = Traffic(rounds * 1e4, prompts,  # rounds 10^4 s apart: no overlap between them
                      hit_xmem=hits if tier.kind == "xmem" else zero,
                      hit_dram=hits if tier.kind == "host" else zero,
                      route=np.array([m.reader for m in rep.measured]))
    res = simulate(traffic, engine)
    return np.asarray(res.ready - res.arrival)


# -- step 8: summary and verdict ------------------------------------------------------------
def rel_error(measured: float, predicted: float) -> float:
    """|measured - predicted| / predicted; nothing measured nor predicted: nan (no
    error); something measured where nothing was predicted: inf (a wrong prediction)."""
    if predicted > 0:
        return abs(measured - predicted) / predicted
    return math.nan if measured <= 0 else math.inf


def summarize_classes(rows: list[RequestRow]) -> list[ClassSummary]:
    out = []
    for name in ("cold", "warm", "all"):
        sel = rows if name == "all" else [r for r in rows if r.klass == name]
        if not sel:
            continue
        lm = np.array([r.load_s for r in sel]) * 1e3
        lp = np.array([r.predicted_load_s for r in sel]) * 1e3
        s = ClassSummary(
            name=name, requests=len(sel),
            load_p50_ms=float(np.percentile(lm, 50)),
            predicted_load_p50_ms=float(np.percentile(lp, 50)),
            load_error_p50=0.0, load_p90_ms=float(np.percentile(lm, 90)),
            predicted_load_p90_ms=float(np.percentile(lp, 90)), load_error_p90=0.0)
        s.load_error_p50 = rel_error(s.load_p50_ms, s.predicted_load_p50_ms)
        s.load_error_p90 = rel_error(s.load_p90_ms, s.predicted_load_p90_ms)
        sim = [r.simulated_load_s for r in sel if r.simulated_load_s is not None]
        if len(sim) == len(sel):
            s.simulated_load_p50_ms = float(np.percentile(sim, 50)) * 1e3
            s.simulated_load_p90_ms = float(np.percentile(sim, 90)) * 1e3
            s.simulated_load_error_p50 = rel_error(s.load_p50_ms, s.simulated_load_p50_ms)
        measured = [r.ttft_s for r in sel if r.ttft_s is not None]
        if len(measured) == len(sel):
            s.ttft_p50_ms = float(np.percentile(measured, 50)) * 1e3
            s.predicted_ttft_p50_ms = float(
                np.percentile([r.predicted_ttft_s for r in sel], 50)) * 1e3
            s.ttft_error_p50 = rel_error(s.ttft_p50_ms, s.predicted_ttft_p50_ms)
        out.append(s)
    return out


P90_MIN_REQUESTS = 10  # below this a class's p90 is nearly its maximum: reported, not judged


def verdict_error(classes: list[ClassSummary]) -> float:
    """The largest per-class error (cold and warm): load p50, load p90 where the class has
    at least P90_MIN_REQUESTS requests, TTFT p50 where compute was measured."""
    errs = []
    for c in classes:
        if c.name == "all":
            continue
        errs.append(c.load_error_p50)
        if c.requests >= P90_MIN_REQUESTS:
            errs.append(c.load_error_p90)
        if c.ttft_error_p50 is not None:
            errs.append(c.ttft_error_p50)
    finite = [e for e in errs if not math.isnan(e)]
    return max(finite, default=0.0)


def preamble(opts: ValidateOptions, mode: ModeChoice, device: Any, basis: PredictionBasis,
             time_scale: float, tier: Any, measure_compute: bool) -> list[str]:
    """The lines that say what ran, from which figures, and what the verdict covers."""
    from pathlib import Path

    lines = []
    if mode.shaped and device is not None:
        gb = 1e9
        banks = "/".join(f"{b / gb:.4g}" for b in device.bank_bytes_per_s)
        curve = ", ".join(f"{_kib(c)} {e:.1%}" for c, e in
                          zip(device.transfer_chunk_bytes, device.transfer_efficiency))
        lines.append(
            f"emulated: device '{device.name}' ({Path(device.path).name}): link "
            f"{device.link_bytes_per_s / gb:.4g} GB/s, banks {banks} GB/s, node "
            f"{device.node_bytes_per_s / 1e12:.4g} TB/s as one token bucket shared by "
            f"{opts.readers} reader(s), copy-size curve {curve}, op latency "
            f"{device.op_latency_s * 1e6:.3g} us; time scale x{time_scale:.3g}")
        srcs = device.sources
        lines.append(f"figures from: banks and link: {srcs.get('bank_bandwidth', '?')}; "
                     f"node: {srcs.get('node_bandwidth', '?')}; assumed: "
                     f"{', '.join(device.assumed()) or 'none'}")
    lines.append(f"predicted by: {basis.words}, {opts.readers} reader(s) loading at once, "
                 f"pages of {opts.page_tokens} tokens, {opts.layout}")
    if measure_compute:
        lines.append("verdict covers: KV load times and TTFT (compute measured on this GPU)")
    else:
        where = "this CPU" if mode.mode != "real" else "this host"
        lines.append(f"verdict covers: KV load times on {where} (p50 and p90 per class); "
                     "no TTFT error: compute was not measured (no GPU)")
    return lines


def _kib(n: float) -> str:
    for div, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= div:
            return f"{n / div:.4g} {unit}"
    return f"{n:.4g} B"


# -- the run --------------------------------------------------------------------------------
def run_validate(opts: ValidateOptions, on_progress: Any = None) -> ValidateResult:
    from xmemplan.backends.device import load_device
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing.model import Transfer, calibration_for, effective_bandwidth

    check_options(opts)
    started = time.perf_counter()
    cat = load_catalog(list(opts.catalog_files))
    model, gpu = cat.model(opts.model), cat.gpu(opts.gpu)
    tier = cat.tier(opts.tier or ("xmem" if opts.backend == "xmem" else "host-dram-pcie5"))
    calibration = calibration_for(cat, "sglang")
    page_bytes = model.kv_bytes_per_token * opts.page_tokens
    mode = choose_mode(opts)
    if opts.readers > 1 and not mode.shaped:
        raise UsageError("--readers > 1 needs the emulated node",
                         "several readers share one emulated X-Mem node; drop --readers for "
                         "--backend dram, --real and --calibrate")
    device = load_device(opts.device) if mode.mode == "emulate" else None
    work = build_workload(opts, page_bytes)
    sink = cuda_sink(work.max_pages * page_bytes) if mode.gpu_sink else None
    pattern = Pattern(page_bytes, opts.seed + 7)
    machine = probe_machine(opts, mode, model, page_bytes, work.max_pages, pattern, sink)
    notes = list(work.notes)
    try:
        time_scale = 1.0
        if mode.shaped:
            part = max(p.shape[0] for p in page_view(machine.calibrator.pool, 0))
            assert device is not None
            time_scale = emulation_scale(device, opts.readers, part,
                                         len(device.bank_bytes_per_s),
                                         machine.copy_bytes_per_s)
        rig = build_rig(opts, mode, device, model, work, page_bytes, time_scale, sink)
        try:
            rep = replay(opts, rig, work, pattern, mode, machine.calibrator, on_progress)
        finally:
            for b in rig.backends:
                b.close()
    finally:
        machine.calibrator.close()
    check_integrity(rep)
    machine_bw = machine.copy_bytes_per_s
    if opts.calibrate or (mode.mode == "dram" and not mode.gpu_sink):
        machine_bw = machine.calibrator.median
        if len(machine.calibrator.samples) > 1:
            s = machine.calibrator.samples
            notes.append(f"machine copy bandwidth: median of {len(s)} samples taken through "
                         f"the run, {min(s) / 1e9:.3g}-{max(s) / 1e9:.3g} GB/s")
    basis = prediction_basis(opts, mode, machine_bw, cat, tier)
    measure_compute = sink is not None
    rows = predict(opts, rep, model, gpu, tier, basis, calibration, measure_compute)
    transfer = Transfer(page_tokens=opts.page_tokens, layout=opts.layout,  # type: ignore[arg-type]
                        io="kernel")
    predict_bw = basis.bandwidth_bytes_per_s or float(effective_bandwidth(
        model, gpu, tier, gpus_loading=opts.readers, loaders=opts.readers, transfer=transfer,
        calibration=calibration))
    if mode.mode == "real":
        notes.append("real X-Mem: pages move host <-> X-Mem (the L3 path); X-Mem -> GPU "
                     "direct (the Netpreme fork's L2 path) is not what this measures")
    classes = summarize_classes(rows)
    error = verdict_error(classes)
    hit_rows = [r for r in rows if r.hit_pages]
    load_sum = sum(r.load_s for r in hit_rows)
    achieved = (sum(r.hit_pages for r in hit_rows) * page_bytes / load_sum
                if hit_rows and load_sum > 0 else 0.0)
    lines = preamble(opts, mode, device, basis, time_scale, tier, measure_compute)
    return ValidateResult(
        note=f"validate: backend {opts.backend} on {mode.medium}; workload: {opts.source}",
        preamble=lines, backend=opts.backend, backend_mode=mode.mode, tier=tier.name,
        model=model.name, gpu=gpu.name, device=device.name if device is not None else None,
        readers=opts.readers, page_tokens=opts.page_tokens, layout=opts.layout,
        calibrated=opts.calibrate, compute_measured=measure_compute, time_scale=time_scale,
        page_bytes=page_bytes, predicted_bandwidth_bytes_per_s=predict_bw,
        achieved_bandwidth_bytes_per_s=achieved, machine_copy_bandwidth_bytes_per_s=machine_bw,
        memcpy_bandwidth_bytes_per_s=machine.memcpy_bytes_per_s, bytes_read=rep.bytes_read,
        bytes_written=rep.bytes_written, wall_s=time.perf_counter() - started,
        tolerance=opts.tolerance, error=error,
        verdict_on="load p50, p90 of classes of 10 or more" + (
            " and TTFT p50" if measure_compute else ""),
        passed=error <= opts.tolerance, classes=classes, requests=rows, notes=notes)
