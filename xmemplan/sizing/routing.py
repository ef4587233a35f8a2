"""Which replica serves each request, and what its own and the shared tiers hold for it.

`place(stream, deployment, router)` walks the requests in arrival order, as a router sees
them, and returns per request the replica it is sent to and its prompt tokens found in
that replica's HBM, found in a tier it shares with others (host DRAM, X-Mem, an L3 store),
or computed. `place_kernel` is the numba kernel; `place_reference` is the same model in
plain Python (the test oracle).

The prefix model (what a v2 profile can say about a request, docs/profile.md): a prompt is
[a shared prefix of G tokens, named by its group g][the session's own context]. The group
prefix is one object in a cache (a system prompt, a shared document); the session's tail
(its previous prompt and output beyond G) is another. A cache serves a request
  min(len(g), G) tokens of the group, then, only when the whole group prefix is there (or
  G = 0), min(len(session), max(0, H - G)) tokens of the session, H being the request's
  reusable tokens with an unlimited cache of its own session (the profile's hit tokens);
and after the request holds len(g) = max(len(g), G) and len(session) = prompt + output - G.

Caches, each an LRU over these objects sized in tokens (SGLang's radix tree evicts leaves by
last access; vLLM's free-block queue evicts the least recently freed; both: the blocks of
running requests are not evicted, so running requests take room from cached prefixes):
- HBM: one per replica, `hbm_tokens` of KV room; a request locks its objects from its
  arrival until `arrival + hold` (the router's view of when it is done).
- Shared tiers: `tier_of[r]` names the tier cache replica r reads (-1: none); replicas
  with the same index share it (scope: docs/size.md "Tier scope"). Write-through: every
  request's objects are written to its replica's tier cache (SGLang HiCache write-through,
  vLLM OffloadingConnector stores every computed block). A tier hit is what the tier holds
  beyond the HBM hit.

Routers (the number is the `router` code; tie-breaks are ours where the real router draws
at random, and said so):
- ROUND_ROBIN: request k to replica k mod R (SGLang router `round_robin`; Dynamo
  `--router-mode round-robin`).
- LEAST_LOADED: the replica with the fewest unfinished requests, lowest index on ties (the
  simulator's join-shortest-queue).
- SESSION: a session's first request goes least-loaded, the rest follow it (session
  affinity: SGLang router `consistent_hashing` / llm-d session-affinity scorer keep a
  session on one replica; the first placement is ours).
- SGLANG: SGLang router `cache_aware` (sgl-project/sglang sgl-model-gateway/src/policies/
  cache_aware.rs, sglang-router 0.3.2): loads are the router's in-flight requests per
  worker; if max - min > balance_abs_threshold (64) and max > balance_rel_threshold (1.5)
  x min, the least-loaded worker; else match_rate = matched / request length on the
  router's approximate tree of what it routed where (no eviction modelled); if match_rate >
  cache_threshold (0.3) the worker with the longest match, else the least-loaded one. The
  real router breaks load ties at random; we take the lowest index. Longest-match ties:
  lowest index (the tree's tenant order is not specified).
- LLMD: llm-d / Gateway API inference extension `prefix-cache-scorer` + `queue-scorer`
  with the max-score picker (kubernetes-sigs/gateway-api-inference-extension pkg/epp/
  scheduling/framework/plugins/multi/prefix/plugin.go): prefix score = matched blocks /
  the request's blocks, the prompt cut at 256 blocks of 64 characters (`llmd_cap_tokens`,
  4 characters a token: 4,096 tokens); queue score = (max q - q) / (max q - min q), 1 when
  all equal, q the replica's waiting requests (GIE queue-scorer reads vLLM's
  WaitingQueueSize): none while the tokens its running requests hold fit its KV room, else
  its in-flight requests x the share of those tokens beyond the room; total = 3 x prefix
  + 2 x queue (the weights of llm-d's default profile, Red
  Hat OpenShift AI 3.4 "Configuring scheduler settings", chapter 6); the highest total
  wins; among equal totals the max-score picker draws at random (it shuffles the
  endpoints first: GIE max_score_picker.go), ours by the request's splitmix64 draw
  (RANDOM's).
- LLMD also takes the kv-cache-utilization scorer (1 - the replica's KV cache usage, usage =
  the tokens its running requests hold, a shared prefix once: vLLM's kv_cache_usage_perc)
  and llm-d's active-request scorer ((max c - c) / max c over the router's in-flight
  counts c, 1 where c = 0; llm-d-inference-scheduler pkg/plugins/scorer/active_request.go)
  at weights 0 by default (the active-request scorer counts what the router sent and has
  not seen finish: in-flight, unlike the queue scorer); its prefix index is an LRU of
  `llmd_view_tokens` per replica
  (GIE prefix plugin lruCapacityPerServer 31,250 blocks of hashBlockSize 64 characters,
  4 characters a token: 500,000 tokens), evicting the least recently routed objects.
- LLMD_PRECISE: llm-d's precise prefix-cache scorer (llm-d-inference-scheduler
  pkg/plugins/scorer/prefix_cache_tracking.go, scores from llm-d-kv-cache-manager's
  index of vLLM's KV events): the tokens of the prompt in the replica's actual HBM,
  min-max normalised over the replicas that hold any of it (utils.go
  indexedScoresToNormalizedScoredPods: all equal -> 1, none held -> 0); with the
  kv-cache-utilization and queue scorers at the llm-d guide's weights 3 / 2 / 2
  (guides/precise-prefix-cache-aware/gaie-kv-events/values.yaml); the highest total wins
  (ties drawn as LLMD's).
- LLMD with llm-d's tiered prefix cache (guides/tiered-prefix-cache/router/
  tiered-prefix-cache-cpu.values.yaml): a second approximate index per replica for its
  CPU tier (`llmd_tier_view_tokens`, its own lruCapacityPerServer), scored like the first
  at `llmd_tier_weight`; and the no-hit-lru-scorer (llm-d-inference-scheduler
  pkg/plugins/scorer/no_hit_lru.go) at `llmd_nohit_weight`: for a cold request (no
  replica's index holds any of the prompt) 1 - rank / (R - 1), replicas never given a cold
  request first in index order, then from the least recently given; 0.5 for every
  replica otherwise.
- RANDOM: a replica drawn uniformly per request (GIE random-picker): splitmix64 of the
  request's index and `seed`, the same integers in the kernel and the reference.
- DYNAMO: Dynamo KV router (docs.nvidia.com/dynamo, "KV Router", "Cost Calculation"):
  cost = overlap_score_weight (1.0) x prefill blocks + decode blocks, prefill blocks = the
  request's tokens not cached on the worker (its actual HBM state: KV events) / block
  size, decode blocks = the worker's active blocks (unfinished requests' prompt + output
  tokens) / block size; the lowest cost wins, router_temperature 0 (deterministic; lowest
  index on ties).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from xmemplan.sizing.engine import Requests

ROUND_ROBIN, LEAST_LOADED, SESSION, SGLANG, LLMD, DYNAMO, RANDOM, LLMD_PRECISE = range(8)
ROUTERS = {
    "round-robin": ROUND_ROBIN,
    "least-loaded": LEAST_LOADED,
    "session": SESSION,
    "sglang-cache-aware": SGLANG,
    "llm-d-prefix": LLMD,
    "dynamo-kv": DYNAMO,
    "random": RANDOM,
    "llm-d-precise": LLMD_PRECISE,
}
ALIASES = {"rr": "round-robin", "prefix-aware": "sglang-cache-aware",
           "cache-aware": "sglang-cache-aware", "sglang": "sglang-cache-aware",
           "llm-d": "llm-d-prefix", "dynamo": "dynamo-kv", "sticky": "session",
           "llm-d-kv-events": "llm-d-precise"}
DEFAULT_ROUTER = "session"
PREFIX_AWARE = ("sglang-cache-aware", "llm-d-prefix", "dynamo-kv", "llm-d-precise")
DESCRIPTIONS = {
    "round-robin": "each request to the next replica in turn",
    "least-loaded": "each request to the replica with the fewest unfinished requests",
    "session": "a session stays on one replica; new sessions go least-loaded",
    "sglang-cache-aware": "SGLang router cache_aware (longest prefix match above 0.3, "
                          "else least-loaded; shortest queue when imbalanced)",
    "llm-d-prefix": "llm-d prefix-cache scorer x3 + queue scorer x2, highest score",
    "dynamo-kv": "Dynamo KV router: lowest prefill blocks + decode blocks",
    "random": "each request to a replica drawn at random",
    "llm-d-precise": "llm-d precise prefix-cache scorer (KV events) x3 + KV-cache "
                     "utilisation x2 + queue x2, highest score",
}


@dataclass(frozen=True)
class RouterParams:
    """The routers' published defaults (module docstring)."""

    cache_threshold: float = 0.3  # SGLang router --cache-threshold
    balance_abs: float = 64.0  # SGLang router --balance-abs-threshold
    balance_rel: float = 1.5  # SGLang router --balance-rel-threshold
    llmd_prefix_weight: float = 3.0
    llmd_queue_weight: float = 2.0
    llmd_cap_tokens: float = 4096.0  # 256 blocks x 64 characters / 4 characters a token
    dynamo_overlap_weight: float = 1.0  # --kv-overlap-score-weight
    dynamo_block_tokens: float = 16.0  # --kv-cache-block-size (backend's; vLLM's 16)
    llmd_kv_weight: float = 0.0  # kv-cache-utilization-scorer (not in the default profile)
    llmd_active_weight: float = 0.0  # llm-d active-request-scorer
    # the approximate prefix index: an LRU of lruCapacityPerServer (31,250) blocks of
    # hashBlockSize (64) characters per server, 4 characters a token
    llmd_view_tokens: float = 500_000.0
    precise_prefix_weight: float = 3.0  # llm-d guide precise-prefix-cache-aware
    precise_queue_weight: float = 2.0
    precise_kv_weight: float = 2.0
    precise_active_weight: float = 0.0
    seed: int = 0  # the random router's draws
    # llm-d tiered prefix cache (guides/tiered-prefix-cache): a second approximate index
    # for the CPU tier (its own lruCapacityPerServer), and the no-hit-lru-scorer
    llmd_tier_weight: float = 0.0
    llmd_tier_view_tokens: float = 0.0
    llmd_nohit_weight: float = 0.0

    def array(self) -> np.ndarray:
        return np.array([self.cache_threshold, self.balance_abs, self.balance_rel,
                         self.llmd_prefix_weight, self.llmd_queue_weight,
                         self.llmd_cap_tokens, self.dynamo_overlap_weight,
                         self.dynamo_block_tokens, self.llmd_kv_weight,
                         self.llmd_active_weight, self.llmd_view_tokens,
                         self.precise_prefix_weight, self.precise_queue_weight,
                         self.precise_kv_weight, self.precise_active_weight,
                         float(self.seed), self.llmd_tier_weight,
                         self.llmd_tier_view_tokens, self.llmd_nohit_weight])


