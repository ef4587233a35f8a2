"""The workload `size` plans for: per-request samples, arrivals, working set, LRU curve.

From flags (one prompt length and one hit ratio), from a `hitrate` profile (its
`requests_sample`, else its prompt-length and hit-ratio statistics), or the documented
default: the seed scenario of the Netpreme blog (Qwen3-30B-A3B-FP8 on an H100-class GPU,
64Ki-token prompts, hit ratio 0.98).

Arrivals for the simulator (`arrivals`):
- Poisson at a rate (requests/s over the deployment);
- closed-loop users: each user sends its next request a think time (exponential, seeded)
  after the previous one is done;
- a trace's own timestamps per session (profile sample with `session` and `timestamp_s`):
  the whole trace's clock is compressed (or stretched) by the load factor (--rate over
  the trace's own rate), session starts and the gaps inside a session alike, and a
  request never starts before the previous one of its session is done (sessions wait for
  their replies, so the load achieved can stay below the rate named: the planner reports
  both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from xmemplan.defaults import SEED_HIT_RATE, SEED_MODEL, SEED_PROMPT_TOKENS
from xmemplan.errors import InputError, UsageError

if TYPE_CHECKING:
    from xmemplan.profile import Profile

__all__ = [
    "SEED_HIT_RATE", "SEED_MODEL", "SEED_PROMPT_TOKENS", "Arrivals", "Copies", "Workload",
    "arrivals", "from_flags", "from_profile", "session_copies", "REACHED",
]
MAX_SAMPLES = 10_000
# a trace reaches the rate asked when its sessions offer at least this share of it (the
# planner's "reach only" reason uses the same line); below it, session copies are added
REACHED = 0.8


@dataclass(frozen=True)
class Workload:
    """Per-request samples (tokens) and what is known about the deployment's KV needs."""

    description: str
    prompt_tokens: np.ndarray
    hit_tokens: np.ndarray
    token_hit_ratio: float
    working_set_tokens: float | None = None
    capacity_curve: tuple[tuple[float, float], ...] = ()
    rate_rps: float | None = None  # the trace's own arrival rate
    model: str | None = None
    kv_bytes_per_token: int | None = None
    output_tokens: np.ndarray | None = None  # per request, when the profile has it
    session: np.ndarray | None = None  # per request session index (profile v2 sample)
    timestamp_s: np.ndarray | None = None  # per request arrival time in the trace
    live_sessions: float | None = None  # the trace's mean live sessions
    # shared-prefix group per request (-1: none) and its prefix's tokens (profile v2
    # `prefix_group`, `prefix_group_tokens`): what routing can exploit beyond sessions
    group: np.ndarray | None = None
    group_tokens: np.ndarray | None = None
    excluded_over_context: int = 0
    session_copies: int = 0  # copies of whole sessions added for the rate (session_copies)
    # the profile's finite cache (hitrate --cache-model): with vllm / sglang the replicas'
    # and tiers' caches of a placed workload follow it (xmemplan.sizing.cachemodel)
    cache_model: str | None = None
    cache_page_tokens: int | None = None
    cache_with_outputs: bool | None = None

    @property
    def prompt_p50(self) -> float:
        return float(np.median(self.prompt_tokens))

    def hit_at_capacity(self, capacity_tokens: float, working_set_tokens: float | None
                        ) -> float:
        """Token hit ratio of an LRU cache of `capacity_tokens` (at most the unlimited one).

        From the profile's LRU curve (hit ratio against capacity, exact for the trace) when
        it has one. Without a curve: the unlimited ratio when the working set fits, else 0
        (an LRU over a cyclically reused working set larger than itself keeps nothing that
        is asked for again); with no working set known, the unlimited ratio.
        """
        h = self.token_hit_ratio
        if self.capacity_curve:
            caps = np.array([c for c, _ in self.capacity_curve])
            hits = np.array([r for _, r in self.capacity_curve])
            return float(min(h, np.interp(capacity_tokens, caps, hits, left=0.0)))
        if working_set_tokens is None or capacity_tokens >= working_set_tokens:
            return h
        return 0.0


def check_hit_rate(h: float) -> float:
    if not (0.0 <= h <= 1.0) or math.isnan(h):
        raise UsageError(f"hit rate {h:g} is outside [0, 1]", "write it as a ratio, like 0.98")
    return h


SPREAD_SAMPLES = 200
Z90 = 1.2815515655446004  # the standard normal's 90th percentile


