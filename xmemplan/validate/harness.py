"""`xmemplan validate`: push real KV pages through a HiCache backend, compare with the model.

For each request of a workload, in replay order:
1. its page keys (64 tokens per page by default) go through the radix matcher
   (`xmemplan.prefix.matcher.match`), which says how many leading pages are cached;
   `batch_exists` on the backend must agree (a disagreement is a backend bug: exit 5);
2. the missed pages are written from a host KV pool in SGLang's layout (`batch_set_v1`);
3. the hit pages are read back into the host pool (`batch_get_v1`, in batches of 128 pages
   as SGLang's controller does) and timed, `repeats` times: the fastest read is the
   measured load time (other tenants of a shared machine disturb single reads in bursts;
   `--repeats 1` gives one-shot times). Where torch sees
   a GPU the pages are then copied into a CUDA tensor and, for the DRAM tier, that
   host-to-GPU copy is the measured load;
4. every byte read is compared with what was written (pages carry a pattern derived from
   their key); a wrong byte fails the run (exit 5).

The prediction is `xmemplan.sizing.model.ttft` for the same prompt and hit tokens, the same
function `xmemplan size` uses. The measured TTFT is the same formula with the measured load
in place of the predicted one: t0 + combine(load, compute) (compute from the model). Error
= |measured p50 - predicted p50| / predicted p50 for each request class; the run fails when
the largest exceeds the tolerance.

Emulation: a machine copies memory far slower than X-Mem's ~350 GB/s per GPU, so the
emulated tier runs `time_scale` times slower than the real tier (bandwidth / k, latency x k,
k chosen so that shaping, not the machine's copy speed, sets the time), and measured load
times are divided by k. `--calibrate` turns shaping off and uses this machine's measured
copy bandwidth as the tier's bandwidth instead (the median of samples of a separate 16-page
read taken before the run and between requests, so that it sees the same machine state as
the replay): the run then tests the model's load term against real copies.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from xmemplan.errors import CheckFailedError, UsageError
from xmemplan.traces.keys import sglang_style_keys
from xmemplan.validate.options import ValidateOptions
from xmemplan.validate.pages import Pattern, host_pool, page_view
from xmemplan.validate.probe import Calibrator, cuda_sink, gpu_matmul_seconds, memcpy_bandwidth
from xmemplan.validate.workload import Request, from_pairs, scale_to_budget, synthetic

STORAGE_BATCH_PAGES = 128  # SGLang's STORAGE_BATCH_SIZE: pages per batched storage call
CLASS_EDGE = 0.5  # hit ratio separating "cold" from "warm" requests


@dataclass
class RequestRow:
    session: int
    round: int
    prompt_tokens: int
    hit_tokens: int
    hit_pages: int
    written_pages: int
    load_s: float  # measured, tier time (time scale divided out)
    predicted_load_s: float
    compute_s: float
    ttft_s: float
    predicted_ttft_s: float
    klass: str


@dataclass
class ClassSummary:
    name: str
    requests: int
    ttft_p50_ms: float
    predicted_ttft_p50_ms: float
    ttft_p99_ms: float
    predicted_ttft_p99_ms: float
    error_p50: float
    error_p99: float
    load_p50_ms: float
    predicted_load_p50_ms: float
    load_error_p50: float


@dataclass
class ValidateResult:
    note: str  # the first line: which tier really ran
    backend: str
    backend_mode: str
    tier: str
    model: str
    gpu: str
    calibrated: bool
    time_scale: float
    page_bytes: int
    predicted_bandwidth_bytes_per_s: float
    achieved_bandwidth_bytes_per_s: float  # hit bytes / measured load (tier time)
    machine_copy_bandwidth_bytes_per_s: float  # unshaped backend reads on this machine
    memcpy_bandwidth_bytes_per_s: float  # numpy single-thread copy, same page size
    bytes_read: int
    bytes_written: int
    wall_s: float
    tolerance: float
    error: float
    passed: bool
    classes: list[ClassSummary]
    requests: list[RequestRow]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the run ----------------------------------------------------------------------------
def run_validate(opts: ValidateOptions, on_progress: Any = None) -> ValidateResult:
    from xmemplan.backends import create_backend
    from xmemplan.backends.media import xmem_installed
    from xmemplan.catalog import load_catalog
    from xmemplan.prefix.matcher import match
    from xmemplan.sizing.model import Transfer, combine, effective_bandwidth, ttft

    if opts.backend not in ("xmem", "dram"):
        raise UsageError(f"unknown backend '{opts.backend}'", "use xmem or dram")
    if opts.real and opts.emulate:
        raise UsageError("--real and --emulate exclude each other")
    if opts.real and opts.backend != "xmem":
        raise UsageError("--real applies to --backend xmem")
    if opts.tolerance <= 0:
        raise UsageError("--tolerance must be positive")
    started = time.perf_counter()
    cat = load_catalog(opts.catalog_files)
    model, gpu = cat.model(opts.model), cat.gpu(opts.gpu)
    tier = cat.tier(opts.tier or ("xmem" if opts.backend == "xmem" else "host-dram-pcie5"))
    page_bytes = model.kv_bytes_per_token * opts.page_tokens
    notes: list[str] = []

    # Which medium really runs, said plainly on the first line.
    sink_probe = cuda_sink(1) if opts.backend == "dram" else None
    if opts.backend == "xmem":
        if opts.real:
            mode = "real"
        elif opts.emulate:
            mode = "emulate"
        else:
            mode = "real" if xmem_installed() else "emulate"
    else:
        mode = "dram"
    shaped = mode == "emulate" or (mode == "dram" and sink_probe is None)
    if opts.calibrate:
        shaped = False

    requests = synthetic(opts) if not opts.pairs else from_pairs(opts)
    budget = opts.max_bytes
    requests, scale_notes = scale_to_budget(requests, page_bytes, opts.page_tokens, budget,
                                             opts.max_requests)
    notes += scale_notes
    max_pages = max(len(r.keys) for r in requests)
    sink = cuda_sink(max_pages * page_bytes) if sink_probe is not None else None
    pool = host_pool(model, max_pages, opts.page_tokens, pinned=sink is not None)
    pattern = Pattern(pool.page_bytes, opts.seed + 7)
    assert pool.page_bytes == page_bytes

    # This machine's copy speed: sets the time scale, and is the tier under --calibrate.
    cal_pages = min(16, max_pages)  # 96 MiB of 6 MiB pages: more than the L3 cache
    calibrator = Calibrator("dram" if mode == "dram" else "emulate", model, opts.page_tokens,
                             cal_pages, tier.banks or 4, pattern, sink)
    machine_bw = calibrator.sample()
    memcpy_bw = memcpy_bandwidth(page_bytes, pages=cal_pages)

    transfer = Transfer(page_tokens=opts.page_tokens, layout="page_first", io="kernel")
    tier_bw = float(effective_bandwidth(model, gpu, tier, transfer=transfer))
    time_scale = 1.0
    if opts.calibrate:
        tier_bw = machine_bw  # refined below: the median of samples taken during the replay
    elif shaped:
        # Shaping must dominate the real copy time by a margin (x2.5) to be exact.
        time_scale = max(1.0, 2.5 * tier_bw / machine_bw)
    predict_bw = opts.predict_bandwidth_bytes_per_s or tier_bw
    if opts.predict_bandwidth_bytes_per_s:
        notes.append(f"prediction forced to {predict_bw / 1e9:.3g} GB/s (--predict-bandwidth)")

    working_set = len({int(k) for r in requests for k in r.keys}) * page_bytes
    capacity = opts.capacity_bytes or max(working_set * 1.25 + 2 * page_bytes, 8 * page_bytes)
    banks = tier.banks or 4
    backend = create_backend(
        "xmem", mode=mode, capacity_bytes=int(capacity), banks=banks, page_bytes=page_bytes,
        shaping=shaped, link_bytes_per_s=tier_bw if shaped else None,
        read_bytes_per_s=tier.node_bandwidth_bytes_per_s if shaped else None,
        write_bytes_per_s=tier.node_bandwidth_bytes_per_s if shaped else None,
        op_latency_s=tier.latency_s if shaped else 0.0, time_scale=time_scale,
        model_name=model.name, page_size=opts.page_tokens,
    )
    backend.register_mem_pool_host(pool)
    if mode == "real":
        notes.append("real X-Mem: pages move host <-> X-Mem (the L3 path); X-Mem -> GPU "
                     "direct (the Netpreme fork's L2 path) is not what this measures")

    keys_all = np.concatenate([r.keys for r in requests])
    offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r.keys) for r in requests])
    resets = np.array([i == 0 or requests[i].session != requests[i - 1].session
                       for i in range(len(requests))], dtype=np.bool_)
    # One radix tree per session (sessions do not share prefixes here).
    hits_by_matcher = match(keys_all, offsets, resets)

    rows: list[RequestRow] = []
    measured: list[tuple[Request, int, int, float]] = []
    bytes_read = bytes_written = 0
    bad_pages: list[str] = []
    try:
        for i, req in enumerate(requests):
            keys = sglang_style_keys(req.keys)
            n = len(keys)
            hit_pages = int(hits_by_matcher[i])
            found = backend.batch_exists(keys)
            if found != hit_pages:
                raise CheckFailedError(
                    f"request {i}: the backend holds {found} leading pages, the radix matcher "
                    f"says {hit_pages}", "the backend lost or invented pages",
                )
            # Write the missed pages from the host pool (SGLang's write-through backup).
            for p in range(hit_pages, n):
                pattern.fill(int(req.keys[p]), page_view(pool, p))
            for start in range(hit_pages, n, STORAGE_BATCH_PAGES):
                end = min(n, start + STORAGE_BATCH_PAGES)
                idx = np.concatenate([pool.page_indices(p) for p in range(start, end)])
                ok = backend.batch_set_v1(keys[start:end], idx)
                if not all(ok):
                    raise CheckFailedError(f"request {i}: {ok.count(False)} page writes failed",
                                           "the tier is full or failing")
                bytes_written += (end - start) * page_bytes
            # Read the hit pages back (the timed load).
            if hit_pages:
                pool.kv_buffer.view(np.uint8).reshape(-1)[:] = 0xA5  # poison the destination
            times = []
            for _ in range(max(1, opts.repeats) if hit_pages else 1):
                t0 = time.perf_counter()
                for start in range(0, hit_pages, STORAGE_BATCH_PAGES):
                    end = min(hit_pages, start + STORAGE_BATCH_PAGES)
                    idx = np.concatenate([pool.page_indices(p) for p in range(start, end)])
                    ok = backend.batch_get_v1(keys[start:end], idx)
                    if not all(ok):
                        raise CheckFailedError(
                            f"request {i}: {ok.count(False)} page reads failed")
                times.append(time.perf_counter() - t0)
                bytes_read += hit_pages * page_bytes
            # The fastest of repeated reads: on a shared machine other tenants' memory traffic
            # comes in bursts; best-of-N measures the tier, not them (--repeats 1: one shot).
            load = min(times) / time_scale
            if sink is not None and hit_pages:
                # page_first pool: the hit pages' K and V are two contiguous regions.
                hit_tok = hit_pages * opts.page_tokens
                h2d = sink.copy(pool.kv_buffer[0, :hit_tok], pool.kv_buffer[1, :hit_tok])
                load = h2d if mode == "dram" else load + h2d
            for p in range(hit_pages):
                if not pattern.check(int(req.keys[p]), page_view(pool, p)):
                    bad_pages.append(f"request {i} page {p}")
            if req.measured:
                measured.append((req, hit_pages, n, load))
            if opts.calibrate and hit_pages:
                calibrator.sample()
            if on_progress is not None:
                on_progress(i + 1, len(requests))
    finally:
        stats = backend.stats()
        backend.close()
        calibrator.close()
    if bad_pages:
        raise CheckFailedError(
            f"{len(bad_pages)} pages read back wrong ({', '.join(bad_pages[:3])})",
            "the backend returned data that differs from what was written",
        )
    if stats.corrupt_pages:
        raise CheckFailedError(f"{stats.corrupt_pages} pages failed their checksum")
    if opts.calibrate:
        machine_bw = tier_bw = calibrator.median
        predict_bw = opts.predict_bandwidth_bytes_per_s or tier_bw
        notes.append(
            f"--calibrate: tier bandwidth = this machine's copy bandwidth, median of "
            f"{len(calibrator.samples)} samples taken through the run: {tier_bw / 1e9:.3g} GB/s "
            f"(range {min(calibrator.samples) / 1e9:.3g}-{max(calibrator.samples) / 1e9:.3g}; "
            "shaping off)")

    for req, hit_pages, n, load in measured:
        prompt = req.prompt_tokens
        hit_tokens = min(hit_pages * opts.page_tokens, prompt)
        pred = ttft(model, gpu, tier, prompt, hit_tokens, overlap=opts.overlap,
                    transfer=transfer, bandwidth_bytes_per_s=predict_bw)
        # The measured TTFT: the same formula with the measured load (and, on a GPU, the
        # measured time of a matmul with the prefill's FLOPs).
        compute = float(pred.compute_s)
        if sink is not None:
            compute = gpu_matmul_seconds(float(pred.linear_flops + pred.attention_flops))
        measured_ttft = float(pred.fixed_s) + float(
            combine(load, compute, opts.overlap, model.layers))
        ratio = hit_tokens / prompt if prompt else 0.0
        rows.append(RequestRow(
            session=req.session, round=req.round, prompt_tokens=int(prompt),
            hit_tokens=int(hit_tokens), hit_pages=hit_pages, written_pages=n - hit_pages,
            load_s=load, predicted_load_s=float(pred.load_s), compute_s=compute,
            ttft_s=measured_ttft, predicted_ttft_s=float(pred.single_s),
            klass="warm" if ratio >= CLASS_EDGE else "cold",
        ))

    classes = _summaries(rows)
    error = max((c.error_p50 for c in classes if c.name != "all"), default=0.0)
    hit_rows = [r for r in rows if r.hit_pages]
    achieved = (sum(r.hit_pages for r in hit_rows) * page_bytes / sum(r.load_s for r in hit_rows)
                if hit_rows else 0.0)
    what = {"real": "real X-Mem hardware", "emulate": "emulated X-Mem tier",
            "dram": "host DRAM"}[mode]
    if mode == "emulate" and not opts.emulate and not opts.calibrate:
        what += " (no X-Mem hardware on this machine)"
    if mode == "dram" and sink is None:
        what += ", emulated host-DRAM tier (no GPU on this machine)" if shaped else ""
    if sink is not None:
        what += ", pages copied to the GPU, compute measured by matmul"
        notes.append("the GPU path (pinned pool, H2D copies, matmul compute) was written "
                     "without a GPU to run it on; docs/validation.md says what was verified")
    if opts.calibrate:
        what += ", calibrated to this machine (no shaping)"
    elif shaped:
        what += f", time scale x{time_scale:.3g}"
    note = f"validate: backend {opts.backend} on {what}; workload: {opts.source}"
    return ValidateResult(
        note=note, backend=opts.backend, backend_mode=mode, tier=tier.name, model=model.name,
        gpu=gpu.name, calibrated=opts.calibrate, time_scale=time_scale, page_bytes=page_bytes,
        predicted_bandwidth_bytes_per_s=predict_bw, achieved_bandwidth_bytes_per_s=achieved,
        machine_copy_bandwidth_bytes_per_s=machine_bw, memcpy_bandwidth_bytes_per_s=memcpy_bw,
        bytes_read=bytes_read, bytes_written=bytes_written,
        wall_s=time.perf_counter() - started, tolerance=opts.tolerance, error=error,
        passed=error <= opts.tolerance, classes=classes, requests=rows, notes=notes,
    )


def _summaries(rows: list[RequestRow]) -> list[ClassSummary]:
    out = []
    for name in ("cold", "warm", "all"):
        sel = rows if name == "all" else [r for r in rows if r.klass == name]
        if not sel:
            continue
        m = np.array([r.ttft_s for r in sel])
        p = np.array([r.predicted_ttft_s for r in sel])
        lm = np.array([r.load_s for r in sel])
        lp = np.array([r.predicted_load_s for r in sel])

        def rel(a: float, b: float) -> float:
            return abs(a - b) / b if b > 0 else math.nan  # nothing predicted: no error

        m50, p50 = float(np.median(m)), float(np.median(p))
        m99, p99 = float(np.percentile(m, 99)), float(np.percentile(p, 99))
        l50, lp50 = float(np.median(lm)), float(np.median(lp))
        out.append(ClassSummary(
            name=name, requests=len(sel), ttft_p50_ms=m50 * 1e3,
            predicted_ttft_p50_ms=p50 * 1e3, ttft_p99_ms=m99 * 1e3,
            predicted_ttft_p99_ms=p99 * 1e3, error_p50=rel(m50, p50), error_p99=rel(m99, p99),
            load_p50_ms=l50 * 1e3, predicted_load_p50_ms=lp50 * 1e3,
            load_error_p50=rel(l50, lp50),
        ))
    return out
