"""Prefill TTFT when a cached prefix is loaded from a KV tier: pure, vectorized functions.

Notation (research/perf-model.md sections 2.1-2.4): S prompt tokens, P hit tokens (the
cached prefix), b KV bytes per token, L layers.

    compute  = 2 x active params x (S - P) / (eta_lin x peak[weight dtype])
             + coef x (S^2 - P^2)            / (eta_attn x peak[bf16])
               with coef = L x q_heads x (d_qk + d_v)   (causal attention)
    load     = P x b / effective bandwidth + tier latency        (0 when P = 0)
    effective bandwidth = min(tier per-GPU path, per-GPU link limit, the GPU's link,
                              node bandwidth x nodes / GPUs loading)
                          x link efficiency x transfer-size efficiency
    t0 = fixed overhead + per-token overhead x S    (host side: scheduling, prefix hashing)
    one request:  sum   t0 + load + compute              (vLLM OffloadingConnector)
                  layer t0 + max(load, compute) + min(load, compute) / L   (SGLang HiCache)
                  max   t0 + max(load, compute)           (perfect overlap, a lower bound)
    N in flight on one GPU (FIFO, loads and compute are two pipelined stages sharing the
    GPU's link and its compute): request i (1..N) finishes at
                  one request + (i - 1) x max(load, compute)

Every function takes numpy arrays or scalars for prompt and hit tokens and broadcasts.
Units: tokens, bytes, seconds, bytes per second, FLOP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from xmemplan.catalog.specs import GpuSpec, ModelSpec, TierSpec
from xmemplan.errors import UsageError

Overlap = Literal["sum", "layer", "max"]
OVERLAPS: tuple[str, ...] = ("sum", "layer", "max")
ArrayLike = Any  # float | np.ndarray


@dataclass(frozen=True)
class Calibration:
    """The model's free constants, fitted to published measurements (docs/model.md).

    eta_linear: share of the dense peak reached by the linear/MoE GEMMs.
    eta_attention: share of the BF16 peak reached by causal attention; per-GPU values in
    `eta_attention_by_gpu` win (tensor-core-throttled GPUs such as H20 get closer to peak).
    fixed_overhead_s: per-request scheduling and launch time (t0) of the engine in use;
    `fixed_overhead_by_engine` keeps one per engine (`for_engine`).
    per_token_overhead_s: host-side time per prompt token (prefix hashing and matching),
    counted with t0, not with the load.
    host_bandwidth_bytes_per_s: effective host-DRAM -> GPU bandwidth for large transfers,
    replacing the catalog's figure for tiers of kind "host" when set.
    """

    eta_linear: float
    eta_attention: float
    fixed_overhead_s: float
    host_bandwidth_bytes_per_s: float | None = None
    eta_attention_by_gpu: Mapping[str, float] = field(default_factory=dict)
    per_token_overhead_s: float = 0.0
    fixed_overhead_by_engine: Mapping[str, float] = field(default_factory=dict)

    def eta_attn(self, gpu: GpuSpec) -> float:
        return float(self.eta_attention_by_gpu.get(gpu.name, self.eta_attention))

    def for_engine(self, engine: str) -> Calibration:
        """The same constants with `engine`'s fixed overhead (unknown engine: unchanged)."""
        t0 = self.fixed_overhead_by_engine.get(engine, self.fixed_overhead_s)
        return replace(self, fixed_overhead_s=t0)


# Fitted by `xmemplan.sizing.calibration.fit()` on the points in docs/model.md; a test
# re-runs the fit and fails if these drift from it.
DEFAULT_CALIBRATION = Calibration(
    eta_linear=0.687,
    eta_attention=0.563,
    eta_attention_by_gpu={"h20": 0.999},
    host_bandwidth_bytes_per_s=50.8e9,
    fixed_overhead_s=0.0243,
    fixed_overhead_by_engine={"sglang": 0.0243, "vllm": 0.0233},
    per_token_overhead_s=0.0,
)


@dataclass(frozen=True)
class Transfer:
    """How KV pages move: tokens per page, host layout, copy engine.

    layer_first (SGLang default) copies K and V of one layer of one page at a time:
    page x b / L / 2 bytes per copy (64 tokens of Qwen3-30B-A3B: 64 KiB). page_first (and
    vLLM >= 0.12's contiguous blocks) copies page x b bytes. io: kernel (SM copy) or dma.
    """

    page_tokens: int = 64
    layout: Literal["layer_first", "page_first"] = "layer_first"
    io: Literal["kernel", "dma"] = "kernel"

    def chunk_bytes(self, model: ModelSpec) -> float:
        if self.layout == "page_first":
            return float(self.page_tokens * model.kv_bytes_per_token)
        per_layer = model.kv_bytes_per_token / model.layers
        # MLA keeps one latent per layer (no separate K and V copies).
        return float(self.page_tokens * per_layer / (1 if model.attention == "mla" else 2))


