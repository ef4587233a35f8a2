"""Routers and per-replica caches (xmemplan/sizing/routing.py, docs/size.md "Routing").

The kernel against its plain-Python reference; each router against its scoring rule as
its documentation and source state it (citations in routing.py's docstring); and the
mechanism the issue asks for: with caches that replicas cannot share, round robin loses
hits as replicas are added, prefix-aware routing gets them back, and a shared X-Mem pool
keeps them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from xmemplan.sizing import routing as RT


def stream(n: int, groups: int, G: float, *, rate: float = 20.0, hold: float = 2.0,
           seed: int = 0, sessions: int = 0) -> RT.Stream:
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    grp = rng.integers(0, groups, n) if groups else np.full(n, -1)
    prompt = np.where(grp >= 0, G, 0) + rng.integers(100, 2000, n)
    sess = rng.integers(0, sessions, n) if sessions else np.arange(n)
    hit = np.where(sessions > 0, rng.integers(0, 1500, n), 0).astype(float)
    return RT.Stream(arr, np.full(n, hold), prompt.astype(float),
                     rng.integers(1, 300, n).astype(float), np.minimum(hit, prompt), grp,
                     np.full(n, float(G)), sess)


def separate(R: int, room: float = 200_000) -> RT.Deployment:
    """R replicas, each its own HBM, no shared tier (HBM only)."""
    return RT.Deployment(R, room, np.full(R, -1, np.int64), np.zeros(0))


def shared(R: int, tokens: float, room: float = 200_000) -> RT.Deployment:
    """R replicas sharing one pool (X-Mem in one rack)."""
    return RT.Deployment(R, room, np.zeros(R, np.int64), np.array([tokens]))


def per_replica_hit(p: RT.Placement, R: int) -> float:
    _, _, ratio = p.per_replica(R)
    return float(ratio.mean())


# --- kernel = reference --------------------------------------------------------------------

@pytest.mark.parametrize("router", list(RT.ROUTERS))
@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_matches_reference(router: str, seed: int) -> None:
    s = stream(250, 12, 3000, seed=seed, sessions=40 if seed else 0, hold=3.0)
    dep = RT.Deployment(4, 20_000, np.array([0, 0, 1, 1]), np.array([40_000.0, 40_000.0]))
    a = RT.place(s, dep, router)
    b = RT.place(s, dep, router, reference=True)
    assert np.array_equal(a.replica, b.replica)
    assert np.allclose(a.hit_hbm, b.hit_hbm)
    assert np.allclose(a.hit_tier, b.hit_tier)
    assert np.all(a.hit_hbm + a.hit_tier <= a.prompt)
    assert 0 < a.split()[0] + a.split()[1] < 1


SCORERS = {  # llm-d's optional scorers on, at small index sizes so that they evict
    "kv+active": RT.RouterParams(llmd_kv_weight=1.0, llmd_active_weight=1.0,
                                 llmd_view_tokens=8_000.0),
    "tiered": RT.RouterParams(llmd_prefix_weight=1.0, llmd_queue_weight=1.0,
                              llmd_kv_weight=1.0, llmd_view_tokens=8_000.0,
                              llmd_tier_weight=1.0, llmd_tier_view_tokens=30_000.0,
                              llmd_nohit_weight=1.0),
    "precise-nohit": RT.RouterParams(llmd_nohit_weight=1.0),
}


@pytest.mark.parametrize("name", list(SCORERS))
@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_matches_reference_llmd_scorers(name: str, seed: int) -> None:
    s = stream(250, 12, 3000, seed=seed, sessions=40 if seed else 0, hold=3.0)
    dep = RT.Deployment(4, 20_000, np.array([0, 0, 1, 1]), np.array([40_000.0, 40_000.0]))
    router = "llm-d-precise" if name.startswith("precise") else "llm-d-prefix"
    a = RT.place(s, dep, router, SCORERS[name])
    b = RT.place(s, dep, router, SCORERS[name], reference=True)
    assert np.array_equal(a.replica, b.replica)
    assert np.allclose(a.hit_hbm, b.hit_hbm)
    assert len(set(a.replica.tolist())) == 4


def test_llmd_no_hit_lru_spreads_cold_requests() -> None:
    """no-hit-lru-scorer alone: cold requests (no index holds any of them) go to replicas
    never given one, in index order, then to the least recently given (no_hit_lru.go)."""
    only = RT.RouterParams(llmd_prefix_weight=0.0, llmd_queue_weight=0.0,
                           llmd_nohit_weight=1.0)
    s = stream(9, 9, 1000, hold=1e3)
    s = replace(s, group=np.arange(9))  # every request its own group: all cold
    got = RT.place(s, separate(3), "llm-d-prefix", only).replica.tolist()
    assert got == [0, 1, 2, 0, 1, 2, 0, 1, 2]


# --- the mechanism (issue 25, "Done when" 1) -----------------------------------------------

def test_round_robin_loses_hits_as_replicas_are_added() -> None:
    s = stream(4000, 64, 16_000)
    hits = [per_replica_hit(RT.place(s, separate(R), "round-robin"), R) for R in (1, 2, 4, 8)]
    assert all(b < a for a, b in zip(hits, hits[1:], strict=False)), hits
    assert hits[-1] < 0.5 * hits[0]


@pytest.mark.parametrize("router", RT.PREFIX_AWARE[:2])
def test_prefix_aware_routing_recovers_them(router: str) -> None:
    s = stream(4000, 64, 16_000)
    one = per_replica_hit(RT.place(s, separate(1), router), 1)
    rr8 = per_replica_hit(RT.place(s, separate(8), "round-robin"), 8)
    pa8 = per_replica_hit(RT.place(s, separate(8), router), 8)
    # one replica cannot hold the 64 prefixes (200K tokens of room); eight together can,
    # when each group goes where its prefix is
    assert pa8 > 2 * rr8
    assert pa8 >= one


def test_shared_xmem_keeps_the_hit_rate() -> None:
    s = stream(4000, 64, 16_000)
    pool = 64 * 16_000 * 4.0
    hits = [sum(RT.place(s, shared(R, pool), "round-robin").split()[:2]) for R in (1, 2, 4, 8)]
    assert max(hits) - min(hits) < 0.01, hits
    assert hits[0] > 0.9


# --- the routers' rules --------------------------------------------------------------------

def test_round_robin_is_request_index_mod_replicas() -> None:
    s = stream(50, 3, 1000)
    assert np.array_equal(RT.place(s, separate(3), "round-robin").replica, np.arange(50) % 3)


def test_session_keeps_a_session_on_its_first_replica() -> None:
    s = stream(300, 0, 0, sessions=20, hold=0.5)
    p = RT.place(s, separate(4), "session")
    for k in np.unique(s.session):
        assert np.unique(p.replica[s.session == k]).size == 1


def test_least_loaded_lowest_index_on_ties() -> None:
    # three requests at once, held long: replicas 0, 1, 2 in order; then back to 0
    arr = np.array([0.0, 0.0, 0.0, 0.0])
    s = RT.Stream(arr, np.full(4, 10.0), np.full(4, 100.0), np.ones(4), np.zeros(4),
                  np.full(4, -1), np.zeros(4), np.arange(4))
    assert RT.place(s, separate(3), "least-loaded").replica.tolist() == [0, 1, 2, 0]


def rows_stream(rows: list[tuple[float, float, float, int]], G: float) -> RT.Stream:
    """A stream from (arrival, hold, prompt, group) rows, each its own session."""
    arr, hold, prompt, grp = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    n = len(rows)
    return RT.Stream(arr, hold, prompt, np.ones(n), np.zeros(n), grp.astype(np.int64),
                     np.full(n, G), np.arange(n))


G = 1000.0
# requests 0 (group 0) and 1 (group 1) arrive together: replicas 0 and 1 (every router
# sends the second to the idle replica); both are done by t = 1
FIRST = [(0.0, 1e-3, G + 10, 0), (0.0, 1e-3, G + 10, 1)]


@pytest.mark.parametrize("router", ("sglang-cache-aware", "dynamo-kv"))
def test_first_requests_spread(router: str) -> None:
    p = RT.place(rows_stream(FIRST, G), separate(3), router)
    assert p.replica.tolist() == [0, 1]


def test_sglang_cache_aware_match_threshold() -> None:
    """cache_aware.rs select_worker, balanced: the longest match when match_rate > 0.3,
    else the least-loaded worker."""
    dep = separate(3)
    # 1000 of 1010 tokens match replica 1 (0.99): replica 1
    p = RT.place(rows_stream([*FIRST, (2.0, 1.0, G + 10, 1)], G), dep, "sglang-cache-aware")
    assert p.replica[-1] == 1
    # 1000 / 4000 = 0.25 <= 0.3: the least-loaded (all idle: lowest index, replica 0)
    p = RT.place(rows_stream([*FIRST, (2.0, 1.0, 4 * G, 1)], G), dep, "sglang-cache-aware")
    assert p.replica[-1] == 0
    # 1000 / 3000 = 0.33 > 0.3: replica 1
    p = RT.place(rows_stream([*FIRST, (2.0, 1.0, 3 * G, 1)], G), dep, "sglang-cache-aware")
    assert p.replica[-1] == 1


def test_sglang_cache_aware_imbalance_thresholds() -> None:
    """Imbalanced when max - min > balance_abs (64) and max > balance_rel (1.5) x min: then
    the least-loaded worker, whatever matches. 70 long requests of group 1: the first 65 go
    to replica 1 (its load 0..64 leaves max - min <= 64), the 66th finds 65 - 0 > 64 and
    goes to replica 0, the 67th (65 - 0 again) to replica 2; the 68th finds 65 - 1 = 64,
    balanced, and every replica now holds group 1 in the router's tree: the tie of
    longest matches goes to the lowest index (ours; the tree's own pick among tenants of
    one node is not specified), replica 0."""
    rows = FIRST + [(1.0, 100.0, G + 10, 1)] * 70
    p = RT.place(rows_stream(rows, G), separate(3), "sglang-cache-aware")
    load = p.replica[2:]
    assert np.all(load[:65] == 1)
    assert load[65:68].tolist() == [0, 2, 0]
    # a lower absolute threshold switches sooner (the run record's 16 instead of 64)
    low = replace(RT.RouterParams(), balance_abs=16.0)
    p = RT.place(rows_stream(rows, G), separate(3), "sglang-cache-aware", low)
    assert np.all(p.replica[2:19] == 1) and p.replica[19] == 0


def _allowed(s: RT.Stream, dep: RT.Deployment, router: str, forced: list[int],
             par: RT.RouterParams = RT.RouterParams()) -> list[int]:
    """The reference's accepted replicas for the last request (its tie set), earlier
    requests placed where `forced` says."""
    g, ss, n_groups, n_keys = RT.keys_of(s)
    allowed: list[list[int]] = []
    RT.place_reference(s.arrival, s.hold, s.prompt, s.output, s.hit, g, s.group_tokens,
                       ss, n_groups, n_keys, dep.replicas, RT.router_code(router),
                       dep.hbm_tokens, dep.tier_of, dep.tier_tokens, par.array(),
                       forced=np.array(forced), allowed=allowed)
    return sorted(allowed[-1])


def test_llmd_prefix_and_queue_scores() -> None:
    """3 x matched / blocks (the prompt cut at 4,096 tokens) + 2 x (max q - q) / (max q -
    min q) over the replicas' waiting requests (1 when all equal); the highest total wins.
    Replica 1 holds group 1 and is over its KV room (a 300,000-token request running):
    1 x 100,001 / 300,001 of a request waits there, none on replica 0."""
    dep = separate(2)
    over = (0.0, 100.0, 300_000.0, 1)
    # short prompt: replica 1 scores 3 x 0.99 + 0 = 2.97 against replica 0's 0 + 2 x 1
    assert _allowed(rows_stream([over, (1.0, 1.0, G + 10, 1)], G), dep, "llm-d-prefix",
                    [1, -1]) == [1]
    # long prompt: 1000 of 4096 counted tokens = 3 x 0.244 = 0.73 < 2: replica 0
    assert _allowed(rows_stream([over, (1.0, 1.0, 20 * G, 1)], G), dep, "llm-d-prefix",
                    [1, -1]) == [0]
    # nobody waiting: the queue scores tie, the prefix decides (3 x 0.244 + 2 vs 0 + 2)
    done = (0.0, 1e-3, 300_000.0, 1)
    assert _allowed(rows_stream([done, (1.0, 1.0, 20 * G, 1)], G), dep, "llm-d-prefix",
                    [1, -1]) == [1]
    # without the 4,096-token cut and idle: 3 x 0.05 + 2 vs 0 + 2: still replica 1; no
    # match anywhere: a tie, drawn
    uncut = replace(RT.RouterParams(), llmd_cap_tokens=1e12)
    assert _allowed(rows_stream([done, (1.0, 1.0, 20 * G, 1)], G), dep, "llm-d-prefix",
                    [1, -1], uncut) == [1]
    assert _allowed(rows_stream([done, (1.0, 1.0, G, 0)], G), dep, "llm-d-prefix",
                    [1, -1]) == [0, 1]


def test_dynamo_cost_is_prefill_plus_decode_blocks() -> None:
    """cost = 1.0 x uncached prompt blocks + active blocks (16 tokens); lowest wins."""
    dep = separate(2)
    p = RT.place(rows_stream([*FIRST, (2.0, 1.0, G + 10, 1)], G), dep, "dynamo-kv")
    assert p.replica[-1] == 1  # 10 vs 1010 tokens to compute, both idle
    # replica 1 holds 2,001 active tokens: 10/16 + 2001/16 > 1010/16 + 0: replica 0
    busy = (1.0, 100.0, 2000.0, 1)
    p = RT.place(rows_stream([*FIRST, busy, (2.0, 1.0, G + 10, 1)], G), dep, "dynamo-kv")
    assert p.replica[2] == 1 and p.replica[-1] == 0


def _stream(arrival, hold, prompt, group, session, hit) -> RT.Stream:  # noqa: ANN001
    a = [np.asarray(c, dtype=float) for c in (arrival, hold, prompt, hit)]
    n = len(a[0])
    return RT.Stream(a[0], a[1], a[2], np.ones(n), a[3], np.asarray(group, np.int64),
                     np.full(n, G), np.asarray(session, np.int64))


def _reference(s: RT.Stream, dep: RT.Deployment, router: str, forced: list[int],
               par: RT.RouterParams = RT.RouterParams()) -> list[int]:
    g, ss, n_groups, n_keys = RT.keys_of(s)
    rep, _, _ = RT.place_reference(
        s.arrival, s.hold, s.prompt, s.output, s.hit, g, s.group_tokens, ss, n_groups,
        n_keys, dep.replicas, RT.router_code(router), dep.hbm_tokens, dep.tier_of,
        dep.tier_tokens, par.array(), forced=np.array(forced))
    return rep.tolist()


def test_llmd_precise_scores_actual_hbm_min_max() -> None:
    """llm-d's precise scorer: tokens held in each replica's HBM, min-max normalised over
    the replicas holding any (utils.go); 3 x that + 2 x KV-cache free + 2 x queue.
    Replica 0 holds the whole re-sent prompt, replica 1 its group prefix only, replica 0
    is busy: precise keeps it on replica 0 (1 vs 0 after min-max), the approximate scorer
    (matched / prompt: 1 vs 0.99) sends it to the idle replica 1."""
    S = G + 10
    s = _stream([0.0, 0.5, 2.0], [10.0, 1e-3, 1e-3], [S, G + 20, S], [0, 0, 0],
                [0, 1, 0], [0.0, 0.0, S])
    dep = separate(3)
    busy = RT.RouterParams(llmd_active_weight=2.0, precise_active_weight=2.0)
    # precise: 3 x 1 + 2 (queue) + 2 x 0.995 (KV free) + 0 (active) against 0 + 2 + 2 + 2
    assert _allowed(s, dep, "llm-d-precise", [0, 1, -1], busy) == [0]
    # approximate: 3 x 1 + 2 + 0 against 3 x 0.99 + 2 + 2 x 1
    assert _allowed(s, dep, "llm-d-prefix", [0, 1, -1], busy) == [1]
    # without the normalisation (raw matched / prompt) replica 1 would win: 8.97 > 6.99
    assert 3 * G / S + 2 + 2 + 2 > 3 + 2 + 2 * (1 - (S + 1) / 200_000)


def test_llmd_kv_cache_scorer_counts_a_shared_prefix_once() -> None:
    """The kv-cache-utilization scorer alone: 1 - the tokens running requests hold / KV
    room. Two running requests of one 100,000-token group hold it once (vLLM's shared
    blocks): replica 0 (100,011) is freer than replica 1 (one 150,000-token prompt)."""
    kv = RT.RouterParams(llmd_prefix_weight=0.0, llmd_queue_weight=0.0, llmd_kv_weight=1.0)
    big = 100_000.0
    s = RT.Stream(np.array([0.0, 0.0, 0.0, 1.0]), np.full(4, 10.0),
                  np.array([big + 10, 150_000.0, big + 10, 100.0]), np.ones(4), np.zeros(4),
                  np.array([0, -1, 0, -1]), np.array([big, 0.0, big, 0.0]), np.arange(4))
    dep = separate(2)
    assert _allowed(s, dep, "llm-d-prefix", [0, 1, 0, -1], kv) == [0]
    # counted twice, replica 0 would hold 200,022 of 200,000 tokens: replica 1 (0.25 free)
    assert 1 - (2 * big + 22) / 200_000 < 1 - 150_001 / 200_000


def test_llmd_prefix_index_is_an_lru_of_its_capacity() -> None:
    """GIE's approximate index holds lruCapacityPerServer blocks per server: once later
    groups push group 0 out of replica 0's entry, the router no longer sees it there."""
    S = G + 10
    rows = [(0.0, 1e-3, S, 0), (0.0, 1e-3, S, 1), (2.0, 1e-3, S, 2), (3.0, 1e-3, S, 0)]
    s = rows_stream(rows, G)
    dep = separate(2)
    assert _allowed(s, dep, "llm-d-prefix", [0, 1, 0, -1]) == [0]
    small = RT.RouterParams(llmd_view_tokens=1.5 * G)  # group 2 pushed group 0 out
    assert _allowed(s, dep, "llm-d-prefix", [0, 1, 0, -1], small) == [0, 1]


