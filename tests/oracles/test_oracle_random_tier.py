"""Issue 19: the engine against vLLM 0.33's own `Scheduler` and `AsyncScheduler` with a
host-DRAM tier behind our KV connector (tier_connector.py), on seeded random scenarios
(oracle_scenarios.random_tier_pool: small pools as test_oracle_random.py draws them, and
a quarter of 20-60 agentic requests under KV pressure; random link speeds, so a load
lands within the step it starts or several steps later). Every field of every step, the
loads started (first_parting_tier), the prefix-cache lookups (`lookups`) and vLLM's
own connector prefix-cache stats against what the engine's records imply
(`connector_counts`): the two hit rates benchmarks/loaded_check.py reads. Round 15 swept
thousands by hand (docs/oracles.md, "Random sweeps"); these keep a seeded 120 per
setting. A scenario known to part is listed with where (strict: one that starts to
agree fails, so the list stays true). SGLang has no setting here: its scheduler driver
has no HiCache tier (docs/oracles.md)."""

from __future__ import annotations

import random

import pytest
from oracle_drivers import sched_vllm
from oracle_scenarios import random_tier_pool
from oracle_support import xmemplan_side
from test_oracle_sched_vllm import first_parting_tier, lookup_totals_parting, max_loads_in_flight

N = 120
# (setting, index) -> where it parts
KNOWN: dict[tuple[str, int], str] = {}


def load_steps(records: list[dict]) -> list[int]:
    """For each load the engine started, how many records later it is seen landed (1: by
    the next schedule)."""
    out = []
    for k, rec in enumerate(records):
        for rid in rec["loads"]:
            later = (j for j in range(k + 1, len(records)) if rid in records[j]["landed"])
            out.append(next(later, len(records)) - k)
    return out


def connector_counts(records: list[dict], prompt: dict[str, int]) -> list[tuple[int, int, int]]:
    """Per record, the connector prefix-cache stats the engine's records imply, as the
    loaded check reads vllm:external_prefix_cache_* (benchmarks/loaded_check.py,
    published_hit_rates): each request never preempted counts once, at the step it is
    given blocks (its load starts, or its first schedule without one), with its prompt
    past the HBM hit as queries and its loaded tokens as hits."""
    seen: set[str] = set()
    preempted: set[str] = set()
    out = []
    for rec in records:
        n = q = h = 0
        admitted = [(rid, hbm, ext) for rid, (hbm, ext) in rec["loads"].items()]
        admitted += [(rid, hit, 0) for rid, hit in rec["new_hits"].items()]
        for rid, hbm, ext in admitted:
            if rid not in seen and rid not in preempted:
                n, q, h = n + 1, q + prompt[rid] - hbm, h + ext
            seen.add(rid)
        preempted.update(rec["preempted"])
        out.append((n, q, h))
    return out


@pytest.mark.parametrize(("setting", "asyn", "seed"), [
    ("vllm-tier", False, 151),
    ("vllm-async-tier", True, 152),
])
def test_random_tiers_match_vllms_own_scheduler(vllm_engine: None, setting: str,
                                                asyn: bool, seed: int) -> None:
    replay = xmemplan_side("xmemplan.sizing.engine", "replay_scenario")
    theirs_of = sched_vllm.replay_scenario_async_tier if asyn else sched_vllm.replay_scenario_tier
    rng = random.Random(seed)
    parted: dict[int, str] = {}
    loads: list[int] = []
    preempted = in_flight = full = looked = stalled = 0
    ext = [0, 0, 0]  # vLLM's connector stats over the sweep: requests, queries, hits
    for k in range(N):
        sc = random_tier_pool("vllm", rng, asyn=asyn)
        totals: dict[str, tuple[int, int]] = {}
        ours = list(replay(sc, totals))
        theirs = theirs_of(sc, sched_vllm.landings(ours))
        implied = connector_counts(ours, {r["id"]: len(r["tokens"]) for r in sc["requests"]})
        # (first_parting compares the lookups of each step too)
        msg = first_parting_tier(ours, theirs) or next(
            (f"step {k}, connector stats: xmemplan {x}, vLLM {b['connector_stats']}"
             for k, (x, b) in enumerate(zip(implied, theirs))
             if x != tuple(b["connector_stats"])), "")
        # each request's lookups over the whole run, empty schedules included; a run
        # that stalls (requests left unfinished on both sides: parked loads hold every
        # block) ends at a different point on each (the engine looks its head up once
        # more before it stops), so those are counted apart and compared per step only
        done = {f for rec in theirs for f in rec["finished"]}
        if len(done) < len(sc["requests"]):
            stalled += 1
        else:
            msg = msg or lookup_totals_parting(sc, totals, theirs)
        if msg:
            parted[k] = msg
        loads += load_steps(ours)
        looked += sum(len(s["lookups"]) for s in theirs)
        ext = [a + sum(s["connector_stats"][j] for s in theirs) for j, a in enumerate(ext)]
        preempted += sum(len(s["preempted"]) for s in theirs)
        in_flight = max(in_flight, max_loads_in_flight(ours))
        full += any(s["kv_blocks_used"] == sc["num_gpu_blocks"] - 1 for s in theirs)
    known = {k: v for (s, k), v in KNOWN.items() if s == setting}
    unexpected = {k: v for k, v in parted.items() if k not in known}
    assert not unexpected, unexpected
    assert set(parted) == set(known), f"known partings that now agree: {set(known) - set(parted)}"
    # the sweep reaches what it is for: many loads, some landing by the next schedule and
    # some several steps later, several in flight at once, preemption, every block held
    # (seeds 151 / 152: 722 / 956 loads, 348 / 455 preemptions, up to 9 / 41 loads in
    # flight, the pool full in 59 / 61 scenarios, 2,997 / 2,718 lookups, and vLLM's
    # connector stats 1,605 / 1,836 requests, 59,229 / 69,373 queries, 17,434 / 21,304 hits)
    assert len(loads) >= 500 and preempted >= 200 and in_flight >= 5 and full >= 30
    assert looked >= 2_000 and ext[0] >= 1_000 and ext[2] >= 10_000
    # per-request lookup totals compared on the rest (seeds 151 / 152: 5 / 5 stall; by
    # hand, seeds 3002 / 3003 async, 300 each: 7 / 20 stall, and the totals part only in
    # 4 / 6 of those, never in a run that finishes)
    assert stalled <= N // 10
    assert min(loads) == 1 and max(loads) >= 6
