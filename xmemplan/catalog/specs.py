"""Frozen records of the catalog: models, GPUs and KV tiers, in SI units.

Bytes are bytes, bandwidths bytes per second, compute rates FLOP per second, latencies
seconds. Every record keeps `source` (where its numbers come from) and `sources` (per-field
overrides), so that a report can cite them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}


@dataclass(frozen=True)
class ModelSpec:
    """A model's shape, enough for KV bytes per token and prefill FLOPs.

    `active_params` counts non-embedding parameters used per token (MoE: the top-k experts),
    `total_params` everything stored (for the weights' share of HBM).
    """

    name: str
    display_name: str
    attention: Literal["gqa", "mla"]
    layers: int
    hidden_size: int
    q_heads: int
    kv_heads: int
    head_dim: int
    kv_dtype_bytes: int
    weight_dtype: str
    active_params: int
    total_params: int
    source: str
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE: routed experts per MoE layer, experts each token is routed to, and the parameters
    # of all routed experts together (what a forward pass reads only where tokens go).
    experts: int = 0
    experts_per_token: int = 0
    expert_params: int = 0
    max_context: int = 0  # the model's maximum context in tokens (0: unknown)
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    aliases: tuple[str, ...] = ()
    origin: str = ""

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token (MLA: one latent + rope key per layer).

        GQA: 2 x layers x kv_heads x head_dim x dtype bytes; MLA: layers x (kv_lora_rank +
        qk_rope_head_dim) x dtype bytes (research/perf-model.md section 2.1). MLA in FP8
        (kv_dtype_bytes 1) uses the vLLM/SGLang layout of 656 B per layer: a 512-byte FP8
        latent, 4 x 4 B scales and a 64 x 2 B BF16 rope key (research 2.1).
        """
        if self.attention == "mla":
            if self.kv_dtype_bytes == 1:
                return self.layers * (self.kv_lora_rank + 16 + 2 * self.qk_rope_head_dim)
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    @property
    def dense_params(self) -> int:
        """Parameters every forward pass reads: all but the routed experts."""
        return self.total_params - self.expert_params

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        return self.kv_bytes_per_token // self.layers

    @property
    def linear_flops_per_token(self) -> float:
        """2 x active non-embedding parameters (one multiply-add per weight)."""
        return 2.0 * self.active_params

    @property
    def attention_flops_coef(self) -> float:
        """Causal attention FLOPs = coef x (S^2 - P^2); coef = layers x q_heads x (d_qk + d_v).

        For d_qk = d_v = head_dim that is 2 x layers x q_heads x head_dim (Qwen3-30B-A3B:
        393,216). research/perf-model.md section 2.2, same as AIConfigurator's SOL model.
        """
        if self.attention == "mla":
            d_qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            return float(self.layers * self.q_heads * (d_qk + self.v_head_dim))
        return float(2 * self.layers * self.q_heads * self.head_dim)

    @property
    def weight_bytes(self) -> float:
        return self.total_params * DTYPE_BYTES.get(self.weight_dtype, 2)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU: dense tensor-core peaks per dtype, HBM, and per-direction link bandwidths."""

    name: str
    display_name: str
    flops: dict[str, float]
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    pcie_bandwidth_bytes_per_s: float
    nvlink_bandwidth_bytes_per_s: float
    gpus_per_server: int
    source: str
    # Host path topology. host_link: "pcie" (x86 servers) or "c2c" (Grace: NVLink-C2C).
    # gpus_per_host_uplink: GPUs whose host traffic shares one uplink of host_uplink_bandwidth
    # (a PCIe switch's x16 to the CPU, or one Grace's C2C); gpus_per_socket share one CPU
    # socket's DRAM bandwidth (socket_dram_bandwidth). 0 / None: not modelled.
    host_link: str = "pcie"
    host_link_bandwidth_bytes_per_s: float | None = None
    gpus_per_host_uplink: int = 1
    host_uplink_bandwidth_bytes_per_s: float | None = None
    gpus_per_socket: int = 0
    socket_dram_bandwidth_bytes_per_s: float | None = None
    # Measured pinned host -> GPU copy bandwidth, large DMA copies (None: not measured).
    host_copy_bandwidth_bytes_per_s: float | None = None
    # What the CUDA driver reports as the GPU's total memory (vLLM total_gpu_memory):
    # what --gpu-memory-utilization / --mem-fraction-static multiply; 0: hbm_capacity.
    device_memory_bytes: float = 0.0
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    aliases: tuple[str, ...] = ()
    origin: str = ""

    def peak_flops(self, dtype: str) -> float:
        """Dense peak for `dtype`; a dtype the GPU lacks falls back to BF16."""
        return self.flops.get(dtype, self.flops["bf16"])

    def link_bandwidth(self, attach: str) -> float:
        """Per-direction bandwidth of the GPU side of a tier's attachment."""
        if attach == "hbm":
            return self.hbm_bandwidth_bytes_per_s
        if attach == "nvlink":
            return self.nvlink_bandwidth_bytes_per_s
        if attach == "host":  # the GPU's link to its own host memory (PCIe or C2C)
            return self.host_link_bandwidth_bytes_per_s or self.pcie_bandwidth_bytes_per_s
        return self.pcie_bandwidth_bytes_per_s  # pcie, nic (NICs sit behind a PCIe switch)


@dataclass(frozen=True)
class TierSpec:
    """A KV tier. `None` means "not applicable" (HBM takes capacity/bandwidth from the GPU)."""

    name: str
    display_name: str
    kind: Literal["hbm", "host", "xmem", "rdma", "nvme"]
    attach: Literal["hbm", "pcie", "nvlink", "nic", "host"]
    capacity_bytes: float | None
    capacity_scope: Literal["gpu", "server", "node", "drive"]
    bandwidth_bytes_per_s: float | None
    effective_bandwidth_bytes_per_s: float | None
    latency_s: float
    source: str
    node_bandwidth_bytes_per_s: float | None = None
    per_gpu_link_bytes_per_s: float | None = None
    efficiency: float | None = None
    banks: int | None = None
    transfer_chunk_bytes: tuple[float, ...] = ()
    transfer_dma_bytes_per_s: tuple[float, ...] = ()
    transfer_kernel_bytes_per_s: tuple[float, ...] = ()
    # Measured share of node_bandwidth that GPUs reach together (None: no published figure,
    # the nominal node bandwidth is used and reports say so).
    node_efficiency: float | None = None
    # Share of prefill compute time lost while SM-kernel copies of this tier overlap it.
    sm_interference: float = 0.0
    # What the catalog could not source for this tier; shown with every prediction using it.
    unpublished: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    aliases: tuple[str, ...] = ()
    origin: str = ""
    # Who reads what this tier holds (docs/size.md "Tier scope"): its replica (one engine
    # instance), every replica of a server, of a rack (up to `share_gpus` GPUs; unset: the
    # whole deployment), or the cluster (an L3 store).
    share_scope: Literal["replica", "server", "rack", "cluster"] = "replica"
    share_gpus: int | None = None

    @property
    def link_efficiency(self) -> float:
        """Measured over theoretical bandwidth (1 when only one of them is known)."""
        if self.efficiency is not None:
            return self.efficiency
        if self.bandwidth_bytes_per_s and self.effective_bandwidth_bytes_per_s:
            return min(1.0, self.effective_bandwidth_bytes_per_s / self.bandwidth_bytes_per_s)
        return 1.0

    def source_of(self, field_name: str) -> str:
        return self.sources.get(field_name, self.source)


@dataclass(frozen=True)
class CalibrationSpec:
    """A `[calibration.ENGINE]` table: fitted TTFT-model constants for one engine.

    `values` keys (SI units): eta_linear, eta_attention, fixed_overhead (s),
    per_token_overhead (s), host_bandwidth (B/s), xmem_bandwidth (B/s), step_base,
    step_per_token, step_per_seq (s: the engine's step overheads), layer_latency,
    moe_layer_latency, allreduce_latency (s), allreduce_bus_share, points; `rules` the
    text ones: floor_rule ("add" or "max").
    `xmemplan.sizing.model.calibration_for(catalog, engine)` applies them.
    """

    engine: str
    source: str
    values: dict[str, float] = field(default_factory=dict)
    origin: str = ""
    rules: dict[str, str] = field(default_factory=dict)