TIE = 1e-9  # relative: scores this close are equal (routing_kernel.TIE)


def draw_reference(i: int, seed: int, replicas: int) -> int:
    """routing_kernel.draw in plain Python: splitmix64 of (seed, i) mod replicas."""
    m = (1 << 64) - 1
    x = (seed * 0x9E3779B97F4A7C15 + i + 1) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    x ^= x >> 31
    return x % replicas


def router_code(name: str) -> int:
    """The kernel's code of a router name or alias (KeyError when unknown)."""
    return ROUTERS[ALIASES.get(name, name)]


def canonical(name: str) -> str:
    n = ALIASES.get(name, name)
    if n not in ROUTERS:
        raise KeyError(name)
    return n


@dataclass
class Placement:
    """Per request: replica, HBM-hit tokens (its replica), shared-tier tokens, computed."""

    replica: np.ndarray
    hit_hbm: np.ndarray
    hit_tier: np.ndarray
    prompt: np.ndarray

    @property
    def computed(self) -> np.ndarray:
        return self.prompt - self.hit_hbm - self.hit_tier

    def split(self) -> tuple[float, float, float]:
        """Shares of all prompt tokens: (serving replica's HBM, shared tier, recomputed)."""
        total = float(self.prompt.sum())
        if total <= 0:
            return 0.0, 0.0, 0.0
        a, b = float(self.hit_hbm.sum()) / total, float(self.hit_tier.sum()) / total
        return a, b, max(0.0, 1.0 - a - b)

    def per_replica(self, replicas: int, output: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(requests, KV tokens written (prompt + output), hit ratio) per replica."""
        req = np.bincount(self.replica, minlength=replicas).astype(np.float64)
        kv = self.prompt if output is None else self.prompt + output
        tok = np.bincount(self.replica, weights=kv, minlength=replicas)
        p = np.bincount(self.replica, weights=self.prompt, minlength=replicas)
        h = np.bincount(self.replica, weights=self.hit_hbm + self.hit_tier,
                        minlength=replicas)
        ratio = np.divide(h, p, out=np.zeros(replicas), where=p > 0)
        return req, tok, ratio


# --- the plain-Python reference ------------------------------------------------------------

def place_reference(arrival, hold, prompt, output, hit, group, gtok, session,  # noqa: ANN001, ANN201, PLR0913, PLR0912, PLR0915
                    n_groups, n_keys, replicas, router, hbm_tokens, tier_of, tier_tokens,
                    par, forced=None, allowed=None):
    """`place_kernel` written plainly: dicts of cached objects, sorted lists, no heaps.

    `forced` (per request, -1: none) replaces the choice by another router's (a real
    router's, which breaks ties at random) after `allowed`, a list, gets the set of
    replicas our rule accepts for that request (every replica tied under the rule)."""
    R = replicas
    (cache_thr, b_abs, b_rel, w_pre, w_q, cap_tok, w_ov, blk, w_kv, w_act, view_cap,
     p_pre, p_q, p_kv, p_act, seed, w_tier, tier_view_cap, w_nohit) = (float(x) for x in par)
    precise = (p_pre, p_q, p_kv, p_act)
    tview = router == LLMD and w_tier != 0.0
    view2: list[dict[int, list[float]]] = [{} for _ in range(R)]
    cold_tick = [-1.0] * R
    if router == LLMD_PRECISE:
        w_pre, w_q, w_kv, w_act = precise
    if router != LLMD:
        view_cap = math.inf
    hbm: list[dict[int, list[float]]] = [{} for _ in range(R)]  # key -> [len, last, locks]
    tiers: list[dict[int, list[float]]] = [{} for _ in range(len(tier_tokens))]
    view: list[dict[int, list[float]]] = [{} for _ in range(R)]
    running: list[tuple[float, int]] = []  # (end, request)
    sess_rep: dict[int, int] = {}
    n = len(arrival)
    rep = [0] * n
    out_hbm = [0.0] * n
    out_tier = [0.0] * n

    def length(c: dict, k: int) -> float:
        v = c.get(k)
        return 0.0 if v is None else (v[0] if isinstance(v, list) else v)

    def match(c: dict, i: int) -> float:
        g, G = int(group[i]), float(gtok[i]) if group[i] >= 0 else 0.0
        skey = n_groups + int(session[i])
        gpart = min(length(c, g), G) if g >= 0 and G > 0 else 0.0
        spart = 0.0
        if g < 0 or G <= 0 or gpart >= G:
            rest = float(hit[i]) - (G if g >= 0 else 0.0)
            if rest > 0:
                spart = min(length(c, skey), rest)
        return min(gpart + spart, float(prompt[i]))

    def put(c: dict, k: int, ln: float, tick: float, lock: bool) -> None:
        v = c.setdefault(k, [0.0, 0.0, 0])
        v[0] = max(v[0], ln)
        v[1] = tick
        if lock:
            v[2] += 1

    def evict(c: dict, cap: float) -> None:
        while sum(v[0] for v in c.values()) > cap:
            free = [(v[1], k) for k, v in c.items() if v[0] > 0 and v[2] == 0]
            if not free:
                return
            _, k = min(free)
            c[k][0] = 0.0

    for i in range(n):
        t = float(arrival[i])
        for end, j in sorted(running):
            if end <= t:
                running.remove((end, j))
                c = hbm[rep[j]]
                if group[j] >= 0 and gtok[j] > 0:
                    c[int(group[j])][2] -= 1
                c[n_groups + int(session[j])][2] -= 1
        load = [0.0] * R
        active = [0.0] * R
        for _, j in running:
            load[rep[j]] += 1
            active[rep[j]] += float(prompt[j] + output[j])
        least = min(range(R), key=lambda q: (load[q], q))
        tied = [q for q in range(R) if load[q] == load[least]]
        S = float(prompt[i])
        s = int(session[i])
        ok: list[int] | None = None  # the replicas tied under the rule
        cold = False  # llm-d no-hit-lru-scorer: no replica's index holds any of it
        if router == ROUND_ROBIN:
            r = i % R
        elif router == LEAST_LOADED:
            r, ok = least, tied
        elif router == SESSION:
            r = sess_rep.setdefault(s, least)
        elif router == SGLANG:
            mx, mn = max(load), min(load)
            if mx - mn > b_abs and mx > b_rel * mn:
                r, ok = least, tied
            else:
                ms = [match(view[q], i) for q in range(R)]
                best = max(range(R), key=lambda q: (ms[q], -q))
                if (ms[best] / S if S > 0 else 0.0) > cache_thr:
                    r, ok = best, [q for q in range(R) if ms[q] == ms[best]]
                else:
                    r, ok = least, tied
        elif router == RANDOM:
            r = draw_reference(i, int(seed), R)
        elif router in (LLMD, LLMD_PRECISE):
            held_tok = [sum(v[0] for v in hbm[q].values() if v[2] > 0) for q in range(R)]
            wait = [load[q] * (held_tok[q] - float(hbm_tokens)) / held_tok[q]
                    if held_tok[q] > float(hbm_tokens) else 0.0 for q in range(R)]
            mx, mn = max(wait), min(wait)
            amax = max(load)
            total = min(S, cap_tok)
            if router == LLMD_PRECISE:  # actual HBM, min-max over replicas holding any
                held = [match(hbm[q], i) for q in range(R)]
                some = [m for m in held if m > 0]
                pre_of = [0.0 if m <= 0 else 1.0 if max(some) == min(some)
                          else (m - min(some)) / (max(some) - min(some)) for m in held]
            else:
                pre_of = [min(match(view[q], i), cap_tok) / total if total > 0 else 0.0
                          for q in range(R)]
            gpu_view = hbm if router == LLMD_PRECISE else view
            cold = w_nohit != 0.0 and all(match(gpu_view[q], i) <= 0 for q in range(R))
            never = [q for q in range(R) if cold_tick[q] < 0]
            given = sorted((q for q in range(R) if cold_tick[q] >= 0),
                           key=lambda q: cold_tick[q])
            rank = {q: k for k, q in enumerate(never + given)}
            scores = []
            for q in range(R):
                qs = 1.0 if mx == mn else (mx - wait[q]) / (mx - mn)
                act = 1.0 if load[q] <= 0 or amax <= 0 else (amax - load[q]) / amax
                use = held_tok[q] / float(hbm_tokens) if hbm_tokens > 0 else 1.0
                tot = (w_pre * pre_of[q] + w_q * qs + w_kv * (1.0 - min(1.0, use))
                       + w_act * act)
                if tview:
                    tot += w_tier * (min(match(view2[q], i), cap_tok) / total
                                     if total > 0 else 0.0)
                if w_nohit != 0.0:
                    tot += w_nohit * ((1.0 - rank[q] / (R - 1) if R > 1 else 1.0)
                                      if cold else 0.5)
                scores.append(tot)
            top = max(scores)
            ok = [q for q in range(R) if scores[q] >= top - TIE * max(1.0, abs(top))]
            r = ok[draw_reference(i, int(seed), len(ok))]  # the picker draws among ties
        else:
            costs = [w_ov * (S - match(hbm[q], i)) / blk + active[q] / blk for q in range(R)]
            r = min(range(R), key=lambda q: (costs[q], q))
        if allowed is not None:
            allowed.append(ok if ok is not None else [r])
        if forced is not None and forced[i] >= 0:
            r = int(forced[i])
        if cold:
            cold_tick[r] = i + 1.0
        rep[i] = r
        own = match(hbm[r], i)
        out_hbm[i] = own
        ti = int(tier_of[r]) if len(tier_tokens) else -1
        if ti >= 0:
            out_tier[i] = max(0.0, match(tiers[ti], i) - own)
        g = int(group[i])
        G = float(gtok[i]) if g >= 0 else 0.0
        tail = max(0.0, S + float(output[i]) - G)
        skey = n_groups + s
        tick = i + 1.0
        if g >= 0 and G > 0:
            put(hbm[r], g, G, tick, True)
        put(hbm[r], skey, tail, tick, True)
        evict(hbm[r], float(hbm_tokens))
        if ti >= 0:
            if g >= 0 and G > 0:
                put(tiers[ti], g, G, tick, False)
            put(tiers[ti], skey, tail, tick, False)
            evict(tiers[ti], float(tier_tokens[ti]))
        if router in (SGLANG, LLMD):
            if g >= 0 and G > 0:
                put(view[r], g, G, tick, False)
            put(view[r], skey, tail, tick, False)
            evict(view[r], view_cap)
        if tview:
            if g >= 0 and G > 0:
                put(view2[r], g, G, tick, False)
            put(view2[r], skey, tail, tick, False)
            evict(view2[r], tier_view_cap)
        running.append((t + float(hold[i]), i))
    return (np.array(rep, np.int64), np.array(out_hbm), np.array(out_tier))


# --- the entry point -----------------------------------------------------------------------

@dataclass(frozen=True)
class Stream:
    """Requests in arrival order, as `place` reads them (tokens as floats)."""

    arrival: np.ndarray
    hold: np.ndarray  # seconds a request counts as unfinished (the router's load view)
    prompt: np.ndarray
    output: np.ndarray
    hit: np.ndarray  # reusable tokens from the request's own session (unlimited cache)
    group: np.ndarray  # shared-prefix group, -1: none
    group_tokens: np.ndarray  # tokens of the group's prefix in this prompt
    session: np.ndarray  # >= 0; a request alone has a session of its own


@dataclass(frozen=True)
class Deployment:
    replicas: int
    hbm_tokens: float  # KV room of one replica
    tier_of: np.ndarray  # per replica: its shared tier cache, -1 none
    tier_tokens: np.ndarray  # per tier cache: tokens it holds


def keys_of(stream: Stream) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(group, session) renumbered densely, and (groups, keys)."""
    grp = np.asarray(stream.group, np.int64)
    has = grp >= 0
    g_codes = np.full(len(grp), -1, np.int64)
    n_groups = 0
    if has.any():
        u, inv = np.unique(grp[has], return_inverse=True)
        g_codes[has] = inv.reshape(-1)
        n_groups = len(u)
    _, s_codes = np.unique(np.asarray(stream.session, np.int64), return_inverse=True)
    s_codes = s_codes.reshape(-1).astype(np.int64)
    n_sess = int(s_codes.max()) + 1 if len(s_codes) else 0
    return g_codes, s_codes, n_groups, n_groups + n_sess


def place(stream: Stream, dep: Deployment, router: str,
          params: RouterParams = RouterParams(), *, reference: bool = False) -> Placement:
    """Route `stream` over `dep` with `router`; see the module docstring."""
    g, s, n_groups, n_keys = keys_of(stream)
    f = np.ascontiguousarray
    args = (f(stream.arrival, np.float64), f(stream.hold, np.float64),
            f(stream.prompt, np.float64), f(stream.output, np.float64),
            f(stream.hit, np.float64), g, f(stream.group_tokens, np.float64), s,
            n_groups, max(1, n_keys), int(dep.replicas), router_code(router),
            float(dep.hbm_tokens), f(dep.tier_of, np.int64),
            f(dep.tier_tokens, np.float64), params.array())
    if reference:
        rep, hh, htier = place_reference(*args)
    else:  # numba only when placing (bare `size` never does)
        from xmemplan.sizing.routing_kernel import place_kernel

        rep, hh, htier = place_kernel(*args)
    return Placement(np.asarray(rep, np.int64), np.asarray(hh), np.asarray(htier),
                     np.asarray(stream.prompt, np.float64))


def cells(replicas: int, stream: Stream) -> int:
    """The kernel's table size (replicas x keys): what `place` allocates three times."""
    _, _, _, n_keys = keys_of(stream)
    return replicas * max(1, n_keys)


# --- into the engine (issue 19's per-replica block pool) -----------------------------------

def block_keys(stream: Stream, block_tokens: int) -> tuple[np.ndarray, np.ndarray,
                                                           np.ndarray]:
    """(keys, koff, kn) of the stream's requests, as `block_keys_reference` gives them,
    from the numba kernel (routing_kernel.block_keys_kernel: a Python loop over requests
    took 0.26 s a call on 1,000 Claude Code requests, and `size --workload` calls it once
    per simulation)."""
    from xmemplan.sizing.routing_kernel import block_keys_kernel

    g, s, _, _ = keys_of(stream)
    n_sess = int(s.max()) + 1 if len(s) else 0
    f = np.ascontiguousarray
    keys, koff, kn = block_keys_kernel(
        f(stream.prompt, np.float64), f(stream.output, np.float64),
        f(stream.group_tokens, np.float64), f(stream.hit, np.float64), g, s, n_sess,
        int(block_tokens))
    return keys, koff, kn


def block_keys_reference(stream: Stream, block_tokens: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, koff, kn) of the stream's requests (prompt then output, full blocks), in
    the prefix model's terms: a group's prefix blocks are the group's, the rest the
    session's. Keys stand for content, as vLLM's chained block hashes do (a block's hash
    covers its parent's, vllm/v1/core/kv_cache_utils.py `hash_block_tokens`): a request's
    session blocks below its reusable tokens (`hit`: what its session's previous request
    left, prompt and output) are that request's blocks, the same keys; from the first
    block past it on, its tokens differ (new question, new output), so do its keys. A
    prompt re-sent whole shares all of its own earlier blocks; a compacted session (hit
    below what it had) shares only up to its hit."""
    bs = int(block_tokens)
    g, s, _, _ = keys_of(stream)
    n = len(stream.prompt)
    last: dict[int, np.ndarray] = {}  # session -> its previous request's session keys
    parts: list[np.ndarray] = []
    koff = np.zeros(n, np.int64)
    kn = np.zeros(n, np.int64)
    pos = 0
    fresh = 0  # the next new content's key
    for i in range(n):
        S, out = float(stream.prompt[i]), float(stream.output[i])
        G = float(stream.group_tokens[i]) if g[i] >= 0 else 0.0
        nb = int((S + out) // bs)
        gb = min(nb, int(G // bs)) if g[i] >= 0 else 0
        j = np.arange(gb, dtype=np.int64)
        gk = (1 << 61) | (int(g[i]) << 24) | j
        prev = last.get(int(s[i]))
        share = int(min(float(stream.hit[i]), S) // bs) - gb  # session blocks reused
        share = max(0, min(share, nb - gb, 0 if prev is None else len(prev)))
        sk = np.empty(nb - gb, np.int64)
        if share:
            sk[:share] = prev[:share]  # type: ignore[index]
        k_new = nb - gb - share
        sk[share:] = (2 << 61) | np.arange(fresh, fresh + k_new, dtype=np.int64)
        fresh += k_new
        last[int(s[i])] = sk
        parts.append(np.concatenate([gk, sk]))
        koff[i], kn[i] = pos, nb
        pos += nb
    keys = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return keys, koff, kn


def engine_requests(stream: Stream, placement: Placement, block_tokens: int,
                    tier: int = -1, prev: np.ndarray | None = None,
                    think: np.ndarray | None = None) -> Requests:
    """The engine's `Requests` for this stream as routed: each request pinned to its
    replica, its tier (0 host DRAM, 1 X-Mem, -1 none) holding the prefix `placement` found
    there (the replica's HBM hit is then the engine's own pool's outcome: the blocks of a
    group's prefix are one set of keys, shared by every request of the group in flight on
    that replica, as vLLM's and SGLang's prefix caches share them). `prev`/`think`: a
    session's request waits for its previous one's reply (sim.Traffic's)."""
    from xmemplan.sizing.engine import Requests

    keys, koff, kn = block_keys(stream, block_tokens)
    n = len(stream.prompt)
    held = (placement.hit_hbm + placement.hit_tier).astype(np.int64)
    return Requests(arrival=np.asarray(stream.arrival, np.float64),
                    prompt=np.maximum(1, np.round(stream.prompt)).astype(np.int64),
                    output=np.maximum(1, np.asarray(stream.output, np.int64)),
                    keys=keys, koff=koff, kn=kn, tier_tokens=held,
                    tier=np.full(n, tier, np.int64), route=placement.replica.copy(),
                    prev=prev, think=think)