def test_random_router_draws_uniformly_and_repeatably() -> None:
    s = stream(4000, 0, 0.0)
    a = RT.place(s, separate(4), "random").replica
    counts = np.bincount(a, minlength=4)
    assert counts.min() > 900 and counts.max() < 1100, counts
    assert np.array_equal(a, RT.place(s, separate(4), "random").replica)
    other = RT.place(s, separate(4), "random", RT.RouterParams(seed=1)).replica
    assert not np.array_equal(a, other)
    assert [RT.draw_reference(i, 0, 4) for i in range(50)] == a[:50].tolist()


def test_block_keys_follow_content() -> None:
    """A prompt re-sent whole shares all its blocks with its earlier send; a session whose
    reusable part is shorter than what it had (compaction) shares only up to it."""
    s = RT.Stream(np.arange(3.0), np.ones(3), np.array([96.0, 96.0, 160.0]),
                  np.full(3, 16.0), np.array([0.0, 96.0, 48.0]), np.full(3, -1),
                  np.zeros(3), np.zeros(3, np.int64))
    keys, koff, kn = RT.block_keys(s, 16)
    k = [keys[koff[i]:koff[i] + kn[i]].tolist() for i in range(3)]
    assert k[1][:6] == k[0][:6] and k[1][6] != k[0][6]  # prompt shared, output not
    assert k[2][:3] == k[1][:3] and not set(k[2][3:]) & set(k[0] + k[1])


