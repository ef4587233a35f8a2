"""The cache drivers against hand-checked cases: the engines' rules as their code applies them
(page alignment, the prompt - 1 cap, eviction order and unit, output insertion, locks)."""

from __future__ import annotations

import pytest
from oracle_drivers import cache_sglang, cache_vllm, output_token
from oracle_scenarios import agentic_requests, cache_scenario

DRIVERS = {"vllm": cache_vllm, "sglang": cache_sglang}


def _reqs(*prompts: list[int], outputs: int = 0) -> list[dict]:
    return [{"id": f"r{i}", "tokens": p, "output_tokens": outputs} for i, p in enumerate(prompts)]


@pytest.fixture(params=["vllm", "sglang"])
def engine(request: pytest.FixtureRequest) -> str:
    request.getfixturevalue(f"{request.param}_engine")
    return request.param


def test_prompt_minus_one_cap_and_page_alignment(engine: str) -> None:
    a = list(range(10))
    reqs = _reqs(a, a, list(range(12)), list(range(9)) + [99])
    hits = DRIVERS[engine].replay_hits(cache_scenario(engine, reqs, page_size=1,
                                                      capacity_tokens=1000))
    assert hits == [0, 9, 10, 9]  # same prompt: 9 (prompt - 1); a longer one: all 10
    hits = DRIVERS[engine].replay_hits(cache_scenario(engine, reqs, page_size=4,
                                                      capacity_tokens=1000))
    assert hits == [0, 8, 8, 8]  # whole pages only; the partial last page never hits


def test_too_long_prompt_is_refused_and_changes_nothing(engine: str) -> None:
    a = list(range(10))
    reqs = _reqs(a, list(range(100, 120)), a)
    hits = DRIVERS[engine].replay_hits(cache_scenario(engine, reqs, page_size=4,
                                                      capacity_tokens=16))
    assert hits == [0, 0, 8]


def test_outputs_take_capacity_and_spare_room(engine: str) -> None:
    """Two 8-token sessions in a 20-token pool at page 4 (5 pages)."""
    a, b = list(range(8)), list(range(100, 108))
    sc = cache_scenario(engine, _reqs(a, b, a, b, outputs=9), page_size=4, capacity_tokens=20)
    if engine == "vllm":
        # prefill only: 4 of 5 blocks hold both prompts; each re-send hits its first block
        # (prompt - 1 = 7 tokens: one full block)
        assert DRIVERS[engine].replay_hits(sc) == [0, 0, 4, 4]
    else:
        # SGLang's prefill asks for extend + one page: r2 (4 new + 4 spare > 4 free) evicts
        # b's whole leaf, so r3 misses
        assert DRIVERS[engine].replay_hits(sc) == [0, 0, 4, 0]
    sc["with_outputs"] = True
    # 9 outputs: KV of 8 + 9 - 1 = 16 tokens per request. vLLM frees a request's blocks tail
    # first, so a's first block outlives its outputs; SGLang's leaf (prompt + outputs) goes
    # whole.
    want = [0, 0, 4, 4] if engine == "vllm" else [0, 0, 0, 0]
    assert DRIVERS[engine].replay_hits(sc) == want


def test_decoded_tokens_are_cached(engine: str) -> None:
    a = list(range(8))
    cont = a + [output_token(0, k) for k in range(8)] + [7777]
    sc = cache_scenario(engine, _reqs(a, cont, outputs=9), page_size=4, capacity_tokens=64,
                        with_outputs=True)
    sc["requests"][1]["output_tokens"] = 1
    # request 0's KV is its prompt + outputs 0..7: request 1 hits all 16 tokens
    assert DRIVERS[engine].replay_hits(sc) == [0, 16]
    sc["with_outputs"] = False
    assert DRIVERS[engine].replay_hits(sc) == [0, 8]


def test_eviction_unit_differs(engine: str) -> None:
    """A 12-token prompt, then two 5-token prompts, then the first again, in 16 tokens at
    page 4. vLLM: BlockPool.free_blocks puts the freed partial block first in line, so the
    second small prompt takes it and one block of the long prompt: its first block survives.
    SGLang: the first small prompt needs 5 + 4 spare > 4 free and evicts the 12-token leaf
    whole."""
    long = list(range(12))
    reqs = _reqs(long, list(range(50, 54)) + [1], list(range(60, 64)) + [1], long)
    hits = DRIVERS[engine].replay_hits(cache_scenario(engine, reqs, page_size=4,
                                                      capacity_tokens=16))
    assert hits == ([0, 0, 0, 4] if engine == "vllm" else [0, 0, 0, 0])


def test_inflight_without_pressure(engine: str) -> None:
    """With room for everything, holding requests changes vLLM's hits not at all: its blocks
    are cached as they are allocated, so a prompt in flight is matched. SGLang inserts a
    prefill-only request at release, so a later request in flight cannot match it yet."""
    reqs = agentic_requests(5, 40, sessions=3, max_prompt=120)
    one = DRIVERS[engine].replay_hits(cache_scenario(engine, reqs, page_size=4,
                                                     capacity_tokens=100_000))
    four = DRIVERS[engine].replay_hits(cache_scenario(engine, reqs, page_size=4,
                                                      capacity_tokens=100_000, inflight=4))
    if engine == "vllm":
        assert one == four and sum(one) > 0
    else:
        assert all(f <= o for f, o in zip(four, one)) and sum(four) < sum(one)


def test_generated_cases_run_and_hit(engine: str) -> None:
    reqs = agentic_requests(3, 60, sessions=3, max_prompt=200)
    sc = cache_scenario(engine, reqs, page_size=4, capacity_tokens=10_000)
    hits = DRIVERS[engine].replay_hits(sc)
    total = sum(len(r["tokens"]) for r in reqs)
    assert 0.5 < sum(hits) / total < 1.0
    sc["capacity_tokens"] = 256
    assert sum(DRIVERS[engine].replay_hits(sc)) < sum(hits)
