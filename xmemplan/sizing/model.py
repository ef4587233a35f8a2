"""Prefill TTFT when a cached prefix is loaded from a KV tier: pure, vectorized functions.

Notation (research/perf-model.md sections 2.1-2.4; docs/model.md has every formula and
constant): S prompt tokens, P hit tokens (the cached prefix), b KV bytes per token per GPU
(`kv_bytes_per_token_per_gpu`, split by the deployment `Shape`), L layers.

    compute  = max(linear FLOPs / (tp x eta_lin[dtype] x peak), passes x active weight
                   bytes / (hbm_eff x HBM bw))                         (linear / MoE)
             + max(attention FLOPs / (ranks x eta_attn x peak[attn dtype]), KV read
                   / (hbm_eff x HBM bw))                               (attention)
               KV read = b x the passes' contexts: (passes - 1) x (P + chunk x passes
                   / 2) + S tokens (each pass reads its prefix and chunks so far);
               linear FLOPs = 2 x active params x (S - P);
               attention FLOPs = L x q_heads x (d_qk + d_v) x (S^2 - P^2) (causal);
               active weight bytes = dense + experts x (1 - (1 - k/E)^tokens per pass)
             + sm_interference x min(load, c1)   (kernel copies overlapping the first pass)
    floor    = passes x L x layer_latency     (small kernels of every pass; not overlapped)
    load     = P x b / effective bandwidth + tier latency        (0 when P = 0)
    effective bandwidth = min(GPU link, tier path, per-GPU link, host path for k loaders)
                          x link efficiency x transfer-size efficiency,
                          capped by node bw x node_efficiency x nodes / GPUs loading
                          (host DRAM over PCIe: host_efficiency x the GPU's measured
                          pinned-copy peak replaces link x link efficiency, and the
                          result is capped at that peak)
    t0 = fixed overhead[engine] + per-token overhead[engine] x S  (fitted on full hits)
    one request:  sum   t0 + floor + load + compute              (vLLM OffloadingConnector)
                  layer t0 + floor + max(load, c1) + min(load, c1) / L + (compute - c1)
                        (SGLang; c1 = the first forward pass, the only one loads overlap)
                  max   t0 + floor + max(load, c1) + (compute - c1)   (a lower bound)
    N in flight on one GPU: request i (1..N) finishes at
                  one request + (i - 1) x max(load, compute + floor)

Functions other modules call: `request_flops`, `active_weight_bytes`,
`kv_bytes_per_token_per_gpu`, `weight_bytes_per_gpu`, `load_bandwidth` (k loaders),
`host_path_limit`, `node_effective_bandwidth`, `host_tier_for`, `notes`,
`over_max_context`, `with_kv_dtype`, `check_shape`, `smallest_shape`, `calibration_for`.
Every function takes numpy arrays or scalars for prompt and hit tokens and broadcasts.
Units: tokens, bytes, seconds, bytes per second, FLOP.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from xmemplan.catalog.specs import DTYPE_BYTES, GpuSpec, ModelSpec, TierSpec
from xmemplan.errors import UsageError

OVERLAPS: tuple[str, ...] = ("sum", "layer", "max")
ArrayLike = Any  # float | np.ndarray


@dataclass(frozen=True)
class Calibration:
    """The model's free constants, fitted to published measurements (docs/model.md).

    eta_linear: share of the dense peak reached by the linear/MoE GEMMs;
    `eta_linear_by_dtype` (measured GEMM efficiency per weight dtype) wins where set.
    eta_attention: share of the BF16 (or FP8, with FP8 attention) peak reached by causal
    attention; per-GPU values in `eta_attention_by_gpu` win.
    fixed_overhead_s: per-request time (t0) of the engine in use, fitted on full-hit
    (load-dominated) points only, apart from the compute fit; `fixed_overhead_by_engine`
    keeps one per engine (`for_engine`).
    per_token_overhead_s: host-side time per prompt token (prefix hashing and matching).
    host_bandwidth_bytes_per_s: effective host-DRAM -> GPU bandwidth over PCIe for large
    transfers, replacing the catalog's figure for PCIe host tiers when set (a user's own
    fit, for their GPU).
    host_efficiency: otherwise, the multiple of the GPU's measured pinned-copy peak
    (`host_copy_bandwidth` in the catalog), scaled by the copy curve at the engine's block
    size, that an engine reaches loading KV (shipped: 1, the curve's rate; capped at the
    peak).
    xmem_bandwidth_bytes_per_s: the same for X-Mem tiers (a user's own fit; None: catalog).
    hbm_efficiency: share of HBM bandwidth reached reading weights and KV (memory roofline).
    layer_latency_s: time per layer that every forward pass adds on top of its FLOP and
    byte rooflines (small kernels, launches, MoE routing; dominant for 1-token passes).
    step_base_s, step_per_token_s, step_per_seq_s: the serving engine's own overheads per
    step, per scheduled token and per scheduled request (the simulated engine's step time,
    engine/steptime.py), fitted on loaded runs (`xmemplan.sizing.loaded`, docs/model.md
    section 6); `step_overheads_by_engine` keeps one triple per engine (`for_engine`). One
    request alone pays them inside t0 (simmodel.config_for), so it still costs model.ttft.
    floor_rule: how a pass's layer floor combines with its rooflines: "add" (shipped: the
    floor on top) or "max" (the floor as the pass's minimum); moe_layer_latency_s: the
    MoE kernels' fixed time per MoE layer and pass, added to the rooflines (shipped 0;
    docs/model.md section 6 gives what each did on the loaded checks);
    allreduce_latency_s, allreduce_bus_share: the tensor-parallel all-reduces of a pass
    (`allreduce_seconds`; shipped since round 11: 5 us and 370 / 450 of NVLink, sources
    at DEFAULT_CALIBRATION; 0 leaves them unpriced).
    """

    eta_linear: float
    eta_attention: float
    fixed_overhead_s: float
    host_bandwidth_bytes_per_s: float | None = None
    eta_attention_by_gpu: Mapping[str, float] = field(default_factory=dict)
    per_token_overhead_s: float = 0.0
    fixed_overhead_by_engine: Mapping[str, float] = field(default_factory=dict)
    xmem_bandwidth_bytes_per_s: float | None = None
    hbm_efficiency: float = 0.8
    per_token_overhead_by_engine: Mapping[str, float] = field(default_factory=dict)
    eta_linear_by_dtype: Mapping[str, float] = field(default_factory=dict)
    host_efficiency: float | None = None
    layer_latency_s: float = 0.0
    step_base_s: float = 0.0
    step_per_token_s: float = 0.0
    step_per_seq_s: float = 0.0
    step_overheads_by_engine: Mapping[str, tuple[float, float, float]] = field(
        default_factory=dict)
    # "add": a pass costs its rooflines + the layer floor; "max": the floor is the pass's
    # minimum, max(rooflines, floor) (a chain of latency-bound kernels that bandwidth-
    # bound work hides)
    floor_rule: str = "add"
    # the MoE kernels' fixed time per MoE layer and pass (the intercept of fused-MoE
    # kernel time against the expert bytes a pass touches), on top of the rooflines
    moe_layer_latency_s: float = 0.0
    # tensor parallelism: each layer's two all-reduces (attention out, MLP down) cost
    # allreduce_latency_s + 2 (tp - 1) / tp x tokens x hidden x 2 B / (allreduce_bus_share
    # x the GPU's NVLink bandwidth per direction); 0: not priced
    allreduce_latency_s: float = 0.0
    allreduce_bus_share: float = 0.0

    def eta_attn(self, gpu: GpuSpec) -> float:
        return float(self.eta_attention_by_gpu.get(gpu.name, self.eta_attention))

    def eta_lin(self, weight_dtype: str) -> float:
        """eta_linear for GEMMs in `weight_dtype` (per-dtype value if set)."""
        return float(self.eta_linear_by_dtype.get(weight_dtype, self.eta_linear))

    def for_engine(self, engine: str) -> Calibration:
        """The same constants with `engine`'s fixed and per-token overheads (an unknown
        engine, or "vllm-x" without its own entry, falls back to its base engine)."""
        base = engine.split("-")[0]
        t0 = self.fixed_overhead_by_engine.get(
            engine, self.fixed_overhead_by_engine.get(base, self.fixed_overhead_s))
        per_tok = self.per_token_overhead_by_engine.get(
            engine, self.per_token_overhead_by_engine.get(base, self.per_token_overhead_s))
        step = self.step_overheads_by_engine.get(
            engine, self.step_overheads_by_engine.get(
                base, (self.step_base_s, self.step_per_token_s, self.step_per_seq_s)))
        return replace(self, fixed_overhead_s=t0, per_token_overhead_s=per_tok,
                       step_base_s=step[0], step_per_token_s=step[1], step_per_seq_s=step[2])


# Fitted by `xmemplan.sizing.calibration.fit()` on the fit points of
# data/measurements/public.csv (docs/model.md); a test re-runs the fit and fails if these
# drift from it. t0 per engine comes from full-hit points only.
DEFAULT_CALIBRATION = Calibration(
    # eta_linear: measured on an H200 (data/measurements/device-h200.jsonl, GEMM of 8192
    # tokens x 2048 x 12288): BF16 777.5 of 989 TFLOPS, FP8 1,311.6 of 1,979 TFLOPS.
    eta_linear=0.786,
    eta_linear_by_dtype={"bf16": 0.786, "fp16": 0.786, "fp8": 0.663},
    eta_attention=0.522,
    eta_attention_by_gpu={"h20": 0.962},
    # Host loads: the engine copies at the measured rate of one transfer of its block size
    # (host_efficiency 1, not fitted), capped by the GPU's measured large-copy peak.
    host_efficiency=1.0,
    # The vLLM offline harness's t0 fits to ~0: its per-request cost is the passes' floor
    # and its per-token host work (0.14 us/token, fitted on the vLLM blog's fig. 1).
    fixed_overhead_s=0.0180,
    fixed_overhead_by_engine={"sglang": 0.0180, "vllm": 0.000267, "vllm-kvc": 0.0391},
    per_token_overhead_s=0.0,
    per_token_overhead_by_engine={"vllm": 1.387e-7, "vllm-kvc": 9.18e-7},
    hbm_efficiency=0.8,
    # Per-layer floor of a forward pass, fitted on batch-1 decode steps (A100 TPOT).
    layer_latency_s=1.169e-4,
    # The engines' step overheads (base, per token, per request), fitted by
    # `python -m xmemplan.sizing.loaded` on the fit rows of data/measurements/loaded.csv
    # (docs/model.md section 6; a test re-runs the fit and fails if these drift from it).
    # per token is not fitted (decode-heavy runs cannot tell it from per request; the
    # single-request per-token overhead above is the host's per-token work). Fitted with
    # the engines' async scheduling as each run's version had it (loaded.csv).
    # With the all-reduces below priced, as the step overheads were refit on them.
    # vLLM's since round 16 on the TPOT of its V0 (0.6.0) and V1 (0.8.2) runs, with a step's
    # base + per-request overheads held within the single-request t0 above (0.267 ms):
    # 0.19 ms a step + 17.5 us a request, where the V0 rows alone gave 64 us a request;
    # the V1 runs' TTFT is scored apart, not fitted (loaded.csv role `check`).
    step_overheads_by_engine={"vllm": (1.93125e-4, 0.0, 1.75e-5),
                              "sglang": (1.5625e-4, 0.0, 8.0e-5)},
    # Tensor parallelism's two all-reduces a layer (not fitted): 5 us each, the custom
    # all-reduce's latency on H100 at TP 2-4 for 0.5-32 KB (3.7-4.8 us; 5.7-7.8 at TP 8:
    # sgl-project/sglang PR #2904), and the activations at 370 of NVLink's 450 GB/s per
    # direction ("With the protocol overhead (~20%) NCCL can get an effective NVLink
    # bandwidth of 370GB/s": NVIDIA/nccl-tests issue #212). TP 1 pays nothing.
    allreduce_latency_s=5e-6,
    allreduce_bus_share=370 / 450,
)


def calibration_for(catalog: Any, engine: str,
                    base: Calibration | None = None) -> Calibration:
    """`base` (default: the shipped constants) for `engine`, with the catalog's
    `[calibration.ENGINE]` overlay (written by `xmemplan calibrate`) applied on top."""
    cal = (base or DEFAULT_CALIBRATION).for_engine(engine)
    spec = getattr(catalog, "calibrations", {}).get(engine.lower())
    if spec is None:
        return cal
    v = spec.values
    changes: dict[str, Any] = {}
    for key, attr in (("eta_linear", "eta_linear"), ("eta_attention", "eta_attention"),
                      ("fixed_overhead", "fixed_overhead_s"),
                      ("per_token_overhead", "per_token_overhead_s"),
                      ("host_bandwidth", "host_bandwidth_bytes_per_s"),
                      ("xmem_bandwidth", "xmem_bandwidth_bytes_per_s"),
                      ("hbm_efficiency", "hbm_efficiency"),
                      ("host_efficiency", "host_efficiency"),
                      ("layer_latency", "layer_latency_s"),
                      ("moe_layer_latency", "moe_layer_latency_s"),
                      ("allreduce_latency", "allreduce_latency_s"),
                      ("allreduce_bus_share", "allreduce_bus_share"),
                      ("step_base", "step_base_s"), ("step_per_token", "step_per_token_s"),
                      ("step_per_seq", "step_per_seq_s")):
        if key in v:
            changes[attr] = float(v[key])
    if "floor_rule" in getattr(spec, "rules", {}):
        changes["floor_rule"] = spec.rules["floor_rule"]
    if "eta_attention" in v:
        changes["eta_attention_by_gpu"] = {}
    if "eta_linear" in v:
        changes["eta_linear_by_dtype"] = {}
    if "host_efficiency" in v and "host_bandwidth" not in v:
        changes["host_bandwidth_bytes_per_s"] = None
    return replace(cal, **changes)


@dataclass(frozen=True)
class Shape:
    """How one replica is spread over GPUs (SGLang/vLLM flags --tp, --ep, --dp-attention).

    tp: GPUs of the replica; linear layers and attention heads are split over them.
    ep: expert-parallel ranks (MoE experts distributed over them; 1 = split like TP).
    dp_attention: attention runs data-parallel (each rank attends its own requests with
    a full copy of the attention weights and of each of its requests' KV).
    """

    tp: int = 1
    ep: int = 1
    dp_attention: bool = False

    def __post_init__(self) -> None:
        if self.tp < 1 or self.ep < 1:
            raise UsageError("--tp and --ep must be at least 1")
        if self.tp % self.ep != 0 and self.ep % self.tp != 0:
            raise UsageError(f"--ep {self.ep} must divide --tp {self.tp}",
                             "use an EP size that divides the TP size (SGLang: ep <= tp)")

    @property
    def gpus(self) -> int:
        return max(self.tp, self.ep)

    @property
    def label(self) -> str:
        return f"tp{self.tp}" + (f" ep{self.ep}" if self.ep > 1 else "") + (
            " dp-attention" if self.dp_attention else "")


ONE_GPU = Shape()


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

    compute_s: ArrayLike  # max(FLOP time, HBM byte time), SM interference included
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
    flop_s: ArrayLike = 0.0  # FLOPs / sustained rate
    bytes_s: ArrayLike = 0.0  # weights and KV read from HBM / sustained HBM bandwidth
    interference_s: ArrayLike = 0.0  # compute lost to SM-kernel copies overlapping it
    latency_s: ArrayLike = 0.0  # passes x layers x layer_latency (the per-pass floor)


def _check_tokens(prompt_tokens: ArrayLike, hit_tokens: ArrayLike) -> tuple[Any, Any]:
    s = np.asarray(prompt_tokens, dtype=np.float64)
    p = np.asarray(hit_tokens, dtype=np.float64)
    if np.any(s <= 0):
        raise UsageError("prompt tokens must be at least 1", "a prompt of 0 tokens has no TTFT")
    if np.any(p < 0) or np.any(p > s):
        raise UsageError("hit tokens must be between 0 and the prompt tokens")
    return s, p


# --- model-level quantities other modules call -------------------------------------------

def prefill_flops(model: ModelSpec, prompt_tokens: ArrayLike, hit_tokens: ArrayLike
                  ) -> tuple[Any, Any]:
    """(linear, attention) FLOPs to prefill S - P new tokens after P cached ones."""
    s, p = _check_tokens(prompt_tokens, hit_tokens)
    linear = model.linear_flops_per_token * (s - p)
    attention = model.attention_flops_coef * (s * s - p * p)
    return linear, attention


def request_flops(model: ModelSpec, prompt_tokens: ArrayLike, hit_tokens: ArrayLike) -> Any:
    """Total prefill FLOPs of one request (linear + causal attention), whole replica."""
    lin, attn = prefill_flops(model, prompt_tokens, hit_tokens)
    return lin + attn


def with_kv_dtype(model: ModelSpec, kv_dtype: str) -> ModelSpec:
    """`model` with its KV cache stored in `kv_dtype` ("bf16", "fp16" or "fp8").

    FP8 halves GQA KV bytes; MLA in FP8 uses the 656 B/layer vLLM/SGLang layout.
    """
    sizes = {"bf16": 2, "fp16": 2, "fp8": 1}
    if kv_dtype not in sizes:
        raise UsageError(f"unknown KV dtype '{kv_dtype}'", "use bf16 or fp8")
    return replace(model, kv_dtype_bytes=sizes[kv_dtype])


def kv_bytes_per_token_per_gpu(model: ModelSpec, shape: Shape = ONE_GPU) -> float:
    """KV bytes one GPU stores (and loads) per token of a request under `shape`.

    GQA under TP: each rank keeps ceil(kv_heads / tp) heads (heads are replicated when
    tp > kv_heads). MLA: the latent is replicated on every rank. DP attention: the rank
    serving the request keeps all of it.
    """
    if model.attention == "mla" or shape.dp_attention or shape.tp == 1:
        return float(model.kv_bytes_per_token)
    heads = math.ceil(model.kv_heads / shape.tp)
    return float(2 * model.layers * heads * model.head_dim * model.kv_dtype_bytes)


def weight_bytes_per_gpu(model: ModelSpec, shape: Shape = ONE_GPU) -> float:
    """Weights one GPU stores: dense part over TP (replicated with DP attention), routed
    experts over max(TP, EP)."""
    b = DTYPE_BYTES.get(model.weight_dtype, 2)
    dense = model.dense_params * b / (1 if shape.dp_attention else shape.tp)
    return dense + model.expert_params * b / shape.gpus


def expert_fraction_touched(model: ModelSpec, tokens: ArrayLike) -> Any:
    """Expected share of routed experts a forward pass of `tokens` tokens reads.

    Uniform routing of k of E experts per token: 1 - (1 - k/E)^tokens
    (26 tokens of Qwen3-30B-A3B: 81 % of the experts; 128 tokens: all but 0.03 %).
    """
    t = np.asarray(tokens, dtype=np.float64)
    if not model.experts or not model.experts_per_token:
        return np.ones_like(t)
    miss = 1.0 - model.experts_per_token / model.experts
    return np.where(t > 0, 1.0 - miss ** t, 0.0)


def active_weight_bytes(model: ModelSpec, tokens: ArrayLike, shape: Shape = ONE_GPU) -> Any:
    """Weight bytes one GPU reads from HBM in one forward pass of `tokens` tokens:
    its dense weights plus the share of its routed experts that the tokens go to."""
    b = DTYPE_BYTES.get(model.weight_dtype, 2)
    dense = model.dense_params * b / (1 if shape.dp_attention else shape.tp)
    experts = model.expert_params * b / shape.gpus
    return dense + experts * expert_fraction_touched(model, tokens)


def default_chunk_tokens(gpu: GpuSpec) -> int:
    """Chunked-prefill budget per forward pass: SGLang's default (server_args.py) is
    8192 tokens for 35-160 GB GPUs and 16384 above."""
    return 16384 if gpu.hbm_capacity_bytes >= 160e9 else 8192


def forward_passes(new_tokens: ArrayLike, chunk_tokens: int) -> Any:
    """Forward passes to prefill `new_tokens`: at least one, since even a prompt cached
    whole runs a pass to produce its first token."""
    n = np.asarray(new_tokens, dtype=np.float64)
    return np.maximum(1.0, np.ceil(n / max(1, chunk_tokens)))


def over_max_context(model: ModelSpec, prompt_tokens: ArrayLike) -> Any:
    """Boolean mask: prompts longer than the model's maximum context (all False when the
    catalog does not know it). Callers count these, report them and keep them out of
    TTFT percentiles (the engine would reject them)."""
    s = np.asarray(prompt_tokens, dtype=np.float64)
    if not model.max_context:
        return np.zeros(s.shape, dtype=bool)
    return s > model.max_context


def hbm_need_bytes(model: ModelSpec, shape: Shape, kv_tokens: float) -> float:
    """Bytes one GPU must hold: its weights plus its share of `kv_tokens` of KV.

    With DP attention each rank holds the KV of its own requests (kv_tokens / tp on
    average); otherwise every rank holds its per-GPU share of every request.
    """
    per_tok = kv_bytes_per_token_per_gpu(model, shape)
    tokens = kv_tokens / shape.tp if shape.dp_attention else kv_tokens
    return weight_bytes_per_gpu(model, shape) + tokens * per_tok


def kv_room_tokens(model: ModelSpec, gpu: GpuSpec, shape: Shape,
                   usable_fraction: float = 0.9) -> float:
    """KV tokens one replica's GPUs hold next to the weights, in `usable_fraction` of HBM
    (the engines' --mem-fraction-static / --gpu-memory-utilization)."""
    room = gpu.hbm_capacity_bytes * usable_fraction - weight_bytes_per_gpu(model, shape)
    return max(0.0, room) / kv_bytes_per_token_per_gpu(model, shape)


# --- the engines' own KV pool accounting (docs/model.md "KV pool"; data/measurements/
# kv-pool.csv; benchmarks/kv_pool_check.py) ------------------------------------------------
# vLLM v1 (0.33 gpu_worker.determine_available_memory, utils/mem_utils.memory_profiling):
#   KV bytes = util x total memory - weights - the profile run's peak (profile_run: a dummy
#              forward of max_num_batched_tokens tokens, then _dummy_sampler_run on
#              min(max_num_seqs, tokens) rows of logits) - non-torch memory (CUDA context,
#              cuBLAS, NCCL) - the CUDA graph estimate (profile_cudagraph_memory, on by
#              VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1).
# SGLang (0.5 kv_cache_configurator._profile_available_bytes): the pool gets what is free
#   after the weights less pre_model_load_memory x (1 - mem_fraction_static), i.e.
#   (total - context) x mem_fraction_static - weights; activations and CUDA graphs live
#   outside mem_fraction_static.
ACTIVATION_BYTES = 2  # BF16 activations (the profile run's dtype for BF16 and FP8 models)
# Bytes the dummy sampler run holds per logit at its peak, read in vLLM 0.33's sampler
# (v1/sample/sampler.py, ops/topk_topp_sampler.py forward_native / random_sample): the BF16
# logits (2 B, still referenced by _dummy_sampler_run), their FP32 copy (4), the softmax
# probabilities (4) and the exponential noise (4; the division is in place). Top-k/top-p go
# through the Triton kernel in place; FlashInfer's path holds less. Not fitted (a vLLM 0.6
# log's 1.26 GiB on Llama-3-8B would give 41.2 B: that sampler also built log-probs).
VLLM_SAMPLER_BYTES_PER_LOGIT = 14.0
# Non-torch memory vLLM logs (PR 10511, Llama-3-8B on H100): 1.79 GiB on one GPU, 3.58 GiB
# per GPU at TP 2 (NCCL and custom all-reduce buffers); used for TP 1 and TP > 1.
VLLM_NON_TORCH_BYTES = (1.79 * 2**30, 3.58 * 2**30)
VLLM_CUDA_GRAPH_BYTES = 0.13 * 2**30  # 0.33's estimate as logged (club-3090 issue 1087)
# SGLang's context before the weights load ("Init torch distributed ends. mem usage"):
# 0.00 GB on one GPU (sglang issue 9574), 1.77-2.01 GB per GPU at TP 8 (sglang PR 11716).
SGLANG_CONTEXT_BYTES = (0.0, 2.0 * 2**30)


def mlp_intermediate(model: ModelSpec) -> tuple[float, int]:
    """(intermediate size of one MLP or routed expert, experts each token goes to), from
    the catalog's counts: MoE expert_params / (layers x experts x 3 x hidden) (gate, up,
    down); dense (active params / layers - attention projections) / (3 x hidden)."""
    h = model.hidden_size
    if model.experts and model.expert_params:
        return model.expert_params / (model.layers * model.experts * 3 * h), \
            max(1, model.experts_per_token)
    attn = h * model.head_dim * (2 * model.q_heads + 2 * model.kv_heads)
    return max(0.0, (model.active_params / model.layers - attn) / (3 * h)), 0


def vocab_size(model: ModelSpec) -> float:
    """The vocabulary from the catalog's counts: stored parameters a token does not use
    (embedding and LM head, untied) less the unrouted experts, over 2 x hidden
    (Llama-3-8B: 128 K, Qwen3-30B-A3B: 144 K of 152 K)."""
    idle = model.expert_params * (1 - model.experts_per_token / model.experts) \
        if model.experts else 0.0
    return max(0.0, (model.total_params - model.active_params - idle) / (2 * model.hidden_size))


def profile_activation_bytes(tokens: float, hidden: float, intermediate: float,
                             topk: int = 0, tp: int = 1, ep: int = 1, *,
                             vocab: float = 0.0, seqs: int = 0) -> float:
    """Peak bytes vLLM's profile run adds on one GPU (BF16 activations):
    forward of `tokens` tokens, its largest layer: dense, hidden states + residual
    (2 x H) and the MLP's gate_up and activation outputs (3 I/tp); MoE (fused_moe
    TritonExperts.workspace_shapes, 0.33), hidden, residual and output (3 x H) and the two
    workspaces M x topk x max(I', H) and M x topk x max(2 I', H), I' = I / tp without
    expert parallelism, I with it;
    sampler: min(seqs, tokens) x vocab logits x VLLM_SAMPLER_BYTES_PER_LOGIT.
    Dense activations are freed before the sampler runs (the peak is the larger); the MoE
    workspaces stay allocated (the workspace manager keeps its high-water mark: the sum)."""
    if topk:
        i = intermediate if ep > 1 else intermediate / max(1, tp)
        fwd = float(tokens) * (3 * hidden + topk * (max(i, hidden) + max(2 * i, hidden)))
    else:
        fwd = float(tokens) * (2 * hidden + 3 * intermediate / max(1, tp))
    fwd *= ACTIVATION_BYTES
    samp = min(seqs, tokens) * vocab * VLLM_SAMPLER_BYTES_PER_LOGIT
    return fwd + samp if topk else max(fwd, samp)


def vllm_other_bytes(tp: int) -> float:
    """Non-torch memory and the CUDA graph estimate of one vLLM GPU (cited constants)."""
    return VLLM_NON_TORCH_BYTES[0 if tp <= 1 else 1] + VLLM_CUDA_GRAPH_BYTES


def vllm_kv_bytes(total_bytes: float, util: float, weights: float, activation: float,
                  other: float) -> float:
    """vLLM's KV cache bytes on one GPU: util x total - weights - profile peak - other."""
    return max(0.0, total_bytes * util - weights - activation - other)


def sglang_kv_bytes(total_bytes: float, mem_fraction: float, weights: float,
                    context: float) -> float:
    """SGLang's KV pool bytes on one GPU: (total - context) x mem_fraction_static - weights."""
    return max(0.0, (total_bytes - context) * mem_fraction - weights)


def engine_kv_room_tokens(model: ModelSpec, gpu: GpuSpec, shape: Shape, engine: str,
                          usable_fraction: float = 0.9, batched_tokens: int = 8192,
                          max_num_seqs: int = 256) -> float:
    """KV tokens one replica's GPUs hold as the engine sizes its pool: "vllm" (its profile
    run at `batched_tokens` = max_num_batched_tokens and `max_num_seqs`), "sglang"; any
    other engine: kv_room_tokens (weights only)."""
    w = weight_bytes_per_gpu(model, shape)
    total = gpu.device_memory_bytes or gpu.hbm_capacity_bytes  # what the engine sees
    if engine == "vllm":
        inter, k = mlp_intermediate(model)
        act = profile_activation_bytes(batched_tokens, model.hidden_size, inter, k,
                                       shape.tp, shape.ep, vocab=vocab_size(model),
                                       seqs=max_num_seqs)
        room = vllm_kv_bytes(total, usable_fraction, w, act,
                             vllm_other_bytes(shape.tp))
    elif engine == "sglang":
        ctx = SGLANG_CONTEXT_BYTES[0 if shape.tp <= 1 else 1]
        room = sglang_kv_bytes(total, usable_fraction, w, ctx)
    else:
        return kv_room_tokens(model, gpu, shape, usable_fraction)
    return room / kv_bytes_per_token_per_gpu(model, shape)

def shape_fits(model: ModelSpec, gpu: GpuSpec, shape: Shape, kv_tokens: float,
               usable_fraction: float = 0.9) -> bool:
    return hbm_need_bytes(model, shape, kv_tokens) <= gpu.hbm_capacity_bytes * usable_fraction


def check_shape(model: ModelSpec, gpu: GpuSpec, shape: Shape, kv_tokens: float,
                usable_fraction: float = 0.9) -> None:
    """Raise UsageError when weights plus `kv_tokens` of KV do not fit `shape`'s HBM."""
    if shape_fits(model, gpu, shape, kv_tokens, usable_fraction):
        return
    w = weight_bytes_per_gpu(model, shape)
    need = hbm_need_bytes(model, shape, kv_tokens)
    have = gpu.hbm_capacity_bytes * usable_fraction
    better = smallest_shape(model, gpu, kv_tokens, usable_fraction=usable_fraction,
                            dp_attention=shape.dp_attention, raise_if_none=False)
    hint = (f"try {better.label}" if better is not None else
            "no shape of up to 72 GPUs fits; use a larger GPU or fewer tokens in flight")
    raise UsageError(
        f"{model.name} does not fit on {gpu.name} with {shape.label}: each GPU needs "
        f"{need / 1e9:,.1f} GB ({w / 1e9:,.1f} GB weights + {(need - w) / 1e9:,.1f} GB KV "
        f"for {kv_tokens:,.0f} tokens) of {have / 1e9:,.1f} GB usable HBM", hint)


def smallest_shape(model: ModelSpec, gpu: GpuSpec, kv_tokens: float, *,
                   usable_fraction: float = 0.9, dp_attention: bool = False,
                   max_gpus: int = 72, raise_if_none: bool = True) -> Shape | None:
    """The smallest TP size (powers of two, then 72) whose HBM holds the weights and
    `kv_tokens` of KV; MoE models use EP = TP. The default deployment shape."""
    sizes = [t for t in (1, 2, 4, 8, 16, 32, 64, 72) if t <= max_gpus]
    for tp in sizes:
        ep = tp if model.expert_params else 1
        shape = Shape(tp=tp, ep=ep, dp_attention=dp_attention and tp > 1)
        if shape_fits(model, gpu, shape, kv_tokens, usable_fraction):
            return shape
    if raise_if_none:
        raise UsageError(
            f"{model.name} does not fit on up to {sizes[-1]} {gpu.name} GPUs with "
            f"{kv_tokens:,.0f} tokens of KV", "use a larger GPU or fewer tokens in flight")
    return None


def compute_parts(
    model: ModelSpec, gpu: GpuSpec, prompt_tokens: ArrayLike, hit_tokens: ArrayLike,
    calibration: Calibration = DEFAULT_CALIBRATION, *, shape: Shape = ONE_GPU,
    attention_dtype: str = "bf16", chunk_tokens: int | None = None,
) -> tuple[Any, Any]:
    """(FLOP-bound time, byte-bound time) of prefilling S - P tokens on one replica.

    Two operator classes, each a roofline max(FLOP time, HBM byte time), summed:
    - linear/MoE layers: linear FLOPs over TP ranks at eta_linear x peak[weight dtype]
      against, per forward pass (chunked prefill), the active weights one GPU reads;
    - attention: attention FLOPs over TP ranks (one rank with DP attention) at
      eta_attention x peak[attention dtype] against, per pass, the KV bytes of its
      context (the prefix and the chunks up to the pass's end).
    Byte rates are hbm_efficiency x HBM bandwidth. Returned: the FLOP and byte parts of
    that sum (compute = their sum; each class contributes its larger term to one of them).
    """
    s, p = _check_tokens(prompt_tokens, hit_tokens)
    linear, attention = prefill_flops(model, s, p)
    lin_rate = (calibration.eta_lin(model.weight_dtype) * gpu.peak_flops(model.weight_dtype)
                * shape.tp)
    attn_ranks = 1 if shape.dp_attention else shape.tp
    attn_rate = calibration.eta_attn(gpu) * gpu.peak_flops(attention_dtype) * attn_ranks
    new = s - p
    chunk = chunk_tokens or default_chunk_tokens(gpu)
    passes = forward_passes(new, chunk)
    per_pass_tokens = np.maximum(np.minimum(new, chunk), 1.0)
    hbm = gpu.hbm_bandwidth_bytes_per_s * calibration.hbm_efficiency
    w_s = passes * active_weight_bytes(model, per_pass_tokens, shape) / hbm
    # each pass reads the KV of its context: the prefix and the chunks before it, up to
    # its own end (the last pass: the whole prompt), as the simulator charges it
    kv_tokens = (passes - 1) * (p + chunk * passes / 2) + s
    kv_s = kv_tokens * kv_bytes_per_token_per_gpu(model, shape) / hbm
    lin_s, attn_s = linear / lin_rate, attention / attn_rate
    flop_part = np.where(lin_s >= w_s, lin_s, 0.0) + np.where(attn_s >= kv_s, attn_s, 0.0)
    byte_part = np.where(lin_s >= w_s, 0.0, w_s) + np.where(attn_s >= kv_s, 0.0, kv_s)
    return flop_part, byte_part


def pass_floor_seconds(model: ModelSpec, calibration: Calibration = DEFAULT_CALIBRATION
                       ) -> float:
    """The time floor of one forward pass: layers x layer_latency.

    A pass of a few tokens is neither FLOP- nor weight-read-bound: its small kernels
    (norms, routing, launches) take about the same time at any size."""
    return model.layers * calibration.layer_latency_s


def moe_pass_seconds(model: ModelSpec, calibration: Calibration = DEFAULT_CALIBRATION
                     ) -> float:
    """The MoE kernels' fixed time of one forward pass: MoE layers x moe_layer_latency
    (every layer of the catalog's MoE models routes to experts; 0 for dense models)."""
    return (model.layers if model.experts else 0) * calibration.moe_layer_latency_s


def allreduce_seconds(model: ModelSpec, gpu: GpuSpec, shape: Shape,
                      calibration: Calibration = DEFAULT_CALIBRATION) -> tuple[float, float]:
    """(seconds per pass, seconds per token of the pass) of the tensor-parallel
    all-reduces: 2 per layer, each latency + 2 (tp - 1) / tp x tokens x hidden x 2 B (BF16
    activations) over the bus bandwidth (allreduce_bus_share x NVLink per direction).
    (0, 0) at TP 1, with DP attention, or where the calibration does not price them."""
    tp = shape.tp
    bw = calibration.allreduce_bus_share * gpu.nvlink_bandwidth_bytes_per_s
    if tp <= 1 or shape.dp_attention or (not calibration.allreduce_latency_s and bw <= 0):
        return 0.0, 0.0
    n = 2 * model.layers
    per_tok = n * 2.0 * (tp - 1) / tp * model.hidden_size * 2.0 / bw if bw > 0 else 0.0
    return n * calibration.allreduce_latency_s, per_tok


def pass_latency_seconds(model: ModelSpec, gpu: GpuSpec, prompt_tokens: ArrayLike,
                         hit_tokens: ArrayLike, calibration: Calibration = DEFAULT_CALIBRATION,
                         chunk_tokens: int | None = None) -> Any:
    """The floor of prefilling S - P tokens: passes x `pass_floor_seconds`."""
    s, p = _check_tokens(prompt_tokens, hit_tokens)
    passes = forward_passes(s - p, chunk_tokens or default_chunk_tokens(gpu))
    return passes * pass_floor_seconds(model, calibration)


def compute_seconds(
    model: ModelSpec, gpu: GpuSpec, prompt_tokens: ArrayLike, hit_tokens: ArrayLike,
    calibration: Calibration = DEFAULT_CALIBRATION, *, shape: Shape = ONE_GPU,
    attention_dtype: str = "bf16", chunk_tokens: int | None = None,
) -> Any:
    """Prefill compute time without the fixed overhead: per operator class the larger of
    FLOP time and HBM byte time, summed (`compute_parts`), and the passes' MoE fixed time,
    with the passes' layer floor on top (floor rule "add") or as the minimum ("max")."""
    flop_s, bytes_s = compute_parts(model, gpu, prompt_tokens, hit_tokens, calibration,
                                    shape=shape, attention_dtype=attention_dtype,
                                    chunk_tokens=chunk_tokens)
    floor = pass_latency_seconds(model, gpu, prompt_tokens, hit_tokens, calibration,
                                 chunk_tokens)
    s, p = _check_tokens(prompt_tokens, hit_tokens)
    passes = forward_passes(s - p, chunk_tokens or default_chunk_tokens(gpu))
    c0, c1 = allreduce_seconds(model, gpu, shape, calibration)
    comp = (flop_s + bytes_s + passes * (moe_pass_seconds(model, calibration) + c0)
            + np.maximum(s - p, 1.0) * c1)
    if calibration.floor_rule == "max":
        return np.maximum(comp, floor)
    return comp + floor


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


def _per_group(loaders: int, group: int, gpus: int) -> int:
    """Loaders that share one of the server's groups of `group` GPUs, spread evenly."""
    if group <= 1:
        return 1
    groups = max(1, gpus // group)
    return int(min(group, max(1, math.ceil(loaders / groups))))


def host_path_limit(gpu: GpuSpec, loaders: int = 1) -> float:
    """Host-memory bytes per second one GPU gets when `loaders` GPUs of its server load
    at once: its own link, its share of a shared uplink (PCIe switch or Grace C2C) and its
    share of the CPU socket's DRAM bandwidth (all theoretical)."""
    k = max(1, int(loaders))
    g = gpu.gpus_per_server
    limit = gpu.link_bandwidth("host")
    if gpu.host_uplink_bandwidth_bytes_per_s:
        limit = min(limit, gpu.host_uplink_bandwidth_bytes_per_s
                    / _per_group(k, gpu.gpus_per_host_uplink, g))
    if gpu.socket_dram_bandwidth_bytes_per_s and gpu.gpus_per_socket:
        limit = min(limit, gpu.socket_dram_bandwidth_bytes_per_s
                    / _per_group(k, gpu.gpus_per_socket, g))
    return float(limit)


def node_effective_bandwidth(tier: TierSpec) -> float | None:
    """What one X-Mem-like node delivers to all its GPUs together: the nominal node
    bandwidth x node_efficiency (1 when no measurement is published; see `notes`)."""
    if not tier.node_bandwidth_bytes_per_s:
        return None
    eff = tier.node_efficiency if tier.node_efficiency is not None else 1.0
    return tier.node_bandwidth_bytes_per_s * eff


def effective_bandwidth(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec, *,
    nodes: ArrayLike = 1, gpus_loading: int = 1, transfer: Transfer = SGLANG_HICACHE,
    calibration: Calibration = DEFAULT_CALIBRATION, loaders: int | None = None,
) -> Any:
    """Bytes per second one GPU pulls from `tier` (see the module docstring).

    `gpus_loading` GPUs share the node bandwidth of an X-Mem-like tier; `loaders` GPUs
    of one server load from host memory at once (default: `gpus_loading` capped at the
    server size), sharing PCIe switch uplinks and the socket's DRAM bandwidth.
    """
    if tier.kind == "hbm":
        eff = tier.efficiency if tier.efficiency is not None else 1.0
        return gpu.hbm_bandwidth_bytes_per_s * eff
    link = gpu.link_bandwidth(tier.attach)
    eff = tier.link_efficiency
    peak = None  # a host load's ceiling: the GPU's measured large-copy rate
    if tier.kind == "host":
        k = min(gpu.gpus_per_server, loaders if loaders is not None else gpus_loading)
        link = min(link, host_path_limit(gpu, k)) if tier.attach == "host" else min(
            link, _pcie_host_limit(gpu, k))
        if tier.attach == "pcie" and tier.bandwidth_bytes_per_s:
            if calibration.host_bandwidth_bytes_per_s:
                eff = calibration.host_bandwidth_bytes_per_s / tier.bandwidth_bytes_per_s
            elif calibration.host_efficiency:
                peak = host_copy_peak(gpu, tier)
                eff = calibration.host_efficiency * peak / tier.bandwidth_bytes_per_s
    if tier.kind == "xmem" and calibration.xmem_bandwidth_bytes_per_s and \
            tier.bandwidth_bytes_per_s:
        eff = calibration.xmem_bandwidth_bytes_per_s / tier.bandwidth_bytes_per_s
    limits: list[Any] = [link]
    if tier.bandwidth_bytes_per_s:
        limits.append(tier.bandwidth_bytes_per_s)
    if tier.per_gpu_link_bytes_per_s:
        limits.append(tier.per_gpu_link_bytes_per_s)
    raw = limits[0]
    for lim in limits[1:]:
        raw = np.minimum(raw, lim)
    bw = raw * eff * transfer_efficiency(tier, transfer.chunk_bytes(model), transfer.io)
    if peak is not None:
        # An engine with transfers in flight can beat one transfer's small-block rate (a
        # host_efficiency above 1), never the link's measured large-copy peak.
        bw = np.minimum(bw, peak)
    node = node_effective_bandwidth(tier)
    if node:
        share = node * np.asarray(nodes, dtype=np.float64) / max(1, gpus_loading)
        bw = np.minimum(bw, share)
    return bw


def host_copy_peak(gpu: GpuSpec, tier: TierSpec) -> float:
    """Pinned host-to-GPU copy bandwidth of `gpu` over `tier`'s PCIe path, large DMA
    copies: the GPU's measured figure (catalog `host_copy_bandwidth`), else the tier's
    published one (an H100's, vLLM blog fig. 4)."""
    if gpu.host_copy_bandwidth_bytes_per_s:
        return float(gpu.host_copy_bandwidth_bytes_per_s)
    return float(tier.effective_bandwidth_bytes_per_s or tier.bandwidth_bytes_per_s or 0.0)


def _pcie_host_limit(gpu: GpuSpec, loaders: int) -> float:
    """PCIe path of x86 hosts: shared switch uplinks and socket DRAM (see host_path_limit)."""
    if gpu.host_link != "pcie":
        return float(gpu.pcie_bandwidth_bytes_per_s)
    return host_path_limit(gpu, loaders)


def load_bandwidth(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec, loaders: ArrayLike = 1, *,
    nodes: ArrayLike = 1, transfer: Transfer = SGLANG_HICACHE,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> Any:
    """Effective bytes/s per GPU when `loaders` GPUs load from `tier` at once (k loaders
    share host uplinks, socket DRAM and X-Mem node bandwidth). Vectorized over loaders."""
    ks = np.atleast_1d(np.asarray(loaders, dtype=np.int64))
    out = np.array([np.asarray(effective_bandwidth(
        model, gpu, tier, nodes=nodes, gpus_loading=int(k), transfer=transfer,
        calibration=calibration, loaders=int(k)), dtype=np.float64) for k in ks])
    return out.reshape(np.shape(loaders)) if np.ndim(loaders) else float(out.ravel()[0])


def host_tier_for(catalog: Any, gpu: GpuSpec, requested: str = "host-dram-pcie5") -> TierSpec:
    """The host-DRAM tier a GPU really has: Grace GPUs (GB200/GB300) reach host memory
    over NVLink-C2C, so a PCIe host tier is swapped for `host-dram-c2c`."""
    tier: TierSpec = catalog.tier(requested)
    if tier.kind == "host" and tier.attach == "pcie" and gpu.host_link == "c2c":
        return catalog.tier("host-dram-c2c")
    return tier


def notes(gpu: GpuSpec, tier: TierSpec) -> list[str]:
    """What a prediction with `tier` on `gpu` rests on that no published figure backs."""
    out = [f"{tier.name}: not published: {u}" for u in tier.unpublished]
    if tier.kind == "host" and tier.attach == "pcie" and gpu.host_link == "c2c":
        out.append(f"{gpu.name} reaches host memory over NVLink-C2C, not PCIe: use tier "
                   "host-dram-c2c")
    return out


def load_seconds(
    model: ModelSpec, hit_tokens: ArrayLike, bandwidth_bytes_per_s: ArrayLike,
    latency_s: float = 0.0, *, bytes_per_token: float | None = None,
) -> Any:
    """hit tokens x KV bytes per token / effective bandwidth + one operation's latency.

    The latency term counts once per request (pages after the first are pipelined); a
    request with no hit loads nothing and pays nothing. `bytes_per_token`: per-GPU KV
    bytes under a deployment shape (`kv_bytes_per_token_per_gpu`).
    """
    p = np.asarray(hit_tokens, dtype=np.float64)
    b = model.kv_bytes_per_token if bytes_per_token is None else bytes_per_token
    return np.where(p > 0, p * b / bandwidth_bytes_per_s + latency_s, 0.0)


def tier_load_seconds(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec, hit_tokens: ArrayLike, *,
    nodes: ArrayLike = 1, gpus_loading: int = 1, transfer: Transfer = SGLANG_HICACHE,
    calibration: Calibration = DEFAULT_CALIBRATION, shape: Shape = ONE_GPU,
) -> Any:
    """`load_seconds` with the effective bandwidth and latency of `tier` on `gpu`."""
    bw = effective_bandwidth(model, gpu, tier, nodes=nodes, gpus_loading=gpus_loading,
                             transfer=transfer, calibration=calibration)
    return load_seconds(model, hit_tokens, bw, tier.latency_s,
                        bytes_per_token=kv_bytes_per_token_per_gpu(model, shape))


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


def sm_interference_fraction(tier: TierSpec, transfer: Transfer, overlap: str) -> float:
    """The share of overlapped compute lost to SM-kernel copies: the tier's fraction, or 0
    for DMA copies and for the `sum` rule (nothing runs alongside the load)."""
    if transfer.io != "kernel" or overlap == "sum":
        return 0.0
    return float(tier.sm_interference)


def sm_interference_seconds(load_s: ArrayLike, compute_s: ArrayLike, tier: TierSpec,
                            transfer: Transfer, overlap: str) -> Any:
    """Compute time lost to SM-kernel copies running alongside it: the fraction x the
    overlapped time min(load, compute)."""
    return sm_interference_fraction(tier, transfer, overlap) * np.minimum(
        np.asarray(load_s, dtype=np.float64), np.asarray(compute_s, dtype=np.float64))


def ttft(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec,
    prompt_tokens: ArrayLike, hit_tokens: ArrayLike, *,
    concurrency: ArrayLike = 1, overlap: str = "layer", nodes: ArrayLike = 1,
    gpus_loading: int = 1,
    transfer: Transfer = SGLANG_HICACHE, calibration: Calibration = DEFAULT_CALIBRATION,
    bandwidth_bytes_per_s: ArrayLike | None = None, shape: Shape = ONE_GPU,
    attention_dtype: str = "bf16", chunk_tokens: int | None = None,
    loaders: int | None = None,
) -> Breakdown:
    """Predicted TTFT of prefilling `prompt_tokens` with `hit_tokens` loaded from `tier`.

    `bandwidth_bytes_per_s` replaces the computed effective bandwidth (sweeps over tier
    bandwidth); prompt, hit, bandwidth, nodes and concurrency broadcast against each other
    (numpy rules), so one call evaluates a whole grid. With `concurrency` N, `ttft_s` is the
    mean over the N positions in flight and `ttft_last_s` the N-th. `shape` spreads the
    replica over GPUs (each loads its own KV share over its own link).
    """
    if overlap not in OVERLAPS:
        raise UsageError(f"unknown overlap '{overlap}'", "use sum, layer or max")
    if np.any(np.asarray(concurrency) < 1):
        raise UsageError("concurrency must be at least 1")
    linear, attention = prefill_flops(model, prompt_tokens, hit_tokens)
    flop_s, bytes_s = compute_parts(model, gpu, prompt_tokens, hit_tokens, calibration,
                                    shape=shape, attention_dtype=attention_dtype,
                                    chunk_tokens=chunk_tokens)
    floor = pass_latency_seconds(model, gpu, prompt_tokens, hit_tokens, calibration,
                                 chunk_tokens)
    s_arr, p_arr = _check_tokens(prompt_tokens, hit_tokens)
    chunk = chunk_tokens or default_chunk_tokens(gpu)
    passes = forward_passes(s_arr - p_arr, chunk)
    c0, c1 = allreduce_seconds(model, gpu, shape, calibration)
    moe1 = moe_pass_seconds(model, calibration) + c0
    new = np.maximum(s_arr - p_arr, 1.0)
    comp = flop_s + bytes_s + passes * moe1 + new * c1
    # Loads overlap the first forward pass only (they start with its batch; later chunks
    # attend to a prefix already loaded): the rest of a chunked prefill runs after.
    f1, b1 = compute_parts(model, gpu, np.minimum(s_arr, p_arr + chunk), p_arr, calibration,
                           shape=shape, attention_dtype=attention_dtype, chunk_tokens=chunk)
    first = np.minimum(f1 + b1 + moe1 + np.minimum(new, chunk) * c1, comp)
    rest = comp - first
    if calibration.floor_rule == "max":
        # each pass is at least its floor (the first pass, and the rest together: exact
        # when each pass of the rest is on the same side of its floor)
        one = floor / passes
        first = np.maximum(first, one)
        rest = np.maximum(rest, floor - one)
        comp = first + rest
        floor = np.zeros_like(np.asarray(floor, dtype=np.float64))
    bw = (effective_bandwidth(model, gpu, tier, nodes=nodes, gpus_loading=gpus_loading,
                              transfer=transfer, calibration=calibration, loaders=loaders)
          if bandwidth_bytes_per_s is None else np.asarray(bandwidth_bytes_per_s, np.float64))
    load = load_seconds(model, hit_tokens, bw, tier.latency_s,
                        bytes_per_token=kv_bytes_per_token_per_gpu(model, shape))
    extra = sm_interference_seconds(load, first, tier, transfer, overlap)
    comp = comp + extra
    t0 = calibration.fixed_overhead_s + calibration.per_token_overhead_s * np.asarray(
        prompt_tokens, dtype=np.float64)
    # The passes' layer floor is not hidden behind loads (small kernels between layers).
    single = t0 + floor + combine(load, first + extra, overlap, model.layers) + rest
    step = np.maximum(load, comp + floor)
    return Breakdown(
        compute_s=comp + floor,
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
        flop_s=flop_s,
        bytes_s=bytes_s,
        interference_s=extra,
        latency_s=floor,
    )
