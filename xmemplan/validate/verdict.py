"""Steps 7 and 8 of `validate`: the planner's (and the simulator's) prediction for every
measured request, the per-class summary and the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.validate.options import ValidateOptions
from xmemplan.validate.probe import gpu_matmul_seconds
from xmemplan.validate.replay import Replay

if TYPE_CHECKING:
    from xmemplan.validate.harness import PredictionBasis

CLASS_EDGE = 0.5  # hit ratio separating "cold" from "warm" requests


# -- rows and classes ------------------------------------------------------------------------------
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
    """The largest per-class error (cold, warm and all): load p50, load p90 where the
    class has at least P90_MIN_REQUESTS requests, TTFT p50 where compute was measured."""
    return worst_figure(classes)[1]


def worst_figure(classes: list[ClassSummary]) -> tuple[str, float]:
    """Which figure sets the verdict error, e.g. ('warm TTFT p50', 0.22), so that a failed
    check names the term to look at (the load terms or the compute half of TTFT)."""
    best = ("", 0.0)
    for c in classes:  # every row, "all" too: any row over tolerance fails the verdict
        figs = [("load p50", c.load_error_p50)]
        if c.requests >= P90_MIN_REQUESTS:
            figs.append(("load p90", c.load_error_p90))
        if c.ttft_error_p50 is not None:
            figs.append(("TTFT p50", c.ttft_error_p50))
        for name, e in figs:
            if not math.isnan(e) and e > best[1]:
                best = (f"{c.name} {name}", e)
    return best
