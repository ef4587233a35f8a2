"""Issue 19: the engine against vLLM 0.33's own `Scheduler` and `AsyncScheduler` with a
host-DRAM tier behind our KV connector (tier_connector.py), on seeded random scenarios
(oracle_scenarios.random_tier_pool: small pools as test_oracle_random.py draws them, and
a quarter of 20-60 agentic requests under KV pressure; random link speeds, so a load
lands within the step it starts or several steps later). Every field of every step, the
loads started (first_parting_tier) and the prefix-cache lookups too (`lookups`, which
the loaded check's hit rates count: benchmarks/loaded_check.py). Round 15 swept
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
from test_oracle_sched_vllm import first_parting_tier, max_loads_in_flight

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
    preempted = in_flight = full = looked = 0
    for k in range(N):
        sc = random_tier_pool("vllm", rng, asyn=asyn)
        ours = list(replay(sc))
        theirs = theirs_of(sc, sched_vllm.landings(ours))
        msg = first_parting_tier(ours, theirs) or next(
            (f"step {a['step']}, lookups: xmemplan {a['lookups']}, vLLM {b['lookups']}"
             for a, b in zip(ours, theirs) if a["lookups"] != b["lookups"]), "")
        if msg:
            parted[k] = msg
        loads += load_steps(ours)
        looked += sum(len(s["lookups"]) for s in theirs)
        preempted += sum(len(s["preempted"]) for s in theirs)
        in_flight = max(in_flight, max_loads_in_flight(ours))
        full += any(s["kv_blocks_used"] == sc["num_gpu_blocks"] - 1 for s in theirs)
    known = {k: v for (s, k), v in KNOWN.items() if s == setting}
    unexpected = {k: v for k, v in parted.items() if k not in known}
    assert not unexpected, unexpected
    assert set(parted) == set(known), f"known partings that now agree: {set(known) - set(parted)}"
    # the sweep reaches what it is for: many loads, some landing by the next schedule and
    # some several steps later, several in flight at once, preemption, every block held
    # (seeds 151 / 152: 721 / 956 loads, 348 / 455 preemptions, up to 9 / 41 loads in
    # flight, the pool full in 59 / 61 scenarios, 2,997 / 2,718 lookups)
    assert len(loads) >= 500 and preempted >= 200 and in_flight >= 5 and full >= 30
    assert looked >= 2_000
    assert min(loads) == 1 and max(loads) >= 6
