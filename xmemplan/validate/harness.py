"""`xmemplan validate`: push real KV pages through a HiCache backend, compare with the model.

`run_validate` runs these steps, each a function with a typed result (steps 5-6 in
`validate.replay`, 7-8 in `validate.verdict`):

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
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from xmemplan import units
from xmemplan.errors import UsageError
from xmemplan.validate.options import ValidateOptions
from xmemplan.validate.pages import Pattern, page_view
from xmemplan.validate.probe import Calibrator, cuda_sink, memcpy_bandwidth
from xmemplan.validate.replay import build_rig, check_integrity, emulation_scale, replay
from xmemplan.validate.verdict import (
    ClassSummary,
    RequestRow,
    predict,
    rel_error,
    summarize_classes,
    verdict_error,
)
from xmemplan.validate.workload import Request, from_pairs, scale_to_budget, synthetic

LAYOUTS = ("page_first", "layer_first")
__all__ = ["ClassSummary", "RequestRow", "ValidateResult", "rel_error", "run_validate",
           "verdict_error"]


# -- the result ---------------------------------------------------------------------------
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
    # flags that changed nothing on this input or machine (stderr, and JSON 'warnings')
    warnings: list[str] = field(default_factory=list)
    # validate --plan: each of the plan's claims, how it was replayed (or "not checked"),
    # and for the judged one the measured and claimed figures and the error
    plan_checks: list[dict[str, Any]] = field(default_factory=list)

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
    if opts.emulate and opts.backend != "xmem":  # dram copies host memory: nothing emulated
        raise UsageError("--emulate applies to --backend xmem",
                         "--backend dram copies real host memory and emulates nothing: "
                         "drop --emulate")
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
            f"{units.count(opts.readers, 'reader')}, copy-size curve {curve}, op latency "
            f"{device.op_latency_s * 1e6:.3g} us; time scale x{time_scale:.3g}")
        srcs = device.sources
        lines.append(f"figures from: banks and link: {srcs.get('bank_bandwidth', '?')}; "
                     f"node: {srcs.get('node_bandwidth', '?')}; assumed: "
                     f"{', '.join(device.assumed()) or 'none'}")
    lines.append(f"predicted by: {basis.words}, {units.count(opts.readers, 'reader')} "
                 "loading at once, "
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
def check_tier_kind(cat: Any, backend: str, named: str | None, tier: Any) -> None:
    """--tier names what the prediction loads from: an X-Mem tier for --backend xmem, a host
    tier for --backend dram (UsageError, exit 2, otherwise). A host tier with --backend
    xmem predicted host-DRAM loads for pages replayed through the X-Mem node and failed by
    87 % on the user's flag; an X-Mem tier with --backend dram was ignored and passed."""
    from xmemplan.sizing.deployment import XMEM_KINDS, tier_names

    if named is None:
        return
    kinds, what, medium = ((XMEM_KINDS, "an X-Mem tier", "an X-Mem node") if backend == "xmem"
                           else (("host",), "a host DRAM tier", "host DRAM"))
    if tier.kind not in kinds:
        alias = "" if named == tier.name else f" ({tier.name})"
        other = ("; --backend dram checks a host DRAM tier" if tier.kind == "host" else
                 "; --backend xmem checks an X-Mem tier" if tier.kind in XMEM_KINDS else "")
        raise UsageError(
            f"--tier {named}{alias} is a tier of kind {tier.kind}, and --backend {backend} "
            f"replays pages through {medium}",
            f"name {what}: {tier_names(cat, kinds)} (xmemplan catalog tiers), or drop --tier"
            + other)


def run_validate(opts: ValidateOptions, on_progress: Any = None) -> ValidateResult:
    from xmemplan.backends.device import load_device
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing.model import (
        Transfer,
        calibration_for,
        effective_bandwidth,
        with_kv_dtype,
    )

    check_options(opts)
    started = time.perf_counter()
    cat = load_catalog(list(opts.catalog_files))
    model, gpu = cat.model(opts.model), cat.gpu(opts.gpu)
    if opts.kv_dtype:  # a plan sized with --kv-dtype: its pages are that size
        model = with_kv_dtype(model, opts.kv_dtype)
    tier = cat.tier(opts.tier or ("xmem" if opts.backend == "xmem" else "host-dram-pcie5"))
    check_tier_kind(cat, opts.backend, opts.tier, tier)
    calibration = calibration_for(cat, "sglang")
    page_bytes = model.kv_bytes_per_token * opts.page_tokens
    mode = choose_mode(opts)
    if opts.readers > 1 and not mode.shaped:
        raise UsageError("--readers > 1 needs the emulated node",
                         "several readers share one emulated X-Mem node; drop --readers for "
                         "--backend dram, --real and --calibrate")
    if opts.device is not None and mode.mode != "emulate":
        raise UsageError(f"--device names the emulated X-Mem node, and this run uses "
                         f"{mode.medium}",
                         "drop --device, or add --emulate (with --backend xmem) to use it")
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
    warnings = []
    if opts.calibrate and mode.mode == "dram" and not mode.gpu_sink:
        warnings.append(
            "--calibrate changed nothing: with no GPU on this machine, --backend dram is "
            "predicted from this machine's copy bandwidth already (the probe); on a machine "
            "with a GPU it replaces the catalog's host bandwidth with pinned host-to-GPU "
            "copies. Here, validate --calibrate without --backend dram replays the X-Mem "
            "backend unshaped and predicts with its measured copies")
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
    checks, claim_error = plan_checks(opts, achieved, measure_compute)
    return ValidateResult(plan_checks=checks,
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
        passed=error <= opts.tolerance and claim_error <= opts.tolerance, classes=classes,
        requests=rows, notes=notes, warnings=warnings)


def plan_checks(opts: ValidateOptions, achieved: float, compute_measured: bool
                ) -> tuple[list[dict[str, Any]], float]:
    """validate --plan: its claims as rows (claim, how replayed), the judged one (the
    plan's per-GPU load bandwidth at its GPUs per node against the bandwidth achieved per
    reader) with its error; (rows, that error, 0 when nothing was judged)."""
    from xmemplan.validate.verdict import rel_error

    rows: list[dict[str, Any]] = [{"claim": c, "replayed": how} for c, how in opts.plan_claims]
    if opts.plan_claims:
        rows.append({"claim": "prefill compute behind the plan's TTFT",
                     "replayed": "measured on this GPU" if compute_measured else
                     "not checked: no GPU here (compute not measured)"})
    claimed = opts.claimed_bandwidth_bytes_per_s
    if claimed is None:
        return rows, 0.0
    err = rel_error(achieved, claimed) if achieved > 0 else math.inf
    rows.append({"claim": f"load bandwidth per GPU at {units.count(opts.readers, 'GPU')} "
                 "per node", "replayed": "judged", "claimed_bytes_per_s": claimed,
                 "measured_bytes_per_s": achieved, "error": err})
    return rows, err
