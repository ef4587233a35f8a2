"""Size a deployment from simulated traffic: the cheapest GPUs, shape and X-Mem nodes that
meet a TTFT SLO.

For each replica shape (TP 1, 2, 4, 8 that fit, unless --tp/--ep fix one) and each option,
HBM only, + host DRAM, + X-Mem with n nodes, the planner replays the workload's traffic
through the prefill-serving simulator (`xmemplan.sizing.sim`) and finds the fewest GPUs
whose TTFT percentile (warm requests by default) meets the SLO at the offered load; the
answer is the cheapest compliant combination (`Prices`, else GPUs then nodes).

- Replications: every configuration is simulated over REPS_MIN or more replications, each
  with its own draws (arrivals, which requests keep their hits) taken from (--seed, k):
  replication k is the same traffic for every option, shape and GPU count (common random
  numbers). The percentile's 95 % confidence interval is Student's t over the
  replications' percentiles; while it straddles the SLO, replications are added (up to
  REPS_MAX, within EXTEND_RUNS extra runs per plan). A count complies when the
  interval's upper end is within the SLO; "marginal" when it straddles it.
- The GPU search cannot miss: from a lower bound that capacity gives (below it the
  requests' compute alone is more than the GPUs have: `gpu_lower_bound`), every count is
  tried in turn, up to SCAN_MAX counts; past them, doubling then bisection (which assumes
  compliance grows with the count; the option's `search` says so when it was used).
- Hit tokens per tier: each request keeps its hits with probability h(capacity) /
  h(unlimited) (else it is cold), with h the profile's LRU curve read at the option's
  capacity scaled to the trace (capacity / load factor: the deployment's working set
  grows with its load); of the hits, the share h(HBM) / h(total) stays in HBM and the
  rest is loaded from the tier. Without a curve,
  `Workload.hit_at_capacity` says what is assumed.
- Per-replica caches instead (`xmemplan.sizing.routing`), when the workload says which
  requests share which prefix (a trace's sessions in their order, or prefix groups): the
  router places each request, and its hits are what its replica's HBM and the tiers it
  shares hold (tier scope: catalog `share_scope`, `--tier-scope`).
- X-Mem nodes: for bandwidth, the fewest nodes at which the GPU count is the one with
  unlimited node bandwidth; for capacity, the deployment's working set over the node
  capacity; recommended = the larger.
- Binding constraint: for the GPU count, compute when instant loads would need as many
  GPUs, else load bandwidth; for the node count, capacity or bandwidth, whichever set it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from xmemplan import units
from xmemplan.catalog.specs import GpuSpec, ModelSpec, TierSpec
from xmemplan.errors import UsageError
from xmemplan.sizing import cachemodel as CM
from xmemplan.sizing import model as M
from xmemplan.sizing import routing as RT
from xmemplan.sizing.engine import Result as EngineResult
from xmemplan.sizing.engine import run as run_engine
from xmemplan.sizing.sim import Traffic
from xmemplan.sizing.simmodel import (
    HBM_USABLE,
    PREFETCH_DEFAULT,
    XMEM_PATH_STORAGE,
    Setup,
    config_for,
    engine_for,
    kv_pool_tokens,
    requests_for,
    single_request_ttft,
)
from xmemplan.sizing.workload import (
    REACHED,
    Arrivals,
    Copies,
    Workload,
    arrivals,
    session_copies,
)
from xmemplan.threads import map_ordered, workers

TABLE_SLOS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
LOAD_SCALES = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
OPTIONS = ("hbm-only", "host-dram", "xmem")
WARMUP_SHARE = 0.1  # the first tenth of requests (by arrival) is left out of percentiles
MIN_REQUESTS_PER_REPLICA = 20  # fewer: a run too short for a steady-state percentile
REPS_MIN = 2  # replications of every simulated configuration
REPS_MAX = 10  # at most, while the interval straddles the SLO
FAIL_SCREEN = 2.0  # a first replication this far over the SLO fails alone
ALONE_MARGIN = 1.25  # no count is searched when requests alone are this far over the SLO
EXTEND_RUNS = 60  # replications past REPS_MIN per plan (about 0.5 s of simulation)
SCAN_MAX = 16  # GPU counts tried one by one from the lower bound before doubling
# Student's t, 97.5th percentile, by degrees of freedom (1..30); 1.96 past 30
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201,
         2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074,
         2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    return math.inf if df < 1 else _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Prices:
    """What the answer costs: per GPU and per X-Mem node (and, optionally, per GPU's host
    DRAM tier), all per hour or all per unit (`basis`). `gpu_by_name` prices GPU types
    one by one (--gpu a,b compared in one run)."""

    gpu: float | None
    xmem_node: float
    host_dram: float = 0.0  # per GPU using the host-DRAM tier (0: already in the server)
    basis: str = "hour"  # hour | unit
    gpu_by_name: tuple[tuple[str, float], ...] = ()
    source: str = "flag (--cost)"

    def gpu_price(self, name: str) -> float:
        for n, v in self.gpu_by_name:
            if n == name:
                return v
        if self.gpu is None:
            raise UsageError(f"--cost gives no price for GPU '{name}'",
                             f"add gpu=PRICE or {name}=PRICE to --cost")
        return self.gpu

    def money(self, x: float) -> str:
        per = "/h" if self.basis == "hour" else ""
        return f"${x:,.2f}{per}" if x < 1000 else f"${x:,.0f}{per}"


@dataclass(frozen=True)
class SizeRequest:
    slo_s: float
    model: ModelSpec
    gpu: GpuSpec
    hbm: TierSpec
    host: TierSpec
    xmem: TierSpec
    workload: Workload
    load: Arrivals
    engine: str = "sglang"
    overlap: str = "layer"
    transfer: M.Transfer = M.SGLANG_HICACHE
    calibration: M.Calibration = M.DEFAULT_CALIBRATION
    shape: M.Shape = M.ONE_GPU
    slo_percentile: float = 99.0
    slo_on: str = "warm"  # warm | all
    output_tokens: int = 100
    requests: int = 4000  # per replication
    seed: int = 0
    working_set_tokens: float | None = None
    max_gpus: int = 1024
    max_nodes: int = 64
    mixed: bool = False
    auto_shape: bool = True  # search the replica shapes (TP 1..8) for the cheapest
    assumptions: tuple[tuple[str, str], ...] = ()  # (statement, source)
    attention_dtype: str = "bf16"  # bf16 or fp8 (FP8 attention: the GPU's FP8 peak)
    dp_attention: bool = False  # --dp-attention: kept by the wider shapes plan() tries
    mem_fraction: float = HBM_USABLE  # --mem-fraction: HBM share for weights + KV
    router: str = RT.DEFAULT_ROUTER  # --router (xmemplan.sizing.routing)
    prefix_groups: int = 0  # --prefix-groups: each hit prefix is one of N shared prefixes
    router_params: RT.RouterParams = RT.RouterParams()  # the routers' published defaults
    prices: Prices | None = None
    inputs: tuple[str, ...] = ()  # files the request was built from (provenance)
    xmem_path: str = "direct"  # --xmem-path (simmodel.Setup.xmem_path)
    prefetch_policy: str = PREFETCH_DEFAULT  # --hicache-storage-prefetch-policy
    reps_min: int = REPS_MIN
    reps_max: int = REPS_MAX
    extend_runs: int = EXTEND_RUNS

    @property
    def setup(self) -> Setup:
        return Setup(model=self.model, gpu=self.gpu, host=self.host, xmem=self.xmem,
                     calibration=self.calibration, transfer=self.transfer,
                     overlap=self.overlap, shape=self.shape, mixed=self.mixed,
                     attention_dtype=self.attention_dtype, mem_fraction=self.mem_fraction,
                     xmem_path=self.xmem_path, prefetch_policy=self.prefetch_policy)


def l3_recomputed(r: EngineResult) -> float | None:
    """The share of L3-prefetched tokens computed instead (Point.l3_recomputed); None
    without a tier at L3."""
    tier = r.requests.tier
    if r.config.l3_tier < 0 or r.config.policy != "sglang" or tier is None \
            or not bool((np.asarray(tier) == r.config.l3_tier).any()):
        return None
    asked = float(r.prefetch_tokens.sum())
    return 1.0 - float(r.prefetched.sum()) / asked if asked > 0 else 0.0


def _num(x: float | None) -> str:
    x = x or 0.0
    return f"{x:,.0f}" if x >= 100 or float(x).is_integer() else f"{x:,.3g}"


def describe_load(a: Arrivals) -> str:
    """The offered load in words, every number whole (`1,000,000 requests/s`)."""
    if a.kind == "poisson":
        return f"Poisson arrivals at {_num(a.rate_rps)} requests/s"
    if a.kind == "users":
        return f"{a.users or 0:,} closed-loop users, {_num(a.think_s)} s mean think time"
    if a.trace_rate_rps and a.rate_rps == a.trace_rate_rps:
        return f"the trace's own timestamps ({_num(a.rate_rps)} requests/s)"
    how = "compressed" if (a.rate_rps or 0) > (a.trace_rate_rps or 0) else "stretched"
    return f"the trace's sessions {how} to {_num(a.rate_rps)} requests/s"


@dataclass
class Point:
    """One simulated configuration, over its replications."""

    option: str
    gpus: int
    nodes: int
    hit_ratio: float
    hbm_share: float
    ttft_ms: dict[str, dict[str, float]]  # warm / cold / all -> p50, p90, p99 (pooled)
    slo_value_ms: float  # mean over replications of each one's SLO percentile
    utilisation: float
    queue_ms_mean: float
    meets_slo: bool  # the interval's upper end within the SLO, not overloaded
    # open-loop load above what these GPUs serve: the queue grows for as long as the run
    # lasts, so the percentiles only measure the run's length (never meets an SLO)
    overloaded: bool = False
    capacity_rps: float | None = None  # requests/s these GPUs serve at this run's batching
    requests_per_replica: float = 0.0
    # time-average share of the replicas' KV blocks held by running requests (vLLM's
    # KV cache usage: cached free blocks count as free)
    kv_full: float = 0.0
    preemptions_per_request: float = 0.0  # preemptions (vLLM) or retractions (SGLang)
    throughput_rps: float = 0.0  # requests finished over the run's span
    throughput_tok_s: float = 0.0  # prompt + output tokens over the run's span
    # --xmem-path hicache-storage, the X-Mem option: the share of the tokens its L3
    # prefetches asked for that had not arrived when the request was admitted (computed
    # instead: --hicache-storage-prefetch-policy); None otherwise
    l3_recomputed: float | None = None
    ci_ms: tuple[float, float] = (0.0, 0.0)  # 95 % interval of slo_value_ms
    replications: int = 1
    offered_rps: float | None = None  # the load named (rate x scale)
    achieved_rps: float = 0.0  # the run's own arrivals per second (sessions wait)
    slo_coverage: float = 1.0  # share of the measured requests the SLO holds
    # per-replica caches (routing.py): shares of prompt tokens from the serving replica's
    # HBM, from a shared tier, recomputed; and the routing's balance per replica
    split: tuple[float, float, float] | None = None
    balance: dict[str, Any] | None = None

    def verdict(self, slo_ms: float) -> str:
        if self.overloaded or self.ci_ms[0] > slo_ms:
            return "fails"
        return "meets" if self.ci_ms[1] <= slo_ms else "marginal"


@dataclass
class OptionResult:
    option: str
    gpus: int | None  # fewest GPUs meeting the SLO (None: none up to max_gpus)
    nodes: int | None
    point: Point | None  # the simulation at that count
    goodput_rps: float | None = None  # largest load within the SLO at that GPU count
    note: str = ""
    # goodput_rps is the search's ceiling (GOODPUT_CEILING x the load), still within the
    # SLO: a lower bound (e.g. trace sessions that wait for their replies never overload)
    goodput_capped: bool = False
    shape: str = "tp1"
    cost: float | None = None  # with --cost: what it costs (per hour or per unit)
    search: str = ""  # how the GPU count was searched
    marginal: Point | None = None  # a smaller count whose interval straddles the SLO


@dataclass
class SizeResult:
    """Everything `xmemplan size` reports; `to_dict()` is the JSON document."""

    answer: str
    binding: str
    cheapest: str
    workload: str
    load: str
    model: str
    gpu: str
    engine: str
    overlap: str
    ttft_slo_ms: float
    slo_percentile: float
    slo_on: str
    prompt_tokens_p50: float
    hit_ratio: float
    kv_bytes_per_token: float
    working_set_bytes: float | None
    options: list[OptionResult]
    recommended_nodes: int | None  # what the answer recommends: 0 when X-Mem is not bought
    nodes_for_bandwidth: int | None
    nodes_for_capacity: int
    gpus_host_dram: int | None
    gpus_xmem: int | None
    gpus_saved_by_xmem: int | None
    headroom_ms: float | None
    table: list[dict[str, Any]]
    load_curve: dict[str, Any]
    reasons: list[str]
    assumptions: list[dict[str, str]]
    excluded_over_context: int = 0
    xmem_option_nodes: int | None = None  # the nodes the X-Mem option needs, bought or not
    concurrency: int | None = None
    shape: str = "tp1"
    kv_dtype_bytes: int = 2
    attention_dtype: str = "bf16"
    # every shape searched: {"shape", "options": [{option, gpus, nodes, cost, search}]}
    shapes: list[dict[str, Any]] = field(default_factory=list)
    cost: float | None = None  # the answer's, with --cost
    cost_basis: str | None = None  # hour | unit
    saving: float | None = None  # against the cheapest answer without X-Mem (or with it)
    offered_rps: float | None = None
    achieved_rps: float | None = None  # the answer's run: its own arrivals per second
    slo_coverage: float | None = None  # share of requests the SLO holds (the answer's run)
    marginal: bool = False  # a cheaper configuration's interval straddles the SLO
    replications: dict[str, int] = field(default_factory=dict)  # min, max, runs
    router: str = RT.DEFAULT_ROUTER  # the router the answer was sized with (routing.py)
    # the same deployment under another router: {"router", "gpus": {option: GPUs}, "nodes"}
    other_router: dict[str, Any] | None = None
    # what `validate --plan` replays: the answer's GPUs, nodes, shape, the GPUs sharing
    # each X-Mem node and the per-GPU load bandwidth the plan assumes at that sharing
    claims: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def option(self, name: str) -> OptionResult:
        return next(o for o in self.options if o.option == name)

    def to_dict(self) -> dict[str, Any]:
        from xmemplan.plan import header

        d = {**header(), **{k: v for k, v in self.__dict__.items()
                             if k not in ("options", "extra")}}
        d["options"] = [
            {"option": o.option, "gpus": o.gpus, "nodes": o.nodes, "shape": o.shape,
             "cost": o.cost, "search": o.search,
             "goodput_rps": o.goodput_rps, "goodput_capped": o.goodput_capped,
             "note": o.note,
             "marginal_below": None if o.marginal is None else {
                 "gpus": o.marginal.gpus, "slo_value_ms": o.marginal.slo_value_ms,
                 "ci_ms": list(o.marginal.ci_ms),
                 "replications": o.marginal.replications},
             **({} if o.point is None else {
                 "hit_ratio": o.point.hit_ratio, "hbm_share_of_hits": o.point.hbm_share,
                 "ttft_ms": o.point.ttft_ms, "utilisation": o.point.utilisation,
                 "slo_value_ms": o.point.slo_value_ms, "ci_ms": list(o.point.ci_ms),
                 "replications": o.point.replications,
                 "queue_ms_mean": o.point.queue_ms_mean, "meets_slo": o.point.meets_slo,
                 "overloaded": o.point.overloaded, "capacity_rps": o.point.capacity_rps,
                 "requests_per_replica": o.point.requests_per_replica,
                 "offered_rps": o.point.offered_rps, "achieved_rps": o.point.achieved_rps,
                 "slo_coverage": o.point.slo_coverage,
                 "kv_full": o.point.kv_full,
                 "preemptions_per_request": o.point.preemptions_per_request,
                 "throughput_rps": o.point.throughput_rps,
                 "throughput_tok_s": o.point.throughput_tok_s,
                 **({} if o.point.l3_recomputed is None
                    else {"l3_prefetch_recomputed": o.point.l3_recomputed}),
                 **({} if o.point.split is None else {"hit_split": dict(zip(
                     ("hbm", "tier", "recompute"), o.point.split, strict=True)),
                     "balance": o.point.balance})})}
            for o in self.options]
        d["gpus_per_option"] = {o.option: o.gpus for o in self.options}
        d.update(self.extra.get("json", {}))
        return d


class Budget:
    """Replications past the minimum left to one plan's planners: a count of runs, not
    wall time, so that the same command gives the same answer on a busy machine."""

    def __init__(self, runs: int) -> None:
        self.runs = runs

    def left(self) -> bool:
        return self.runs > 0

    def spend(self) -> None:
        self.runs -= 1


@dataclass
class _Rep:
    """One replication's figures at one configuration."""

    value: float
    overloaded: bool
    cap: float | None
    groups: dict[str, np.ndarray]
    utilisation: float
    queue_ms: float
    kv_full: float
    per_replica: float
    achieved: float
    coverage: float
    split: tuple[float, float, float] | None = None
    balance: dict[str, Any] | None = None
    hit_ratio: float = 0.0  # the run's hit tokens (HBM + tier) over its prompt tokens
    hbm_share: float = 0.0  # the run's HBM hits over all hits (the pool's outcome)
    preemptions: float = 0.0  # per request
    throughput_rps: float = 0.0
    throughput_tok_s: float = 0.0
    l3_recomputed: float | None = None


