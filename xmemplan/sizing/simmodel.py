"""Adapter: the simulator's per-token and per-batch constants from `xmemplan.sizing.model`.

The TTFT model (model.py) prices one request; the simulator (sim.py) prices batches, so it
needs the model's rates split per token: seconds per new token of linear work, seconds per
unit of (S^2 - P^2) of causal attention, dense and routed-expert weight bytes, KV bytes per
token, HBM bandwidth, and the tiers' bandwidths split into what one GPU can pull and what
is shared (PCIe switch uplink, X-Mem nodes). Every figure is taken from model.py's public
functions and the catalog, so that one request alone in the simulator gets the model's TTFT
(tests/test_sim.py checks it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from xmemplan.catalog.specs import DTYPE_BYTES, GpuSpec, ModelSpec, TierSpec
from xmemplan.sizing import model as M
from xmemplan.sizing.engine import Config, Requests
from xmemplan.sizing.engine.pool import synth_keys
from xmemplan.sizing.engine.prefetch import DEFAULT_POLICY as PREFETCH_DEFAULT
from xmemplan.sizing.sim import LAYER, MAX, SUM, Engine, Traffic

OVERLAP_CODES = {"sum": SUM, "layer": LAYER, "max": MAX}
XMEM_PATHS = ("direct", "hicache-storage")  # Setup.xmem_path
XMEM_PATH_STORAGE = "hicache-storage"
HBM_USABLE = 0.9  # share of HBM for weights + KV (as model.shape_fits' usable_fraction)
# (the engines' knob: SGLang --mem-fraction-static, vLLM --gpu-memory-utilization)


@dataclass(frozen=True)
class Setup:
    """One deployment option the simulator runs: hardware, engine and tiers."""

    model: ModelSpec
    gpu: GpuSpec
    host: TierSpec
    xmem: TierSpec
    calibration: M.Calibration = M.DEFAULT_CALIBRATION
    transfer: M.Transfer = M.SGLANG_HICACHE
    overlap: str = "layer"
    shape: M.Shape = M.ONE_GPU
    chunk_tokens: int | None = None
    mixed: bool = False  # vLLM: decodes ride in every prefill batch
    decode_fixed_s: float = 0.0
    max_batch: int = 256  # the old simulator's (sim.py) batch cap
    # SGLang's running-request cap in the engine; None: SGLang's own default from the KV
    # room (sglang_max_running)
    max_running: int | None = None
    attention_dtype: str = "bf16"  # "fp8": FP8 attention at the GPU's FP8 peak (model.ttft)
    mem_fraction: float = HBM_USABLE  # share of HBM the engine takes for weights + KV
    # The KV pool as the engine sizes it (model.engine_kv_room_tokens: vLLM less its
    # profile run and non-torch memory, SGLang less its context); False: weights only
    # (kv_pool_tokens; docs/validation.md "KV pool check", "Task structure")
    engine_pool: bool = True
    max_num_seqs: int | None = None  # vLLM --max-num-seqs (None: its default on this GPU)
    # each step's batch built while the step before runs (vLLM --async-scheduling /
    # --no-async-scheduling, SGLang --disable-overlap-schedule); None: the engine's default
    # (async_default)
    async_schedule: bool | None = None
    # vLLM's deferred block frees under async scheduling with a KV connector that loads
    # (Config.defer_block_free; vLLM 0.33 `defer_block_free`); None: as vLLM 0.33 sets it
    # (vLLM policy, async scheduling and a tier behind its OffloadingConnector:
    # config_for's `connector`); False for vLLM versions before the rule (Netpreme's fork,
    # benchmarks/loaded_check.py)
    defer_block_free: bool | None = None
    # X-Mem under SGLang: "direct" (the Netpreme fork's GPU <-> X-Mem copy, loaded with
    # the batch) or "hicache-storage" (our HiCache storage backend, docs/hicache-backend.md:
    # X-Mem at L3, prefetched to host while the request waits, then loaded host -> GPU;
    # engine/prefetch.py), and SGLang's --hicache-storage-prefetch-policy for the latter
    xmem_path: str = "direct"
    prefetch_policy: str = PREFETCH_DEFAULT


def _raw_host_link(gpu: GpuSpec, tier: TierSpec) -> float:
    lims = [gpu.link_bandwidth(tier.attach)]
    for x in (tier.bandwidth_bytes_per_s, tier.per_gpu_link_bytes_per_s):
        if x:
            lims.append(x)
    return float(min(lims))


def engine_for(s: Setup, *, replicas: int, nodes: float, load_tier: str = "xmem") -> Engine:
    """The simulator's Engine for `replicas` replicas of shape `s.shape` and `nodes` X-Mem
    nodes. `load_tier` ("host" or "xmem") names the tier whose SM interference applies."""
    m, g, cal, shape = s.model, s.gpu, s.calibration, s.shape
    lin_rate = cal.eta_lin(m.weight_dtype) * g.peak_flops(m.weight_dtype) * shape.tp
    attn_rate = (cal.eta_attn(g) * g.peak_flops(s.attention_dtype)
                 * (1 if shape.dp_attention else shape.tp))
    wb = DTYPE_BYTES.get(m.weight_dtype, 2)
    dense = m.dense_params * wb / (1 if shape.dp_attention else shape.tp)
    experts = m.expert_params * wb / shape.gpus
    miss = 1.0 - m.experts_per_token / m.experts if m.experts and m.experts_per_token else 0.0
    kvb = M.kv_bytes_per_token_per_gpu(m, shape)
    hbm = g.hbm_bandwidth_bytes_per_s * cal.hbm_efficiency
    # Host DRAM: what one GPU pulls alone, and the switch uplink its group shares.
    dram_cap = float(M.effective_bandwidth(m, g, s.host, transfer=s.transfer, calibration=cal,
                                           gpus_loading=1, loaders=1))
    per_switch = 1
    if g.host_uplink_bandwidth_bytes_per_s:
        per_switch = max(1, g.gpus_per_host_uplink // shape.gpus)
    switch = math.inf
    if g.host_uplink_bandwidth_bytes_per_s and g.gpus_per_host_uplink > 1:
        switch = g.host_uplink_bandwidth_bytes_per_s * dram_cap / _raw_host_link(g, s.host)
    # X-Mem: one GPU's ceiling, and the nodes' bandwidth shared by every loading GPU.
    xmem_cap = float(M.effective_bandwidth(m, g, s.xmem, nodes=1e9, gpus_loading=1,
                                           transfer=s.transfer, calibration=cal))
    node = M.node_effective_bandwidth(s.xmem)
    node_bw = math.inf if not node else node * nodes / shape.gpus
    kv_cap = M.kv_room_tokens(m, g, shape, s.mem_fraction)
    tier = s.host if load_tier == "host" else s.xmem
    interf = M.sm_interference_fraction(tier, s.transfer, s.overlap)
    floor = M.pass_floor_seconds(m, cal)
    comm0, comm1 = M.allreduce_seconds(m, g, shape, cal)
    return Engine(
        replicas=replicas,
        chunk_tokens=s.chunk_tokens or M.default_chunk_tokens(g),
        max_batch=s.max_batch,
        overlap=OVERLAP_CODES[s.overlap],
        layers=m.layers,
        mixed=int(s.mixed),
        gpus_per_switch=per_switch,
        lin_s_per_token=m.linear_flops_per_token / lin_rate,
        attn_s_per_unit=m.attention_flops_coef / attn_rate,
        dense_weight_bytes=dense,
        expert_weight_bytes=experts,
        expert_miss=miss,
        sm_interference=interf,
        hbm_bandwidth=hbm,
        kv_bytes_per_token=kvb,
        # The per-layer pass floor: every prefill batch and every decode step is a pass.
        fixed_s=cal.fixed_overhead_s,
        per_token_s=cal.per_token_overhead_s,
        decode_fixed_s=s.decode_fixed_s + floor,
        pass_fixed_s=floor,
        comm_pass_s=comm0,
        comm_s_per_token=comm1,
        dram_bandwidth=dram_cap,
        switch_bandwidth=switch,
        dram_latency_s=s.host.latency_s,
        xmem_bandwidth=xmem_cap,
        node_bandwidth=node_bw,
        xmem_latency_s=s.xmem.latency_s,
        kv_capacity_tokens=kv_cap,
    )


def single_request_ttft(s: Setup, prompt: float, hit: float, tier: str) -> float:
    """The model's TTFT of one request alone (the value the simulator must reproduce)."""
    t = s.host if tier == "host" else s.xmem
    b = M.ttft(s.model, s.gpu, t, prompt, hit, overlap=s.overlap, transfer=s.transfer,
               calibration=s.calibration, shape=s.shape, chunk_tokens=s.chunk_tokens,
               nodes=1e9 if tier == "xmem" else 1, loaders=1,
               attention_dtype=s.attention_dtype)
    return float(np.asarray(b.single_s))


