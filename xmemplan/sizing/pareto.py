"""`size --gpus N`: a load sweep of a multi-turn workload, interactivity against throughput.

For each option (host DRAM, X-Mem) and each load (AIPerf user-centric QPS, or concurrent
users), the synthetic workload's requests (`xmemplan.sizing.synthetic`) are replayed
through the iteration-level engine (`xmemplan.sizing.engine`, as the planner runs it;
GPU prefix caching off, every hit loaded from the tier, write-through on) on N GPUs, and
each run reports what AIPerf reports for it (definitions: AIPerf metrics reference,
docs.nvidia.com/aiperf/v0.13.0/reference/ai-perf-metrics-reference.md):

- TTFT per request: send to first token;
- inter-token latency per request: (last token - first token) / (output tokens - 1), from
  the engine's decode steps (every running request gains one token per step; a prefill
  batch, with its KV load, stalls the decodes under SGLang's prefill-first schedule);
- interactivity: output tokens/s per user = 1 / inter-token latency, averaged over requests
  (AIPerf's "output token throughput per user");
- throughput: output tokens over the run's window (first kept send to last reply) / its
  length, per GPU (AIPerf's "output token throughput" / GPUs);
- the longest gap between two tokens of each request (`itl_max_ms`, the engine's).

The first tenth of requests by send time is left out (warm-up, as the planner does).

User-centric sends wait for the previous reply when it is late (`send_k = max(done_{k-1},
send_{k-1} + gap)`), and a late send delays the user's later ones. The simulator takes
`max(arrival, done of prev)`; arrivals are re-planned from its effective sends (`send_{k-1}
+ gap`) and the run repeated until no send moves, at most MAX_ITERATIONS runs. Below
saturation it settles in two; near it single sends keep moving (a user a few ms late
waits for a reply, one a few ms early does not) while the aggregates settle: the range of
interactivity over the last re-plans, over its mean, is reported as `spread`.

Pareto: per option, a point is Pareto-optimal when no other point of that option has at
least its interactivity and its throughput, one of them higher.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from xmemplan.errors import UsageError
from xmemplan.sizing.engine import Result as EngineResult
from xmemplan.sizing.engine import run as run_engine
from xmemplan.sizing.sim import Traffic
from xmemplan.sizing.simmodel import Setup, config_for, requests_for
from xmemplan.sizing.synthetic import Schedule, SyntheticWorkload, schedule, tier_hits
from xmemplan.threads import map_ordered

OPTIONS = ("host-dram", "xmem")
OPTION_NAMES = {"host-dram": "host DRAM", "xmem": "X-Mem", "hbm-only": "HBM only"}
WARMUP_SHARE = 0.1
MAX_ITERATIONS = 6
MAX_LOADS = 32
LATE_SHARE = 0.5  # sends waiting for replies from which users no longer keep the schedule


@dataclass(frozen=True)
class SweepRequest:
    setup: Setup
    workload: SyntheticWorkload
    gpus: int = 1
    rates: tuple[float, ...] = ()  # user-centric QPS over all users
    concurrencies: tuple[int, ...] = ()  # or closed-loop users
    tier_capacity_bytes: dict[str, float] = field(default_factory=dict)
    options: tuple[str, ...] = OPTIONS
    nodes: int = 1
    requests: int = 4000
    seed: int = 0

    @property
    def loads(self) -> list[tuple[str, float]]:
        if self.rates:
            return [("qps", float(r)) for r in self.rates]
        return [("users", float(c)) for c in self.concurrencies]


@dataclass
class SweepPoint:
    option: str
    load_kind: str  # qps | users
    load: float
    run: int  # index in the list of loads (the post runs QPS 3.0 twice)
    gpus: int
    interactivity: float  # mean output tokens/s per user
    interactivity_p50: float
    throughput: float  # output tokens/s over the deployment
    throughput_per_gpu: float
    ttft_ms: dict[str, float]
    itl_ms: dict[str, float]
    hit_ratio: float
    offered_rps: float
    served_rps: float
    late_share: float  # sends that waited for the previous reply (past their schedule)
    requests: int
    iterations: int
    residual_ms: float
    spread: float = 0.0  # interactivity's range over the last re-plans / its mean
    # the longest gap between two tokens of a request (a prefill batch stalling its
    # decode), percentiles over requests
    itl_max_ms: dict[str, float] = field(default_factory=dict)
    pareto: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SweepResult:
    answer: str
    points: list[SweepPoint]
    gains: list[dict[str, Any]]  # per run: X-Mem over host DRAM
    medium_load: float | None
    high_load: float | None
    workload: str
    model: str
    gpu: str
    gpus: int
    engine: str
    assumptions: list[dict[str, str]]
    aiperf_command: str
    # per option: the highest load at which fewer than half the sends wait for a reply
    # (the users keep their schedule); None when none does, or for --concurrency loads
    keeps_schedule_up_to: dict[str, float | None] = field(default_factory=dict)
    num_users: int = 0
    simulations: int = 0

    def to_dict(self) -> dict[str, Any]:
        from xmemplan.plan import header

        d = {**header(), **{k: v for k, v in self.__dict__.items() if k != "points"}}
        d["points"] = [p.as_dict() for p in self.points]
        return d


def _q(v: np.ndarray) -> dict[str, float]:
    if not v.size:
        return {}
    return {f"p{q}": float(np.percentile(v, q)) for q in (50, 90, 99)}


def traffic_for(s: Schedule, hits: np.ndarray, option: str, send: np.ndarray) -> Traffic:
    zero = np.zeros(len(s))
    return Traffic(send, s.prompt, hit_dram=hits if option == "host-dram" else zero,
                   hit_xmem=hits if option == "xmem" else zero, output=s.output,
                   prev=s.prev, route=np.where(s.prev >= 0, -2, -1))


def _arrival(send: np.ndarray) -> np.ndarray:
    """`traffic_for(...).arrival` of a re-plan without the rest of Traffic: only the
    arrivals move (er0 was checked whole), and they get Traffic's own check."""
    a = np.ascontiguousarray(send, dtype=np.float64)
    if a.size and (not np.all(np.isfinite(a)) or a.min() < 0):
        raise UsageError("traffic: 'arrival' has a negative or non-finite value")
    return a


