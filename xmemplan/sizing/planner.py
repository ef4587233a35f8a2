"""Search the configurations that meet a TTFT SLO: HBM only, + host DRAM, + X-Mem x n.

For each option the TTFT distribution (p50, p99) comes from the workload's samples, the N
positions of a burst of prefills in flight on one GPU, and, with an arrival rate, an
M/G/1 queueing wait in front of the GPU (service time = the per-request bottleneck of its
two pipelined stages, load and compute). Waiting-time quantiles use the exponential-tail
approximation P(W > t) = rho exp(-t rho / E[W]) with the Pollaczek-Khinchine mean.

Node counts (DESIGN.md section 2): bandwidth-driven n >= GPUs loading x the per-GPU
bandwidth the SLO needs / (node bandwidth x link efficiency); capacity-driven n >= KV
working set / node capacity; recommended n = the larger. When TTFT with an unlimited tier
still breaks the SLO, compute is the limit: no memory tier helps, and the report says how
many prefills per GPU would fit the SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from xmemplan.catalog.specs import GpuSpec, ModelSpec, TierSpec
from xmemplan.errors import UsageError
from xmemplan.sizing.model import (
    DEFAULT_CALIBRATION,
    SGLANG_HICACHE,
    Calibration,
    Transfer,
    combine,
    compute_seconds,
    effective_bandwidth,
    load_seconds,
)
from xmemplan.sizing.workload import Workload

SENSITIVITY_HIT_RATES = (0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0)
SENSITIVITY_BANDWIDTHS_GB_PER_S = (25, 50, 100, 200, 350, 450, 900, 1800)
HBM_KV_FRACTION = 0.9  # share of HBM left after weights that holds KV (SGLang/vLLM default-ish)
WAIT_LEVELS = np.linspace(0.0025, 0.9975, 200)  # quantile grid of the queueing wait


@dataclass(frozen=True)
class SizeRequest:
    slo_s: float
    model: ModelSpec
    gpu: GpuSpec
    hbm: TierSpec
    host: TierSpec
    xmem: TierSpec
    workload: Workload
    concurrency: int = 8
    gpus: int = 8
    rate_rps: float | None = None  # over all GPUs
    working_set_tokens: float | None = None
    engine: str = "sglang"
    overlap: str = "layer"
    transfer: Transfer = SGLANG_HICACHE
    calibration: Calibration = DEFAULT_CALIBRATION
    slo_percentile: float = 99.0
    max_nodes: int = 256


@dataclass
class OptionResult:
    option: str
    tier: str
    nodes: int | None
    hit_ratio: float
    effective_bandwidth_gb_per_s: float
    compute_ms: float
    load_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    meets_slo: bool
    note: str = ""


@dataclass
class SizeResult:
    """Everything `xmemplan size` reports; `to_dict()` is the JSON document."""

    workload: str
    model: str
    gpu: str
    engine: str
    overlap: str
    ttft_slo_ms: float
    slo_percentile: float
    prompt_tokens_p50: float
    hit_ratio: float
    concurrency: int
    gpus: int
    rate_rps: float | None
    kv_bytes_per_token: int
    working_set_bytes: float
    options: list[OptionResult]
    nodes_for_bandwidth: int | None
    nodes_for_capacity: int
    recommended_nodes: int | None
    required_bandwidth_per_gpu_gb_per_s: float | None
    xmem_per_gpu_limit_gb_per_s: float
    speedup_vs_host_dram_p50: float | None
    speedup_vs_host_dram_p99: float | None
    compute_bound: bool
    compute_only_ttft_p99_ms: float
    max_concurrency_meeting_slo: int
    verdict: str
    reasons: list[str]
    sensitivity: dict[str, Any]
    assumptions: list[str] = field(default_factory=list)

    def option(self, name: str) -> OptionResult:
        return next(o for o in self.options if o.option == name)

    def to_dict(self) -> dict[str, Any]:
        from xmemplan.plan import header

        d = {**header(), **{k: v for k, v in self.__dict__.items() if k != "options"}}
        d["options"] = [o.__dict__ for o in self.options]
        rec = self.option("xmem")
        d["ttft_p50_ms"] = rec.ttft_p50_ms
        d["ttft_p99_ms"] = rec.ttft_p99_ms
        d["meets_slo"] = rec.meets_slo
        return d


# --- the distribution of TTFT ----------------------------------------------------------

def _wait_quantiles(rate_per_gpu: float, step: np.ndarray) -> np.ndarray | None:
    """Queueing-wait quantiles (seconds) on WAIT_LEVELS; None when the GPU is overloaded."""
    b = float(step.mean())
    rho = rate_per_gpu * b
    if rho >= 1.0:
        return None
    if rho <= 0.0:
        return np.zeros_like(WAIT_LEVELS)
    cs2 = float(step.var()) / (b * b) if b > 0 else 0.0
    mean_wait = rho * b * (1.0 + cs2) / (2.0 * (1.0 - rho))
    tau = mean_wait / rho
    q = WAIT_LEVELS
    return np.where(q <= 1.0 - rho, 0.0, tau * np.log(rho / np.maximum(1e-300, 1.0 - q)))


def ttft_percentiles(
    req: SizeRequest, tier: TierSpec, hits: np.ndarray, *, nodes: float = 1.0,
    bandwidth: float | None = None, concurrency: int | None = None,
    percentiles: tuple[float, ...] = (50.0, 99.0),
) -> tuple[list[float], dict[str, float]]:
    """TTFT percentiles (seconds) of `req.workload` with `hits` loaded from `tier`."""
    w = req.workload
    n = req.concurrency if concurrency is None else concurrency
    m = req.model
    comp = compute_seconds(m, req.gpu, w.prompt_tokens, hits, req.calibration)
    bw = bandwidth if bandwidth is not None else float(effective_bandwidth(
        m, req.gpu, tier, nodes=nodes, gpus_loading=req.gpus, transfer=req.transfer,
        calibration=req.calibration))
    load = load_seconds(m, hits, bw, tier.latency_s)
    cal = req.calibration
    t0 = cal.fixed_overhead_s + cal.per_token_overhead_s * w.prompt_tokens
    single = t0 + combine(load, comp, req.overlap, m.layers)
    step = np.maximum(load, comp)
    # Burst: position i in 1..n waits for i-1 average requests ahead on the bottleneck.
    values = single[:, None] + np.arange(n)[None, :] * float(step.mean())
    values = values.ravel()
    if req.rate_rps:
        waits = _wait_quantiles(req.rate_rps / req.gpus, step)
        if waits is None:
            inf = [math.inf for _ in percentiles]
            return inf, {"bw": bw, "compute": float(np.median(comp)),
                         "load": float(np.median(load)), "overloaded": 1.0}
        if values.size > 4096:
            values = np.quantile(values, np.linspace(0, 1, 4096))
        values = (values[:, None] + waits[None, :]).ravel()
    out = [float(np.percentile(values, p)) for p in percentiles]
    return out, {"bw": bw, "compute": float(np.median(comp)), "load": float(np.median(load)),
                 "overloaded": 0.0}


# --- capacities ------------------------------------------------------------------------

def hbm_kv_capacity_bytes(model: ModelSpec, gpu: GpuSpec) -> float:
    """KV bytes one GPU can keep after the weights (one replica per GPU)."""
    return max(0.0, (gpu.hbm_capacity_bytes - model.weight_bytes) * HBM_KV_FRACTION)


def tier_capacity_bytes(tier: TierSpec, gpu: GpuSpec, gpus: int, nodes: int = 1) -> float:
    cap = tier.capacity_bytes or 0.0
    if tier.capacity_scope == "node":
        return cap * nodes
    if tier.capacity_scope == "server":
        return cap * math.ceil(gpus / gpu.gpus_per_server)
    if tier.capacity_scope == "drive":
        return cap * gpus
    return cap * gpus


# --- the search ------------------------------------------------------------------------

def _option(req: SizeRequest, name: str, tier: TierSpec, capacity_bytes: float,
            ws_tokens: float, nodes: int | None, note: str = "") -> OptionResult:
    w = req.workload
    b = req.model.kv_bytes_per_token
    h_cap = w.hit_at_capacity(capacity_bytes / b, ws_tokens)
    scale = h_cap / w.token_hit_ratio if w.token_hit_ratio > 0 else 0.0
    hits = np.floor(w.hit_tokens * min(1.0, scale))
    (p50, p99), info = ttft_percentiles(req, tier, hits, nodes=float(nodes or 1))
    slo_value = p99 if req.slo_percentile >= 99 else p50
    if req.slo_percentile not in (50.0, 99.0):
        slo_value = ttft_percentiles(req, tier, hits, nodes=float(nodes or 1),
                                     percentiles=(req.slo_percentile,))[0][0]
    if info["overloaded"]:
        note = (note + "; " if note else "") + "arrival rate exceeds this GPU's prefill throughput"
    return OptionResult(
        option=name, tier=tier.name, nodes=nodes, hit_ratio=h_cap,
        effective_bandwidth_gb_per_s=info["bw"] / 1e9,
        compute_ms=info["compute"] * 1e3, load_ms=info["load"] * 1e3,
        ttft_p50_ms=p50 * 1e3, ttft_p99_ms=p99 * 1e3,
        meets_slo=bool(slo_value <= req.slo_s), note=note,
    )


def _slo_value(req: SizeRequest, tier: TierSpec, hits: np.ndarray, *, bandwidth: float,
               concurrency: int | None = None) -> float:
    return ttft_percentiles(req, tier, hits, bandwidth=bandwidth, concurrency=concurrency,
                            percentiles=(req.slo_percentile,))[0][0]


def required_bandwidth(req: SizeRequest, hits: np.ndarray) -> float | None:
    """Smallest effective per-GPU bandwidth (bytes/s) meeting the SLO; None if none does."""
    hi = 1e15
    if _slo_value(req, req.xmem, hits, bandwidth=hi) > req.slo_s:
        return None
    lo = 1e6
    if _slo_value(req, req.xmem, hits, bandwidth=lo) <= req.slo_s:
        return lo
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if _slo_value(req, req.xmem, hits, bandwidth=mid) <= req.slo_s:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.001:
            break
    return hi


def plan(req: SizeRequest) -> SizeResult:
    """Evaluate every option and the X-Mem node count for `req`."""
    if req.slo_s <= 0:
        raise UsageError("the TTFT SLO must be positive")
    if req.concurrency < 1 or req.gpus < 1:
        raise UsageError("--concurrency and --gpus must be at least 1")
    m, g, w = req.model, req.gpu, req.workload
    b = m.kv_bytes_per_token
    ws_tokens = (req.working_set_tokens if req.working_set_tokens is not None
                 else w.working_set_tokens if w.working_set_tokens is not None
                 else 32.0 * req.gpus * float(w.prompt_tokens.mean()))
    ws_bytes = ws_tokens * b
    node_cap = req.xmem.capacity_bytes or 1.0
    n_cap = max(1, math.ceil(ws_bytes / node_cap))

    full_hits = w.hit_tokens
    bw_need = required_bandwidth(req, full_hits)
    # The X-Mem path's own ceiling: tier per-GPU link and the GPU's link, times efficiency.
    ceiling = float(effective_bandwidth(m, g, req.xmem, nodes=1e9, gpus_loading=1,
                                        transfer=req.transfer, calibration=req.calibration))
    raw_ceiling_eff = ceiling  # effective bandwidth with unlimited node bandwidth
    eff = ceiling / min(x for x in (req.xmem.bandwidth_bytes_per_s,
                                     req.xmem.per_gpu_link_bytes_per_s,
                                     g.link_bandwidth(req.xmem.attach)) if x)
    n_bw: int | None
    if bw_need is None or bw_need > raw_ceiling_eff:
        n_bw = None
    else:
        node_bw = req.xmem.node_bandwidth_bytes_per_s or math.inf
        n_bw = max(1, math.ceil(req.gpus * bw_need / (eff * node_bw) - 1e-9))
    compute_only = ttft_percentiles(req, req.xmem, full_hits, bandwidth=1e18)[0][1]
    compute_bound = bw_need is None
    recommended = None if n_bw is None else min(req.max_nodes, max(n_bw, n_cap))

    hbm_cap = hbm_kv_capacity_bytes(m, g) * req.gpus
    host_cap = tier_capacity_bytes(req.host, g, req.gpus)
    hbm_note = "" if hbm_cap > 0 else "the weights do not leave room for KV in HBM"
    options = [
        _option(req, "hbm-only", req.hbm, hbm_cap, ws_tokens, None, hbm_note),
        _option(req, "host-dram", req.host, hbm_cap + host_cap, ws_tokens, None),
        _option(req, "xmem", req.xmem, hbm_cap + tier_capacity_bytes(
            req.xmem, g, req.gpus, recommended or n_cap), ws_tokens, recommended or n_cap),
    ]
    host, xm = options[1], options[2]

    max_n = 0
    for n in range(1, req.concurrency + 1):
        if _slo_value(req, req.xmem, full_hits, bandwidth=ceiling, concurrency=n) <= req.slo_s:
            max_n = n
        else:
            break

    reasons: list[str] = []
    slo_ms = req.slo_s * 1e3
    pct = f"p{req.slo_percentile:g}"
    if compute_bound:
        verdict = (f"Compute alone breaks the {slo_ms:g} ms SLO: with a tier of unlimited "
                   f"bandwidth, TTFT {pct} is {compute_only * 1e3:,.0f} ms. No memory tier "
                   "can fix this.")
        if max_n >= 1:
            reasons.append(
                f"At most {max_n} prefill(s) in flight per GPU meet the SLO with X-Mem "
                f"(you asked for {req.concurrency}): spread the load over "
                f"{math.ceil(req.gpus * req.concurrency / max_n)} GPUs instead of {req.gpus}, "
                "or lower concurrency per GPU.")
        else:
            reasons.append(
                "Even one request alone misses the SLO: the prompt's residual prefill is too "
                "long for this GPU; use a faster GPU or tensor parallelism, or raise the hit "
                "rate.")
    elif n_bw is None and bw_need is not None:
        verdict = (f"The SLO needs {bw_need / 1e9:,.0f} GB/s per GPU, above what one GPU "
                   f"can pull from X-Mem ({ceiling / 1e9:,.0f} GB/s): no node count meets it.")
        reasons.append("Lower concurrency per GPU or use GPUs with a faster link.")
    elif recommended is not None:
        verdict = (f"Recommended: {recommended} X-Mem node(s) "
                   f"({n_bw} for bandwidth, {n_cap} for capacity); TTFT p50 "
                   f"{xm.ttft_p50_ms:,.0f} ms, p99 {xm.ttft_p99_ms:,.0f} ms against a "
                   f"{slo_ms:g} ms SLO ({pct}).")
        need = bw_need or 0.0
        reasons.append(
            f"The SLO needs {need / 1e9:,.1f} GB/s of effective bandwidth per GPU; "
            f"{req.gpus} GPUs pull {req.gpus * need / 1e12:,.2f} TB/s, one node gives "
            f"{(req.xmem.node_bandwidth_bytes_per_s or 0) * eff / 1e12:,.2f} TB/s effective.")
        reasons.append(
            f"KV working set {ws_bytes / 1e12:,.2f} TB vs {node_cap / 1e12:g} TB per node.")
    if host.meets_slo:
        reasons.append(
            f"Host DRAM already meets the SLO (p99 {host.ttft_p99_ms:,.0f} ms); X-Mem buys "
            "headroom, not compliance.")
    else:
        reasons.append(
            f"Host DRAM misses it: {host.effective_bandwidth_gb_per_s:,.0f} GB/s per GPU gives "
            f"p99 {host.ttft_p99_ms:,.0f} ms.")
    if not options[0].meets_slo and options[0].hit_ratio < w.token_hit_ratio:
        reasons.append(
            f"HBM alone holds too little: hit ratio falls to {options[0].hit_ratio:.2f} "
            f"(from {w.token_hit_ratio:.2f}).")
    if m.weight_bytes > g.hbm_capacity_bytes:
        reasons.append(
            f"{m.name} weights ({m.weight_bytes / 1e9:,.0f} GB) exceed one {g.name}'s HBM: "
            "this planner assumes one replica per GPU (no tensor parallelism).")

    speed50 = host.ttft_p50_ms / xm.ttft_p50_ms if xm.ttft_p50_ms > 0 else None
    speed99 = host.ttft_p99_ms / xm.ttft_p99_ms if xm.ttft_p99_ms > 0 else None
    return SizeResult(
        workload=w.description, model=m.name, gpu=g.name, engine=req.engine,
        overlap=req.overlap, ttft_slo_ms=slo_ms, slo_percentile=req.slo_percentile,
        prompt_tokens_p50=w.prompt_p50, hit_ratio=w.token_hit_ratio,
        concurrency=req.concurrency, gpus=req.gpus, rate_rps=req.rate_rps,
        kv_bytes_per_token=b, working_set_bytes=ws_bytes, options=options,
        nodes_for_bandwidth=n_bw, nodes_for_capacity=n_cap, recommended_nodes=recommended,
        required_bandwidth_per_gpu_gb_per_s=None if bw_need is None else bw_need / 1e9,
        xmem_per_gpu_limit_gb_per_s=ceiling / 1e9,
        speedup_vs_host_dram_p50=speed50, speedup_vs_host_dram_p99=speed99,
        compute_bound=compute_bound, compute_only_ttft_p99_ms=compute_only * 1e3,
        max_concurrency_meeting_slo=max_n, verdict=verdict, reasons=reasons,
        sensitivity=sensitivity(req),
        assumptions=assumptions(req, ws_tokens),
    )


def sensitivity(req: SizeRequest, hit_rates: tuple[float, ...] = SENSITIVITY_HIT_RATES,
                bandwidths_gb_per_s: tuple[float, ...] = SENSITIVITY_BANDWIDTHS_GB_PER_S
                ) -> dict[str, Any]:
    """TTFT p50/p99 over hit rate x effective per-GPU bandwidth at the median prompt."""
    s = req.workload.prompt_p50
    one = replace(req, workload=Workload("", np.array([s]), np.array([0.0]), 1.0))
    p50 = []
    p99 = []
    for h in hit_rates:
        hits = np.array([math.floor(s * h)])
        row50, row99 = [], []
        for bw in bandwidths_gb_per_s:
            (a, z), _ = ttft_percentiles(one, req.xmem, hits, bandwidth=bw * 1e9)
            row50.append(a * 1e3)
            row99.append(z * 1e3)
        p50.append(row50)
        p99.append(row99)
    return {
        "prompt_tokens": s,
        "hit_rates": list(hit_rates),
        "bandwidths_gb_per_s": list(bandwidths_gb_per_s),
        "ttft_p50_ms": p50,
        "ttft_p99_ms": p99,
    }


def assumptions(req: SizeRequest, ws_tokens: float) -> list[str]:
    c = req.calibration
    out = [
        f"engine {req.engine}: overlap '{req.overlap}', pages of {req.transfer.page_tokens} "
        f"tokens, {req.transfer.layout}, {req.transfer.io} copies; fixed overhead "
        f"{c.fixed_overhead_s * 1e3:.1f} ms",
        f"efficiencies: linear {c.eta_linear:.2f} of {req.model.weight_dtype} peak, attention "
        f"{c.eta_attn(req.gpu):.2f} of BF16 peak (fitted, docs/model.md)",
        f"{req.concurrency} prefill(s) in flight per GPU, {req.gpus} GPU(s) loading from the "
        "same X-Mem nodes",
        f"KV working set {ws_tokens:,.0f} tokens"
        + ("" if req.working_set_tokens is not None or req.workload.working_set_tokens
           is not None else " (default: 32 live sessions per GPU at the mean prompt length)"),
    ]
    if req.rate_rps:
        out.append(f"{req.rate_rps:g} requests/s over all GPUs, M/G/1 queueing per GPU")
    return out
