"""The per-call transcript report reuses work between calls; reuse must never change a
figure. Each shortcut is checked against the same computation done from scratch."""

from __future__ import annotations

from typing import Any

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


def _windowed(c: A.ModelCall) -> A.ModelCall:
    """`windowed_call` fed the per-message form of a whole call."""
    return A.windowed_call(
        cum=[0, *c.bounds.tolist()], hashes=c.hashes,
        blocks=np.diff(c.blocks, prepend=0).tolist(), breakpoints=c.breakpoints,
        universe=c.universe, timestamp=c.timestamp, ttl_s=c.ttl_s, min_len=c.min_len,
        warm=c.warm)


def _trimmed(c: A.ModelCall) -> tuple[list[int], list[int], list[int], list[int]]:
    """The window plainly: every bound up to the last breakpoint whose cumulative blocks are
    within LOOKBACK_BLOCKS of it, and the breakpoints (bounds, hashes, blocks, breakpoints)."""
    n = len(c.bounds)
    last = max(c.breakpoints) if c.breakpoints else n - 1
    keep = sorted({j for j in range(last + 1)
                   if c.blocks[j] >= c.blocks[last] - A.LOOKBACK_BLOCKS} | set(c.breakpoints))
    return ([int(c.bounds[j]) for j in keep], [c.hashes[j] for j in keep],
            [int(c.blocks[j]) for j in keep], [keep.index(j) for j in c.breakpoints])


@pytest.mark.parametrize("seed", range(5))
def test_trimmed_calls_replay_the_same(seed: int) -> None:
    rng = np.random.default_rng(seed)
    calls = [_call(rng, int(rng.integers(1, 80)), float(t)) for t in range(40)]
    full = A.replay(calls)
    trimmed = A.replay([_windowed(c) for c in calls])
    assert full == trimmed
    assert any(len(_windowed(c).bounds) < len(c.bounds) for c in calls)


@pytest.mark.parametrize("seed", range(6))
def test_windowed_call_is_the_trimmed_call(seed: int) -> None:
    """`windowed_call` builds only the lookback window and the breakpoints; it must equal
    the window taken plainly from the whole call, field for field, including messages of
    zero content blocks and a breakpoint on the first message (the stand-in)."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(1, 90))
        lens = rng.integers(1, 200, size=n)
        per_msg = [int(x) for x in rng.integers(0, 3, size=n)]
        hashes = [int(x) for x in rng.integers(0, 1 << 40, size=n)]
        bps = sorted({0, n - 1} if rng.random() < 0.5 else {n - 1})
        cum = [0, *np.cumsum(lens).tolist()]
        kw: dict[str, Any] = dict(universe=0, timestamp=1.0, ttl_s=300.0, min_len=100, warm=3)
        bounds, hs, blks, bp = _trimmed(A.ModelCall(
            bounds=np.array(cum[1:], dtype=np.int64), hashes=hashes,
            blocks=np.cumsum(per_msg), breakpoints=bps, **kw))
        win = A.windowed_call(cum=cum, hashes=hashes, blocks=per_msg, breakpoints=bps, **kw)
        assert win.bounds.tolist() == bounds
        assert win.hashes == hs
        assert win.blocks.tolist() == blks
        assert win.breakpoints == bp


def test_chained_lists_share_without_a_walk_and_agree_with_one() -> None:
    """A prompt built by extending another (`ChainedList` with its parent's key) shares
    all of the parent's messages, the same objects; `shared_objects` answers that without
    walking them, and the answer equals the walk's, in either order; lists without keys,
    or whose keys are unrelated, are walked."""
    from xmemplan.traces.base import ChainedList, shared_objects

    rng = np.random.default_rng(9)
    msgs = _msgs(rng, 40)
    a = ChainedList(msgs[:25], key="a")
    b = ChainedList(a, key="b", parent="a")
    b.extend(msgs[25:])

    def walk(x: list[np.ndarray], y: list[np.ndarray], n: int) -> int:
        k = 0
        while k < n and x[k] is y[k]:
            k += 1
        return k

    for x, y in ((a, b), (b, a)):
        for n in (0, 10, 25):
            assert shared_objects(x, y, n) == walk(x, y, n) == n
    edited = list(b)
    edited[7] = np.array([1, 2])
    assert shared_objects(edited, b, 40) == walk(edited, b, 40) == 7
    other = ChainedList(edited, key="c", parent="z")
    assert shared_objects(other, b, 40) == 7