SGLANG_HICACHE = Transfer(page_tokens=64, layout="layer_first", io="kernel")
VLLM_OFFLOAD = Transfer(page_tokens=16, layout="page_first", io="dma")


@dataclass(frozen=True)
class Breakdown:
    """One configuration's prediction (arrays when inputs are arrays). Seconds."""

    compute_s: ArrayLike
    load_s: ArrayLike
    single_s: ArrayLike  # one request alone, fixed overhead included
    ttft_s: ArrayLike  # mean over the N positions in flight
    ttft_last_s: ArrayLike  # the N-th request in flight (worst position)
    effective_bandwidth_bytes_per_s: ArrayLike
    linear_flops: ArrayLike
    attention_flops: ArrayLike
    fixed_s: ArrayLike  # t0 + per-token overhead x prompt tokens
    concurrency: ArrayLike
    overlap: str


def _check_tokens(prompt_tokens: ArrayLike, hit_tokens: ArrayLike) -> tuple[Any, Any]:
    s = np.asarray(prompt_tokens, dtype=np.float64)
    p = np.asarray(hit_tokens, dtype=np.float64)
    if np.any(s <= 0):
        raise UsageError("prompt tokens must be at least 1", "a prompt of 0 tokens has no TTFT")
    if np.any(p < 0) or np.any(p > s):
        raise UsageError("hit tokens must be between 0 and the prompt tokens")
    return s, p


def prefill_flops(model: ModelSpec, prompt_tokens: ArrayLike, hit_tokens: ArrayLike
                  ) -> tuple[Any, Any]:
    """(linear, attention) FLOPs to prefill S - P new tokens after P cached ones."""
    s, p = _check_tokens(prompt_tokens, hit_tokens)
    linear = model.linear_flops_per_token * (s - p)
    attention = model.attention_flops_coef * (s * s - p * p)
    return linear, attention