# --- one simulated configuration, replicated ---------------------------------------------

class Planner:
    """Runs and caches simulations of `req` (option, GPUs, nodes, load scale), each over
    its replications (common random numbers: replication k has the same draws everywhere)."""

    def __init__(self, req: SizeRequest, budget: Budget | None = None) -> None:
        if req.slo_s <= 0:
            raise UsageError("the TTFT SLO must be positive")
        self.req = req
        w = req.workload
        # KV bytes per token: one GPU's share (what HBM holds and each GPU loads), and the
        # whole token's (what a tier stores: every rank backs up its own heads)
        self.kvb = M.kv_bytes_per_token_per_gpu(req.model, req.shape)
        self.kvb_all = float(req.model.kv_bytes_per_token)
        self.trace_order = w.session is not None and w.timestamp_s is not None \
            and req.load.kind == "trace"
        self._draws: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        self._orders: dict[tuple[float, int], np.ndarray] = {}  # _traffic's, per (scale, k)
        self.cache: dict[tuple[str, int, int, float], list[_Rep]] = {}
        self._agg: dict[tuple[str, int, int, float], tuple[int, Point]] = {}
        self._alone: dict[tuple[str, str, bool], float] = {}
        self.sims = 0
        self._lock = threading.Lock()
        self.budget = budget or Budget(req.extend_runs)
        self.searches: dict[tuple[str, int, float, bool], tuple[str, Point | None]] = {}
        # the deployment's load over the trace's: scales the trace's working set and curve
        self.load_factor = 1.0
        if w.rate_rps and req.load.rate_rps:
            self.load_factor = req.load.rate_rps / w.rate_rps
        elif w.live_sessions and req.load.users:
            self.load_factor = req.load.users / w.live_sessions
        self.router = RT.canonical(req.router)
        # per-replica caches when the workload names what requests share: a trace's sessions
        # in their own order, or prefix groups (the profile's, or --prefix-groups)
        self.placed = (self.trace_order or w.group is not None or req.prefix_groups > 0) \
            and req.load.kind != "users"
        self._groups: dict[int, np.ndarray | None] = {}
        self.placements: dict[tuple[str, int, int, float, int], RT.Placement] = {}
        self._hold: tuple[float, float] | None = None
        # the profile's engine cache model (hitrate --cache-model vllm|sglang) replaces
        # the placement's own LRU objects in every replica's and tier's cache
        self.cache_model = CM.for_workload(w.cache_model, w.cache_page_tokens,
                                           w.cache_with_outputs)
        self._followers: dict[bytes, CM.Follower] = {}

    def groups(self, k: int) -> np.ndarray | None:
        """Replication k's prefix group per sampled request (None: no groups)."""
        if k not in self._groups:
            w, req = self.req.workload, self.req
            idx = self.draws(k)[0]
            if w.group is not None:
                self._groups[k] = w.group[idx]
            elif req.prefix_groups > 0:
                rng = np.random.default_rng(np.random.SeedSequence([req.seed, k, 1]))
                self._groups[k] = rng.integers(0, req.prefix_groups, len(idx))
            else:
                self._groups[k] = None
        return self._groups[k]

    def draws(self, k: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Replication k's draws: the requests sampled, each request's keep-its-hits
        draw, and the arrivals' seed; from (--seed, k) alone."""
        if k not in self._draws:
            ss = np.random.SeedSequence([self.req.seed, k])
            rng = np.random.default_rng(ss)
            w, n = self.req.workload, self.req.requests
            if self.trace_order:
                idx = np.arange(len(w.prompt_tokens))
            else:
                idx = rng.integers(0, len(w.prompt_tokens), n) if len(w.prompt_tokens) > 1 \
                    else np.zeros(n, np.int64)
            keep = rng.random(len(idx))
            seed = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
            self._draws[k] = (idx, keep, seed)
        return self._draws[k]

    @property
    def idx(self) -> np.ndarray:
        return self.draws(0)[0]

    # capacities -------------------------------------------------------------------------
    def hbm_tokens(self, gpus: int) -> float:
        r = self.req
        per = kv_pool_tokens(r.setup, r.engine)  # the engine's own pool (simmodel)
        return per * max(1, gpus // r.shape.gpus)  # tokens per replica x replicas

    def tier_tokens(self, option: str, gpus: int, nodes: int) -> float:
        if option == "hbm-only":
            return 0.0
        t = self.req.host if option == "host-dram" else self.req.xmem
        cap = t.capacity_bytes or 0.0
        if t.capacity_scope == "node":
            cap *= nodes
        elif t.capacity_scope == "server":
            cap *= math.ceil(gpus / self.req.gpu.gpus_per_server)
        else:
            cap *= gpus
        return cap / self.kvb_all

    def working_set_tokens(self) -> float | None:
        ws = self.req.working_set_tokens
        if ws is not None:
            return ws
        w = self.req.workload
        return None if w.working_set_tokens is None else w.working_set_tokens * self.load_factor

    def hit_split(self, option: str, gpus: int, nodes: int) -> tuple[float, float]:
        """(hit ratio, share of hits served from HBM) at this option's capacities."""
        if self.placed:
            pl = self.placement(option, gpus, nodes, 1.0)
            hbm, tier, _ = pl.split()
            h = hbm + tier
            return h, (hbm / h if h > 0 else 0.0)
        w = self.req.workload
        ws = self.working_set_tokens()
        f = self.load_factor
        c_hbm = self.hbm_tokens(gpus)
        c_all = c_hbm + self.tier_tokens(option, gpus, nodes)
        h_all = w.hit_at_capacity(c_all / f, None if ws is None else ws / f)
        h_hbm = w.hit_at_capacity(c_hbm / f, None if ws is None else ws / f)
        if not w.capacity_curve and ws is None:
            # nothing known about what HBM keeps: no hit is credited to it, every hit is
            # loaded from the tier (HBM only: every request is cold)
            h_hbm = 0.0
            if option == "hbm-only":
                h_all = 0.0
        share = min(1.0, h_hbm / h_all) if h_all > 0 else 0.0
        return h_all, share

    # traffic ----------------------------------------------------------------------------
    def traffic(self, option: str, gpus: int, nodes: int, scale: float, k: int = 0
                ) -> Traffic:
        return self._traffic(option, gpus, nodes, scale, k)[0]

    def _traffic(self, option: str, gpus: int, nodes: int, scale: float, k: int = 0
                 ) -> tuple[Traffic, np.ndarray]:
        """Replication k's traffic for this option, and which of its requests are warm:
        those that hit at least half their prompt in the workload (an unlimited cache),
        the same requests for every option (an option whose cache loses a hit still
        answers for that request's TTFT)."""
        req, w = self.req, self.req.workload
        idx, keep_draw, seed = self.draws(k)
        n = len(idx)
        order = np.arange(n)
        arr, prev, think, route = arrivals(
            req.load, n, seed, scale=scale,
            session=None if w.session is None else w.session[idx],
            timestamp_s=None if w.timestamp_s is None else w.timestamp_s[idx],
            order=order)
        idx = idx[order]
        self._order_idx = idx  # the samples in arrival order (the engine's prefixes)
        self._orders[(scale, k)] = idx  # the same, per replication (threads read these)
        prompt = w.prompt_tokens[idx]
        warm = np.minimum(prompt, w.hit_tokens[idx]) * 2 >= prompt
        if self.placed:
            pl = self.placement(option, gpus, nodes, scale, k)
            out = (np.full(n, req.output_tokens, np.int64) if w.output_tokens is None
                   else np.maximum(1, w.output_tokens[idx]).astype(np.int64))
            zero = np.zeros(n)
            return Traffic(arr, prompt, hit_hbm=pl.hit_hbm,
                           hit_dram=pl.hit_tier if option == "host-dram" else zero,
                           hit_xmem=pl.hit_tier if option == "xmem" else zero,
                           output=out, prev=prev, think=think, route=pl.replica), warm
        h_all, share = self.hit_split(option, gpus, nodes)
        factor = min(1.0, h_all / w.token_hit_ratio) if w.token_hit_ratio > 0 else 0.0
        # A smaller cache loses whole prefixes, not a slice of every one (an LRU keeps
        # what was reused soon): each request keeps its hits with probability `factor`
        # (the same draw in every run, so options and GPU counts compare like for like).
        keep = keep_draw[order] < factor
        hits = np.minimum(prompt, np.where(keep, w.hit_tokens[idx], 0.0))
        in_hbm = np.floor(hits * share)
        rest = hits - in_hbm
        out = (np.full(n, req.output_tokens, np.int64) if w.output_tokens is None
               else np.maximum(1, w.output_tokens[idx]).astype(np.int64))
        zero = np.zeros(n)
        return Traffic(arr, prompt, hit_hbm=in_hbm,
                       hit_dram=rest if option == "host-dram" else zero,
                       hit_xmem=rest if option == "xmem" else zero,
                       output=out, prev=prev, think=think, route=route), warm

    # per-replica caches -------------------------------------------------------------------
    def stream(self, scale: float, k: int = 0) -> RT.Stream:
        """Replication k's requests in arrival order as the router sees them
        (routing.Stream)."""
        req, w = self.req, self.req.workload
        idx0, _, seed = self.draws(k)
        n = len(idx0)
        order = np.arange(n)
        arr, _, _, _ = arrivals(
            req.load, n, seed, scale=scale,
            session=None if w.session is None else w.session[idx0],
            timestamp_s=None if w.timestamp_s is None else w.timestamp_s[idx0],
            order=order)
        idx = idx0[order]
        groups = self.groups(k)
        prompt = w.prompt_tokens[idx].astype(np.float64)
        out = (np.full(n, float(req.output_tokens)) if w.output_tokens is None
               else np.maximum(1, w.output_tokens[idx]).astype(np.float64))
        if self.trace_order and w.session is not None:
            session = w.session[idx].astype(np.int64)
            hit = np.minimum(prompt, w.hit_tokens[idx])
        else:  # open arrivals drawn from the samples: every request a session of its own
            session = np.arange(n, dtype=np.int64)
            hit = np.zeros(n)
        if groups is not None:
            group = groups[order].astype(np.int64)
            if w.group_tokens is not None:
                gtok = np.minimum(prompt, w.group_tokens[idx])
            else:  # --prefix-groups: a request's hit prefix is its group's
                gtok = np.minimum(prompt, w.hit_tokens[idx])
            group = np.where(gtok > 0, group, -1)
        else:
            group = np.full(n, -1, np.int64)
            gtok = np.zeros(n)
        per_tok, step = self.hold_rates()
        hold = (prompt - np.maximum(hit, gtok)) * per_tok + out * step
        return RT.Stream(arr, hold, prompt, out, hit, group, gtok, session)

    def hold_rates(self) -> tuple[float, float]:
        """(seconds per computed prompt token, seconds per output token) of one request
        alone: how long the router counts a request as unfinished (its load view)."""
        if self._hold is None:
            s = self.req.setup
            p50 = max(1.0, float(np.median(self.req.workload.prompt_tokens)))
            t = single_request_ttft(s, p50, 0.0, "host")
            e = engine_for(s, replicas=1, nodes=1)
            w = ((e.dense_weight_bytes + e.expert_weight_bytes) / e.hbm_bandwidth
                 + M.moe_pass_seconds(s.model, s.calibration))
            # the decode floor on top, or as the step's minimum (floor rule "max")
            step = (max(w, e.decode_fixed_s) if s.calibration.floor_rule == "max"
                    else w + e.decode_fixed_s)
            self._hold = (t / p50, step)
        return self._hold

    def deployment(self, option: str, gpus: int, nodes: int) -> RT.Deployment:
        """Replicas, each one's HBM room, and the shared tier caches of `option`."""
        req = self.req
        R = max(1, gpus // req.shape.gpus)
        room = kv_pool_tokens(req.setup, req.engine)
        if option == "hbm-only":
            return RT.Deployment(R, room, np.full(R, -1, np.int64), np.zeros(0))
        t = req.host if option == "host-dram" else req.xmem
        tier_of = tier_domains(t.share_scope, R, req.shape.gpus, req.gpu.gpus_per_server,
                               t.share_gpus)
        d = int(tier_of.max()) + 1
        total = self.tier_tokens(option, gpus, nodes)
        return RT.Deployment(R, room, tier_of, np.full(d, total / d))

    def placement(self, option: str, gpus: int, nodes: int, scale: float, k: int = 0
                  ) -> RT.Placement:
        key = (option, gpus, nodes if option == "xmem" else 0, scale, k)
        if key not in self.placements:
            stream = self.stream(scale, k)
            dep = self.deployment(option, gpus, nodes)
            pl = RT.place(stream, dep, self.router, self.req.router_params)
            if self.cache_model is not None:  # the profile's vllm / sglang cache decides
                d = CM.digest(stream)
                with self._lock:  # one Follower per digest, also from threads
                    f = self._followers.get(d)  # scales share their pages
                    if f is None:
                        f = self._followers[d] = CM.Follower(self.cache_model, stream)
                pl = f.follow(dep, pl)
            self.placements[key] = pl
        return self.placements[key]

    def run(self, option: str, gpus: int, nodes: int = 0, scale: float = 1.0,
            instant_loads: bool = False, slo_ms: float | None = None,
            extend: bool = True, reps_min: int | None = None) -> Point:
        """The configuration over its replications: REPS_MIN (`reps_min`: fewer for a
        figure that decides nothing, the goodput and the load curve), and more (up to
        REPS_MAX, while the plan's budget lasts) while its interval straddles `slo_ms`
        (the request's SLO by default) when `extend`. A first replication more than
        FAIL_SCREEN x the SLO fails without a second (far from deciding)."""
        key = (option + ("!" if instant_loads else ""), gpus, nodes, scale)
        reps = self.cache.setdefault(key, [])
        req = self.req
        slo = req.slo_s * 1e3 if slo_ms is None else slo_ms
        want = req.reps_min if reps_min is None else max(1, reps_min)

        def rep(k: int) -> _Rep:
            return self._rep(option, gpus, nodes, scale, instant_loads, k)

        def screened(r: _Rep) -> bool:
            return r.value > FAIL_SCREEN * slo

        if not reps:
            # replications 0 and 1 side by side (threads.py); the second is dropped when the
            # first screens the configuration out, so the answer is the sequential one's
            side = want > 1 and workers() > 1  # one thread: no replication ahead
            got = self._reps([0, 1] if side else [0], rep)
            reps.append(got[0])
            if len(got) > 1 and not screened(got[0]):
                reps.append(got[1])
            elif len(got) > 1:
                with self._lock:
                    self.sims -= 1  # computed beside the first, not used
        first = reps[0]
        if screened(first):
            want = 1
        while len(reps) < want:
            reps.extend(self._reps(list(range(len(reps), want)), rep))
        got_agg = self._agg.get(key)
        pt = got_agg[1] if got_agg is not None and got_agg[0] == len(reps) else \
            self._aggregate(option, gpus, nodes, scale, reps)
        self._agg[key] = (len(reps), pt)
        if len(reps) == 1 and screened(first):
            # screened: one replication this far over fails at any spread
            return replace(pt, ci_ms=(FAIL_SCREEN * slo, math.inf))

        def more() -> bool:
            return (extend and len(reps) < req.reps_max and pt.verdict(slo) == "marginal"
                    and self.budget.left() and want > 1)

        ahead: list[_Rep] = []  # computed beside the last one, taken only if still wanted
        while more():
            if not ahead:
                k = len(reps)
                ks = ([k, k + 1] if k + 1 < req.reps_max and self.budget.runs > 1
                      and workers() > 1 else [k])
                ahead = self._reps(ks, rep)
            self.budget.spend()
            reps.append(ahead.pop(0))
            pt = self._aggregate(option, gpus, nodes, scale, reps)
        with self._lock:
            self.sims -= len(ahead)  # computed ahead, not used
        self._agg[key] = (len(reps), pt)
        return pt

    def _reps(self, ks: list[int], rep: Callable[[int], _Rep]) -> list[_Rep]:
        """Replications `ks`, side by side on the machine's cores (threads.py), counted."""
        out = map_ordered(rep, ks)
        with self._lock:  # _load_curve calls run from threads
            self.sims += len(out)
        return out

    def _rep(self, option: str, gpus: int, nodes: int, scale: float, instant_loads: bool,
             k: int) -> _Rep:
        req = self.req
        replicas = max(1, gpus // req.shape.gpus)
        tr, warm_all = self._traffic(option, gpus, nodes, scale, k)
        r = self.simulate(option, gpus, nodes, tr, instant_loads, scale=scale, k=k)
        keep = np.argsort(r.arrival, kind="stable")[int(len(r.arrival) * WARMUP_SHARE):]
        ttft = r.ttft[keep] * 1e3
        warm = warm_all[keep]
        groups = {"warm": ttft[warm], "cold": ttft[~warm], "all": ttft}
        on_warm = req.slo_on == "warm" and bool(warm.any())
        base = groups["warm"] if on_warm else groups["all"]
        over, cap, achieved = self._overload(r, ttft, scale)
        split = bal = None
        if self.placed:  # the hits as the replicas' block pools had them
            got, out = ran_placement(r, tr.output)
            split, bal = got.split(), balance(got, replicas, out)
        prompt = r.requests.prompt.astype(float)
        hits = float((r.hbm_hit + r.tier_hit).sum())
        span = r.span
        tokens = float(prompt.sum()) + float(r.requests.output.sum())
        return _Rep(split=split, balance=bal,
                    value=float(np.percentile(base, req.slo_percentile)), overloaded=over,
                    cap=cap, groups=groups, utilisation=r.utilisation(),
                    queue_ms=float(np.mean(r.start[keep] - r.ready[keep]) * 1e3),
                    kv_full=r.kv_usage(),
                    per_replica=len(r.arrival) / len(r.busy), achieved=achieved,
                    coverage=float(warm.mean()) if on_warm and len(warm) else 1.0,
                    hit_ratio=hits / float(prompt.sum()) if prompt.sum() > 0 else 0.0,
                    hbm_share=r.hbm_share_of_hits(),
                    preemptions=r.preemptions_per_request(),
                    throughput_rps=len(r.arrival) / span if span > 0 else 0.0,
                    throughput_tok_s=tokens / span if span > 0 else 0.0,
                    l3_recomputed=l3_recomputed(r))

    def simulate(self, option: str, gpus: int, nodes: int, tr: Traffic,
                 instant_loads: bool = False, *, scale: float = 1.0, k: int = 0
                 ) -> EngineResult:
        """One run of the iteration-level engine (xmemplan.sizing.engine) on `tr`.

        HBM hits are the run's outcome: a request's prefix (the previous turn of its
        session or user, `prev`) hits where its blocks survived in the replica's block
        pool. Requests with no earlier turn in the run keep the traffic's prior HBM hits
        (hit_split's share). With a router's placement (routing.py; replication k at
        `scale`) each request is pinned to the router's replica and carries the prefix
        model's block keys (routing.block_keys: a group's prefix blocks are one set of
        keys, shared by the group's requests in flight on a replica): the replica's HBM
        hits are its block pool's outcome. The tier (host DRAM or X-Mem) holds each kept
        hit; what HBM lacks of it is loaded, and each prefill's new KV is written to it."""
        req = self.req
        replicas = max(1, gpus // req.shape.gpus)
        tier = "host" if option == "host-dram" else "xmem"
        cfg = config_for(req.setup, replicas=replicas, nodes=max(nodes, 1), load_tier=tier,
                         policy=req.engine, prompt_p50=req.workload.prompt_p50,
                         tier_write=option != "hbm-only", connector=option != "hbm-only")
        if option != "xmem":
            cfg = cfg.replace(node_bandwidth=math.inf)
        if instant_loads:
            cfg = cfg.replace(dram_bandwidth=1e30, xmem_bandwidth=1e30,
                              node_bandwidth=math.inf, switch_bandwidth=math.inf,
                              tier_write=False)
        kept = tr.hit_hbm + tr.hit_dram + tr.hit_xmem
        if self.placed:
            pl = self.placement(option, gpus, nodes, scale, k)
            er = RT.engine_requests(self.stream(scale, k), pl, cfg.block_tokens,
                                    tier=-1 if option == "hbm-only"
                                    else (0 if tier == "host" else 1),
                                    prev=tr.prev, think=tr.think)
            res, *_ = run_engine(er, cfg)
            return res
        order_idx = self._orders.get((scale, k), self._order_idx)
        shared = np.minimum(tr.prompt, req.workload.hit_tokens[order_idx])
        fixed = np.where(tr.prev < 0, tr.hit_hbm, 0.0)
        er = requests_for(tr, shared=shared, block_tokens=cfg.block_tokens,
                          tier_tokens=kept if option != "hbm-only" else np.zeros(len(kept)),
                          tier=-1 if option == "hbm-only" else (0 if tier == "host" else 1),
                          hbm_fixed=fixed)
        res, *_ = run_engine(er, cfg)
        return res

    def _aggregate(self, option: str, gpus: int, nodes: int, scale: float,
                   reps: list[_Rep]) -> Point:
        req = self.req
        k = len(reps)
        vals = np.array([r.value for r in reps])
        m = float(vals.mean())
        half = t975(k - 1) * float(vals.std(ddof=1)) / math.sqrt(k) if k > 1 else math.inf
        if not math.isfinite(half) and k > 1:
            half = 0.0
        over = 2 * sum(r.overloaded for r in reps) > k
        stats: dict[str, dict[str, float]] = {}
        for g in ("warm", "cold", "all"):
            v = np.concatenate([r.groups[g] for r in reps])
            stats[g] = ({f"p{q:g}": float(x) for q, x in
                         zip((50, 90, 99), np.percentile(v, (50, 90, 99)), strict=True)}
                        if v.size else {})
        caps = [r.cap for r in reps if r.cap is not None]
        # the hit split is the runs' outcome (the engine's block pools), not the prior
        h = float(np.mean([r.hit_ratio for r in reps]))
        share = float(np.mean([r.hbm_share for r in reps]))
        rate = req.load.load_rps()
        ci = (m - half, m + half)
        return Point(option=option, gpus=gpus, nodes=nodes, hit_ratio=h, hbm_share=share,
                     ttft_ms=stats, slo_value_ms=m,
                     utilisation=float(np.mean([r.utilisation for r in reps])),
                     queue_ms_mean=float(np.mean([r.queue_ms for r in reps])),
                     meets_slo=not over and ci[1] <= req.slo_s * 1e3, overloaded=over,
                     capacity_rps=float(np.mean(caps)) if caps else None,
                     requests_per_replica=reps[0].per_replica,
                     kv_full=float(np.mean([r.kv_full for r in reps])),
                     preemptions_per_request=float(np.mean([r.preemptions for r in reps])),
                     throughput_rps=float(np.mean([r.throughput_rps for r in reps])),
                     throughput_tok_s=float(np.mean([r.throughput_tok_s for r in reps])),
                     l3_recomputed=None if reps[0].l3_recomputed is None else float(
                         np.mean([r.l3_recomputed or 0.0 for r in reps])),
                     ci_ms=ci, replications=k,
                     offered_rps=None if rate is None or req.load.kind == "users"
                     else rate * scale,
                     achieved_rps=float(np.mean([r.achieved for r in reps])),
                     slo_coverage=float(np.mean([r.coverage for r in reps])),
                     split=reps[0].split, balance=reps[0].balance)

    def _overload(self, r: EngineResult, ttft_ms: np.ndarray, scale: float
                  ) -> tuple[bool, float | None, float]:
        """(overloaded, requests/s the replicas serve, requests/s that arrived).

        Capacity = replicas x requests / busy replica-seconds (at this run's batching).
        Overloaded when the load the run was offered (its own arrivals) is above it, i.e.
        the replicas were given more work than the arrival window lasts, and either TTFT
        grows through the run (the last third of requests waits at least 1.25x as long as
        the first: a queue that never drains) or the run is too short to show it (fewer
        than MIN_REQUESTS_PER_REPLICA requests per replica: a run of one request per
        replica shows no queue at any rate). Closed-loop users cannot overload (they
        wait). The arrivals are the run's own: a trace's sessions wait for their replies,
        so they arrive slower than the rate named."""
        rate = self.req.load.load_rps()
        span = float(r.arrival.max() - r.arrival.min()) if len(r.arrival) else 0.0
        achieved = (len(r.arrival) - 1) / span if span > 0 else (rate or 0.0) * scale
        busy = float(r.busy.sum())
        if self.req.load.kind == "users" or not rate or busy <= 0 or len(ttft_ms) < 3:
            return False, None, achieved
        cap = len(r.busy) * len(r.arrival) / busy
        k = len(ttft_ms) // 3
        trend = float(np.mean(ttft_ms[-k:])) > 1.25 * float(np.mean(ttft_ms[:k]))
        short = len(r.arrival) < MIN_REQUESTS_PER_REPLICA * len(r.busy)
        return bool(achieved > cap and (trend or short)), cap, achieved

    # searches ---------------------------------------------------------------------------
    def gpu_lower_bound(self) -> int:
        """Fewest GPUs that can carry an open-loop load at all: below LOWER_MARGIN x
        (rate x the mean replica-seconds of each request's compute at its FLOP time: every
        hit kept, linear FLOPs of its computed prompt and output tokens, attention FLOPs of
        its prompt, no overhead, no weight or KV bytes), the replicas are more than 1 /
        LOWER_MARGIN busy on compute alone and their queue grows; no count below it can
        comply. Every batch of the simulator costs at least its FLOP time
        (docs/size.md, "The search"). Closed-loop users and trace sessions wait for their
        replies (no count overloads): the bound is one replica."""
        req = self.req
        step = req.shape.gpus
        rate = req.load.load_rps()
        if req.load.kind != "poisson" or not rate:
            return step
        e = engine_for(req.setup, replicas=1, nodes=1)
        lin = float(getattr(e, "lin_s_per_token", 0.0))
        attn = float(getattr(e, "attn_s_per_unit", 0.0))
        w = req.workload
        s, h = w.prompt_tokens, np.minimum(w.prompt_tokens, w.hit_tokens)
        out = (np.full(len(s), req.output_tokens) if w.output_tokens is None
               else np.maximum(1, w.output_tokens))
        work = lin * (s - h + out - 1) + attn * (s * s - h * h)
        replicas = math.ceil(LOWER_MARGIN * rate * float(np.mean(work)) - 1e-9)
        return max(1, min(replicas, self.top_gpus() // step)) * step

    def fewest_gpus(self, option: str, nodes: int = 0, slo_s: float | None = None,
                    instant_loads: bool = False, upper: int | None = None) -> int | None:
        """Fewest GPUs whose interval is within the SLO, searched so that a count that
        complies cannot be missed: doubling probes from the lower bound to the first that
        complies, then every count from the bound up to it (the first SCAN_MAX of them;
        past them, bisection, which assumes compliance grows with the count;
        `self.searches` says which was used). `upper`: search no further (a cheaper
        answer is known)."""
        slo_ms = (self.req.slo_s if slo_s is None else slo_s) * 1e3
        step = self.req.shape.gpus
        top = self.top_gpus() if upper is None else min(self.top_gpus(),
                                                        upper // step * step)
        skey = (option + ("!" if instant_loads else ""), nodes, slo_ms, upper is None)
        lo = self.gpu_lower_bound()
        alone = self.alone_bound_ms(option, nodes, instant_loads)
        if alone > ALONE_MARGIN * slo_ms:
            self.searches[skey] = (
                f"none: even alone (no queue, loads free, every hit the largest deployment "
                f"keeps) the {self.req.slo_percentile:g}th percentile is {alone:,.0f} ms", None)
            return None
        if top < step or lo > top:
            self.searches[skey] = (f"not searched: fewer than {lo:,} GPUs cannot carry the "
                                   "load" if lo > top else "not searched", None)
            return None

        def pt(g: int) -> Point:
            return self.run(option, g, nodes, instant_loads=instant_loads, slo_ms=slo_ms)

        marginal: Point | None = None
        probe = lo
        while True:  # doubling probes
            p = pt(probe)
            v = p.verdict(slo_ms)
            if v == "meets":
                break
            if v == "marginal":
                marginal = p
            if probe >= top:
                self.searches[skey] = (
                    f"none: probed {lo:,} to {top:,} GPUs, doubling", marginal)
                return None
            probe = min(top, max(probe + step, probe * 2 // step * step))
        hi = probe
        # every count from the bound up to the first probe that complies (the probes
        # skipped some); past SCAN_MAX of them, bisection for the rest of the range
        below = list(range(lo, hi, step))
        scan, rest = below[:SCAN_MAX], below[SCAN_MAX:]
        how = f"exhaustive from {lo:,} GPUs (the capacity bound)"
        found = False
        for g in scan:
            q = pt(g)
            v = q.verdict(slo_ms)
            if v == "meets":
                hi, found = g, True
                break
            if v == "marginal":
                marginal = q
        if not found and rest:
            how = (f"exhaustive from {lo:,} GPUs up to {scan[-1]:,}, bisection between "
                   f"{scan[-1]:,} and {hi:,} (assumes compliance grows with the count)")
            a = scan[-1]
            while hi - a > step:
                mid = (a + hi) // 2 // step * step
                if mid <= a:
                    break
                q = pt(mid)
                v = q.verdict(slo_ms)
                if v == "meets":
                    hi = mid
                else:
                    if v == "marginal":
                        marginal = q
                    a = mid
        if marginal is not None and marginal.gpus > hi:
            marginal = None
        self.searches[skey] = (how, marginal)
        return hi

    def alone_bound_ms(self, option: str, nodes: int, instant_loads: bool = False) -> float:
        """A floor under the SLO percentile at any GPU count: each request of the SLO's set
        alone on its replica (no queue, no batch), its load free, with the hits of the
        largest deployment searched (`--max-gpus`, --max-nodes nodes; all of them when
        a request may keep any): the model's single-request TTFT (`model.ttft`, which the
        simulator reproduces for one request alone: tests/test_sim.py)."""
        req, w = self.req, self.req.workload
        key = ("alone", option, instant_loads)
        if key not in self._alone:
            h, _ = self.hit_split(option, self.top_gpus(), req.max_nodes)
            prompt = np.asarray(w.prompt_tokens, np.float64)
            hits = np.minimum(prompt, w.hit_tokens) if h > 0 else np.zeros(len(prompt))
            warm = np.minimum(prompt, w.hit_tokens) * 2 >= prompt
            sel = warm if req.slo_on == "warm" and warm.any() else np.ones(len(prompt), bool)
            b = M.ttft(req.model, req.gpu, req.xmem, prompt[sel], hits[sel],
                       overlap=req.overlap, transfer=req.transfer,
                       calibration=req.calibration, shape=req.shape,
                       attention_dtype=req.attention_dtype, bandwidth_bytes_per_s=1e30)
            single = np.asarray(b.single_s, np.float64) * 1e3
            self._alone[key] = float(np.percentile(single, req.slo_percentile)) \
                if single.size else 0.0
        return self._alone[key]

    def search_of(self, option: str, nodes: int = 0, slo_s: float | None = None,
                  upper: bool = False) -> tuple[str, Point | None]:
        slo_ms = (self.req.slo_s if slo_s is None else slo_s) * 1e3
        return self.searches.get((option, nodes, slo_ms, not upper), ("", None))

    def top_gpus(self) -> int:
        """The largest GPU count searched: --max-gpus rounded down to whole replicas."""
        step = self.req.shape.gpus
        return max(step, self.req.max_gpus // step * step)

    def fewest_nodes(self, gpus: int, slo_s: float | None = None) -> int | None:
        """Fewest X-Mem nodes that let `gpus` GPUs meet the SLO, for their bandwidth and,
        where the tier's capacity is per node, for the hits that capacity keeps (the
        profile's LRU curve): doubling probes, then every count below the first that
        complies.

        Past the count at which the nodes give every GPU its full link at once, more
        bandwidth cannot speed a load up: a count there complies when its hits are those
        of --max-nodes nodes (which the caller found to comply)."""
        slo_ms = (self.req.slo_s if slo_s is None else slo_s) * 1e3
        e = engine_for(self.req.setup, replicas=max(1, gpus // self.req.shape.gpus), nodes=1)
        one = e.node_bandwidth * self.req.shape.gpus  # one node, over all its GPUs
        ceiling = max(1, math.ceil(gpus * e.xmem_bandwidth / one - 1e-9)) \
            if math.isfinite(one) else 1
        full = self.hit_split("xmem", gpus, self.req.max_nodes)

        def ok(n: int) -> bool:
            if n >= ceiling and self.hit_split("xmem", gpus, n) == full:
                return True
            return self.run("xmem", gpus, n, slo_ms=slo_ms).verdict(slo_ms) == "meets"

        hi = 1
        while not ok(hi):
            if hi >= self.req.max_nodes:
                return None
            hi = min(self.req.max_nodes, hi * 2)
        for n in range(max(1, hi // 2 + 1), hi):
            if ok(n):
                return n
        return hi

    def goodput_bound(self, option: str, gpus: int, nodes: int
                      ) -> tuple[float | None, bool]:
        """(goodput, capped): the largest load (requests/s, or users x this for closed
        loop) whose mean percentile over the replications is within the SLO; capped when
        the load still complies at GOODPUT_CEILING x the requested one, where the search
        stops (the figure is then a lower bound)."""
        base = self.req.load.load_rps()
        if base is None:
            return None, False
        slo_ms = self.req.slo_s * 1e3

        def ok(s: float) -> bool:
            p = self.run(option, gpus, nodes, scale=s, extend=False, reps_min=1)
            return not p.overloaded and p.slo_value_ms <= slo_ms

        lo, hi = 0.0, 1.0
        if ok(hi):
            while hi < GOODPUT_CEILING and ok(hi * 2):
                hi *= 2
            if hi >= GOODPUT_CEILING:
                return hi * base, True
            lo, hi = hi, hi * 2
        for _ in range(5):
            mid = (lo + hi) / 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return (lo * base if lo > 0 else 0.0), False


def tier_domains(scope: str, replicas: int, replica_gpus: int, gpus_per_server: int,
                 share_gpus: int | None) -> np.ndarray:
    """Per replica, the index of the tier cache it reads: its own (replica), its server's,
    its rack's (`share_gpus` GPUs; unset: one for all) or the cluster's. Numbered 0, 1, ...
    without gaps (the tier's capacity is split over max + 1 domains): a replica wider than
    a server (tp8 on GB200's 4-GPU trays) reads its own servers' share, not one server's."""
    r = np.arange(replicas, dtype=np.int64)
    if scope == "replica":
        return r
    if scope == "server":
        first = r * replica_gpus // max(1, gpus_per_server)
    elif scope == "rack" and share_gpus:
        first = r * replica_gpus // share_gpus
    else:
        return np.zeros(replicas, np.int64)
    return np.unique(first, return_inverse=True)[1].astype(np.int64)  # sorted: in order


def ran_placement(r: Any, output: np.ndarray) -> tuple[RT.Placement, np.ndarray]:
    """The placement an engine run made, and those requests' output lengths, over the
    requests it ran. A request an overloaded run never sent or never admitted (replica -1:
    its session's earlier turn was still waiting when the run ended) is no replica's."""
    ran = np.asarray(r.replica) >= 0
    return RT.Placement(np.asarray(r.replica, np.int64)[ran],
                        np.asarray(r.hbm_hit, float)[ran], np.asarray(r.tier_hit, float)[ran],
                        np.asarray(r.requests.prompt, float)[ran]), np.asarray(output)[ran]


def balance(pl: RT.Placement, replicas: int, output: np.ndarray) -> dict[str, Any]:
    """Requests and KV tokens written per replica (min, mean, max) and each replica's hit
    ratio range: how evenly the router spread the work and the hits."""
    req, kv, ratio = pl.per_replica(replicas, output.astype(np.float64))

    def mmm(a: np.ndarray) -> dict[str, float]:
        return {"min": float(a.min()), "mean": float(a.mean()), "max": float(a.max())}

    return {"replicas": replicas, "requests": mmm(req), "kv_tokens": mmm(kv),
            "hit_ratio": mmm(ratio)}


def nodes_for_capacity(p: Planner) -> int:
    ws = p.working_set_tokens()
    node_cap = p.req.xmem.capacity_bytes or math.inf
    if ws is None:
        return 1
    return max(1, math.ceil(ws * p.kvb_all / node_cap))


SHAPES_TP = (1, 2, 4, 8)
GOODPUT_CEILING = 128  # goodput search stops at this multiple of the requested load
KV_FULL_WARN = 0.8  # a simulated KV cache this full on average: say the answer is optimistic
# What the engine's TTFT p50 did against published agent runs it put this full on average:
# (runs, of them predicted under, median error, lowest, highest). From benchmarks/
# loaded_check.py --sweep and its 04-19 check (docs/validation.md "Loaded check", round
# 12, re-measured in rounds 14 and 16: Netpreme's 12-24 agents on one H100);
# tests/test_loaded_check.py recomputes it.
KV_FULL_EVIDENCE = (20, 16, -0.245, -0.742, 4.862)


def kv_full_note(options: Iterable[tuple[str, str, float]]) -> str | None:
    """The caveat an answer carries where the engine ran its KV cache KV_FULL_WARN full or
    more: of (option, where, kv_full) per option, the fullest; None where none is."""
    full = [o for o in options if o[2] >= KV_FULL_WARN]
    if not full:
        return None
    option, where, kv_full = max(full, key=lambda o: o[2])
    n, under, med, lo, hi = KV_FULL_EVIDENCE
    return (f"The KV cache is {kv_full:.0%} full on average ({option}, {where}): on {n} "
            f"published agent runs the engine ran {KV_FULL_WARN:.0%} full or more (12-24 "
            f"agents on one H100), its TTFT p50 came out under the measured on {under} "
            f"(median {med:+.0%}, from {lo:+.0%} to {hi:+.0%}), and past that knee runs of "
            "one deployment repeated only within 1.5-5.7x (docs/validation.md, 'Loaded "
            "check'): read these figures as optimistic.")


# What the model's TTFT p90 did against published multi-replica runs: (stage rows, of
# them predicted under, median error, within 30 %, runs). From benchmarks/
# replicas_check.py, every row of data/measurements/multi-replica.csv (docs/validation.md
# "Multi-replica check", rounds 13, 15 and 16: llm-d's 37-capacity, tiered-prefix-cache and
# seven unseen runs, 4-8 vLLM or SGLang replicas behind its gateway and router);
# tests/test_routing.py recomputes it.
MULTI_REPLICA_EVIDENCE = (278, 186, -0.318, 85, 9)


def multi_replica_note(replicas: int) -> str | None:
    """The caveat an answer carries where an option runs on more than one replica (the
    most any option has: `replicas`): how the model's TTFT did on the published
    multi-replica runs; None for one replica."""
    if replicas <= 1:
        return None
    stages, under, med, within, runs = MULTI_REPLICA_EVIDENCE
    return (f"More than one replica (up to {replicas:,} here): on {stages} published stages "
            f"of {runs} multi-replica runs (llm-d, 4-8 vLLM or SGLang replicas behind its "
            f"gateway and router), the model's TTFT p90 came out under the measured at "
            f"{under} (median {med:+.0%}; within 30% at {within}; docs/validation.md, "
            "'Multi-replica check'). Waits outside the engine (gateway, router, client) are not "
            "modelled: read multi-replica TTFTs as optimistic.")


LOWER_MARGIN = 0.8  # the capacity bound: counts below 0.8 x the compute-alone need


# --- the cheapest over shapes and options ------------------------------------------------

RANK = {"hbm-only": 0, "host-dram": 1, "xmem": 2}


def _shapes(req: SizeRequest) -> list[M.Shape]:
    """The replica shapes searched: the one --tp/--ep fixed, else the smallest that holds
    the weights and the longest prompt's KV and every wider TP up to 8 (EP = TP for MoE),
    keeping --dp-attention."""
    if not req.auto_shape:
        return [req.shape]
    out = [req.shape]
    for tp in SHAPES_TP:
        if tp <= req.shape.tp or tp > req.max_gpus:
            continue
        out.append(M.Shape(tp=tp, ep=tp if req.model.expert_params else 1,
                           dp_attention=req.shape.dp_attention or req.dp_attention))
    return out


def option_cost(req: SizeRequest, option: str, gpus: int, nodes: int) -> float | None:
    """What `gpus` GPUs (and `nodes` X-Mem nodes) cost with --cost; None without prices."""
    pr = req.prices
    if pr is None:
        return None
    c = gpus * pr.gpu_price(req.gpu.name) + (nodes if option == "xmem" else 0) * pr.xmem_node
    if option == "host-dram":
        c += gpus * pr.host_dram
    return c


def _key(o: OptionResult, tp: int) -> tuple[float, ...]:
    """Cheapest first: by price with --cost, else by GPUs, then X-Mem nodes; ties go to
    the simpler tier (HBM, host DRAM, X-Mem), then to the lower percentile (more
    headroom: a shape that only just complies at one seed does not win a tie by chance),
    then to the narrower replica."""
    assert o.gpus is not None
    v = o.point.slo_value_ms if o.point is not None else math.inf
    base = (float(o.gpus), float(o.nodes or 0 if o.option == "xmem" else 0),
            float(RANK[o.option]), v, float(tp))
    return base if o.cost is None else (o.cost, *base)


@dataclass
class _ShapeRun:
    p: Planner
    options: list[OptionResult]
    n_cap: int
    n_bw: int | None
    n_rec: int | None
    upper: int | None
    g_x_inf: int | None = None


def _options(p: Planner, upper: int | None) -> _ShapeRun:
    """Each option's fewest GPUs (and X-Mem nodes) at the planner's shape; `upper`: no
    more GPUs than this are of interest (a cheaper answer is known)."""
    req = p.req
    big = req.max_nodes
    n_cap = nodes_for_capacity(p)
    g_hbm = p.fewest_gpus("hbm-only", upper=upper)
    g_host = p.fewest_gpus("host-dram", upper=upper)
    g_x_inf = p.fewest_gpus("xmem", big, upper=upper)  # nodes not limiting
    n_bw = p.fewest_nodes(g_x_inf) if g_x_inf is not None else None
    n_rec = None if n_bw is None else max(n_bw, n_cap)
    g_x = None if n_rec is None else p.fewest_gpus("xmem", n_rec, upper=upper)
    top = p.top_gpus() if upper is None else min(p.top_gpus(), upper)
    label = req.shape.label

    def opt(name: str, g: int | None, n: int | None) -> OptionResult:
        nodes = n if name == "xmem" else None
        how, marg = p.search_of(name, (n or big) if name == "xmem" else 0, upper=upper
                                is not None)
        pt = None if g is None else p.run(name, g, n or 0)
        note = ""
        if g is None:
            if name == "xmem" and g_x_inf is not None and n_bw is None:
                note = (f"{g_x_inf:,} GPUs would need more than {big:,} X-Mem nodes of "
                        "bandwidth")
            elif upper is not None:
                note = f"no GPU count up to {top:,} (the cheaper answer's) meets the SLO"
            else:
                at_top = p.run(name, top, big if name == "xmem" else 0, extend=False)
                note = f"no GPU count up to {top:,} meets the SLO" + (
                    f" (overloaded at this rate: {top:,} GPUs serve about "
                    f"{at_top.capacity_rps or 0:,.0f} requests/s)" if at_top.overloaded
                    else "")
        o = OptionResult(name, g, nodes, pt, note=note, shape=label, search=how,
                         marginal=marg)
        if g is not None:
            o.cost = option_cost(req, name, g, n or 0)
        return o

    options = [opt("hbm-only", g_hbm, None), opt("host-dram", g_host, None),
               opt("xmem", g_x, n_rec)]
    return _ShapeRun(p, options, n_cap, n_bw, n_rec, upper, g_x_inf)


def _upper(req: SizeRequest, best: OptionResult) -> int:
    """Most GPUs a configuration may have and still be as cheap as `best`."""
    assert best.gpus is not None
    if best.cost is None or req.prices is None:
        return best.gpus
    g = req.prices.gpu_price(req.gpu.name)
    return best.gpus if g <= 0 else int(best.cost / g + 1e-9)


def plan(req: SizeRequest, *, with_table: bool = True, with_curve: bool = True,
         with_router: bool = True) -> SizeResult:
    """The cheapest compliant configuration over replica shapes and options; see the
    module docstring. The answer names the router; with per-replica caches, the hit split
    and balance of each option are reasons, and so is the same deployment under another
    router."""
    req, copies = _session_copies(req)
    res, q = _plan_shapes(req, with_table=with_table, with_curve=with_curve)
    if copies is not None and copies.copies:
        res.reasons.insert(0, (
            f"The trace's {units.count(copies.sessions, 'session')} offer at most "
            f"{_num(copies.offered_rps)} requests/s at this rate (each waits for its "
            f"replies, served alone): "
            f"{units.count(copies.copies, 'session copy', 'session copies')} added "
            f"({copies.requests:,} requests), time-shifted over the trace's span, each its "
            "own user (its own session and prefix keys)."))
        res.extra.setdefault("json", {})["session_copies"] = {
            "sessions": copies.sessions, "offered_rps_by_sessions": copies.offered_rps,
            "copies": copies.copies, "requests_added": copies.requests}
    _routing(q, res, compare=with_router)
    replicas = max((o.gpus // q.shape.gpus for o in res.options
                    if o.point is not None and o.gpus), default=1)
    if note := multi_replica_note(replicas):
        res.reasons.append(note)
    from xmemplan.provenance import provenance

    res.extra.setdefault("json", {})["provenance"] = provenance(list(req.inputs))
    if hicache := hicache_json(req):
        res.extra["json"]["hicache"] = hicache
    return res


def hicache_json(req: SizeRequest) -> dict[str, str] | None:
    """JSON's `hicache` (--xmem-path hicache-storage: the X-Mem option's path and SGLang's
    prefetch policy); None on the default direct path (the JSON as before)."""
    if req.xmem_path != XMEM_PATH_STORAGE:
        return None
    return {"xmem_path": req.xmem_path,
            "hicache_storage_prefetch_policy": req.prefetch_policy}


def _session_copies(req: SizeRequest) -> tuple[SizeRequest, Copies | None]:
    """`req` with copies of the trace's sessions where its own cannot offer the rate asked
    (workload.session_copies), each request's reply served alone as the router counts it
    (Planner.hold_rates) on the fastest replica shape searched (the widest TP): no
    configuration searched reaches a higher rate with the trace's own sessions."""
    w = req.workload
    if req.load.kind != "trace" or w.session is None or w.timestamp_s is None:
        return req, None
    fastest = max(_shapes(req), key=lambda sh: sh.gpus)
    per_tok, step = Planner(replace(req, shape=fastest)).hold_rates()
    prompt = w.prompt_tokens.astype(np.float64)
    out = (np.full(len(prompt), float(req.output_tokens)) if w.output_tokens is None
           else np.maximum(1, w.output_tokens).astype(np.float64))
    service = (prompt - np.minimum(prompt, w.hit_tokens)) * per_tok + out * step
    w2, info = session_copies(w, req.load, service)
    return (req if w2 is w else replace(req, workload=w2)), info


def _routing(req: SizeRequest, res: SizeResult, *, compare: bool) -> None:
    name = RT.canonical(req.router)
    res.router = name
    default = " (the default)" if name == RT.DEFAULT_ROUTER else ""
    res.answer = res.answer.rstrip() + f" Router: {name}{default}."
    placed = any(o.point is not None and o.point.split is not None for o in res.options)
    if not placed and req.load.kind == "users" and (
            req.prefix_groups or req.workload.group is not None
            or req.workload.session is not None):
        res.reasons.append(
            "Routing does not change these hits: closed-loop users are not placed on "
            "per-replica caches (their arrival times come from the simulation itself); "
            "one LRU curve at the deployment's capacity stands for every replica. Use "
            "--rate for per-replica caches.")
        return
    if not placed:
        res.reasons.append(
            "Routing does not change these hits: the workload does not say which requests "
            "share a prefix, so one LRU curve at the deployment's capacity stands for every "
            "replica (a profile with sessions or prefix groups, or --prefix-groups, gives "
            "each replica its own cache).")
        return
    for o in res.options:
        pt = o.point
        if pt is None or pt.split is None or pt.balance is None:
            continue
        a, b, c = pt.split
        bal = pt.balance
        tier = {"host-dram": "host DRAM", "xmem": "X-Mem"}.get(o.option)
        res.reasons.append(
            f"{o.option} on {_gpus(o.gpus)} ({units.count(bal['replicas'], 'replica')}): "
            f"{a:.0%} of prompt tokens from the serving replica's HBM"
            + (f", {b:.0%} from {tier}" if tier else "") + f", {c:.0%} recomputed; "
            f"requests per replica {bal['requests']['min']:,.0f}-"
            f"{bal['requests']['max']:,.0f}, KV written per replica "
            f"{bal['kv_tokens']['min'] / 1e6:,.1f}-{bal['kv_tokens']['max'] / 1e6:,.1f}M "
            f"tokens, replica hit ratios {bal['hit_ratio']['min']:.2f}-"
            f"{bal['hit_ratio']['max']:.2f}.")
    cm = CM.for_workload(req.workload.cache_model, req.workload.cache_page_tokens,
                         req.workload.cache_with_outputs)
    if cm is not None:
        res.reasons.append(
            f"These hits are the profile's {cm.name} cache model's (hitrate --cache-model "
            f"{cm.name}): each replica's requests replayed through it at the replica's HBM "
            f"room, each tier's at the tier's capacity, {cm.page}-token pages, decoded "
            f"tokens {'cached' if cm.with_outputs else 'not cached'}; the router's choices "
            "are the placement's own (docs/size.md).")
    if not compare:
        return
    other = "round-robin" if name in RT.PREFIX_AWARE else "sglang-cache-aware"
    q = Planner(replace(req, router=other))
    nodes = res.xmem_option_nodes or 1
    got = {o: q.fewest_gpus(o, nodes if o == "xmem" else 0) for o in OPTIONS}
    res.other_router = {"router": other, "gpus": got, "nodes": nodes}
    mine = {o.option: o.gpus for o in res.options}
    words = "prefix-aware routing (sglang-cache-aware)" if other != "round-robin" \
        else "round-robin routing"

    def n(g: int | None) -> str:
        return "none up to --max-gpus" if g is None else _gpus(g)

    res.reasons.append(
        f"With {words} host DRAM needs {n(got['host-dram'])} (here "
        f"{n(mine.get('host-dram'))}), HBM alone {n(got['hbm-only'])} (here "
        f"{n(mine.get('hbm-only'))}), X-Mem {n(got['xmem'])} with "
        f"{units.count(nodes, 'node')} (here {n(mine.get('xmem'))}).")


def _plan_shapes(req: SizeRequest, *, with_table: bool, with_curve: bool
                 ) -> tuple[SizeResult, SizeRequest]:
    """The result at the cheapest shape, and that shape's request."""
    budget = Budget(req.extend_runs)
    runs: list[tuple[M.Shape, _ShapeRun | None]] = []
    best: tuple[tuple[float, ...], int, OptionResult] | None = None
    for shape in _shapes(req):
        r = req if shape == req.shape else replace(req, shape=shape)
        p = Planner(r, budget)
        upper = None if best is None else _upper(req, best[2])
        if upper is not None and upper < shape.gpus:
            runs.append((shape, None))  # one replica costs more than the answer
            continue
        sr = _options(p, upper)
        runs.append((shape, sr))
        for o in sr.options:
            if o.gpus is not None:
                k = _key(o, shape.tp)
                if best is None or k < best[0]:
                    best = (k, len(runs) - 1, o)
    i = 0 if best is None else best[1]
    sr0 = runs[i][1]
    assert sr0 is not None
    sr = sr0 if sr0.upper is None else _options(sr0.p, None)  # the answer's shape in full
    res = _result(sr, with_table=with_table, with_curve=with_curve)
    res.shapes = [{"shape": s.label, "searched": x is not None,
                   "options": [] if x is None else [
                       {"option": o.option, "gpus": o.gpus, "nodes": o.nodes,
                        "cost": o.cost, "search": o.search, "note": o.note}
                       for o in x.options]} for s, x in runs]
    first = runs[0][1]
    if i > 0 and first is not None:
        alt = [o for o in first.options if o.gpus is not None]
        if alt:
            a = min(alt, key=lambda o: _key(o, runs[0][0].tp))
            nodes = (f" and {units.count(a.nodes or 0, 'X-Mem node')}"
                     if a.option == "xmem" else "")
            res.reasons.insert(0, f"At {runs[0][0].label} the cheapest is {a.option} with "
                               f"{_gpus(a.gpus)}{nodes}; {res.shape} replicas do as well or better "
                               "(fewer GPUs or nodes, else more headroom).")
        else:
            res.reasons.insert(0, f"At {runs[0][0].label} no GPU count meets the SLO.")
    elif best is None and len(runs) > 1:
        res.reasons.append(f"Wider replicas ({', '.join(s.label for s, _ in runs[1:])}) do "
                           "not meet it either.")
    sims = sum(x.p.sims for _, x in runs if x is not None) + (sr.p.sims if sr is not sr0
                                                               else 0)
    reps = [len(v) for _, x in runs if x is not None for v in x.p.cache.values()]
    res.replications = {"min": min(reps, default=0), "max": max(reps, default=0),
                        "simulations": sims}
    res.extra["simulations"] = sims
    return res, sr.p.req


def self_full(p: Planner, gpus: int | None, nodes: int) -> bool:
    """Whether `nodes` X-Mem nodes keep every hit that --max-nodes nodes keep (bandwidth,
    not capacity, then set their count)."""
    if gpus is None:
        return True
    return p.hit_split("xmem", gpus, nodes) == p.hit_split("xmem", gpus, p.req.max_nodes)


def _gpus(n: int | None) -> str:
    """'1 GPU', '5 GPUs' (the answer line is read aloud; no '1 GPUs')."""
    return "- GPUs" if n is None else units.count(n, "GPU")


def _ms(x: float) -> str:
    return f"{x:,.0f}"


def _interval(pt: Point, pq: str) -> str:
    lo, hi = pt.ci_ms
    if not math.isfinite(hi):
        return f"{pq} {_ms(pt.slo_value_ms)} ms ({pt.replications} replication)"
    return (f"{pq} {_ms(pt.slo_value_ms)} ms, 95 % CI {_ms(max(0.0, lo))}-{_ms(hi)} over "
            f"{pt.replications} replications")


def _result(sr: _ShapeRun, *, with_table: bool, with_curve: bool) -> SizeResult:
    p, options = sr.p, sr.options
    req = p.req
    slo_ms = req.slo_s * 1e3
    big = req.max_nodes
    n_cap, n_bw, n_rec = sr.n_cap, sr.n_bw, sr.n_rec
    by = {o.option: o for o in options}
    g_hbm, g_host, g_x = by["hbm-only"].gpus, by["host-dram"].gpus, by["xmem"].gpus
    comp = [o for o in options if o.gpus is not None]
    best = min(comp, key=lambda o: _key(o, req.shape.tp)) if comp else None
    for o in comp:
        assert o.gpus is not None
        o.goodput_rps, o.goodput_capped = p.goodput_bound(o.option, o.gpus, o.nodes or 0)
    g_instant = p.fewest_gpus("xmem", big, instant_loads=True)
    # Instant loads are never slower than a real tier: the line says the smallest count
    # known to comply.
    known = [g for g in (g_instant, g_x, g_host, g_hbm) if g is not None]
    g_instant = min(known) if known else None
    top = p.top_gpus()

    reasons: list[str] = []
    headroom = None
    saved = None if g_host is None or g_x is None else g_host - g_x
    load = describe_load(req.load)
    slo_txt = f"{slo_ms:,.0f} ms" if slo_ms >= 1 else f"{slo_ms:.3g} ms"
    pq = f"p{req.slo_percentile:g}"
    shape_txt = f" as {req.shape.label} replicas" if req.shape.label != "tp1" else ""
    saving: float | None = None
    money = ""
    pr = req.prices
    shown: Point | None = None
    if best is None:
        alone = p.run("xmem", top, big, instant_loads=True, extend=False)
        shown = alone
        cheapest = "none"
        if alone.overloaded:
            cap = alone.capacity_rps or 0.0
            rate = req.load.load_rps() or 0.0
            need = (float(f"{top * rate / cap:.2g}") if cap > 0 and
                    alone.requests_per_replica >= MIN_REQUESTS_PER_REPLICA else None)
            answer = (f"No option meets the {slo_txt} SLO with up to {top:,} GPUs at {load}: "
                      f"overloaded at this rate ({top:,} GPUs serve about {cap:,.0f} "
                      "requests/s even with instant KV loads; the queue grows without "
                      "bound).")
            binding = "overloaded (the offered load exceeds what --max-gpus GPUs serve)"
            reasons.append("Lower --rate, or raise --max-gpus"
                           + (f" (about {need:,.0f} GPUs serve this rate)." if need else
                              "; the run had too few requests per GPU to say how many "
                              "would (raise --requests)."))
        else:
            looser = alone.ci_ms[1] if math.isfinite(alone.ci_ms[1]) else alone.slo_value_ms
            answer = (f"No option meets the {slo_txt} SLO with up to {top:,} GPUs at {load}: "
                      f"even with instant loads TTFT {pq} is {alone.slo_value_ms:,.0f} ms "
                      f"(compute); an SLO of {looser:,.0f} ms would be met there.")
            binding = "compute (no GPU count complies)"
            reasons.append("Raise the SLO, use a faster GPU or tensor parallelism (--tp), "
                           "or shorten prompts; no memory tier changes compute.")
    elif best.option != "xmem":
        g_best = best.gpus
        assert g_best is not None and best.point is not None
        nx = n_rec or n_cap
        hx = p.run("xmem", g_best, nx)
        hh = best.point
        headroom = hh.slo_value_ms - hx.slo_value_ms
        cheapest = best.option
        binding = ("compute sets the GPUs" if g_instant is not None and g_instant >= g_best
                   else "load bandwidth sets the GPUs")
        compare = (f"({pq} {hh.slo_value_ms:,.0f} -> {hx.slo_value_ms:,.0f} ms on "
                   f"{_gpus(g_best)})")
        xmem_txt = (f"X-Mem adds {headroom:,.0f} ms of headroom {compare}" if headroom >= 0.5
                    else f"X-Mem with {units.count(nx, 'node')} is no faster "
                    f"{compare}")
        answer = (f"0 X-Mem nodes for {_gpus(g_best)}{shape_txt}: "
                  f"{'HBM alone' if cheapest == 'hbm-only' else 'host DRAM'} meets the "
                  f"{slo_txt} SLO at {load}; {xmem_txt}")
        ox = by["xmem"]
        if pr is not None and best.cost is not None:
            money = f"; {pr.money(best.cost)}"
            if ox.cost is not None:
                saving = ox.cost - best.cost
                money += f", {pr.money(saving)} less than X-Mem's {pr.money(ox.cost)}"
    else:
        assert g_x is not None and n_rec is not None and n_bw is not None
        node_bind = ("capacity sets the nodes" if n_cap >= n_bw and n_cap > 1
                     else "node bandwidth sets the nodes" if n_bw > 1
                     and self_full(p, sr.g_x_inf, n_bw)
                     else "the hits their capacity keeps set the nodes" if n_bw > 1
                     else "one node suffices")
        gpu_bind = ("compute" if g_instant is not None and g_instant >= g_x
                    else "per-GPU load bandwidth")
        binding = f"{gpu_bind} sets the GPUs, {node_bind}"
        cheapest = "xmem"
        host_txt = (f"host DRAM needs {_gpus(g_host)}, {saved:,} more" if g_host is not None
                    and saved is not None and saved >= 0
                    else f"host DRAM needs {_gpus(g_host)} and no X-Mem node"
                    if g_host is not None
                    else f"host DRAM does not meet it with up to {top:,} GPUs")
        answer = (f"{units.count(n_rec, 'X-Mem node')} for {_gpus(g_x)}{shape_txt}: meets "
                  f"the {slo_txt} SLO at {load} ({host_txt}); binding: {binding}")
        alt = [o for o in comp if o.option != "xmem"]
        if pr is not None and best.cost is not None:
            money = f"; {pr.money(best.cost)}"
            if alt:
                a = min(alt, key=lambda o: _key(o, req.shape.tp))
                assert a.cost is not None
                saving = a.cost - best.cost
                money += (f", saves {pr.money(saving)} against "
                          f"{'host DRAM' if a.option == 'host-dram' else 'HBM alone'}")
        elif saved:
            reasons.append(f"X-Mem is the cheaper option if {units.count(n_rec, 'node')} "
                           f"cost{'s' if n_rec == 1 else ''} less than {_gpus(saved)} "
                           "(pass --cost to compare in money).")
    pt_best = None if best is None else best.point
    marg = None
    if best is not None:
        cands = [o.marginal for o in options if o.marginal is not None
                 and o.marginal.gpus <= (best.gpus or 0)]
        marg = min(cands, key=lambda q: (q.gpus, RANK[q.option])) if cands else None
    if pt_best is not None:
        cover = (f" ({pq} of warm requests, {pt_best.slo_coverage:.0%} of all)"
                 if req.slo_on == "warm" else f" ({pq} of all requests)")
        answer += f"{money}. {_interval(pt_best, pq)}{cover}"
        if marg is not None:
            answer += (f"; marginal: {marg.option} on {_gpus(marg.gpus)}, {pq} "
                       f"{_ms(max(0.0, marg.ci_ms[0]))}-{_ms(marg.ci_ms[1])} ms straddles "
                       f"{slo_txt}")
        if req.load.kind == "trace" and pt_best.offered_rps:
            answer += (f"; achieved {_num(pt_best.achieved_rps)} of "
                       f"{_num(pt_best.offered_rps)} requests/s offered (sessions wait "
                       "for replies)")
        answer += "."
    if (req.load.kind == "trace" and pt_best is not None and pt_best.offered_rps
            and pt_best.achieved_rps < REACHED * pt_best.offered_rps):
        n_sess = len(np.unique(req.workload.session)) if req.workload.session is not None \
            else 0
        n_copy = req.workload.session_copies
        who = (f"{units.count(n_sess - n_copy, 'session')} and their "
               f"{units.count(n_copy, 'copy', 'copies')}" if n_copy else
               units.count(n_sess, 'session'))
        reasons.append(
            f"The trace's {who} reach only "
            f"{_num(pt_best.achieved_rps)} of the {_num(pt_best.offered_rps)} requests/s "
            "asked while each waits for its replies: the GPUs were simulated at the load "
            "achieved (the working set is scaled to the rate asked); more load needs more "
            "sessions than the trace has (a longer trace, or --users).")
    if pr is None and best is not None:
        reasons.append("Compared in counts (GPUs, then X-Mem nodes): pass --cost "
                       "gpu=PRICE,xmem-node=PRICE to compare in money.")
    reasons.append(f"Nodes: {'-' if n_bw is None else f'{n_bw:,}'} simulated (bandwidth and "
                   f"the hits they keep), {n_cap:,} for capacity (working set / node "
                   "capacity).")
    if g_instant is not None:
        reasons.append(f"With instant KV loads {_gpus(g_instant)} would do: the rest of the "
                       "GPU count is compute (prefill, decode) and queueing.")
    kv_note = kv_full_note((o.option, _gpus(o.gpus), o.point.kv_full) for o in options
                           if o.point is not None)
    if kv_note:
        reasons.append(kv_note)
    thin = [o for o in options if o.point is not None
            and o.point.requests_per_replica < MIN_REQUESTS_PER_REPLICA]
    if thin:
        o = min(thin, key=lambda o: o.point.requests_per_replica if o.point else 0.0)
        assert o.point is not None
        reasons.append(f"Only {o.point.requests_per_replica:,.1f} simulated requests per "
                       f"replica at {_gpus(o.gpus)} ({o.option}): the percentiles are of a "
                       "short run, not a steady state; raise --requests.")
    bisected = [o.option for o in options if "bisection" in o.search]
    if bisected:
        reasons.append(f"The GPU search of {', '.join(bisected)} bisected a long range "
                       "(more than {SCAN_MAX} counts): it assumes compliance grows with "
                       "the count there.".replace("{SCAN_MAX}", str(SCAN_MAX)))

    table = _table(p, n_cap) if with_table else []
    saving_rows = [t for t in table if t["gpus_saved"]]
    if saving_rows and cheapest != "xmem":
        t = max(saving_rows, key=lambda t: t["ttft_slo_ms"])
        reasons.append(f"X-Mem becomes worth buying at an SLO of {t['ttft_slo_ms']:,.0f} ms or "
                       f"tighter: it saves {_gpus(t['gpus_saved'])} there "
                       f"({t['gpus_host_dram']:,} -> {t['gpus_xmem']:,}).")
    curve = _load_curve(p, options) if with_curve else {}
    ws = p.working_set_tokens()
    w = req.workload
    conc = req.load.users if req.load.kind == "users" else None
    at = pt_best or shown
    res = SizeResult(
        answer=answer, binding=binding, cheapest=cheapest, workload=w.description, load=load,
        model=req.model.name, gpu=req.gpu.name, engine=req.engine, overlap=req.overlap,
        ttft_slo_ms=slo_ms, slo_percentile=req.slo_percentile, slo_on=req.slo_on,
        prompt_tokens_p50=w.prompt_p50, hit_ratio=w.token_hit_ratio,
        kv_bytes_per_token=p.kvb_all,
        working_set_bytes=None if ws is None else ws * p.kvb_all,
        options=options, xmem_option_nodes=n_rec,
        # the answer line's count: 0 when host DRAM or HBM alone is the cheaper answer
        recommended_nodes=n_rec if cheapest == "xmem" else (None if cheapest == "none" else 0),
        nodes_for_bandwidth=n_bw,
        nodes_for_capacity=n_cap, gpus_host_dram=g_host, gpus_xmem=g_x,
        gpus_saved_by_xmem=saved, headroom_ms=headroom, table=table, load_curve=curve,
        reasons=reasons,
        assumptions=[{"assumption": a, "source": s} for a, s in req.assumptions],
        excluded_over_context=w.excluded_over_context, concurrency=conc,
        shape=req.shape.label, kv_dtype_bytes=req.model.kv_dtype_bytes,
        attention_dtype=req.attention_dtype,
        cost=None if best is None else best.cost,
        cost_basis=None if pr is None else pr.basis, saving=saving,
        offered_rps=None if at is None else at.offered_rps,
        achieved_rps=None if at is None else at.achieved_rps,
        slo_coverage=None if at is None else at.slo_coverage,
        marginal=marg is not None,
        claims=None if best is None else _claims(p, best),
    )
    return res


def _claims(p: Planner, best: OptionResult) -> dict[str, Any]:
    """The plan's claims `validate --plan` replays: its GPU count and replica shape, the
    GPUs that share each X-Mem node (the answer's GPUs over its nodes, each loading its
    share of every request's KV), and the load bandwidth per GPU the model gives at that
    sharing (the figure behind the plan's load times: `model.effective_bandwidth`)."""
    req = p.req
    g = best.gpus or 0
    nodes = (best.nodes or 0) if best.option == "xmem" else 0
    tier = req.xmem if best.option == "xmem" else req.host
    readers = math.ceil(g / nodes) if nodes else 1
    loaders = min(g, req.gpu.gpus_per_server) if best.option == "host-dram" else readers
    bw = None
    if best.option != "hbm-only":
        bw = float(M.effective_bandwidth(req.model, req.gpu, tier, gpus_loading=readers,
                                         loaders=loaders, transfer=req.transfer,
                                         calibration=req.calibration))
    return {"option": best.option, "gpus": g, "nodes": nodes, "shape": req.shape.label,
            "tp": req.shape.tp, "dp_attention": req.shape.dp_attention,
            "tier": None if best.option == "hbm-only" else tier.name,
            "gpus_per_node": readers if nodes else None,
            "load_bandwidth_per_gpu_bytes_per_s": bw,
            "slo_value_ms": None if best.point is None else best.point.slo_value_ms}


def _table(p: Planner, n_cap: int) -> list[dict[str, Any]]:
    """GPUs with host DRAM and with X-Mem, and the nodes, for each SLO of the table."""
    rows = []
    slos = sorted(set(TABLE_SLOS_S) | {p.req.slo_s})
    big = p.req.max_nodes
    for s in slos:
        gh = p.fewest_gpus("host-dram", slo_s=s)
        gx = p.fewest_gpus("xmem", big, slo_s=s)
        nb = p.fewest_nodes(gx, slo_s=s) if gx is not None else None
        n = None if nb is None else max(nb, n_cap)
        gx2 = None if n is None else p.fewest_gpus("xmem", n, slo_s=s)
        rows.append({"ttft_slo_ms": s * 1e3, "gpus_host_dram": gh, "gpus_xmem": gx2,
                     "xmem_nodes": n, "gpus_saved": None if gh is None or gx2 is None
                     else gh - gx2})
    return rows


def _load_curve(p: Planner, options: list[OptionResult]) -> dict[str, Any]:
    """SLO-percentile TTFT against offered load, per option, at the X-Mem answer's GPU
    count (or host DRAM's when X-Mem has none)."""
    g = next((o.gpus for o in reversed(options) if o.gpus is not None), None)
    if g is None or p.req.load.load_rps() is None:
        return {}
    base = p.req.load.load_rps() or 0.0
    out: dict[str, Any] = {"gpus": g, "load_rps": [s * base for s in LOAD_SCALES]}
    nodes = next((o.nodes for o in options if o.option == "xmem"), None) or 1
    # one replication per point, none extended: the points run side by side (threads.py)
    tasks = [(o, s) for o in OPTIONS for s in LOAD_SCALES]
    got = map_ordered(lambda t: p.run(t[0], g, nodes if t[0] == "xmem" else 0, scale=t[1],
                                      extend=False, reps_min=1), tasks)
    for o in OPTIONS:
        pts = [pt for (oo, _), pt in zip(tasks, got, strict=True) if oo == o]
        out[o] = [pt.slo_value_ms for pt in pts]
        out[o + "_overloaded"] = [pt.overloaded for pt in pts]
        out[o + "_achieved_rps"] = [pt.achieved_rps for pt in pts]
    return out


def blog_ratio(req: SizeRequest, gpus: int = 8, nodes: int = 1
               ) -> dict[str, float | bool | None]:
    """Load per GPU that host DRAM and X-Mem sustain within the SLO on `gpus` GPUs. A load
    still within it at the search's ceiling is a lower bound (`*_capped`): the ratio is
    then only bounded (None when both are)."""
    p = Planner(replace(req))
    h, h_cap = p.goodput_bound("host-dram", gpus, 0)
    x, x_cap = p.goodput_bound("xmem", gpus, nodes)
    ratio = None if not h or x is None or (h_cap and x_cap) else x / h
    return {"host_dram_rps_per_gpu": None if h is None else h / gpus,
            "xmem_rps_per_gpu": None if x is None else x / gpus,
            "host_dram_capped": h_cap, "xmem_capped": x_cap,
            "ratio": ratio}


FIXED_SLO_S = 3600.0  # `size --gpus N` without --ttft-slo: an SLO nothing is judged by


def evaluate(req: SizeRequest, gpus: int, nodes: int | None = None) -> list[OptionResult]:
    """A fixed deployment: each option (hbm-only, host-dram, xmem) on `gpus` GPUs at the
    request's load, no search; the planner's own simulation (`Planner.run`) at that count.
    X-Mem gets `nodes` nodes, by default the fewest that hold the working set."""
    if gpus < req.shape.gpus or gpus > req.max_gpus:
        raise UsageError(f"--gpus '{gpus}' is out of range",
                         f"give {req.shape.gpus:,} to {req.max_gpus:,} GPUs "
                         f"(a replica is {req.shape.label}: {req.shape.gpus:,} GPUs)")
    p = Planner(req)
    n_x = nodes_for_capacity(p) if nodes is None else nodes
    out = []
    for name in ("hbm-only", "host-dram", "xmem"):
        n = n_x if name == "xmem" else 0
        pt = p.run(name, gpus, n)
        o = OptionResult(name, gpus, n if name == "xmem" else None, pt,
                         shape=req.shape.label, search="fixed")
        o.cost = option_cost(req, name, gpus, n)
        out.append(o)
    return out
