"""Issue 22: xmemplan's `--cache-model vllm|sglang` hit tokens equal the engines' own code
(vLLM's KVCacheManager/BlockPool, SGLang's RadixCache + allocator) on generated cases and on
slices of the shared traces, prefill only and with outputs, one at a time and in flight.
A differing case prints the first request where they part."""

from __future__ import annotations

import pytest
from oracle_drivers import cache_sglang, cache_vllm
from oracle_scenarios import agentic_requests, cache_scenario, trace_requests
from oracle_support import shared_trace, xmemplan_side

DRIVERS = {"vllm": cache_vllm, "sglang": cache_sglang}


@pytest.fixture(params=["vllm", "sglang"])
def engine(request: pytest.FixtureRequest) -> str:
    request.getfixturevalue(f"{request.param}_engine")
    return request.param


def first_parting(scenario: dict, ours: list[int], theirs: list[int]) -> str:
    if len(ours) != len(theirs):
        return f"lengths differ: xmemplan {len(ours)} requests, engine {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            r = scenario["requests"][i]
            return (f"{scenario['engine']} page {scenario['page_size']} capacity "
                    f"{scenario['capacity_tokens']} outputs {scenario['with_outputs']} "
                    f"inflight {scenario['inflight']}: request {i} ({r['id']}, "
                    f"{len(r['tokens'])} tokens, {r.get('output_tokens', 0)} outputs) "
                    f"hit xmemplan {a}, engine {b}; hits before it agree")
    return ""


def check(scenario: dict) -> None:
    replay_hits = xmemplan_side("xmemplan.prefix.engine_cache", "replay_hits")
    theirs = DRIVERS[scenario["engine"]].replay_hits(scenario)
    ours = [int(h) for h in replay_hits(scenario)]
    msg = first_parting(scenario, ours, theirs)
    assert not msg, msg


CASES = [  # seed, page size, capacity, outputs, inflight
    (seed, page, cap, outs, inflight)
    for seed, page, cap in [(1, 1, 120), (2, 4, 96), (3, 4, 400), (4, 16, 640), (5, 16, 4000),
                            (6, 1, 10_000)]
    for outs in (False, True)
    for inflight in (1, 3)
]


@pytest.mark.parametrize(("seed", "page", "cap", "outs", "inflight"), CASES)
def test_generated(engine: str, seed: int, page: int, cap: int, outs: bool,
                   inflight: int) -> None:
    reqs = agentic_requests(seed, 80, sessions=2 + seed % 4, max_prompt=min(cap, 300),
                            shared_system=seed % 2 == 0)
    check(cache_scenario(engine, reqs, page_size=page, capacity_tokens=cap,
                         with_outputs=outs, inflight=inflight))


@pytest.mark.parametrize(("trace", "limit", "page", "cap"), [
    ("claude-code-weka", 50, 64, 200_000),
    ("claude-code-weka", 50, 16, 60_000),
    ("mooncake-fast25/conversation_trace.jsonl", 200, 512, 400_000),
    ("mooncake-fast25/synthetic_trace.jsonl", 120, 32, 300_000),
])
@pytest.mark.parametrize("outs", [False, True])
def test_shared_trace_slices(engine: str, trace: str, limit: int, page: int, cap: int,
                             outs: bool) -> None:
    reqs = trace_requests([shared_trace(*trace.split("/"))], limit=limit, files=6)
    check(cache_scenario(engine, reqs, page_size=page, capacity_tokens=cap,
                         with_outputs=outs, inflight=2 if outs else 1))


# -- the engine simulator's SGLang pool (issue 19: "SGLang's radix leaves by last access") --
def engine_hits(scenario: dict) -> list[int]:
    """The contract-A scenario through the simulated engine (sizing/engine, SGLang policy,
    its radix pool): one replica whose blocks are the pages, requests far apart (each
    finishes before the next arrives), no chunking; the hit of each request's admission."""
    replay = xmemplan_side("xmemplan.sizing.engine", "replay_scenario")
    page, big = int(scenario["page_size"]), 1 << 20
    outs = bool(scenario["with_outputs"])
    reqs = [{"id": r["id"], "arrival_s": 1000.0 * i, "tokens": r["tokens"],
             "max_tokens": max(1, int(r.get("output_tokens", 0))) if outs else 1}
            for i, r in enumerate(scenario["requests"])]
    steps = replay({"engine": "sglang", "block_size": page,
                    "num_gpu_blocks": int(scenario["capacity_tokens"]) // page,
                    "max_num_seqs": 8, "max_num_batched_tokens": big,
                    "chunked_prefill_size": big, "enable_prefix_caching": True,
                    "step_time": {"base_s": 0.01}, "requests": reqs})
    hits = {k: v for rec in steps for k, v in rec["new_hits"].items()}
    return [int(hits.get(r["id"], -1)) for r in reqs]


@pytest.mark.parametrize(("seed", "page", "cap"), [(1, 1, 120), (2, 4, 96), (3, 4, 400),
                                                   (4, 16, 640), (5, 16, 4000)])
@pytest.mark.parametrize("outs", [False, True])
def test_engine_pool_hits_what_sglang_hits(sglang_engine: None, seed: int, page: int,
                                           cap: int, outs: bool) -> None:
    """The simulated engine's own event loop with `--engine sglang`, under KV pressure: its
    pool (match with the prompt - 1 cap, page-aligned; a prefill asks its new tokens and a
    page, a decode step a page; whole leaves evicted by last access; checkpoint after the
    prefill, insert at the end) hits what SGLang's RadixCache and allocator hit, request
    for request (the driver makes the engine's calls, cache_sglang.py). One request at a
    time: SGLang's step loop, where several would be in flight, is methods of its
    Scheduler, which needs a model worker (oracle_drivers/sched_sglang.py)."""
    reqs = agentic_requests(seed, 80, sessions=2 + seed % 4, max_prompt=min(cap, 300),
                            shared_system=seed % 2 == 0)
    # requests the engine admits alone (prompt, outputs and a page fit the pool)
    reqs = [r for r in reqs if len(r["tokens"]) + r["output_tokens"] + 2 * page < cap]
    sc = cache_scenario("sglang", reqs, page_size=page, capacity_tokens=cap,
                        with_outputs=outs)
    theirs = cache_sglang.replay_hits(sc)
    ours = engine_hits(sc)
    assert sum(theirs) > 0
    msg = first_parting(sc, ours, theirs)
    assert not msg, msg


@pytest.mark.parametrize(("trace", "limit", "page", "cap"), [
    ("claude-code-weka", 40, 64, 150_000),
    ("mooncake-fast25/conversation_trace.jsonl", 150, 512, 300_000),
])
def test_engine_pool_on_shared_trace_slices(sglang_engine: None, trace: str, limit: int,
                                            page: int, cap: int) -> None:
    reqs = trace_requests([shared_trace(*trace.split("/"))], limit=limit, files=6)
    reqs = [r for r in reqs if len(r["tokens"]) + r.get("output_tokens", 0) + 2 * page < cap]
    sc = cache_scenario("sglang", reqs, page_size=page, capacity_tokens=cap,
                        with_outputs=True)
    theirs = cache_sglang.replay_hits(sc)
    msg = first_parting(sc, engine_hits(sc), theirs)
    assert not msg, msg
