"""Size a deployment from simulated traffic: GPUs and X-Mem nodes that meet a TTFT SLO.

For each option, HBM only, + host DRAM, + X-Mem with n nodes, the planner replays the
workload's traffic through the prefill-serving simulator (`xmemplan.sizing.sim`) and finds
the fewest GPUs whose TTFT percentile (warm requests by default) meets the SLO at the
offered load: probe 1, 2, 4, ... GPUs, then bisect (the percentile falls as GPUs are
added; every evaluation is one simulation, cached).

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
  unlimited node bandwidth (bisection over nodes); for capacity, the deployment's working
  set over the node capacity; recommended = the larger.
- Binding constraint: for the GPU count, compute when instant loads would need as many
  GPUs, else load bandwidth; for the node count, capacity or bandwidth, whichever set it.
- The answer never recommends X-Mem when host DRAM meets the SLO with as few GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from xmemplan import units
from xmemplan.catalog.specs import GpuSpec, ModelSpec, TierSpec
from xmemplan.errors import UsageError
from xmemplan.sizing import model as M
from xmemplan.sizing import routing as RT
from xmemplan.sizing.sim import SimResult, Traffic, simulate
from xmemplan.sizing.simmodel import HBM_USABLE, Setup, engine_for, single_request_ttft
from xmemplan.sizing.workload import Arrivals, Workload, arrivals

TABLE_SLOS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
LOAD_SCALES = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
OPTIONS = ("hbm-only", "host-dram", "xmem")
WARMUP_SHARE = 0.1  # the first tenth of requests (by arrival) is left out of percentiles
MIN_REQUESTS_PER_REPLICA = 20  # fewer: a run too short for a steady-state percentile


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
    requests: int = 4000
    seed: int = 0
    working_set_tokens: float | None = None
    max_gpus: int = 1024
    max_nodes: int = 64
    mixed: bool = False
    auto_shape: bool = True  # when no GPU count complies, try wider tensor parallelism
    assumptions: tuple[tuple[str, str], ...] = ()  # (statement, source)
    attention_dtype: str = "bf16"  # bf16 or fp8 (FP8 attention: the GPU's FP8 peak)
    dp_attention: bool = False  # --dp-attention: kept by the wider shapes plan() tries
    mem_fraction: float = HBM_USABLE  # --mem-fraction: HBM share for weights + KV
    router: str = RT.DEFAULT_ROUTER  # --router (xmemplan.sizing.routing)
    prefix_groups: int = 0  # --prefix-groups: each hit prefix is one of N shared prefixes

    @property
    def setup(self) -> Setup:
        return Setup(model=self.model, gpu=self.gpu, host=self.host, xmem=self.xmem,
                     calibration=self.calibration, transfer=self.transfer,
                     overlap=self.overlap, shape=self.shape, mixed=self.mixed,
                     attention_dtype=self.attention_dtype, mem_fraction=self.mem_fraction)


def describe_load(a: Arrivals) -> str:
    """The offered load in words, every number whole (`1,000,000 requests/s`)."""
    def num(x: float | None) -> str:
        x = x or 0.0
        return f"{x:,.0f}" if x >= 100 or float(x).is_integer() else f"{x:,.3g}"

    if a.kind == "poisson":
        return f"Poisson arrivals at {num(a.rate_rps)} requests/s"
    if a.kind == "users":
        return f"{a.users or 0:,} closed-loop users, {num(a.think_s)} s mean think time"
    if a.trace_rate_rps and a.rate_rps == a.trace_rate_rps:
        return f"the trace's own timestamps ({num(a.rate_rps)} requests/s)"
    return f"the trace's timestamps, sessions compressed to {num(a.rate_rps)} requests/s"


@dataclass
class Point:
    """One simulated configuration."""

    option: str
    gpus: int
    nodes: int
    hit_ratio: float
    hbm_share: float
    ttft_ms: dict[str, dict[str, float]]  # warm / cold / all -> p50, p90, p99
    slo_value_ms: float
    utilisation: float
    queue_ms_mean: float
    meets_slo: bool
    # open-loop load above what these GPUs serve: the queue grows for as long as the run
    # lasts, so the percentiles only measure the run's length (never meets an SLO)
    overloaded: bool = False
    capacity_rps: float | None = None  # requests/s these GPUs serve at this run's batching
    requests_per_replica: float = 0.0
    # time-average share of the replicas' KV room held by started, unfinished requests
    kv_full: float = 0.0
    # per-replica caches (routing.py): shares of prompt tokens from the serving replica's
    # HBM, from a shared tier, recomputed; and the routing's balance per replica
    split: tuple[float, float, float] | None = None
    balance: dict[str, Any] | None = None


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
    # A wider replica shape that needs fewer GPUs (or as many and fewer nodes) than this
    # answer at the default (smallest) shape: {"shape", "gpus", "nodes", "answer"}
    wider_shape: dict[str, Any] | None = None
    router: str = RT.DEFAULT_ROUTER  # the router the answer was sized with (routing.py)
    # the same deployment under another router: {"router", "gpus": {option: GPUs}, "nodes"}
    other_router: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def option(self, name: str) -> OptionResult:
        return next(o for o in self.options if o.option == name)

    def to_dict(self) -> dict[str, Any]:
        from xmemplan.plan import header

        d = {**header(), **{k: v for k, v in self.__dict__.items()
                             if k not in ("options", "extra")}}
        d["options"] = [
            {"option": o.option, "gpus": o.gpus, "nodes": o.nodes,
             "goodput_rps": o.goodput_rps, "goodput_capped": o.goodput_capped,
             "note": o.note,
             **({} if o.point is None else {
                 "hit_ratio": o.point.hit_ratio, "hbm_share_of_hits": o.point.hbm_share,
                 "ttft_ms": o.point.ttft_ms, "utilisation": o.point.utilisation,
                 "queue_ms_mean": o.point.queue_ms_mean, "meets_slo": o.point.meets_slo,
                 "overloaded": o.point.overloaded, "capacity_rps": o.point.capacity_rps,
                 "requests_per_replica": o.point.requests_per_replica,
                 "kv_full": o.point.kv_full,
                 **({} if o.point.split is None else {"hit_split": dict(zip(
                     ("hbm", "tier", "recompute"), o.point.split, strict=True)),
                     "balance": o.point.balance})})}
            for o in self.options]
        d["gpus_per_option"] = {o.option: o.gpus for o in self.options}
        return d


# --- one simulation ------------------------------------------------------------------------

class Planner:
    """Runs and caches simulations of `req` (option, GPUs, nodes, load scale)."""

    def __init__(self, req: SizeRequest) -> None:
        if req.slo_s <= 0:
            raise UsageError("the TTFT SLO must be positive")
        self.req = req
        w = req.workload
        n = req.requests
        # KV bytes per token: one GPU's share (what HBM holds and each GPU loads), and the
        # whole token's (what a tier stores: every rank backs up its own heads)
        self.kvb = M.kv_bytes_per_token_per_gpu(req.model, req.shape)
        self.kvb_all = float(req.model.kv_bytes_per_token)
        rng = np.random.default_rng(req.seed)
        self.trace_order = w.session is not None and w.timestamp_s is not None \
            and req.load.kind == "trace"
        if self.trace_order:
            idx = np.arange(len(w.prompt_tokens))
        else:
            idx = rng.integers(0, len(w.prompt_tokens), n) if len(w.prompt_tokens) > 1 \
                else np.zeros(n, np.int64)
        self.idx = idx
        self.keep_draw = rng.random(len(idx))
        self.cache: dict[tuple[str, int, int, float], Point] = {}
        self.sims = 0
        # the deployment's load over the trace's: scales the trace's working set and curve
        self.load_factor = 1.0
        if w.rate_rps and req.load.rate_rps:
            self.load_factor = req.load.rate_rps / w.rate_rps
        elif w.live_sessions and req.load.users:
            self.load_factor = req.load.users / w.live_sessions
        self.router = RT.canonical(req.router)
        # per-replica caches when the workload names what requests share: a trace's sessions
        # in their own order, or prefix groups (the profile's, or --prefix-groups)
        self.groups: np.ndarray | None = None
        if w.group is not None:
            self.groups = w.group[idx]
        elif req.prefix_groups > 0:
            self.groups = rng.integers(0, req.prefix_groups, len(idx))
        self.placed = (self.trace_order or self.groups is not None) \
            and req.load.kind != "users"
        self.placements: dict[tuple[str, int, int, float], RT.Placement] = {}
        self._hold: tuple[float, float] | None = None

    # capacities -------------------------------------------------------------------------
    def hbm_tokens(self, gpus: int) -> float:
        r = self.req
        per = M.kv_room_tokens(r.model, r.gpu, r.shape, r.mem_fraction)
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
    def traffic(self, option: str, gpus: int, nodes: int, scale: float) -> Traffic:
        req, w = self.req, self.req.workload
        idx = self.idx
        n = len(idx)
        order = np.arange(n)
        arr, prev, think, route = arrivals(
            req.load, n, req.seed, scale=scale,
            session=None if w.session is None else w.session[idx],
            timestamp_s=None if w.timestamp_s is None else w.timestamp_s[idx],
            order=order)
        idx = idx[order]
        prompt = w.prompt_tokens[idx]
        out = (np.full(n, req.output_tokens, np.int64) if w.output_tokens is None
               else np.maximum(1, w.output_tokens[idx]).astype(np.int64))
        if self.placed:
            pl = self.placement(option, gpus, nodes, scale)
            zero = np.zeros(n)
            return Traffic(arr, prompt, hit_hbm=pl.hit_hbm,
                           hit_dram=pl.hit_tier if option == "host-dram" else zero,
                           hit_xmem=pl.hit_tier if option == "xmem" else zero,
                           output=out, prev=prev, think=think, route=pl.replica)
        h_all, share = self.hit_split(option, gpus, nodes)
        factor = min(1.0, h_all / w.token_hit_ratio) if w.token_hit_ratio > 0 else 0.0
        # A smaller cache loses whole prefixes, not a slice of every one (an LRU keeps
        # what was reused soon): each request keeps its hits with probability `factor`
        # (the same draw in every run, so options and GPU counts compare like for like).
        keep = self.keep_draw[: len(idx)] < factor
        hits = np.minimum(prompt, np.where(keep, w.hit_tokens[idx], 0.0))
        in_hbm = np.floor(hits * share)
        rest = hits - in_hbm
        zero = np.zeros(n)
        return Traffic(arr, prompt, hit_hbm=in_hbm,
                       hit_dram=rest if option == "host-dram" else zero,
                       hit_xmem=rest if option == "xmem" else zero,
                       output=out, prev=prev, think=think, route=route)

    # per-replica caches -------------------------------------------------------------------
    def stream(self, scale: float) -> RT.Stream:
        """The requests in arrival order as the router sees them (routing.Stream)."""
        req, w = self.req, self.req.workload
        n = len(self.idx)
        order = np.arange(n)
        arr, _, _, _ = arrivals(
            req.load, n, req.seed, scale=scale,
            session=None if w.session is None else w.session[self.idx],
            timestamp_s=None if w.timestamp_s is None else w.timestamp_s[self.idx],
            order=order)
        idx = self.idx[order]
        prompt = w.prompt_tokens[idx].astype(np.float64)
        out = (np.full(n, float(req.output_tokens)) if w.output_tokens is None
               else np.maximum(1, w.output_tokens[idx]).astype(np.float64))
        if self.trace_order and w.session is not None:
            session = w.session[idx].astype(np.int64)
            hit = np.minimum(prompt, w.hit_tokens[idx])
        else:  # open arrivals drawn from the samples: every request a session of its own
            session = np.arange(n, dtype=np.int64)
            hit = np.zeros(n)
        if self.groups is not None:
            group = self.groups[order].astype(np.int64)
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
            step = ((e.dense_weight_bytes + e.expert_weight_bytes) / e.hbm_bandwidth
                    + e.decode_fixed_s)
            self._hold = (t / p50, step)
        return self._hold

    def deployment(self, option: str, gpus: int, nodes: int) -> RT.Deployment:
        """Replicas, each one's HBM room, and the shared tier caches of `option`."""
        req = self.req
        R = max(1, gpus // req.shape.gpus)
        room = M.kv_room_tokens(req.model, req.gpu, req.shape, req.mem_fraction)
        if option == "hbm-only":
            return RT.Deployment(R, room, np.full(R, -1, np.int64), np.zeros(0))
        t = req.host if option == "host-dram" else req.xmem
        tier_of = tier_domains(t.share_scope, R, req.shape.gpus, req.gpu.gpus_per_server,
                               t.share_gpus)
        d = int(tier_of.max()) + 1
        total = self.tier_tokens(option, gpus, nodes)
        return RT.Deployment(R, room, tier_of, np.full(d, total / d))

    def placement(self, option: str, gpus: int, nodes: int, scale: float) -> RT.Placement:
        key = (option, gpus, nodes if option == "xmem" else 0, scale)
        if key not in self.placements:
            self.placements[key] = RT.place(self.stream(scale),
                                            self.deployment(option, gpus, nodes),
                                            self.router)
        return self.placements[key]

    def run(self, option: str, gpus: int, nodes: int = 0, scale: float = 1.0,
            instant_loads: bool = False) -> Point:
        key = (option + ("!" if instant_loads else ""), gpus, nodes, scale)
        if key in self.cache:
            return self.cache[key]
        req = self.req
        replicas = max(1, gpus // req.shape.gpus)
        e = engine_for(req.setup, replicas=replicas, nodes=max(nodes, 1),
                       load_tier="host" if option == "host-dram" else "xmem")
        if option != "xmem":
            e = e.replace(node_bandwidth=math.inf)
        if instant_loads:
            e = e.replace(dram_bandwidth=1e30, xmem_bandwidth=1e30, node_bandwidth=math.inf,
                          switch_bandwidth=math.inf)
        tr = self.traffic(option, gpus, nodes, scale)
        r = simulate(tr, e)
        self.sims += 1
        if self.placed:
            pl = self.placement(option, gpus, nodes, scale)
            hbm, tier, _ = pl.split()
            h_all, share = hbm + tier, (hbm / (hbm + tier) if hbm + tier > 0 else 0.0)
        else:
            h_all, share = self.hit_split(option, gpus, nodes)
        p = self._point(option, gpus, nodes, h_all, share, r, scale)
        if self.placed:
            p.split = pl.split()
            p.balance = balance(pl, replicas, tr.output)
        self.cache[key] = p
        return p

    def _point(self, option: str, gpus: int, nodes: int, h: float, share: float,
               r: SimResult, scale: float = 1.0) -> Point:
        req = self.req
        keep = np.argsort(r.arrival, kind="stable")[int(len(r.arrival) * WARMUP_SHARE):]
        ttft = r.ttft[keep] * 1e3
        warm = r.warm[keep]
        groups = {"warm": ttft[warm], "cold": ttft[~warm], "all": ttft}
        stats = {k: ({f"p{q:g}": float(np.percentile(v, q)) for q in (50, 90, 99)}
                     if v.size else {}) for k, v in groups.items()}
        base = groups["warm"] if req.slo_on == "warm" and warm.any() else groups["all"]
        value = float(np.percentile(base, req.slo_percentile))
        over, cap = self._overload(r, ttft, scale)
        return Point(option=option, gpus=gpus, nodes=nodes, hit_ratio=h, hbm_share=share,
                     ttft_ms=stats, slo_value_ms=value, utilisation=r.utilisation(),
                     queue_ms_mean=float(np.mean(r.queue_delay[keep]) * 1e3),
                     meets_slo=value <= req.slo_s * 1e3 and not over, overloaded=over,
                     capacity_rps=cap, requests_per_replica=len(r.arrival) / len(r.busy),
                     kv_full=self._kv_full(r, gpus))

    def _kv_full(self, r: SimResult, gpus: int) -> float:
        """Little's law over the run: the KV tokens of started, unfinished requests (prompt
        and output, each from its start to its end), time-averaged, over the replicas'
        KV room (`hbm_tokens`)."""
        room, span = self.hbm_tokens(gpus), r.span
        if room <= 0 or span <= 0:
            return 0.0
        t = r.traffic
        held = float(np.sum((t.prompt + t.output) * (r.done - r.start)))
        return held / span / room

    def _overload(self, r: SimResult, ttft_ms: np.ndarray, scale: float
                  ) -> tuple[bool, float | None]:
        """(overloaded, requests/s the replicas serve) for an open-loop load.

        Capacity = replicas x requests / busy replica-seconds (at this run's batching).
        Overloaded when the offered rate is above it, i.e. the replicas were given more
        work than the arrival window lasts, and either TTFT grows through the run (the
        last third of requests waits at least 1.25x as long as the first: a queue that
        never drains) or the run is too short to show it (fewer than
        MIN_REQUESTS_PER_REPLICA requests per replica: a run of one request per replica
        shows no queue at any rate). Closed-loop users cannot overload (they wait)."""
        rate = self.req.load.load_rps()
        busy = float(r.busy.sum())
        if self.req.load.kind == "users" or not rate or busy <= 0 or len(ttft_ms) < 3:
            return False, None
        cap = len(r.busy) * len(r.arrival) / busy
        k = len(ttft_ms) // 3
        trend = float(np.mean(ttft_ms[-k:])) > 1.25 * float(np.mean(ttft_ms[:k]))
        short = len(r.arrival) < MIN_REQUESTS_PER_REPLICA * len(r.busy)
        # The load these replicas were offered: the run's own arrivals. Open-loop arrivals
        # are the requested rate; a trace's sessions wait for their replies, so they arrive
        # slower than the rate named (the nominal figure had flagged a run 3 % busy).
        span = float(r.arrival.max() - r.arrival.min())
        offered = (len(r.arrival) - 1) / span if span > 0 else rate * scale
        return bool(offered > cap and (trend or short)), cap

    # searches ---------------------------------------------------------------------------
    def fewest_gpus(self, option: str, nodes: int = 0, slo_s: float | None = None,
                    instant_loads: bool = False) -> int | None:
        slo_ms = (self.req.slo_s if slo_s is None else slo_s) * 1e3
        step = self.req.shape.gpus

        def ok(g: int) -> bool:
            pt = self.run(option, g, nodes, instant_loads=instant_loads)
            return pt.slo_value_ms <= slo_ms and not pt.overloaded

        top = self.top_gpus()
        if not ok(top):  # no count helps: say so after one run, not after doubling to it
            return None
        lo, hi = 0, step
        while not ok(hi):
            lo = hi
            hi *= 2
            if hi >= top:
                hi = top
                break
        while hi - lo > step:  # ok(hi), not ok(lo) (or lo = 0)
            mid = (lo + hi) // 2 // step * step
            if mid <= lo:
                break
            if ok(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def top_gpus(self) -> int:
        """The largest GPU count searched: --max-gpus rounded down to whole replicas."""
        step = self.req.shape.gpus
        return max(step, self.req.max_gpus // step * step)

    def fewest_nodes(self, gpus: int, slo_s: float | None = None) -> int | None:
        """Fewest X-Mem nodes whose bandwidth lets `gpus` GPUs meet the SLO.

        Never more than the count at which the nodes give every GPU its full link at once
        (more cannot speed a load up)."""
        slo_ms = (self.req.slo_s if slo_s is None else slo_s) * 1e3
        e = engine_for(self.req.setup, replicas=max(1, gpus // self.req.shape.gpus), nodes=1)
        one = e.node_bandwidth * self.req.shape.gpus  # one node, over all its GPUs
        ceiling = max(1, math.ceil(gpus * e.xmem_bandwidth / one - 1e-9)) \
            if math.isfinite(one) else 1

        def ok(n: int) -> bool:
            if n >= ceiling:
                return True
            pt = self.run("xmem", gpus, n)
            return pt.slo_value_ms <= slo_ms and not pt.overloaded

        if ok(1):
            return 1
        hi = 2
        while not ok(hi):
            hi *= 2
            if hi > self.req.max_nodes:
                return None
        lo = hi // 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def goodput_bound(self, option: str, gpus: int, nodes: int
                      ) -> tuple[float | None, bool]:
        """(goodput, capped): the largest load (requests/s, or users x this for closed
        loop) within the SLO; capped when the load still complies at GOODPUT_CEILING x the
        requested one, where the search stops (the figure is then a lower bound)."""
        base = self.req.load.load_rps()
        if base is None:
            return None, False

        def ok(s: float) -> bool:
            return self.run(option, gpus, nodes, scale=s).meets_slo

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
    its rack's (`share_gpus` GPUs; unset: one for all) or the cluster's."""
    r = np.arange(replicas, dtype=np.int64)
    if scope == "replica":
        return r
    if scope == "server":
        return r * replica_gpus // max(1, gpus_per_server)
    if scope == "rack" and share_gpus:
        return r * replica_gpus // share_gpus
    return np.zeros(replicas, np.int64)


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


SHAPES_TP = (2, 4, 8)
GOODPUT_CEILING = 128  # goodput search stops at this multiple of the requested load
KV_FULL_WARN = 0.8  # a simulated KV cache this full on average: say the answer is optimistic


def plan(req: SizeRequest, *, with_table: bool = True, with_curve: bool = True,
         with_router: bool = True) -> SizeResult:
    """Size every option; see the module docstring. When compute binds so that no GPU
    count complies at the requested replica shape, wider tensor parallelism is tried
    (TP 2, 4, 8; EP = TP for MoE) and the first shape that complies is the answer. The
    answer names the router; with per-replica caches, the hit split and balance of each
    option are reasons, and so is the same deployment under another router."""
    res = _plan_shapes(req, with_table=with_table, with_curve=with_curve)
    _routing(req, res, compare=with_router)
    return res


def _routing(req: SizeRequest, res: SizeResult, *, compare: bool) -> None:
    name = RT.canonical(req.router)
    res.router = name
    default = " (the default)" if name == RT.DEFAULT_ROUTER else ""
    res.answer = res.answer.rstrip() + f" Router: {name}{default}."
    placed = any(o.point is not None and o.point.split is not None for o in res.options)
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


def _plan_shapes(req: SizeRequest, *, with_table: bool = True, with_curve: bool = True
                 ) -> SizeResult:
    res = _plan(req, with_table=with_table, with_curve=with_curve)
    if res.cheapest != "none" and req.auto_shape:
        _hint_wider(req, res)
    if res.cheapest != "none" or not req.auto_shape:
        return res
    tried = []
    for tp in SHAPES_TP:
        if tp <= req.shape.tp or tp > req.max_gpus:
            continue
        tried.append(f"tp{tp}")
        shape = M.Shape(tp=tp, ep=tp if req.model.expert_params else 1,
                        dp_attention=req.shape.dp_attention or req.dp_attention)
        wider = _plan(replace(req, shape=shape), with_table=with_table,
                      with_curve=with_curve)
        if wider.cheapest != "none":
            wider.reasons.insert(0, f"At {req.shape.label} no GPU count meets the SLO: "
                                 f"{res.answer}")
            wider.answer = wider.answer.rstrip(".") + f", as {shape.label} replicas."
            why = res.binding.split(" (")[0]
            wider.binding = f"{why} at {req.shape.label}; at {shape.label} {wider.binding}"
            return wider
    if tried:
        res.reasons.append(f"Wider replicas ({', '.join(tried)}) do not meet it either.")
    return res


def _cost(r: SizeResult) -> tuple[int, int] | None:
    """(GPUs, X-Mem nodes) the answer buys; None when nothing complies."""
    if r.cheapest == "none":
        return None
    g = r.option(r.cheapest).gpus
    return None if g is None else (g, r.recommended_nodes or 0)


def _hint_wider(req: SizeRequest, res: SizeResult) -> None:
    """The answer stays at the smallest shape that fits (the default), but when a wider
    one (TP 2, 4, 8) needs fewer GPUs, or as many and fewer nodes, say so: long prompts
    make tensor parallelism pay even where one GPU per replica complies."""
    best = _cost(res)
    if best is None:
        return
    found: tuple[tuple[int, int], M.Shape, SizeResult] | None = None
    for tp in SHAPES_TP:
        if tp <= req.shape.tp or tp > min(req.max_gpus, best[0]):
            continue  # a replica of tp GPUs cannot use fewer GPUs than tp
        shape = M.Shape(tp=tp, ep=tp if req.model.expert_params else 1,
                        dp_attention=req.shape.dp_attention or req.dp_attention)
        wider = _plan(replace(req, shape=shape), with_table=False, with_curve=False)
        c = _cost(wider)
        if c is not None and c < (found[0] if found else best):
            found = (c, shape, wider)
    if found is None:
        return
    (g, n), shape, wider = found
    flags = f"--tp {shape.tp}" + (f" --ep {shape.ep}" if shape.ep > 1 else "")
    res.wider_shape = {
        "shape": shape.label, "gpus": g, "nodes": n, "answer": wider.answer,
        "line": f"Wider replicas need less: as {shape.label} replicas, "
                f"{wider.answer.split(':')[0]} ({wider.cheapest}); pass {flags} to size "
                "that shape."}


def _gpus(n: int | None) -> str:
    """'1 GPU', '5 GPUs' (the answer line is read aloud; no '1 GPUs')."""
    return "- GPUs" if n is None else units.count(n, "GPU")


def _plan(req: SizeRequest, *, with_table: bool, with_curve: bool) -> SizeResult:
    p = Planner(req)
    slo_ms = req.slo_s * 1e3
    n_cap = nodes_for_capacity(p)
    big = req.max_nodes

    g_hbm = p.fewest_gpus("hbm-only")
    g_host = p.fewest_gpus("host-dram")
    g_x_inf = p.fewest_gpus("xmem", big)  # node bandwidth not limiting
    n_bw = p.fewest_nodes(g_x_inf) if g_x_inf is not None else None
    n_rec = None if n_bw is None else max(n_bw, n_cap)
    g_x = None if n_rec is None else p.fewest_gpus("xmem", n_rec)
    g_instant = p.fewest_gpus("xmem", big, instant_loads=True)
    # Instant loads are never slower than a real tier, so a count that complies with one
    # complies with them: the bisecting searches assume compliance grows with the GPU
    # count, and where a run breaks that (a nominal-rate overload flag once made instant
    # loads "need" 9 GPUs beside X-Mem's 5) the line still says the smallest count known.
    known = [g for g in (g_instant, g_x, g_host, g_hbm) if g is not None]
    g_instant = min(known) if known else None

    top = p.top_gpus()

    def opt(name: str, g: int | None, n: int | None) -> OptionResult:
        pt = None if g is None else p.run(name, g, n or 0)
        note = ""
        if g is None:
            at_top = p.run(name, top, big if name == "xmem" else 0)
            note = f"no GPU count up to {top:,} meets the SLO" + (
                f" (overloaded at this rate: {top:,} GPUs serve about "
                f"{at_top.capacity_rps or 0:,.0f} requests/s)" if at_top.overloaded else "")
        return OptionResult(name, g, n, pt, note=note)

    options = [opt("hbm-only", g_hbm, None), opt("host-dram", g_host, None),
               opt("xmem", g_x, n_rec)]
    for o in options:
        if o.gpus is not None:
            o.goodput_rps, o.goodput_capped = p.goodput_bound(o.option, o.gpus, o.nodes or 0)

    # the answer -------------------------------------------------------------------------
    reasons: list[str] = []
    headroom = None
    saved = None if g_host is None or g_x is None else g_host - g_x
    load = describe_load(req.load)
    slo_txt = f"{slo_ms:,.0f} ms" if slo_ms >= 1 else f"{slo_ms:.3g} ms"
    pq = f"p{req.slo_percentile:g}"
    if g_x is None and g_host is None and g_hbm is None:
        alone = p.run("xmem", top, big, instant_loads=True)
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
            answer = (f"No option meets the {slo_txt} SLO with up to {top:,} GPUs at {load}: "
                      f"even with instant loads TTFT {pq} is {alone.slo_value_ms:,.0f} ms "
                      "(compute).")
            binding = "compute (no GPU count complies)"
            reasons.append("Raise the SLO, use a faster GPU or tensor parallelism (--tp), "
                           "or shorten prompts; no memory tier changes compute.")
    elif g_host is not None and (g_x is None or g_host <= g_x):
        nx = n_rec or n_cap
        hx = p.run("xmem", g_host, nx)
        hh = p.run("host-dram", g_host)
        headroom = hh.slo_value_ms - hx.slo_value_ms
        cheapest = ("hbm-only" if g_hbm is not None and g_hbm <= g_host else "host-dram")
        g_best = g_hbm if cheapest == "hbm-only" else g_host
        binding = ("compute sets the GPUs" if g_instant is not None and g_instant >= g_host
                   else "load bandwidth sets the GPUs")
        compare = (f"({pq} {hh.slo_value_ms:,.0f} -> {hx.slo_value_ms:,.0f} ms on "
                   f"{_gpus(g_host)})")
        xmem_txt = (f"X-Mem adds {headroom:,.0f} ms of headroom {compare}" if headroom >= 0.5
                    else f"X-Mem with {units.count(nx, 'node')} is no faster "
                    f"{compare}")
        answer = (f"0 X-Mem nodes for {_gpus(g_best)}: "
                  f"{'HBM alone' if cheapest == 'hbm-only' else 'host DRAM'} meets the "
                  f"{slo_txt} SLO at {load}; {xmem_txt}.")
    else:
        assert g_x is not None and n_rec is not None and n_bw is not None
        node_bind = ("capacity sets the nodes" if n_cap > n_bw
                     else "node bandwidth sets the nodes" if n_bw > 1
                     else "one node suffices")
        gpu_bind = ("compute" if g_instant is not None and g_instant >= g_x
                    else "per-GPU load bandwidth")
        binding = f"{gpu_bind} sets the GPUs, {node_bind}"
        cheapest = "xmem"
        host_txt = (f"host DRAM needs {_gpus(g_host)}, {saved:,} more" if g_host is not None
                    and saved is not None
                    else f"host DRAM does not meet it with up to {top:,} GPUs")
        answer = (f"{units.count(n_rec, 'X-Mem node')} for {_gpus(g_x)}: meets "
                  f"the {slo_txt} SLO at {load} ({host_txt}); binding: {binding}.")
        if saved:
            reasons.append(f"X-Mem is the cheaper option if {units.count(n_rec, 'node')} "
                           f"cost{'s' if n_rec == 1 else ''} less than {_gpus(saved)}.")
    reasons.append(f"Nodes: {'-' if n_bw is None else f'{n_bw:,}'} for bandwidth, {n_cap:,} "
                   "for capacity (working set / node capacity).")
    if g_instant is not None:
        reasons.append(f"With instant KV loads {_gpus(g_instant)} would do: the rest of the "
                       "GPU count is compute (prefill, decode) and queueing.")
    full = [o for o in options if o.point is not None and o.point.kv_full >= KV_FULL_WARN]
    if full:
        worst = max(full, key=lambda o: o.point.kv_full if o.point else 0.0)
        assert worst.point is not None
        reasons.append(
            f"The KV cache is {worst.point.kv_full:.0%} full on average ({worst.option}, "
            f"{_gpus(worst.gpus)}): where agents fill it, a published run (12 agents on one "
            "H100, KV 92-94 % full) measured TTFT 5-15x above this simulator's and no gain "
            "from X-Mem (docs/validation.md, 'Loaded check'): read these figures as "
            "optimistic.")
    thin = [o for o in options if o.point is not None
            and o.point.requests_per_replica < MIN_REQUESTS_PER_REPLICA]
    if thin:
        o = min(thin, key=lambda o: o.point.requests_per_replica if o.point else 0.0)
        assert o.point is not None
        reasons.append(f"Only {o.point.requests_per_replica:,.1f} simulated requests per "
                       f"replica at {_gpus(o.gpus)} ({o.option}): the percentiles are of a "
                       "short run, not a steady state; raise --requests.")

    table = _table(p, n_cap) if with_table else []
    saving = [t for t in table if t["gpus_saved"]]
    if saving and cheapest != "xmem":
        t = max(saving, key=lambda t: t["ttft_slo_ms"])
        reasons.append(f"X-Mem becomes worth buying at an SLO of {t['ttft_slo_ms']:,.0f} ms or "
                       f"tighter: it saves {_gpus(t['gpus_saved'])} there "
                       f"({t['gpus_host_dram']:,} -> {t['gpus_xmem']:,}).")
    curve = _load_curve(p, options) if with_curve else {}
    ws = p.working_set_tokens()
    w = req.workload
    conc = req.load.users if req.load.kind == "users" else None
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
    )
    res.extra["simulations"] = p.sims
    return res


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
    for o in OPTIONS:
        pts = [p.run(o, g, nodes if o == "xmem" else 0, scale=s) for s in LOAD_SCALES]
        out[o] = [pt.slo_value_ms for pt in pts]
        out[o + "_overloaded"] = [pt.overloaded for pt in pts]
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