def lognormal_quantiles(p50: float, p90: float, n: int = SPREAD_SAMPLES,
                        shift: int = 0) -> np.ndarray:
    """n lengths at evenly spaced quantiles of the lognormal whose median is p50 and 90th
    percentile p90 (deterministic; `shift` rotates the order so that two such lists pair
    a long prompt with outputs of every length, not with the longest)."""
    from statistics import NormalDist

    if not (p90 >= p50 >= 1):
        raise UsageError(f"P50:P90 {p50:g}:{p90:g}: the 90th percentile must be at least "
                         "the median, both at least 1", "write it like 20k:60k")
    sigma = math.log(p90 / p50) / Z90
    nd = NormalDist()
    q = np.array([math.exp(math.log(p50) + sigma * nd.inv_cdf((k + 0.5) / n))
                  for k in range(n)])
    return np.maximum(1.0, np.round(np.roll(q, shift)))


def from_flags(prompt_tokens: int, hit_rate: float, description: str,
               prompt_p90: int | None = None) -> Workload:
    if prompt_tokens <= 0:
        raise UsageError("prompt tokens must be at least 1", "write it like '64Ki' or '8k'")
    check_hit_rate(hit_rate)
    s = (np.array([float(prompt_tokens)]) if prompt_p90 is None
         else lognormal_quantiles(prompt_tokens, prompt_p90))
    return Workload(description, s, np.floor(s * hit_rate), hit_rate)


def from_profile(prof: Profile) -> Workload:
    """Samples from `requests_sample` if present, else from the prompt histogram/quantiles."""
    path = prof.path
    h = prof.token_hit_ratio
    if h is None:
        h = prof.rounds_ge1_token_hit_ratio
    how: str
    out = sess = ts = grp = gtok = None
    if prof.sample_prompt.size:
        # v2 per-request fields (None in a v1 profile), checked by load_profile
        out, sess, ts = prof.sample_output, prof.sample_session, prof.sample_timestamp
        grp, gtok = prof.sample_group, prof.sample_group_tokens
        keep = prof.sample_prompt > 0
        keep[MAX_SAMPLES:] = False
        s = prof.sample_prompt[keep]
        p = prof.sample_hit[keep]
        out, sess, ts, grp, gtok = (None if a is None else a[keep]
                                    for a in (out, sess, ts, grp, gtok))
        if h is None:
            h = float(p.sum() / s.sum()) if s.sum() else 0.0
        how = f"{len(s):,} sampled requests"
    else:
        if h is None:
            raise InputError("no hit ratio in the profile", path=path,
                             field="hit_ratio.token_hit_ratio")
        s = _prompt_samples(prof)
        p = np.floor(s * h)
        how = f"prompt-length distribution ({len(s)} points), hit ratio {h:.3f}"
    if len(s) == 0:
        raise InputError("the profile has no requests with a prompt", path=path,
                         field="requests_sample")
    check_hit_rate(h)
    # The capacity curve is only the deployment's when one cache served every session.
    curve = prof.capacity_curve if prof.scope == "global" else ()
    arrival = prof.doc.get("arrival") if isinstance(prof.doc, dict) else None
    live = arrival.get("concurrency_mean") if isinstance(arrival, dict) else None
    if isinstance(live, int | float) and not isinstance(live, bool) and live > 0 \
            and not math.isfinite(live):
        raise InputError(f"not a finite number ({live!r})", path=path,
                         field="arrival.concurrency_mean")
    return Workload(
        description=f"profile {path} ({how})",
        prompt_tokens=s,
        hit_tokens=p,
        token_hit_ratio=float(h),
        working_set_tokens=prof.working_set_tokens,
        capacity_curve=curve,
        rate_rps=prof.rate_rps,
        model=prof.model,
        kv_bytes_per_token=prof.kv_bytes_per_token,
        output_tokens=out,
        session=sess,
        timestamp_s=ts,
        live_sessions=float(live) if isinstance(live, int | float) and live > 0 else None,
        group=None if grp is None else grp.astype(np.int64),
        group_tokens=gtok,
        cache_model=prof.cache_model,
        cache_page_tokens=prof.cache_page_tokens,
        cache_with_outputs=prof.cache_with_outputs,
    )


