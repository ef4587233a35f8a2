"""The simulated serving engine: iteration-level batching over one KV block pool per
replica, as vLLM V1 and SGLang schedule (docs/size.md "The simulator").

- `pool`: the block pool (cached prefixes and running requests share it; eviction order);
- `policy`: one step's batch per engine (vLLM running-first with preemption, SGLang
  prefill-first with retraction);
- `steptime`: a step's time (roofline plus engine overheads);
- `loop`: the event loop (arrivals, tier loads and writes over shared links, steps);
- `reference`: the pool and the policies in plain Python (the tests' oracle).

`run(requests, config)` simulates; `replay_scenario(scenario)` steps one replica through
an oracle scenario (/work contract, docs/oracles.md) and returns its per-step records.
"""

# ruff: noqa: E402  (the kernels import after the stale-cache check below)
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.sizing.engine._numba_stamp import drop_stale_cache

# Before the kernels load: numba's cache would not see an edit to an inlined sibling.
_HERE = Path(__file__).resolve().parent
_PREFIX = _HERE.parent.parent / "prefix"  # radix.py inlines the SGLang cache model's kernels
drop_stale_cache(_HERE, [_HERE.parent / "sim.py", _PREFIX / "engine_kernels.py",
                         _PREFIX / "kernels.py"])


from xmemplan.sizing.engine.loop import (
    E_ASYNC,
    E_L3,
    E_LAYERS,
    E_NB,
    E_PER_SWITCH,
    E_REPLICAS,
    L_DRAM_CAP,
    L_DRAM_LAT,
    L_INTERF,
    L_NODE_BW,
    L_PF_BASE,
    L_PF_PERKI,
    L_PF_POLICY,
    L_PF_THRESH,
    L_SWITCH_BW,
    L_WRITE,
    L_XMEM_CAP,
    L_XMEM_LAT,
    N_E,
    N_L,
    O_ARR,
    O_DONE,
    O_FIRST,
    O_ITL_MAX,
    O_READY,
    O_START,
    S_DECODE_STEPS,
    S_HBM_HIT,
    S_KV_AREA,
    S_PREEMPT,
    S_SPAN_END,
    S_SPAN_START,
    S_STEPS,
    S_TIER_HIT,
    S_WRITE_BYTES,
    run_kernel,
)
from xmemplan.sizing.engine.policy import (
    N_P,
    P_BS,
    P_BUDGET,
    P_CACHING,
    P_CHUNK,
    P_EBS,
    P_FULLISL,
    P_HOLD_VICTIMS,
    P_MAXPREFILL,
    P_MAXSEQ,
    P_POLICY,
    P_THRESH,
    SGLANG,
    VLLM,
)
from xmemplan.sizing.engine.prefetch import (
    DEFAULT_POLICY,
    PF_DEADLINE,
    PF_DONE,
    PF_ENDED,
    PF_STATE,
    PF_TOKENS,
    POLICY_NAMES,
    PREFETCH_THRESHOLD,
    TIMEOUT_BASE_S,
    TIMEOUT_PER_KI_TOKEN_S,
)
from xmemplan.sizing.engine.steptime import (
    N_T,
    T_ATTN,
    T_BASE,
    T_COMM0,
    T_COMM1,
    T_DEC,
    T_FLOOR_MAX,
    T_HBM,
    T_KVB,
    T_LIN,
    T_MISS,
    T_MOE,
    T_PASS,
    T_PER_SEQ,
    T_PER_TOK,
    T_T0,
    T_TOKOVH,
    T_WDENSE,
    T_WEXP,
)

__all__ = ["Config", "Requests", "Result", "chain_keys", "replay_scenario", "run"]
INF = float("inf")
POLICIES = {"vllm": VLLM, "sglang": SGLANG}
OUT_BASE, OUT_STRIDE = 1_000_000, 10_007  # output token ids of the oracle contract


