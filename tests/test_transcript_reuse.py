"""The per-call transcript report reuses work between calls; reuse must never change a
figure. Each shortcut is checked against the same computation done from scratch."""

from __future__ import annotations

import numpy as np
import pytest

from xmemplan.hitrate import anthropic_cache as A
from xmemplan.hitrate.transcript_calls import _Chains, _Trie


def _msgs(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [rng.integers(0, 50, size=int(rng.integers(1, 6))) for _ in range(n)]


def _fresh(parts: list[np.ndarray]) -> list[int]:
    return _Chains({})(parts)


def test_chains_reuse_matches_a_fresh_chain_on_edited_histories() -> None:
    """Growing histories, a history edited in the middle (same length, one array
    replaced) and a shorter one (compaction): reused hashes equal fresh ones."""
    rng = np.random.default_rng(3)
    base = _msgs(rng, 12)
    edited = list(base)
    edited[5] = np.array([99, 98])  # another array in the middle
    lists = [base[:4], base[:8], base, base + _msgs(rng, 3), edited, edited[:3],
             edited[:3] + base[3:]]
    chains = _Chains({})
    for parts in lists:
        assert chains(parts) == _fresh(parts)
        assert chains.cum[-1] == sum(p.shape[0] for p in parts)


def test_trie_shortcut_matches_the_plain_walk() -> None:
    """The cached-prefix shortcut of `_Trie.match_insert` gives the hits of a trie that
    walks every message (a fresh trie per call replaying all earlier prompts first)."""
    rng = np.random.default_rng(5)
    hist = _msgs(rng, 30)
    alt = list(hist)
    alt[10] = np.array([7, 7, 7])
    prompts = [hist[:5], hist[:9], hist[:9], hist[:20], alt[:25], hist[:30], alt[:12]]
    memo: dict[int, int] = {}
    fast = _Trie(memo)
    for i, parts in enumerate(prompts):
        slow = _Trie({})
        for earlier in prompts[:i]:
            slow.chains = _Chains({})  # no reuse: every message walked
            slow.match_insert(earlier)
        slow.chains = _Chains({})
        assert fast.match_insert(parts) == slow.match_insert(parts), i


def _call(rng: np.random.Generator, n: int, t: float) -> A.ModelCall:
    lens = rng.integers(1, 200, size=n)
    blocks = np.cumsum(rng.integers(0, 3, size=n))
    bps = sorted({int(x) for x in rng.integers(0, n, size=3)} | {n - 1})
    # prefixes shared between calls: hashes from a small alphabet of chains
    hashes = [int(x) for x in np.cumsum(rng.integers(0, 2, size=n))]
    return A.ModelCall(universe=0, timestamp=t, bounds=np.cumsum(lens), hashes=hashes,
                       blocks=blocks, breakpoints=bps, ttl_s=300.0, min_len=100)


@pytest.mark.parametrize("seed", range(5))
def test_trimmed_calls_replay_the_same(seed: int) -> None:
    rng = np.random.default_rng(seed)
    calls = [_call(rng, int(rng.integers(1, 80)), float(t)) for t in range(40)]
    full = A.replay(calls)
    trimmed = A.replay([c.trimmed() for c in calls])
    assert full == trimmed
    assert any(len(c.trimmed().bounds) < len(c.bounds) for c in calls)