def drop_over_context(w: Workload, max_context: int) -> Workload:
    """`w` without the requests longer than the model's context (an engine rejects them)."""
    if not max_context:
        return w
    keep = w.prompt_tokens <= max_context
    if keep.all():
        return w
    if not keep.any():
        raise UsageError(f"every prompt of the workload is longer than the model's "
                         f"{max_context:,}-token context", "pick a model with a longer context")

    def k(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[keep]

    return replace(w, prompt_tokens=w.prompt_tokens[keep], hit_tokens=w.hit_tokens[keep],
                   output_tokens=k(w.output_tokens), session=k(w.session),
                   timestamp_s=k(w.timestamp_s), group=k(w.group),
                   group_tokens=k(w.group_tokens),
                   excluded_over_context=int((~keep).sum()))


def _prompt_samples(prof: Profile) -> np.ndarray:
    edges = np.asarray(prof.prompt_hist_edges, dtype=np.float64)
    counts = np.asarray(prof.prompt_hist_counts, dtype=np.float64)
    if len(edges) and len(edges) == len(counts) + 1 and counts.sum() > 0:
        mids = (edges[:-1] + edges[1:]) / 2
        reps = np.round(counts / counts.sum() * 1000).astype(int)
        s = np.repeat(mids, reps)
        if len(s):
            return np.maximum(1.0, s)
    if prof.prompt_p50 is None:
        if prof.prompt_mean is None:
            raise InputError("no prompt-length statistics in the profile", path=prof.path,
                             field="prompt_tokens")
        return np.array([max(1.0, prof.prompt_mean)])
    # Quantiles only: 100 points, 50 at p50, 40 at p90, 9 at p99, 1 at max.
    p50 = prof.prompt_p50
    p90 = prof.prompt_p90 if prof.prompt_p90 is not None else p50
    p99 = prof.prompt_p99 if prof.prompt_p99 is not None else p90
    mx = prof.prompt_max or p99
    return np.maximum(1.0, np.repeat([p50, p90, p99, mx], [50, 40, 9, 1]))


# --- arrivals ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Arrivals:
    """How requests arrive: `kind` is poisson, users or trace. `scale` multiplies the
    load (the planner's p99-vs-load sweep and goodput search)."""

    kind: str
    rate_rps: float | None = None  # poisson
    users: int | None = None  # closed loop
    think_s: float = 0.0  # closed loop: mean think time
    trace_rate_rps: float | None = None  # trace: the trace's own rate, for the load factor

    def describe(self) -> str:
        if self.kind == "poisson":
            return f"Poisson arrivals at {self.rate_rps:g} requests/s"
        if self.kind == "users":
            return f"{self.users} closed-loop users, {self.think_s:g} s mean think time"
        return f"the trace's timestamps, sessions compressed to {self.rate_rps:g} requests/s"

    def load_rps(self) -> float | None:
        return self.rate_rps


def session_prev(sess: np.ndarray) -> np.ndarray:
    """Each request's previous request of its session (-1: its first), requests in the
    order given: a stable sort by session keeps each session's requests in order, so the
    one before a request in that sort is its previous one when the session is the same."""
    n = len(sess)
    prev = np.full(n, -1, np.int64)
    if n < 2:
        return prev
    by = np.argsort(sess, kind="stable")
    same = sess[by[1:]] == sess[by[:-1]]
    prev[by[1:][same]] = by[:-1][same]
    return prev


def arrivals(a: Arrivals, n: int, seed: int, *, scale: float = 1.0,
             session: np.ndarray | None = None, timestamp_s: np.ndarray | None = None,
             order: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(arrival, prev, think, route) arrays for `n` requests in the order they are sent.

    route: -1 (least-loaded replica) for open arrivals and the first request of a user or
    session, -2 (the previous request's replica, where its prefix sits) after it.
    """
    rng = np.random.default_rng(seed)
    if a.kind == "poisson":
        rate = (a.rate_rps or 0.0) * scale
        if rate <= 0:
            raise UsageError("the arrival rate must be positive")
        arr = np.cumsum(rng.exponential(1.0 / rate, n))
        return arr, np.full(n, -1, np.int64), np.zeros(n), np.full(n, -1, np.int64)
    if a.kind == "users":
        users = max(1, int(round((a.users or 1) * scale)))
        idx = np.arange(n)
        prev = idx - users
        prev[prev < 0] = -1
        think = rng.exponential(a.think_s, n) if a.think_s > 0 else np.zeros(n)
        # users start spread over one think time, so that they do not all send at once
        arr = np.where(prev < 0, rng.uniform(0, max(a.think_s, 1e-3), n), 0.0)
        return arr, prev, think, np.where(prev >= 0, -2, -1).astype(np.int64)
    # trace: the clock compressed by the load factor; sessions wait for their replies
    assert session is not None and timestamp_s is not None
    factor = (a.rate_rps or 1.0) * scale / (a.trace_rate_rps or 1.0)
    ts = np.asarray(timestamp_s, dtype=np.float64)
    sess = np.asarray(session, dtype=np.int64)
    t0 = float(ts.min()) if len(ts) else 0.0
    arr = (ts - t0) / factor
    order_ = np.argsort(arr, kind="stable")
    arr = arr[order_]
    sess = sess[order_]
    prev = session_prev(sess)
    if order is not None:
        order[:] = order_
    return arr, prev, np.zeros(n), np.where(prev >= 0, -2, -1).astype(np.int64)


# --- session copies: more users than the trace has -----------------------------------------

@dataclass(frozen=True)
class Copies:
    """What `session_copies` did: the rate the trace's own sessions offer at the rate
    asked (each waiting for its replies, served alone), and the copies added."""

    sessions: int  # the trace's own
    offered_rps: float  # what they offer (at most: served alone, no queue)
    copies: int  # whole sessions added
    requests: int  # requests those copies add


def _chained(ts: np.ndarray, sess: np.ndarray, service_s: np.ndarray, factor: float
             ) -> np.ndarray:
    """Each request's start when the trace's clock is compressed by `factor` and every
    request waits for its session's previous one, served alone in `service_s`."""
    start = (ts - float(ts.min())) / factor
    out = np.empty(len(ts))
    done: dict[int, float] = {}
    for i in np.argsort(start, kind="stable").tolist():
        s_ = int(sess[i])
        t = max(float(start[i]), done.get(s_, -math.inf))
        out[i] = t
        done[s_] = t + float(service_s[i])
    return out


def session_copies(w: Workload, a: Arrivals, service_s: np.ndarray
                   ) -> tuple[Workload, Copies | None]:
    """`w` with time-shifted copies of whole sessions when its own sessions cannot offer
    the rate `a` asks; else `w` itself (no copy where the trace can reach the rate).

    The offered rate is the trace's arrivals per second with its clock compressed to the
    rate asked and each session waiting for its replies, each reply served alone in
    `service_s` (a bound: queueing only lowers it). Below `REACHED` x the rate asked,
    copies of whole sessions (round robin over the trace's, as few as reach the rate asked)
    are spread over that
    schedule's span, each its own user: a new session id (its own prefix keys, so it
    never hits its original's cache) and new prefix groups for groups only its original
    session uses; a group several of the trace's sessions share (what different users
    share) is kept."""
    if (a.kind != "trace" or w.session is None or w.timestamp_s is None
            or not a.rate_rps or not a.trace_rate_rps or len(w.session) < 2):
        return w, None
    ts = np.asarray(w.timestamp_s, np.float64)
    sess = np.asarray(w.session, np.int64)
    factor = a.rate_rps / a.trace_rate_rps
    start = _chained(ts, sess, np.asarray(service_s, np.float64), factor)
    span = float(start.max() - start.min())
    n = len(ts)
    offered = (n - 1) / span if span > 0 else math.inf
    ids = np.unique(sess)
    info = Copies(int(len(ids)), offered, 0, 0)
    if offered >= REACHED * a.rate_rps:
        return w, info
    need = math.ceil(a.rate_rps * span + 1 - n)
    members = [np.flatnonzero(sess == s_) for s_ in ids.tolist()]
    dur = [float(start[m].max() - start[m].min()) for m in members]
    # groups only one session uses are that user's: a copy gets its own
    shared: set[int] = set()
    if w.group is not None:
        g_all = np.asarray(w.group, np.int64)
        has = g_all >= 0
        for g_ in np.unique(g_all[has]).tolist():
            if len(np.unique(sess[g_all == g_])) > 1:
                shared.add(int(g_))
    next_sess = int(sess.max()) + 1
    next_group = int(w.group.max()) + 1 if w.group is not None and len(w.group) else 0
    pick: list[np.ndarray] = []
    new_sess: list[np.ndarray] = []
    new_ts: list[np.ndarray] = []
    new_group: list[np.ndarray] = []
    added = c = 0
    golden = (math.sqrt(5) - 1) / 2
    while added < need:
        j = c % len(members)
        m = members[j]
        # a start in the span (low-discrepancy: copies spread evenly, deterministic)
        u = ((c + 1) * golden % 1.0) * max(0.0, span - dur[j])
        pick.append(m)
        new_sess.append(np.full(len(m), next_sess + c, np.int64))
        # trace clock: the session's own gaps, its first request moved to u
        new_ts.append(float(ts.min()) + u * factor + ts[m] - float(ts[m].min()))
        if w.group is not None:
            g = np.asarray(w.group, np.int64)[m].copy()
            for g_ in np.unique(g[g >= 0]).tolist():
                if g_ not in shared:
                    g[g == g_] = next_group
                    next_group += 1
            new_group.append(g)
        added += len(m)
        c += 1
    idx = np.concatenate([np.arange(n), *pick])

    def k(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else np.asarray(x)[idx]

    out = replace(w, prompt_tokens=w.prompt_tokens[idx], hit_tokens=w.hit_tokens[idx],
                  output_tokens=k(w.output_tokens),
                  session=np.concatenate([sess, *new_sess]),
                  timestamp_s=np.concatenate([ts, *new_ts]),
                  group=None if w.group is None else np.concatenate(
                      [np.asarray(w.group, np.int64), *new_group]),
                  group_tokens=k(w.group_tokens), session_copies=c)
    return out, replace(info, copies=c, requests=added)
