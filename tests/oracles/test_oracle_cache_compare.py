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