@pytest.mark.parametrize("seed", range(6))
def test_block_keys_kernel_equals_reference(seed: int) -> None:
    """The numba kernel against the plain-Python loop: random sessions and groups, prompts
    re-sent whole, grown and compacted (hit below, at and above the previous request),
    outputs of 0-3 blocks, block sizes 1-64."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    sess = rng.integers(0, max(1, n // 5), n)
    grp = np.where(rng.random(n) < 0.5, rng.integers(0, 7, n), -1)
    prompt = rng.integers(1, 3_000, n).astype(float)
    hit = np.where(rng.random(n) < 0.2, prompt, rng.random(n) * prompt * 1.2)
    s = RT.Stream(np.arange(n, dtype=float), np.ones(n), prompt,
                  rng.integers(0, 200, n).astype(float), hit, grp,
                  rng.random(n) * 1_500, sess)
    bs = int(rng.choice([1, 16, 64]))
    got, want = RT.block_keys(s, bs), RT.block_keys_reference(s, bs)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)
    assert len(np.unique(got[0])) < len(got[0])  # some blocks were shared


def test_router_names() -> None:
    assert RT.canonical("prefix-aware") == "sglang-cache-aware"
    assert RT.DEFAULT_ROUTER == "session"
    with pytest.raises(KeyError):
        RT.canonical("magic")


# --- through the planner and the CLI -------------------------------------------------------

def _req(router: str, groups: int = 64, **kw: object):  # noqa: ANN202
    from xmemplan.sizing.request import build_request

    req, _ = build_request(ttft_slo="2s", prompt_tokens="20k", hit_rate=0.8, rate=8,
                           prefix_groups=groups, router=router, requests=1000,
                           **kw)  # type: ignore[arg-type]
    return req


def _replica_hits(router: str, option: str, counts: tuple[int, ...], **kw: Any
                  ) -> list[float]:
    from xmemplan.sizing.planner import Planner

    p = Planner(_req(router, **kw))
    out = []
    for g in counts:
        pt = p.run(option, g, 1)
        assert pt.balance is not None and pt.split is not None
        out.append(pt.balance["hit_ratio"]["mean"])
    return out


def test_planner_per_replica_hits_fall_recover_and_hold() -> None:
    """The issue's deployment through `size`'s planner: 64 prefix groups of 16,000 tokens,
    replicas that cannot read each other's HBM or host DRAM (per instance, the catalog's
    default). Round robin: falling; prefix-aware: recovering; X-Mem shared: flat."""
    counts = (1, 2, 4, 8)
    rr = _replica_hits("round-robin", "host-dram", counts)
    assert all(b < a for a, b in zip(rr, rr[1:], strict=False)), rr
    pa = _replica_hits("sglang-cache-aware", "host-dram", counts)
    assert pa[-1] > rr[-1] + 0.2 and pa[-1] >= pa[0] - 0.01, (pa, rr)
    x = _replica_hits("round-robin", "xmem", counts)
    assert max(x) - min(x) < 0.02, x


def test_tier_scope_flag_shares_host_dram_per_server() -> None:
    inst = _replica_hits("round-robin", "host-dram", (8,))
    server = _replica_hits("round-robin", "host-dram", (8,), tier_scope=["host-dram=server"])
    assert server[0] > inst[0] + 0.2


def test_tier_domains() -> None:
    from xmemplan.sizing.planner import tier_domains

    assert tier_domains("replica", 4, 2, 8, None).tolist() == [0, 1, 2, 3]
    assert tier_domains("server", 8, 2, 8, None).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert tier_domains("rack", 4, 8, 8, 16).tolist() == [0, 0, 1, 1]
    assert tier_domains("rack", 4, 8, 8, None).tolist() == [0, 0, 0, 0]
    assert tier_domains("cluster", 3, 1, 8, None).tolist() == [0, 0, 0]
    # a replica wider than a server (tp8 on GB200's 4-GPU trays) or a rack: one domain
    # each, numbered without gaps (they were 0, 2, 4: the tier split over 5 domains)
    assert tier_domains("server", 3, 8, 4, None).tolist() == [0, 1, 2]
    assert tier_domains("rack", 3, 8, 8, 4).tolist() == [0, 1, 2]


def test_cli_names_the_router_and_shows_the_mechanism(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    import json

    from xmemplan.cli.main import run

    monkeypatch.setenv("COLUMNS", "80")
    args = ["size", "--ttft-slo", "2s", "--prompt-tokens", "20k", "--hit-rate", "0.8",
            "--rate", "8", "--requests", "1000", "--prefix-groups", "64"]
    assert run([*args, "--router", "rr"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(("1 X-Mem", "0 X-Mem"))
    assert "Router: round-robin." in " ".join(out.split())
    assert "from the serving replica's HBM" in " ".join(out.split())
    assert "With prefix-aware routing (sglang-cache-aware) host DRAM needs" in \
        " ".join(out.split())
    assert run([*args, "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["router"] == "session" and "Router: session (the default)." in d["answer"]
    o = d["options"][1]
    assert set(o["hit_split"]) == {"hbm", "tier", "recompute"}
    assert abs(sum(o["hit_split"].values()) - 1) < 1e-9
    assert o["balance"]["requests"]["max"] >= o["balance"]["requests"]["min"]
    assert d["other_router"]["router"] == "sglang-cache-aware"


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--router", "magic", "unknown router 'magic'"),
    ("--tier-scope", "host-dram", "is not TIER=SCOPE"),
    ("--tier-scope", "host-dram=moon", "is not TIER=SCOPE"),
    ("--tier-scope", "hbm=server", "not a tier this plan loads from"),
    ("--prefix-groups", "0", "--prefix-groups"),
])
def test_cli_bad_routing_flags(capsys: pytest.CaptureFixture[str], flag: str, value: str,
                               says: str) -> None:
    from xmemplan.cli.main import run

    assert run(["size", "--ttft-slo", "1s", flag, value]) == 2
    err = capsys.readouterr().err
    assert says in " ".join(err.split()) and "Traceback" not in err


def test_bare_size_says_routing_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from xmemplan.cli.main import run

    assert run(["size", "--ttft-slo", "2s", "--requests", "1000"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Router: session (the default)." in out
    assert "Routing does not change these hits" in out


# --- prefix groups in a profile -------------------------------------------------------------

def _profile(tmp_path):  # noqa: ANN001, ANN202
    import json

    from xmemplan.cli.main import run
    from xmemplan.traces import synth

    synth.write_mooncake(tmp_path / "m.jsonl",
                         synth.agent_sessions(n_sessions=6, turns=6, seed=3))
    out = tmp_path / "p.json"
    assert run(["-q", "hitrate", str(tmp_path / "m.jsonl"), "--profile-out", str(out)]) == 0
    return out, json.loads(out.read_text())


def test_profile_prefix_groups_are_read_and_routed(tmp_path) -> None:  # noqa: ANN001
    import json

    from xmemplan.profile import load_profile
    from xmemplan.sizing import workload as wl
    from xmemplan.sizing.planner import Planner
    from xmemplan.sizing.request import build_request

    out, doc = _profile(tmp_path)
    s = doc["requests_sample"]
    n = len(s["prompt_tokens"])
    s["prefix_group"] = [k % 2 for k in s["session"]]
    s["prefix_group_tokens"] = [min(p, 500) for p in s["prompt_tokens"]]
    out.write_text(json.dumps(doc))
    w = wl.from_profile(load_profile(out))
    assert w.group is not None and w.group.size == n and w.group_tokens is not None
    req, _ = build_request(ttft_slo="2s", workload=out, router="round-robin")
    p = Planner(req)
    st = p.stream(1.0)
    assert st.group.max() == 1 and np.all(st.group_tokens <= st.prompt)
    pt = p.run("host-dram", 2)
    assert pt.split is not None


@pytest.mark.parametrize(("edit", "field"), [
    ({"prefix_group": [0]}, "requests_sample.prefix_group"),  # wrong length
    ({"prefix_group_tokens": "all"}, "requests_sample.prefix_group"),  # one of the two
    ("tokens-above-prompt", "requests_sample.prefix_group_tokens"),
])
def test_profile_bad_prefix_groups(tmp_path, edit, field: str) -> None:  # noqa: ANN001
    import json

    from xmemplan.errors import InputError
    from xmemplan.profile import load_profile

    out, doc = _profile(tmp_path)
    s = doc["requests_sample"]
    n = len(s["prompt_tokens"])
    if edit == "tokens-above-prompt":
        s["prefix_group"] = [0] * n
        s["prefix_group_tokens"] = [p + 1 for p in s["prompt_tokens"]]
    elif "prefix_group" in edit:
        s.update(edit)
        s["prefix_group_tokens"] = [0] * n
    else:
        s.pop("prefix_group", None)
        s["prefix_group_tokens"] = [0] * n  # prefix_group missing
    out.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        load_profile(out)


# --- into the engine's block pool (issue 19) -------------------------------------------------

def test_engine_block_pool_agrees_with_the_placement() -> None:
    """The same routed requests through the engine's own per-replica block pool (vLLM
    policy, the replica's KV room in 16-token blocks): its HBM hits are the pool's
    outcome, not ours, and agree with the placement model's (8 replicas, no overload)."""
    from xmemplan.sizing.engine import Config, run

    s = stream(1000, 64, 16_000, rate=20, hold=2.0)
    got = {}
    for r in ("round-robin", "sglang-cache-aware"):
        pl = RT.place(s, separate(8), r)
        cfg = Config(policy="vllm", replicas=8, block_tokens=16, blocks=200_000 // 16,
                     lin_s_per_token=1e-6, fixed_s=0.002, max_batched_tokens=8192)
        res, *_ = run(RT.engine_requests(s, pl, 16), cfg)
        assert np.array_equal(res.replica, pl.replica)
        engine = float(res.hbm_hit.sum() / s.prompt.sum())
        assert abs(engine - pl.split()[0]) < 0.03, (r, engine, pl.split())
        got[r] = engine
    assert got["sglang-cache-aware"] > got["round-robin"] + 0.4