# --- the iteration-level engine (xmemplan.sizing.engine) -------------------------------------
VLLM_BLOCK_TOKENS = 16  # vLLM CacheConfig.DEFAULT_BLOCK_SIZE (serving-sim.md 1.4)
MAX_BLOCKS_PER_PROMPT = 64  # the simulator's block: a multiple of the engine's, so that
# a median prompt spans at most this many (pool work per admission stays bounded)


def vllm_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of `vllm serve` 0.33 on this GPU
    (engine/arg_utils.py get_batch_defaults; serving-sim.md 1.4): 8,192 / 1,024 on GPUs of
    70 GiB or more that are not A100, 16,384 / 1,024 from 160 GiB, else 2,048 / 256."""
    gib = gpu.hbm_capacity_bytes / 2**30
    if gib >= 160:
        return 16384, 1024
    if gib >= 70 and "a100" not in gpu.name.lower():
        return 8192, 1024
    return 2048, 256


def async_default(policy: str) -> bool:
    """Whether the engine builds a step's batch while the step before runs, as it is
    served by default (docs/size.md "The simulator"). vLLM 0.33: `async_scheduling` None
    becomes True unless the model is a pooling model, the executor lacks support, ROCm
    DeepEP DBO, or the V1 model runner with a non-EAGLE/MTP spec decode or pipeline
    parallelism (vllm/config/vllm.py `VllmConfig.__post_init__`, lines 1685-1719); the
    default since vllm-project/vllm PR #27614. SGLang 0.5.23: `disable_overlap_schedule`
    False (srt/arg_groups/fields/schedule.py line 193; the default since sgl-project/sglang
    PR #2067, November 2024), so `event_loop_overlap` runs
    (srt/managers/scheduler.py lines 500-502, 6230); off only with pipeline parallelism and
    a few model kinds (srt/arg_groups/overrides.py). Neither case is one we model."""
    return policy in ("vllm", "sglang")


# On, as both engines ship it (async_default). The loaded fit of the step overheads
# (model.md section 6) replays each run with its engine version's setting (loaded.csv
# `async_schedule`: off for vLLM 0.6 and SGLang 0.3); docs/validation.md "Async
# scheduling" gives the checks both ways. The benchmarks' --async-schedule sets this.
ASYNC_BY_DEFAULT = True


def sglang_max_running(room_tokens: float, context_len: int) -> int:
    """SGLang's default cap on running requests: its request pool holds
    min(max(KV tokens / context length x 512, 2,048), 4,096) requests (ModelRunner
    init_memory_pool, `max_num_reqs`) and the scheduler runs at most that many and at most
    KV tokens / 2 (`max_running_requests` unset). context_len 0 (unknown): 256."""
    if context_len <= 0:
        return 256
    pool = min(max(int(room_tokens / context_len * 512), 2048), 4096)
    return max(1, min(pool, int(room_tokens) // 2))


def sim_block_tokens(engine_block: int, prompt_p50: float) -> int:
    """The engine's block, doubled until a median prompt spans at most
    MAX_BLOCKS_PER_PROMPT blocks (docs/size.md: prefix hits and evictions then move in
    these larger blocks)."""
    b = max(1, engine_block)
    while prompt_p50 / b > MAX_BLOCKS_PER_PROMPT:
        b *= 2
    return b


def config_for(s: Setup, *, replicas: int, nodes: float, load_tier: str = "xmem",
               policy: str = "sglang", prompt_p50: float = 0.0,
               overheads: tuple[float, float, float] | None = None,
               tier_write: bool = True, connector: bool = False) -> Config:
    """The engine's Config for `replicas` replicas of `s.shape`: the same per-token rates
    and links as engine_for (the single-request model), the block pool from the KV room,
    the batch limits as the engine's defaults on this GPU. `overheads`: the engine's own
    (per step, per scheduled token, per scheduled request) seconds; None: the
    calibration's (`s.calibration.step_*`, fitted on loaded runs). One request alone pays
    them inside the model's t0 and per-prompt-token overhead (which were fitted on
    single-request TTFTs that include them), so t0 and that overhead are reduced by them:
    one request alone still costs model.ttft. `connector`: a tier (host DRAM or X-Mem)
    sits behind the engine's KV connector (vLLM's OffloadingConnector), which with async
    scheduling turns vLLM 0.33's deferred block frees on (`s.defer_block_free` None)."""
    e = engine_for(s, replicas=replicas, nodes=nodes, load_tier=load_tier)
    cal = s.calibration
    comm = M.allreduce_seconds(s.model, s.gpu, s.shape, cal)
    if overheads is None:
        overheads = (cal.step_base_s, cal.step_per_token_s, cal.step_per_seq_s)
    engine_block = VLLM_BLOCK_TOKENS if policy == "vllm" else 16
    bs = sim_block_tokens(engine_block, prompt_p50)
    budget, seqs = vllm_defaults(s.gpu)
    seqs = s.max_num_seqs or seqs
    chunk = s.chunk_tokens or M.default_chunk_tokens(s.gpu)
    room = kv_pool_tokens(s, policy)
    asyn = ((ASYNC_BY_DEFAULT and async_default(policy)) if s.async_schedule is None
            else s.async_schedule)
    defer = (policy == "vllm" and asyn and connector) if s.defer_block_free is None \
        else s.defer_block_free
    return Config(
        policy=policy, replicas=replicas, block_tokens=bs, engine_block_tokens=engine_block,
        blocks=max(1, int(room // bs)),
        max_num_seqs=seqs if policy == "vllm" else (
            s.max_running or sglang_max_running(room, s.model.max_context)),
        max_batched_tokens=(s.chunk_tokens or budget) if policy == "vllm" else chunk,
        chunked_prefill_size=chunk,
        lin_s_per_token=e.lin_s_per_token, attn_s_per_unit=e.attn_s_per_unit,
        dense_weight_bytes=e.dense_weight_bytes, expert_weight_bytes=e.expert_weight_bytes,
        expert_miss=e.expert_miss, hbm_bandwidth=e.hbm_bandwidth,
        kv_bytes_per_token=e.kv_bytes_per_token,
        fixed_s=max(0.0, e.fixed_s - overheads[0] - overheads[2]),
        per_prompt_token_s=max(0.0, e.per_token_s - overheads[1]), pass_fixed_s=e.pass_fixed_s,
        decode_fixed_s=e.decode_fixed_s, moe_fixed_s=M.moe_pass_seconds(s.model, cal),
        comm_fixed_s=comm[0], comm_per_token_s=comm[1],
        floor_rule=cal.floor_rule, base_s=overheads[0], per_token_s=overheads[1],
        per_seq_s=overheads[2], layers=e.layers, gpus_per_switch=e.gpus_per_switch,
        dram_bandwidth=e.dram_bandwidth, switch_bandwidth=e.switch_bandwidth,
        dram_latency_s=e.dram_latency_s, xmem_bandwidth=e.xmem_bandwidth,
        node_bandwidth=e.node_bandwidth, xmem_latency_s=e.xmem_latency_s,
        sm_interference=e.sm_interference, tier_write=tier_write, async_schedule=asyn,
        defer_block_free=defer,
        l3_tier=1 if (policy == "sglang" and load_tier == "xmem"
                      and s.xmem_path == XMEM_PATH_STORAGE) else -1,
        prefetch_policy=s.prefetch_policy)


def kv_pool_tokens(s: Setup, policy: str) -> float:
    """KV tokens one replica holds. With `s.engine_pool` (the default) as the engine sizes
    its pool (model.engine_kv_room_tokens): vLLM less its profile run at its batch budget
    and max_num_seqs, its non-torch and CUDA graph memory; SGLang less its context. Else
    HBM x mem fraction less the weights (model.kv_room_tokens). The planner's placement
    room and the engine's pool both come from here."""
    if not s.engine_pool:
        return M.kv_room_tokens(s.model, s.gpu, s.shape, s.mem_fraction)
    budget, seqs = vllm_defaults(s.gpu)
    chunk = s.chunk_tokens or (budget if policy == "vllm" else M.default_chunk_tokens(s.gpu))
    return M.engine_kv_room_tokens(s.model, s.gpu, s.shape, policy, s.mem_fraction, chunk,
                                   s.max_num_seqs or seqs)


def requests_for(tr: Traffic, *, shared: np.ndarray, tier_tokens: np.ndarray, tier: int,
                 block_tokens: int, hbm_fixed: np.ndarray | None = None) -> Requests:
    """The engine's requests from the simulator's traffic arrays: request i shares its
    first shared[i] tokens with prev[i] (its conversation's previous turn), its tier holds
    tier_tokens[i] of its prompt (tier 0 host DRAM, 1 X-Mem, -1 none)."""
    prompt = np.maximum(1, np.round(tr.prompt)).astype(np.int64)
    output = np.asarray(tr.output, np.int64)
    keys, koff, kn = synth_keys(prompt, output, np.asarray(tr.prev, np.int64),
                                np.asarray(shared, np.int64), int(block_tokens))
    n = len(prompt)
    prev = np.asarray(tr.prev, np.int64)
    cacheable = np.zeros(n, np.int64)
    cacheable[prev[prev >= 0]] = 1  # only a later turn asks for a request's blocks
    return Requests(arrival=tr.arrival, prompt=prompt, output=output, keys=keys, koff=koff,
                    kn=kn, tier_tokens=np.asarray(tier_tokens, np.int64),
                    tier=np.full(n, tier, np.int64), prev=tr.prev, think=tr.think,
                    route=tr.route, cacheable=cacheable,
                    hbm_fixed=None if hbm_fixed is None else np.asarray(hbm_fixed, np.int64))