def compute_seconds(
    model: ModelSpec, gpu: GpuSpec, prompt_tokens: ArrayLike, hit_tokens: ArrayLike,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> Any:
    """Roofline prefill compute time without the fixed overhead (seconds)."""
    linear, attention = prefill_flops(model, prompt_tokens, hit_tokens)
    lin_rate = calibration.eta_linear * gpu.peak_flops(model.weight_dtype)
    attn_rate = calibration.eta_attn(gpu) * gpu.peak_flops("bf16")
    return linear / lin_rate + attention / attn_rate


def transfer_efficiency(tier: TierSpec, chunk_bytes: float, io: str = "kernel") -> float:
    """Share of the tier's large-transfer bandwidth reached with `chunk_bytes` copies.

    Interpolated (log chunk size) in the tier's measured curve, normalized by its effective
    bandwidth (research/perf-model.md 3.2); 1 for tiers without a published curve.
    """
    curve = tier.transfer_kernel_bytes_per_s if io == "kernel" else tier.transfer_dma_bytes_per_s
    if not curve or not tier.effective_bandwidth_bytes_per_s:
        return 1.0
    x = np.log(np.asarray(tier.transfer_chunk_bytes))
    y = np.interp(np.log(max(chunk_bytes, 1.0)), x, np.asarray(curve))
    return float(min(1.0, y / tier.effective_bandwidth_bytes_per_s))


def effective_bandwidth(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec, *,
    nodes: ArrayLike = 1, gpus_loading: int = 1, transfer: Transfer = SGLANG_HICACHE,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> Any:
    """Bytes per second one GPU pulls from `tier` (see the module docstring)."""
    if tier.kind == "hbm":
        eff = tier.efficiency if tier.efficiency is not None else 1.0
        return gpu.hbm_bandwidth_bytes_per_s * eff
    limits: list[Any] = [gpu.link_bandwidth(tier.attach)]
    if tier.bandwidth_bytes_per_s:
        limits.append(tier.bandwidth_bytes_per_s)
    if tier.per_gpu_link_bytes_per_s:
        limits.append(tier.per_gpu_link_bytes_per_s)
    raw = limits[0]
    for lim in limits[1:]:
        raw = np.minimum(raw, lim)
    if tier.node_bandwidth_bytes_per_s:
        share = tier.node_bandwidth_bytes_per_s * np.asarray(nodes, dtype=np.float64)
        raw = np.minimum(raw, share / max(1, gpus_loading))
    eff = tier.link_efficiency
    if tier.kind == "host" and calibration.host_bandwidth_bytes_per_s and \
            tier.bandwidth_bytes_per_s:
        eff = calibration.host_bandwidth_bytes_per_s / tier.bandwidth_bytes_per_s
    return raw * eff * transfer_efficiency(tier, transfer.chunk_bytes(model), transfer.io)


def load_seconds(
    model: ModelSpec, hit_tokens: ArrayLike, bandwidth_bytes_per_s: ArrayLike,
    latency_s: float = 0.0,
) -> Any:
    """hit tokens x KV bytes per token / effective bandwidth + one operation's latency.

    The latency term counts once per request (pages after the first are pipelined); a
    request with no hit loads nothing and pays nothing.
    """
    p = np.asarray(hit_tokens, dtype=np.float64)
    return np.where(p > 0, p * model.kv_bytes_per_token / bandwidth_bytes_per_s + latency_s, 0.0)


def tier_load_seconds(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec, hit_tokens: ArrayLike, *,
    nodes: ArrayLike = 1, gpus_loading: int = 1, transfer: Transfer = SGLANG_HICACHE,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> Any:
    """`load_seconds` with the effective bandwidth and latency of `tier` on `gpu`."""
    bw = effective_bandwidth(model, gpu, tier, nodes=nodes, gpus_loading=gpus_loading,
                             transfer=transfer, calibration=calibration)
    return load_seconds(model, hit_tokens, bw, tier.latency_s)


def combine(load_s: ArrayLike, compute_s: ArrayLike, overlap: str, layers: int) -> Any:
    """One request's load and compute under the engine's overlap rule (no fixed overhead)."""
    if overlap == "sum":
        return load_s + compute_s
    hi = np.maximum(load_s, compute_s)
    if overlap == "max":
        return hi
    if overlap == "layer":
        return hi + np.minimum(load_s, compute_s) / layers
    raise UsageError(f"unknown overlap '{overlap}'", "use sum, layer or max")


def ttft(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec,
    prompt_tokens: ArrayLike, hit_tokens: ArrayLike, *,
    concurrency: ArrayLike = 1, overlap: str = "layer", nodes: ArrayLike = 1,
    gpus_loading: int = 1,
    transfer: Transfer = SGLANG_HICACHE, calibration: Calibration = DEFAULT_CALIBRATION,
    bandwidth_bytes_per_s: ArrayLike | None = None,
) -> Breakdown:
    """Predicted TTFT of prefilling `prompt_tokens` with `hit_tokens` loaded from `tier`.

    `bandwidth_bytes_per_s` replaces the computed effective bandwidth (sweeps over tier
    bandwidth); prompt, hit, bandwidth, nodes and concurrency broadcast against each other
    (numpy rules), so one call evaluates a whole grid. With `concurrency` N, `ttft_s` is the
    mean over the N positions in flight and `ttft_last_s` the N-th.
    """
    if overlap not in OVERLAPS:
        raise UsageError(f"unknown overlap '{overlap}'", "use sum, layer or max")
    if np.any(np.asarray(concurrency) < 1):
        raise UsageError("concurrency must be at least 1")
    linear, attention = prefill_flops(model, prompt_tokens, hit_tokens)
    comp = compute_seconds(model, gpu, prompt_tokens, hit_tokens, calibration)
    bw = (effective_bandwidth(model, gpu, tier, nodes=nodes, gpus_loading=gpus_loading,
                              transfer=transfer, calibration=calibration)
          if bandwidth_bytes_per_s is None else np.asarray(bandwidth_bytes_per_s, np.float64))
    load = load_seconds(model, hit_tokens, bw, tier.latency_s)
    t0 = calibration.fixed_overhead_s + calibration.per_token_overhead_s * np.asarray(
        prompt_tokens, dtype=np.float64)
    single = t0 + combine(load, comp, overlap, model.layers)
    step = np.maximum(load, comp)
    return Breakdown(
        compute_s=comp,
        load_s=load,
        single_s=single,
        ttft_s=single + (concurrency - 1) / 2.0 * step,
        ttft_last_s=single + (concurrency - 1) * step,
        effective_bandwidth_bytes_per_s=bw,
        linear_flops=linear,
        attention_flops=attention,
        fixed_s=t0,
        concurrency=concurrency,
        overlap=overlap,
    )