def test_block_keys_share_groups_and_sessions() -> None:
    rows = [(0.0, 1.0, 64.0, 0), (1.0, 1.0, 96.0, 0), (2.0, 1.0, 80.0, 1)]
    arr, hold, prompt, grp = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    s = RT.Stream(arr, hold, prompt, np.full(3, 16.0), np.array([0.0, 80.0, 0.0]),
                  grp.astype(np.int64), np.full(3, 32.0), np.array([0, 0, 1]))
    keys, koff, kn = RT.block_keys(s, 16)
    k = [keys[koff[i]:koff[i] + kn[i]] for i in range(3)]
    assert kn.tolist() == [5, 7, 6]
    assert np.array_equal(k[0], k[1][:5])  # same group, same session: 80 tokens shared
    assert not np.array_equal(k[0][:2], k[2][:2])  # another group
    assert not set(k[2][2:]) & set(k[0])


# --- prefix groups from a trace (xmemplan/prefix/groups.py) ----------------------------------

def test_groups_find_prefixes_shared_across_sessions() -> None:
    from xmemplan.prefix.groups import fingerprints, groups

    rng = np.random.default_rng(0)
    system = rng.integers(0, 1 << 30, 300)  # 300 token ids every session of group A starts with
    other = rng.integers(0, 1 << 30, 300)
    reqs = [  # (session, tokens)
        (0, np.concatenate([system, rng.integers(0, 1 << 30, 50)])),
        (0, np.concatenate([system, rng.integers(0, 1 << 30, 80)])),
        (1, np.concatenate([system, rng.integers(0, 1 << 30, 40)])),
        (2, np.concatenate([other, rng.integers(0, 1 << 30, 40)])),  # alone
        (3, np.concatenate([other[:100], rng.integers(0, 1 << 30, 400)])),  # shares 100
    ]
    keys = np.concatenate([t for _, t in reqs]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(t) for _, t in reqs])]).astype(np.int64)
    block = np.ones(len(reqs), np.int64)
    fp = fingerprints(keys, offsets, block)
    g, tok = groups(fp, np.array([s for s, _ in reqs]), np.array([len(t) for _, t in reqs]),
                    block)
    assert g[0] == g[1] == g[2] >= 0 and g[3] == g[4] >= 0 and g[0] != g[3]
    # the grid rounds down: 300 shared tokens read as 256, 100 as 91 (64 x 2^0.5)
    assert tok[:3].tolist() == [256, 256, 256] and tok[3] == tok[4] == 91
    # one session alone: no group
    g1, t1 = groups(fp[:2], np.array([0, 0]), np.array([350, 380]), block[:2])
    assert g1.tolist() == [-1, -1] and t1.tolist() == [0, 0]