@dataclass(frozen=True)
class Config:
    """One deployment's engine: policy, pool, step-time constants and tier links.

    Step-time fields as steptime.py (seconds, bytes, bytes/s); `base_s`, `per_token_s`,
    `per_seq_s` are the engine's own overheads per step, per scheduled token and per
    scheduled request. Link fields as sim.Engine. `tier_write`: write-through of each
    prefill's new KV to the request's tier over the load links.
    """

    policy: str = "vllm"
    replicas: int = 1
    block_tokens: int = 16
    engine_block_tokens: int = 0  # the engine's own block (tier loads); 0: block_tokens
    blocks: int = 1 << 20  # per replica
    max_num_seqs: int = 1024
    max_batched_tokens: int = 8192
    long_prefill_threshold: int = 0
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    conservativeness: float = 1.0
    prefix_caching: bool = True
    reserve_full_isl: bool = True  # vLLM --scheduler-reserve-full-isl (0.33 default)
    # the batch of a step built while the step before runs (vLLM --async-scheduling,
    # SGLang's overlap scheduler; loop.py): off here, on per engine in simmodel.config_for
    async_schedule: bool = False
    # vLLM 0.33's deferred block frees (`defer_block_free`: async scheduling with a KV
    # connector that loads, the OffloadingConnector's kv_both): a request that step k
    # scheduled is no preemption victim while step k+1 is built (loop.py). (That a
    # request finished in step k frees its blocks and seat once step k+1 is built is
    # every async vLLM's, with or without it.) vLLM policy with async_schedule only; off
    # here, on with a tier in simmodel.config_for
    defer_block_free: bool = False
    lin_s_per_token: float = 0.0
    attn_s_per_unit: float = 0.0
    dense_weight_bytes: float = 0.0
    expert_weight_bytes: float = 0.0
    expert_miss: float = 0.0
    hbm_bandwidth: float = INF
    kv_bytes_per_token: float = 0.0
    fixed_s: float = 0.0
    per_prompt_token_s: float = 0.0
    pass_fixed_s: float = 0.0
    decode_fixed_s: float = 0.0
    # the MoE kernels' fixed time of a pass (routing, block alignment, the expert GEMMs'
    # launches and tails: the intercept of fused-MoE kernel time against expert bytes)
    moe_fixed_s: float = 0.0
    # the tensor-parallel all-reduces of a pass: seconds per pass (their latency) and per
    # token of the pass (the activations over the link); 0 at TP 1
    comm_fixed_s: float = 0.0
    comm_per_token_s: float = 0.0
    # the layer floor (pass_fixed_s, decode_fixed_s) as the pass's minimum ("max") instead
    # of an overhead on top of its roofline ("add")
    floor_rule: str = "add"
    base_s: float = 0.0
    per_token_s: float = 0.0
    per_seq_s: float = 0.0
    layers: int = 1
    gpus_per_switch: int = 1
    dram_bandwidth: float = 1.0
    switch_bandwidth: float = INF
    dram_latency_s: float = 0.0
    xmem_bandwidth: float = 1.0
    node_bandwidth: float = INF
    xmem_latency_s: float = 0.0
    sm_interference: float = 0.0
    tier_write: bool = False
    # SGLang HiCache with a tier at L3 (a HiCacheStorage backend; prefetch.py): the tier
    # index (0 host DRAM, 1 X-Mem) whose prefixes are prefetched L3 -> host while the
    # request waits and loaded host -> GPU with its batch, -1 none (the tier is the host
    # pool, or X-Mem on the fork's direct path); SGLang's --hicache-storage-prefetch-policy
    # and its storage_backend_extra_config defaults
    l3_tier: int = -1
    prefetch_policy: str = DEFAULT_POLICY
    prefetch_threshold: int = PREFETCH_THRESHOLD
    prefetch_timeout_base_s: float = TIMEOUT_BASE_S
    prefetch_timeout_per_ki_token_s: float = TIMEOUT_PER_KI_TOKEN_S

    def replace(self, **kw: Any) -> Config:
        return replace(self, **kw)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        from xmemplan.errors import UsageError

        if self.policy not in POLICIES:
            raise UsageError(f"engine: unknown policy '{self.policy}'", "use vllm or sglang")
        pp = np.zeros(N_P, np.int64)
        pp[P_POLICY] = POLICIES[self.policy]
        pp[P_BS] = self.block_tokens
        pp[P_MAXSEQ] = self.max_num_seqs
        pp[P_BUDGET] = self.max_batched_tokens
        pp[P_THRESH] = self.long_prefill_threshold
        pp[P_HOLD_VICTIMS] = int(self.defer_block_free)
        pp[P_CHUNK] = self.chunked_prefill_size
        pp[P_CACHING] = int(self.prefix_caching)
        pp[P_MAXPREFILL] = self.max_prefill_tokens
        pp[P_EBS] = self.engine_block_tokens or self.block_tokens
        pp[P_FULLISL] = int(self.reserve_full_isl)
        tp = np.zeros(N_T)
        tp[T_LIN] = self.lin_s_per_token
        tp[T_ATTN] = self.attn_s_per_unit
        tp[T_WDENSE] = self.dense_weight_bytes
        tp[T_WEXP] = self.expert_weight_bytes
        tp[T_MISS] = self.expert_miss
        tp[T_HBM] = self.hbm_bandwidth
        tp[T_KVB] = self.kv_bytes_per_token
        tp[T_T0] = self.fixed_s
        tp[T_TOKOVH] = self.per_prompt_token_s
        tp[T_PASS] = self.pass_fixed_s
        tp[T_DEC] = self.decode_fixed_s
        tp[T_MOE] = self.moe_fixed_s
        tp[T_COMM0] = self.comm_fixed_s
        tp[T_COMM1] = self.comm_per_token_s
        if self.floor_rule not in ("add", "max"):
            raise UsageError(f"engine: unknown floor rule '{self.floor_rule}'", "use add or max")
        tp[T_FLOOR_MAX] = 1.0 if self.floor_rule == "max" else 0.0
        tp[T_BASE] = self.base_s
        tp[T_PER_TOK] = self.per_token_s
        tp[T_PER_SEQ] = self.per_seq_s
        lp = np.zeros(N_L)
        lp[L_DRAM_CAP] = self.dram_bandwidth
        lp[L_SWITCH_BW] = self.switch_bandwidth
        lp[L_DRAM_LAT] = self.dram_latency_s
        lp[L_XMEM_CAP] = self.xmem_bandwidth
        lp[L_NODE_BW] = self.node_bandwidth
        lp[L_XMEM_LAT] = self.xmem_latency_s
        lp[L_INTERF] = self.sm_interference
        lp[L_WRITE] = 1.0 if self.tier_write else 0.0
        if self.prefetch_policy not in POLICY_NAMES:
            raise UsageError(f"engine: unknown prefetch policy '{self.prefetch_policy}'",
                             "use " + ", ".join(POLICY_NAMES))
        lp[L_PF_POLICY] = POLICY_NAMES.index(self.prefetch_policy)
        lp[L_PF_THRESH] = self.prefetch_threshold
        lp[L_PF_BASE] = self.prefetch_timeout_base_s
        lp[L_PF_PERKI] = self.prefetch_timeout_per_ki_token_s
        ep = np.zeros(N_E, np.int64)
        ep[E_REPLICAS] = self.replicas
        ep[E_PER_SWITCH] = self.gpus_per_switch
        ep[E_LAYERS] = self.layers
        ep[E_NB] = self.blocks
        ep[E_ASYNC] = int(self.async_schedule)
        ep[E_L3] = self.l3_tier if self.policy == "sglang" else -1
        if self.replicas < 1 or self.block_tokens < 1 or self.blocks < 1 \
                or self.max_num_seqs < 1 or self.max_batched_tokens < 1 or self.layers < 1 \
                or self.gpus_per_switch < 1:
            raise UsageError("engine: replicas, block size, blocks, max_num_seqs, token "
                             "budget, layers and switch size must be at least 1")
        if np.any(tp < 0) or np.isnan(tp).any() or np.any(lp < 0) or np.isnan(lp).any():
            raise UsageError("engine: a negative or NaN parameter")
        for name in ("hbm_bandwidth", "dram_bandwidth", "switch_bandwidth",
                     "xmem_bandwidth", "node_bandwidth"):
            if not getattr(self, name) > 0:
                raise UsageError(f"engine: {name} must be positive")
        return pp, tp, lp, ep


