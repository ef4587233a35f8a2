"""The engine cache kernels against their plain-Python references (engine_reference)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from xmemplan.prefix.engine_cache import replay_detail, replay_hits
from xmemplan.prefix.engine_reference import reference_replay


def _agent_requests(rng: random.Random, n: int) -> list[dict[str, object]]:
    """Sessions that grow their prompt, sometimes fork or restart: prefixes shared at
    every depth, page boundaries hit and missed."""
    sessions: list[list[int]] = []
    out = []
    next_tok = 1
    for i in range(n):
        if not sessions or rng.random() < 0.25:
            base = rng.choice(sessions)[: rng.randrange(0, 40)] if sessions and \
                rng.random() < 0.5 else []
            sessions.append(list(base))
        s = rng.randrange(len(sessions))
        grow = rng.randrange(0, 30)
        sessions[s] = sessions[s] + list(range(next_tok, next_tok + grow))
        next_tok += grow
        toks = list(sessions[s]) or [next_tok]
        if rng.random() < 0.1:
            toks = toks[: rng.randrange(1, len(toks) + 1)]  # a resend of a prefix
        out.append({"id": str(i), "tokens": toks, "output_tokens": rng.randrange(0, 25)})
    return out


CASES = [(e, p, cap, wo, k) for e in ("vllm", "sglang") for p in (1, 4, 16)
         for cap in (64, 200, 1000) for wo in (False, True) for k in (1, 3)]


@pytest.mark.parametrize("engine,page,cap,with_outputs,inflight", CASES)
def test_kernel_equals_reference(engine: str, page: int, cap: int, with_outputs: bool,
                                 inflight: int) -> None:
    rng = random.Random(hash((engine, page, cap, with_outputs, inflight)) & 0xFFFF)
    for _ in range(3):
        reqs = _agent_requests(rng, 60)
        sc = {"engine": engine, "page_size": page, "capacity_tokens": cap,
              "with_outputs": with_outputs, "inflight": inflight, "requests": reqs}
        want = replay_detail(sc, reference=True)
        got = replay_detail(sc)
        if got != want:
            first = next(i for i, (a, b) in enumerate(zip(got["hit_tokens"],
                                                          want["hit_tokens"])) if a != b)
            pytest.fail(f"request {first}: kernel {got['hit_tokens'][first]}, reference "
                        f"{want['hit_tokens'][first]}")


def test_rules_by_hand() -> None:
    a = list(range(1, 10))  # 9 tokens
    reqs = [{"id": "a", "tokens": a, "output_tokens": 3},
            {"id": "b", "tokens": a, "output_tokens": 3},
            {"id": "c", "tokens": a + [50, 51, 52], "output_tokens": 1}]
    for engine in ("vllm", "sglang"):
        sc = {"engine": engine, "page_size": 2, "capacity_tokens": 100, "with_outputs": False,
              "inflight": 1, "requests": reqs}
        # no partial last page, and at most prompt - 1 tokens: 9 tokens hit 8, not 9
        assert replay_hits(sc) == [0, 8, 8]
        sc["capacity_tokens"] = 4  # 2 pages: the 9-token prompt needs 5: rejected
        assert replay_detail(sc)["rejected"] == [True, True, True]


def test_sglang_evicts_whole_leaves() -> None:
    # one long leaf: a request that needs a little room evicts all of it (SGLang), while
    # vLLM frees blocks one at a time from its queue
    long = list(range(1, 41))
    reqs = [{"id": "a", "tokens": long, "output_tokens": 0},
            {"id": "b", "tokens": [100 + t for t in range(1, 11)], "output_tokens": 0},
            {"id": "c", "tokens": long[:20] + [7777], "output_tokens": 0}]
    base = {"page_size": 1, "capacity_tokens": 45, "with_outputs": False, "inflight": 1,
            "requests": reqs}
    assert replay_hits({**base, "engine": "sglang"}) == [0, 0, 0]
    assert replay_hits({**base, "engine": "vllm"}) == [0, 0, 20]
    for e in ("vllm", "sglang"):
        assert replay_detail({**base, "engine": e}, reference=True)["hit_tokens"] == \
            replay_hits({**base, "engine": e})


def test_outputs_take_room() -> None:
    # decoded KV is cached too (never hit again): over many sessions it crowds out prompts
    reqs = _agent_requests(random.Random(5), 200)
    for e in ("vllm", "sglang"):
        base = {"engine": e, "page_size": 4, "capacity_tokens": 400, "inflight": 1,
                "requests": reqs}
        without = sum(replay_hits({**base, "with_outputs": False}))
        with_ = sum(replay_hits({**base, "with_outputs": True}))
        assert with_ < without


def test_bad_scenario() -> None:
    with pytest.raises(ValueError, match="engine"):
        replay_hits({"engine": "tgi", "page_size": 1, "capacity_tokens": 1, "requests": []})
    with pytest.raises(ValueError, match="page_size"):
        replay_hits({"engine": "vllm", "page_size": 0, "capacity_tokens": 1, "requests": []})
    assert replay_hits({"engine": "vllm", "page_size": 1, "capacity_tokens": 1,
                        "requests": []}) == []
    assert np.array_equal(reference_replay("sglang", [], [], 1, 10).hit_tokens, [])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("page", [1, 4])
def test_picker_subsets_equal_the_reference_alone(engine: str, page: int) -> None:
    """Picker: requests picked from one id layout, replayed in turn on kept tables (one
    epoch a pick), hit what the reference hits on those requests alone."""
    from xmemplan.prefix.engine_cache import Picker, kv_tokens
    from xmemplan.prefix.lru import token_pages

    rng = random.Random(7 + page)
    reqs = _agent_requests(rng, 120)
    prompts = [list(r["tokens"]) for r in reqs]  # type: ignore[call-overload]
    outs = [int(r["output_tokens"]) for r in reqs]  # type: ignore[call-overload]
    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    off = np.zeros(len(prompts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    pk, poff = token_pages(np.array([t for p in prompts for t in p], dtype=np.int64), off,
                           page)
    kv = kv_tokens(lengths, np.array(outs), True)
    pick = Picker(engine, pk, poff, lengths, kv, page)
    nrng = np.random.default_rng(page)
    for cap in (40, 150, 150, 600, 10_000):
        idx = np.sort(nrng.choice(len(reqs), size=int(nrng.integers(10, len(reqs))),
                                  replace=False))
        want = reference_replay(engine, [prompts[i] for i in idx], [outs[i] for i in idx],
                                page, cap, True).hit_tokens
        assert pick.hits(idx, cap).tolist() == want, (engine, page, cap)


@pytest.mark.parametrize("seed", [25, 86])
def test_vllm_hand_over_with_requests_in_flight(seed: int) -> None:
    """vLLM's hand-over of released blocks the next request hits, with 5 requests in
    flight: a block held by two of the released ones is free only once its last holder
    is released (these two cases parted from the reference before that was counted)."""
    rng = random.Random(seed * 7919 + 16)
    sc = {"engine": "vllm", "page_size": 16, "capacity_tokens": 200, "with_outputs": False,
          "inflight": 5, "requests": _agent_requests(rng, 60)}
    assert replay_detail(sc) == replay_detail(sc, reference=True)