def test_groups_with_blocks_cover_whole_blocks_only() -> None:
    from xmemplan.prefix.groups import fingerprints, groups

    keys = np.array([1, 2, 3, 9, 1, 2, 3, 7], np.int64)  # chained block ids, 512 tokens each
    offsets = np.array([0, 4, 8], np.int64)
    block = np.array([512, 512])
    g, tok = groups(fingerprints(keys, offsets, block), np.array([0, 1]),
                    np.array([2048, 2048]), block)
    assert g[0] == g[1] >= 0
    assert tok.tolist() == [1024, 1024]  # 3 blocks shared; the grid's 1,448 covers 2 whole


def test_closed_loop_users_say_they_are_not_placed(capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    from xmemplan.cli.main import run

    assert run(["size", "--ttft-slo", "2s", "--requests", "400", "--users", "8",
                "--prefix-groups", "4", "--prompt-tokens", "8k"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "closed-loop users are not placed on per-replica caches" in out


# --- the public multi-replica check's data and replay (benchmarks/replicas_check.py) ------

def _check_module():  # noqa: ANN202
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import replicas_check

    return replicas_check


def test_multi_replica_rows_are_read_and_a_third_held_out() -> None:
    """Every row maps to our router and a stage of its run; the two runs the check was
    developed on hold a third out, and the runs added unseen are unseen in every row."""
    import csv

    C = _check_module()
    rows = list(csv.DictReader(C.DATA.open()))
    by: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        b = row["benchmark"]
        by.setdefault(b, []).append(row)
        # every scheduler maps to ours
        assert row["router_ours"].removesuffix(C.STAND_IN) == C.scheduler(
            row["router_measured"], 1e5, b)[0]
        assert float(row["qps"]) in {r for r, _ in C.STAGES[b]}
        assert (row["tier"] == "none") == (float(row["tier_tokens_per_replica"]) == 0)
        assert row["source"]
    assert set(by) == set(C.STAGES) == {"llm-d-37-capacity", "llm-d-tiered-prefix-cache",
                                        C.HEADROOM, C.OVERLOAD, C.CAP73,
                                        C.SGLANG_TIERED, C.GUIDE_PRECISE, *C.OPTBASE}
    for b, rs in by.items():
        roles = {r["role"] for r in rs}
        if b in (C.HEADROOM, C.OVERLOAD, C.CAP73, C.SGLANG_TIERED, C.GUIDE_PRECISE,
                 *C.OPTBASE):
            assert roles == {"unseen"}
            continue
        held = sum(r["role"] == "held-out" for r in rs)
        assert roles <= {"check", "held-out"} and 3 * held >= len(rs) - 1, b


def test_the_unseen_runs_schedulers_are_their_own_configs() -> None:
    """The unseen runs' EndpointPickerConfigs weigh the queue scorer where 37-capacity
    weighs the active-request scorer (each file's own weights)."""
    C = _check_module()
    _, p = C.scheduler("precise-prefix-cache", 1e5, C.HEADROOM)
    assert (p.precise_prefix_weight, p.precise_queue_weight, p.precise_kv_weight,
            p.precise_active_weight) == (1.0, 1.0, 1.0, 0.0)
    _, p = C.scheduler("precise-prefix-cache_load", 1e5)
    assert (p.precise_prefix_weight, p.precise_queue_weight, p.precise_active_weight) == (
        2.0, 0.0, 1.0)
    _, p = C.scheduler("load", 1e5, C.HEADROOM)
    assert (p.llmd_prefix_weight, p.llmd_queue_weight, p.llmd_active_weight) == (
        0.0, 1.0, 0.0)
    _, p = C.scheduler("estimate-prefix-cache", 1e5, C.HEADROOM)
    assert (p.llmd_prefix_weight, p.llmd_view_tokens) == (1.0, 140_800.0)
    # the overload run: 64-character blocks x 31,250 a pod, its own scheduler names
    r, p = C.scheduler("prefix-cache-estimate", 1e5, C.OVERLOAD)
    assert (r, p.llmd_cap_tokens, p.llmd_view_tokens) == ("llm-d-prefix", 4096.0, 500_000.0)
    assert C.scheduler("random-routing", 1e5, C.OVERLOAD)[0] == "random"
    # 73-capacity (round 15): precise weighs prefix 3, kv-cache 2, queue 2; estimated 1/1/1
    # over 64-character blocks x 31,250; load: queue 1 + kv-cache 1
    _, p = C.scheduler("precise-scheduling", 1e5, C.CAP73)
    assert (p.precise_prefix_weight, p.precise_kv_weight, p.precise_queue_weight,
            p.precise_active_weight) == (3.0, 2.0, 2.0, 0.0)
    r, p = C.scheduler("estimated-scheduling", 1e5, C.CAP73)
    assert (r, p.llmd_prefix_weight, p.llmd_queue_weight, p.llmd_view_tokens) == (
        "llm-d-prefix", 1.0, 1.0, 500_000.0)
    r, p = C.scheduler("load-scheduling", 1e5, C.CAP73)
    assert (r, p.llmd_prefix_weight, p.llmd_queue_weight) == ("llm-d-prefix", 0.0, 1.0)
    assert C.scheduler("random-scheduling", 1e5, C.CAP73)[0] == "random"


def test_cpu_offload_replay_keeps_ttft_where_hbm_alone_queues(monkeypatch) -> None:  # noqa: ANN001
    """The tiered-prefix-cache run's shape, its first stage (5 QPS, 60 s) then 30 s at 10
    QPS: 250 groups of a 16,000-token prefix overflow 8 replicas' HBM; with each
    replica's CPU tier the same placed requests load their prefixes instead of
    recomputing them (the run: TTFT p90 16.6 s HBM only, 1.31 s with CPU offload at 10)."""
    import csv

    C = _check_module()
    monkeypatch.setitem(C.STAGES, "llm-d-tiered-prefix-cache", [(5.0, 60.0), (10.0, 30.0)])
    rows = [r for r in csv.DictReader(C.DATA.open())
            if r["benchmark"] == "llm-d-tiered-prefix-cache" and r["qps"] == "10"]
    got = C.simulate(rows, 0)
    hbm = got[("llm-d-tiered-prefix-cache", "optimized-baseline-hbm-only", 10.0)][0]
    cpu = got[("llm-d-tiered-prefix-cache", "gpu-cpu-tier-prefix-aware", 10.0)][0]
    assert cpu < 0.5 * hbm, (cpu, hbm)


def test_multi_replica_replay_sends_what_the_server_computed() -> None:
    """Run 1's prompts as its server tokenised them (inference-perf sends decoded random
    token ids: 1.0435 tokens a configured token, measured by the same harness and
    tokenizer, plus the BOS) and the run's own KV room per replica; the tiered run's
    tokenizer has no such count and keeps its configured lengths."""
    import csv

    from xmemplan.sizing import model as M
    from xmemplan.sizing.request import build_request

    C = _check_module()
    rows = list(csv.DictReader(C.DATA.open()))
    r1 = next(r for r in rows if r["benchmark"] == "llm-d-37-capacity")
    r2 = next(r for r in rows if r["benchmark"] == "llm-d-tiered-prefix-cache")
    assert C.served_lengths(r1) == (round(8000 * 1.0435) + 1, round(1000 * 1.0435))
    assert C.served_lengths(r2) == (16000.0, 256.0)
    # measured time per output token: run 1 from its ITL mean (two stamps a token), run 2
    # from its mean E2E and TTFT
    assert C.measured_per_token(r1) == 2 * float(r1["itl_mean_s"])
    assert abs(C.measured_per_token(r2) - (11.98 - 1.62) / 255) < 1e-9
    # every run but the precise guide's ladder (no per-stage ITL or E2E) gives one
    assert all((C.measured_per_token(r) is None)
               == (r["benchmark"] in (C.GUIDE_PRECISE, *C.OPTBASE)) for r in rows)
    # that run states its memory share, not its KV room: the engine's pool at 0.95
    g = next(r for r in rows if r["benchmark"] == C.GUIDE_PRECISE)
    q, _ = build_request(ttft_slo="2s", prompt_tokens="7200", model=g["model"], gpu=g["gpu"],
                         tp=2, engine="vllm", rate=3.0)
    assert C.with_run_room(q, g).mem_fraction == 0.95
    s = C.run_stream(r1, [(3.0, 10.0)], 0, (1e-4, 0.03))
    assert s.prompt[0] == sum(C.served_lengths(r1))
    assert s.group_tokens[0] == C.served_lengths(r1)[0]
    req, _ = build_request(ttft_slo="2s", prompt_tokens="9000", model=r1["model"],
                           gpu=r1["gpu"], tp=4, engine="vllm", rate=3.0)
    # the room the run logged is the engine's own pool (vLLM's "GPU KV cache size", after
    # its profile run), not HBM x share less the weights: 446,241 tokens before round 7
    from xmemplan.sizing.simmodel import config_for, kv_pool_tokens

    for r in (r1, r2):
        q, _ = build_request(ttft_slo="2s", prompt_tokens="9000", model=r["model"],
                             gpu=r["gpu"], tp=int(r["tp"]), engine="vllm", rate=3.0)
        q = C.with_run_room(q, r)
        room = float(r["kv_tokens_per_replica"])
        assert abs(kv_pool_tokens(q.setup, "vllm") - room) < 1, r["benchmark"]
        assert abs(C.run_room(q) - room) < 1
        cfg = config_for(q.setup, replicas=1, nodes=1, policy="vllm", prompt_p50=9000)
        assert room - cfg.block_tokens < cfg.blocks * cfg.block_tokens <= room
        assert M.kv_room_tokens(q.model, q.gpu, q.shape, q.mem_fraction) > room


def test_the_answers_multi_replica_caveat_is_what_the_replica_check_measures() -> None:
    """`size` says, where an option runs on more than one replica, how its TTFT p90 did on
    the published multi-replica runs (planner.MULTI_REPLICA_EVIDENCE). The figures are
    recomputed here from the check's own rows and replays (median of 3, as it prints), so
    a change that moves them fails until the caveat says what the model now does."""
    import csv

    from xmemplan.sizing.planner import MULTI_REPLICA_EVIDENCE, multi_replica_note

    C = _check_module()
    rows = list(csv.DictReader(C.DATA.open()))
    runs = [C.simulate(rows, s) for s in range(3)]
    scored = [row for row in rows if row["ttft_p90_s"]]  # stages with a published TTFT
    errs = np.array([
        float(np.median([r[(row["benchmark"], row["router_measured"], float(row["qps"]))][0]
                         for r in runs])) / float(row["ttft_p90_s"]) - 1 for row in scored])
    stages, under, med, within, n_runs = MULTI_REPLICA_EVIDENCE
    assert (len(errs), int((errs < 0).sum()), int((abs(errs) <= C.TTFT_BOUND).sum()),
            len({row["benchmark"] for row in rows})) == (stages, under, within, n_runs)
    assert float(np.median(errs)) == pytest.approx(med, abs=0.005)
    assert multi_replica_note(1) is None
    note = multi_replica_note(8)
    assert note is not None and f"under the measured at {under}" in note


def test_a_capped_client_sends_when_a_slot_frees() -> None:
    """inference-perf holds at most num_workers x worker_max_concurrency requests in
    flight; the rest wait in its queue, first come first served, and are timed from the
    send (replicas_check.capped_sends, behind --client-cap)."""
    C = _check_module()
    at = np.zeros(4)
    assert C.capped_sends(at, np.ones(4), 2).tolist() == [0.0, 0.0, 1.0, 1.0]
    # a slot frees at 1, but request 2 is not due before 5; nothing goes ahead of its turn
    assert C.capped_sends(np.array([0.0, 0.0, 5.0]), np.ones(3), 1).tolist() == [0.0, 1.0,
                                                                                 5.0]
    assert C.capped_sends(np.array([0.0, 0.1, 0.2]), np.array([3.0, 1.0, 1.0]), 1).tolist() \
        == [0.0, 3.0, 4.0]
    # no cap reached: every request at its own time
    assert C.capped_sends(np.array([0.0, 2.0, 4.0]), np.ones(3), 1).tolist() == [0.0, 2.0,
                                                                                 4.0]