def replan(s: Schedule, send: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Sends on AIPerf's rule given the replies' done times: along each session, turn by
    turn, `send_k = max(done_{k-1}, send_{k-1} + gap)` (the simulator applies the max;
    this plans `send_{k-1} + gap`, the previous send being the effective one)."""
    planned = send.copy()
    eff = send.copy()
    first = s.turn == 0
    eff[first] = np.maximum(planned[first], np.where(s.prev[first] >= 0,
                                                      done[np.maximum(s.prev[first], 0)], 0))
    for k in range(1, int(s.turn.max(initial=0)) + 1):
        idx = np.flatnonzero(s.turn == k)
        p = s.prev[idx]
        planned[idx] = eff[p] + s.gap_s
        eff[idx] = np.maximum(planned[idx], done[p])
    return planned


def _kept(r: EngineResult) -> np.ndarray:
    order = np.argsort(r.arrival, kind="stable")
    return order[int(len(order) * WARMUP_SHARE):]


def _interactivity(r: EngineResult, s: Schedule) -> float:
    keep = _kept(r)
    out = s.output[keep].astype(np.float64)
    multi = out > 1
    itl = (r.done - r.first)[keep][multi] / (out[multi] - 1)
    itl = itl[itl > 0]
    return float(np.mean(1.0 / itl)) if itl.size else 0.0


def load_schedule(req: SweepRequest, kind: str, load: float) -> Schedule:
    """The users' schedule at one load (the same for every option)."""
    if kind == "qps":
        return schedule(req.workload, rate_rps=load, requests=req.requests)
    return schedule(req.workload, concurrency=int(load), requests=req.requests)


def run_point(req: SweepRequest, option: str, kind: str, load: float, run: int,
              s: Schedule | None = None) -> tuple[SweepPoint, int]:
    """One option at one load (on schedule `s` when given: `load_schedule`'s); returns the
    point and the simulations it took."""
    w = req.workload
    st = req.setup
    if s is None:
        s = load_schedule(req, kind, load)
    kvb = float(st.model.kv_bytes_per_token)
    cap = req.tier_capacity_bytes.get(option, math.inf) / kvb if option != "hbm-only" else 0.0
    hits = tier_hits(w, s, cap, st.transfer.page_tokens) if cap > 0 else np.zeros(len(s))
    replicas = max(1, req.gpus // st.shape.gpus)
    tier = "host" if option == "host-dram" else "xmem"
    cfg = config_for(st, replicas=replicas, nodes=max(1, req.nodes), load_tier=tier,
                     policy="vllm" if st.mixed else "sglang",
                     prompt_p50=float(np.median(s.prompt)), tier_write=option != "hbm-only",
                     connector=option != "hbm-only")
    # GPU prefix caching off (the post's run): every hit is loaded from the tier
    cfg = cfg.replace(prefix_caching=False)
    if option != "xmem":
        cfg = cfg.replace(node_bandwidth=math.inf)
    tier_code = -1 if option == "hbm-only" else (0 if tier == "host" else 1)

    # the engine's requests once: a re-plan moves only the arrivals (block keys unchanged)
    er0 = requests_for(traffic_for(s, hits, option, s.ideal_send()), shared=hits,
                       tier_tokens=hits if tier_code >= 0 else np.zeros(len(s)),
                       tier=tier_code, block_tokens=cfg.block_tokens)

    def simulate(send: np.ndarray) -> EngineResult:
        return run_engine(replace(er0, arrival=_arrival(send)), cfg)[0]

    send = s.ideal_send()
    iterations = 0
    residual = 0.0
    seen: list[float] = []  # interactivity of each run from the third on
    while True:
        r = simulate(send)
        iterations += 1
        if iterations >= 3:
            seen.append(_interactivity(r, s))
        if s.gap_s <= 0:
            break
        new = replan(s, send, r.done)
        residual = float(np.max(np.abs(new - send))) if len(send) else 0.0
        if residual < 1e-6 or iterations >= MAX_ITERATIONS:
            break
        # near saturation the plan swings (a user a few ms late waits for a reply, one a
        # few ms early does not): after the first re-plans, move halfway
        send = new if iterations < 2 else 0.5 * (send + new)
    keep = _kept(r)
    out = s.output[keep].astype(np.float64)
    ttft = (r.first - r.arrival)[keep]
    multi = out > 1
    itl = ((r.done - r.first)[keep][multi] / (out[multi] - 1))
    per_user = 1.0 / itl[itl > 0] if itl.size else np.zeros(0)
    t0 = float(r.arrival[keep].min())
    t1 = float(r.done[keep].max())
    span = max(t1 - t0, 1e-9)
    thr = float(out.sum() / span)
    sv = np.asarray(seen, dtype=np.float64)
    spread = float((sv.max() - sv.min()) / max(float(sv.mean()), 1e-9)) if sv.size > 1 else 0.0
    point = SweepPoint(
        option=option, load_kind=kind, load=load, run=run, gpus=req.gpus,
        interactivity=float(per_user.mean()) if per_user.size else 0.0,
        interactivity_p50=float(np.median(per_user)) if per_user.size else 0.0,
        throughput=thr, throughput_per_gpu=thr / req.gpus,
        ttft_ms={k: v * 1e3 for k, v in _q(ttft).items()},
        itl_ms={k: v * 1e3 for k, v in _q(itl).items()},
        hit_ratio=float(hits[keep].sum() / s.prompt[keep].sum()),
        offered_rps=load if kind == "qps" else float(len(keep) / span),
        served_rps=float(len(keep) / span),
        late_share=float(np.mean(r.arrival[keep] > send[keep] + 1e-6)) if kind == "qps"
        else 0.0,
        requests=len(keep), iterations=iterations, residual_ms=residual * 1e3,
        spread=float(spread),
        itl_max_ms={k: v * 1e3 for k, v in _q(r.itl_max[keep][multi]).items()})
    return point, iterations


def mark_pareto(points: list[SweepPoint]) -> None:
    """Per option: Pareto-optimal in (interactivity, throughput), both higher is better."""
    for p in points:
        p.pareto = not any(
            q is not p and q.option == p.option
            and q.interactivity >= p.interactivity and q.throughput >= p.throughput
            and (q.interactivity > p.interactivity or q.throughput > p.throughput)
            for q in points)


def _gain(x: float, h: float) -> float | None:
    return None if not h else x / h - 1.0


def gains(points: list[SweepPoint]) -> list[dict[str, Any]]:
    """X-Mem over host DRAM at each run of the list."""
    by = {(p.option, p.run): p for p in points}
    out = []
    for run in sorted({p.run for p in points}):
        h, x = by.get(("host-dram", run)), by.get(("xmem", run))
        if h is None or x is None:
            continue
        out.append({"run": run, "load_kind": h.load_kind, "load": h.load,
                    "interactivity": _gain(x.interactivity, h.interactivity),
                    "throughput": _gain(x.throughput, h.throughput),
                    "ttft_p50": _gain(x.ttft_ms.get("p50", 0), h.ttft_ms.get("p50", 0)),
                    "itl_p50": _gain(x.itl_ms.get("p50", 0), h.itl_ms.get("p50", 0))})
    return out


def _mean_gain(g: list[dict[str, Any]], load: float, key: str) -> float | None:
    v = [r[key] for r in g if r["load"] == load and r[key] is not None]
    return float(np.mean(v)) if v else None


def pct(v: float | None) -> str:
    """A relative change as a signed whole percentage; a change that rounds to nothing is
    +0%, never -0%."""
    return "-" if v is None else f"{round(v * 100):+d}%"


def load_text(kind: str, load: float) -> str:
    return f"QPS {load:g}" if kind == "qps" else f"{load:g} users"


def sweep(req: SweepRequest, assumptions: list[dict[str, str]] | None = None) -> SweepResult:
    loads = req.loads
    if not loads:
        raise UsageError("no loads to sweep", "give --user-centric-rate 3,4,5 or "
                         "--concurrency 8,16")
    if len(loads) > MAX_LOADS:
        raise UsageError(f"{len(loads)} loads, more than {MAX_LOADS}", "sweep fewer loads")
    points: list[SweepPoint] = []
    # a load listed twice (the post runs QPS 3.0 twice) is the same simulation at the same
    # seed: run it once and give the repeat its own row
    first: dict[tuple[str, str, float], int] = {}  # (option, kind, load) -> its first run
    scheds: dict[tuple[str, float], Schedule] = {}
    for run, (kind, load) in enumerate(loads):
        for opt in req.options:
            if (opt, kind, load) not in first:
                first[(opt, kind, load)] = run
                if (kind, load) not in scheds:
                    scheds[(kind, load)] = load_schedule(req, kind, load)
    tasks = list(first.items())
    # each point is its own simulation: they run on the machine's cores (threads.py)
    ran = map_ordered(lambda t: run_point(req, t[0][0], t[0][1], t[0][2], t[1],
                                          scheds[(t[0][1], t[0][2])]), tasks)
    done = {key: p for (key, _), (p, _) in zip(tasks, ran, strict=True)}
    sims = sum(n for _, n in ran)
    for run, (kind, load) in enumerate(loads):
        for opt in req.options:
            seen = done[(opt, kind, load)]
            points.append(seen if seen.run == run else replace(seen, run=run))
    mark_pareto(points)
    g = gains(points)
    uniq = sorted({ld for _, ld in loads})
    kind = loads[0][0]
    medium = uniq[(len(uniq) - 1) // 2] if uniq else None
    high = uniq[-1] if uniq else None
    st = req.setup
    if g and medium is not None and high is not None:
        answer = (f"X-Mem: {pct(_mean_gain(g, medium, 'interactivity'))} interactivity at "
                  f"{load_text(kind, medium)} (medium load), "
                  f"{pct(_mean_gain(g, high, 'interactivity'))} interactivity and "
                  f"{pct(_mean_gain(g, high, 'throughput'))} throughput at "
                  f"{load_text(kind, high)} (high load), over host DRAM on "
                  f"{req.gpus} x {st.gpu.name}.")
    else:
        names = ", ".join(OPTION_NAMES.get(o, o) for o in req.options)
        answer = (f"Load sweep of {names} on {req.gpus} x {st.gpu.name}: "
                  f"{len(loads)} loads, Pareto points marked.")
    from xmemplan.sizing.synthetic import aiperf_command

    keeps: dict[str, float | None] = {}
    if kind == "qps":
        for opt in req.options:
            ok = [p.load for p in points if p.option == opt and p.late_share < LATE_SHARE]
            keeps[opt] = max(ok) if ok else None

    cmd = (aiperf_command(req.workload, rate_rps=loads[-1][1]) if kind == "qps"
           else aiperf_command(req.workload, concurrency=int(loads[-1][1])))
    return SweepResult(
        answer=answer, points=points, gains=g, medium_load=medium, high_load=high,
        workload=req.workload.describe(), model=st.model.name, gpu=st.gpu.name,
        gpus=req.gpus, engine="sglang" if not st.mixed else "vllm",
        assumptions=assumptions or [], aiperf_command=cmd, keeps_schedule_up_to=keeps,
        num_users=req.workload.num_users, simulations=sims)