@dataclass
class Requests:
    """Per-request arrays. `keys`/`koff`/`kn`: the hash of every full block of request i's
    tokens (prompt then output) is keys[koff[i] : koff[i] + kn[i]] (equal keys = equal
    tokens up to that block: the same prefix). `tier_tokens`: the prompt prefix the
    request's tier holds (loaded when HBM lacks it); `tier`: 0 host DRAM, 1 X-Mem, -1 none.
    prev/think/route as sim.Traffic."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    keys: np.ndarray
    koff: np.ndarray
    kn: np.ndarray
    tier_tokens: np.ndarray | None = None
    tier: np.ndarray | None = None
    prev: np.ndarray | None = None
    think: np.ndarray | None = None
    route: np.ndarray | None = None
    hbm_fixed: np.ndarray | None = None  # tokens counted in HBM past the pool's own hit
    # 0: no later request can ask for this one's blocks (their keys are its own), so they
    # are not entered in the pool's map: the same run, less work
    cacheable: np.ndarray | None = None
    ids: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.arrival)


class Result:
    """Per-request times (s), hits, preemptions; per-replica busy seconds; run totals."""

    def __init__(self, req: Requests, cfg: Config, out: tuple[Any, ...]) -> None:
        ro, self.replica, hits, self.tier_loaded, self.preemptions, self.busy, \
            self.stats = out[:7]
        # tokens hit in HBM / loaded from the tier at the admission that gave the first
        # token; tier_loaded: every load, reloads after preemption included
        self.hbm_hit, self.tier_hit = hits[:, 0], hits[:, 1]
        # vLLM: prefix-cache lookups of the request before it first ran (one per step that
        # reached it while it waited) and their hit tokens, as the Netpreme fork's
        # vllm:prefix_cache_queries / hits count them (policy._count_lookup)
        self.lookups, self.lookup_hit = hits[:, 2], hits[:, 3]
        self.arrival = ro[:, O_ARR]
        self.ready = ro[:, O_READY]
        self.start = ro[:, O_START]
        self.first = ro[:, O_FIRST]
        self.done = ro[:, O_DONE]
        self.itl_max = ro[:, O_ITL_MAX]
        self.requests = req
        self.config = cfg
        # SGLang HiCache L3 (Config.l3_tier): per request the tokens its prefetch asked
        # L3 for and those it had when it ended (the rest computed); 0 without one
        pf = out[9]
        n = len(req)
        # (and the timeout's deadline, inf where no timer started)
        if pf.shape[0] == n and n > 0:
            ended = pf[:, PF_STATE] == PF_ENDED
            self.prefetch_tokens = np.where(ended, pf[:, PF_TOKENS], 0.0).astype(np.int64)
            self.prefetched = np.where(ended, pf[:, PF_DONE], 0.0).astype(np.int64)
            self.prefetch_deadline = np.where(ended, pf[:, PF_DEADLINE], np.inf)
        else:
            self.prefetch_tokens = np.zeros(n, np.int64)
            self.prefetched = np.zeros(n, np.int64)
            self.prefetch_deadline = np.full(n, np.inf)

    @property
    def ttft(self) -> np.ndarray:
        return self.first - self.arrival

    @property
    def tpot(self) -> np.ndarray:
        """Mean time per output token after the first (NaN for one-token requests)."""
        o = self.requests.output.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(o > 1, (self.done - self.first) / (o - 1), np.nan)

    @property
    def span(self) -> float:
        return float(self.stats[S_SPAN_END] - self.stats[S_SPAN_START])

    @property
    def steps(self) -> int:
        return int(self.stats[S_STEPS])

    def kv_usage(self) -> float:
        """Time-average share of the replicas' blocks held by requests (vLLM's KV cache
        usage: cached free blocks count as free)."""
        s = self.span
        tot = self.config.blocks * self.config.replicas
        return float(self.stats[S_KV_AREA] / (s * tot)) if s > 0 and tot > 0 else 0.0

    def hbm_share_of_hits(self) -> float:
        h, t = float(self.stats[S_HBM_HIT]), float(self.stats[S_TIER_HIT])
        return h / (h + t) if h + t > 0 else 0.0

    def preemptions_per_request(self) -> float:
        n = len(self.arrival)
        return float(self.stats[S_PREEMPT]) / n if n else 0.0

    def utilisation(self) -> float:
        s = self.span
        return float(self.busy.sum() / (s * len(self.busy))) if s > 0 else 0.0

    def write_bytes(self) -> float:
        return float(self.stats[S_WRITE_BYTES])

    def decode_steps(self) -> int:
        return int(self.stats[S_DECODE_STEPS])


def _i64(a: np.ndarray | None, n: int, fill: int) -> np.ndarray:
    return (np.full(n, fill, np.int64) if a is None
            else np.ascontiguousarray(np.asarray(a), dtype=np.int64))


def _f64(a: np.ndarray | None, n: int) -> np.ndarray:
    return np.zeros(n) if a is None else np.ascontiguousarray(np.asarray(a), dtype=np.float64)


def _check(req: Requests, cfg: Config) -> None:
    from xmemplan.errors import UsageError

    n = len(req)
    if n and (np.asarray(req.output).min() < 1 or np.asarray(req.prompt).min() < 1):
        raise UsageError("engine: every request has a prompt and at least one output token")
    if n and (not np.all(np.isfinite(req.arrival)) or np.asarray(req.arrival).min() < 0):
        raise UsageError("engine: arrival times must be finite and non-negative")
    if req.prev is not None and n:
        idx = np.arange(n)
        has = np.asarray(req.prev) >= 0
        if np.any(np.asarray(req.prev)[has] >= idx[has]):
            raise UsageError("engine: 'prev' must name an earlier request or be -1")


def run(req: Requests, cfg: Config, *, trace_rows: int = 0, step_rows: int = 0
        ) -> tuple[Result, np.ndarray, np.ndarray, int, int]:
    """Simulate; with trace_rows/step_rows > 0 also record per-step decisions (replay)."""
    pp, tp, lp, ep = cfg.arrays()
    _check(req, cfg)
    n = len(req)
    prompt = _i64(req.prompt, n, 0)
    output = _i64(req.output, n, 1)
    tier = _i64(req.tier, n, -1)
    tier_tok = np.where(tier >= 0, _i64(req.tier_tokens, n, 0), 0).astype(np.int64)
    trace = np.zeros((max(1, trace_rows), 3), np.int64)
    steps = np.zeros((max(1, step_rows), 4))
    sgp = np.array([*radix_sizes(cfg, n, len(req.keys)), 0], np.int64)
    while True:
        out = _run_once(req, cfg, n, prompt, output, tier_tok, tier, trace, steps, sgp,
                        pp, tp, lp, ep)
        if sgp[2] == 0:
            break
        sgp[0] *= 4
        sgp[1] *= 2
        sgp[2] = 0
    res = Result(req, cfg, out)
    return res, trace, steps, int(out[7]), int(out[8])


def radix_sizes(cfg: Config, n: int, nkeys: int) -> tuple[int, int]:
    """SGLang's radix tables (radix.py) to start a run with: node rows (a request's walks
    and checkpoints make a few; evicted nodes are reclaimed) and heap entries per replica
    (an evictable leaf holds a page at least of one request's keys: at most the replica's
    blocks, and here at most 4x an even share of the run's keys, so that 1,024 replicas do
    not reserve 1,024 whole-pool heaps). A run that finds them too small runs again with 4x
    the nodes and 2x the heap (`run`)."""
    share = max(1, 4 * nkeys // max(cfg.replicas, 1))
    return cfg.replicas + n + 1024, 2 * min(cfg.blocks, share) + 64


def _run_once(req: Requests, cfg: Config, n: int, prompt: np.ndarray, output: np.ndarray,
              tier_tok: np.ndarray, tier: np.ndarray, trace: np.ndarray, steps: np.ndarray,
              sgp: np.ndarray, pp: np.ndarray, tp: np.ndarray, lp: np.ndarray,
              ep: np.ndarray) -> tuple[Any, ...]:
    return run_kernel(_f64(req.arrival, n), _i64(req.prev, n, -1), _f64(req.think, n), prompt,
                     output, tier_tok, tier, _i64(req.route, n, -1), _i64(req.koff, n, 0),
                     _i64(req.kn, n, 0), _i64(req.keys, 0, 0) if len(req.keys) else
                     np.zeros(1, np.int64), _i64(req.hbm_fixed, n, 0),
                     _i64(req.cacheable, n, 1), pp, tp, lp, ep,
                     float(cfg.conservativeness),
                     trace, steps, sgp)


def chain_keys(tokens: list[list[int]], block: int) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray]:
    """(keys, koff, kn) of requests given as token lists: the hash of each full block and
    of every block before it (vLLM's chained block hash; equal prefixes, equal keys)."""
    keys: list[int] = []
    koff = np.zeros(len(tokens), np.int64)
    kn = np.zeros(len(tokens), np.int64)
    for i, t in enumerate(tokens):
        koff[i] = len(keys)
        h = 0
        for j in range(len(t) // block):
            h = hash((h, tuple(t[j * block:(j + 1) * block]))) & ((1 << 62) - 1)
            keys.append(h)
        kn[i] = len(t) // block
    return np.asarray(keys, np.int64), koff, kn


def defer_block_free(scenario: dict[str, Any]) -> bool:
    """A scenario's `defer_block_free`; absent: as vLLM 0.33 sets it (`Scheduler.__init__`:
    more than one batch in flight and a KV connector that loads), i.e. vLLM with
    `async_scheduling` and a tier (`tier_link`: the oracle's kv_both connector)."""
    if "defer_block_free" in scenario:
        return bool(scenario["defer_block_free"])
    return (scenario.get("engine") == "vllm" and bool(scenario.get("async_scheduling"))
            and "tier_link" in scenario)


def replay_scenario(scenario: dict[str, Any],
                    lookup_totals: dict[str, tuple[int, int]] | None = None
                    ) -> list[dict[str, Any]]:
    """Step one replica through an oracle scenario (docs/oracles.md section B): the same
    arrivals and linear step times the engines' own schedulers are driven with; per step
    the scheduled tokens per request, preemptions, first-admission hits, finished
    requests and blocks held; vLLM: `lookups`, the hit tokens of each prefix-cache lookup
    the step made (policy._count_lookup). With a tier (a request's `tier_tokens`, the
    prefix host DRAM holds; `tier_link`: kv_bytes_per_token, bandwidth, latency_s), vLLM
    records also carry `loads`, {id: [HBM hit, tokens loaded]} of the tier loads the step
    started, and `landed`, {id: time} of the loads that landed since the record before; a
    schedule that only starts loads is a record of its own (nothing scheduled).
    `lookup_totals`, if given, gets {id: (lookups, hit tokens)} of the run, as
    `Result.lookups` / `lookup_hit` count them: the records' lookups and those of the
    schedules that scheduled nothing and make no record."""
    from xmemplan.errors import UsageError

    try:
        eng = str(scenario["engine"])
        bs = int(scenario["block_size"])
        reqs = list(scenario["requests"])
        st = scenario.get("step_time", {})
        ids = [str(r["id"]) for r in reqs]
        prompts = [list(map(int, r["tokens"])) for r in reqs]
        outs = [int(r["max_tokens"]) for r in reqs]
        arrival = np.array([float(r["arrival_s"]) for r in reqs])
        tier_tok = np.array([int(r.get("tier_tokens", 0)) for r in reqs], np.int64)
        link = scenario.get("tier_link", {})
        kvb = float(link.get("kv_bytes_per_token", 1.0))
        link_bw = float(link.get("bandwidth", 1.0))
        link_lat = float(link.get("latency_s", 0.0))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"scenario: missing or bad field ({e})") from None
    full = [p + [OUT_BASE + i * OUT_STRIDE + k for k in range(o)]
            for i, (p, o) in enumerate(zip(prompts, outs, strict=True))]
    keys, koff, kn = chain_keys(full, bs)
    sg = eng == "sglang"
    cfg = Config(
        policy=eng, block_tokens=bs,
        blocks=int(scenario["num_gpu_blocks"]) - (0 if sg else 1),  # vLLM's null block
        max_num_seqs=int(scenario.get("max_num_seqs", 256)),
        max_batched_tokens=int(scenario.get("max_num_batched_tokens", 8192)),
        long_prefill_threshold=int(scenario.get("long_prefill_token_threshold", 0)),
        chunked_prefill_size=int(scenario.get("chunked_prefill_size", 8192)),
        conservativeness=float(scenario.get("schedule_conservativeness", 1.0)),
        prefix_caching=bool(scenario.get("enable_prefix_caching", True)),
        reserve_full_isl=bool(scenario.get("scheduler_reserve_full_isl", True)),
        async_schedule=bool(scenario.get("async_scheduling", False)),
        defer_block_free=defer_block_free(scenario),
        base_s=float(st.get("base_s", 0.0)), per_token_s=float(st.get("per_token_s", 0.0)),
        per_seq_s=float(st.get("per_seq_s", 0.0)),
        kv_bytes_per_token=kvb, dram_bandwidth=link_bw, dram_latency_s=link_lat)
    r = Requests(arrival=arrival, prompt=np.array([len(p) for p in prompts]),
                 output=np.array(outs), keys=keys, koff=koff, kn=kn, ids=ids,
                 tier_tokens=tier_tok, tier=np.where(tier_tok > 0, 0, -1))
    if sorted(arrival.tolist()) != arrival.tolist():
        raise UsageError("scenario: requests must be listed by arrival_s")
    rows, srows = 4096, 1024
    while True:
        res, trace, steps, tn, sn = run(r, cfg, trace_rows=rows, step_rows=srows)
        if tn <= rows and sn <= srows:
            break
        rows, srows = max(rows, 2 * tn), max(srows, 2 * sn)
    if lookup_totals is not None:
        lookup_totals.update({x: (int(n), int(h)) for x, n, h in
                              zip(ids, res.lookups, res.lookup_hit, strict=True)})
    del res
    out: list[dict[str, Any]] = []
    prev_b = 0
    for k in range(sn):
        t, a, b, held = steps[k]
        rec: dict[str, Any] = {"step": k, "t_s": float(t), "scheduled": {}, "preempted": [],
                               "new_hits": {}, "finished": [], "kv_blocks_used": int(held),
                               "lookups": {}, "loads": {}, "landed": {}, "aborted": []}
        for kind, i, v in trace[prev_b:int(a)]:  # between records: only loads landing
            if kind == 5:
                rec["landed"][ids[i]] = float(np.array([v], np.int64).view(np.float64)[0])
        prev_b = max(prev_b, int(b))
        for kind, i, v in trace[int(a):int(b)]:
            if kind == 5:
                rec["landed"][ids[i]] = float(np.array([v], np.int64).view(np.float64)[0])
            elif kind == 6:
                rec["loads"][ids[i]] = [0, int(v)]
            elif kind == 7:
                rec["loads"][ids[i]][0] = int(v)
            elif kind == 0:
                rec["scheduled"][ids[i]] = int(v)
            elif kind == 1:
                rec["preempted"].append(ids[i])
            elif kind == 2:
                rec["new_hits"][ids[i]] = int(v)
            elif kind == 4:
                rec["lookups"][ids[i]] = int(v)
            elif kind == 3:
                rec["finished"].append(ids[i])
            elif kind == 8:
                rec["aborted"].append(ids[i])
        out.append(rec)
    return out
