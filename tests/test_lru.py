"""The one-pass LRU kernel against the readable reference LRU (`ReferenceLRU`)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.prefix.lru import (
    ReferenceLRU,
    lru_match,
    reference_flat_lru,
    reference_lru,
    reference_plain_lru,
    token_pages,
)
from xmemplan.prefix.reference import reference_match


def _flat(requests):
    keys = np.array([k for r in requests for k in r], dtype=np.int64)
    offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in requests])
    return keys, offsets


def _run(requests, resets, page_tokens, caps, **kw):
    keys, offsets = _flat(requests)
    return lru_match(keys, offsets, np.array(resets, dtype=bool), np.array(page_tokens), caps, **kw)


def test_fixed_case_by_hand():
    # Pages of 1 token, capacity 4 tokens; the cache listed most recent first.
    requests = [
        [1, 2, 3],  # miss: 1 2 3
        [1, 2, 4],  # hits 1 2; touches 4, 2, 1: 1 2 4 3
        [5, 6],  # miss: 5 6 1 2 4 3 -> evict leaves 3, then 4: 5 6 1 2
        [1, 2, 3],  # hits 1 2: 1 2 3 5 6 -> evict leaf 6: 1 2 3 5
        [5],  # hits 5
    ]
    want = [0, 2, 0, 2, 1]
    assert reference_lru(requests, [True] + [False] * 4, [1] * 5, 4) == want
    res = _run(requests, [True] + [False] * 4, [1] * 5, [4, 100])
    assert res.hits[:, 0].tolist() == want
    assert res.hits[:, 1].tolist() == res.matched.tolist() == [0, 2, 0, 3, 1]


def test_evicting_a_parent_never_leaves_its_children_cached():
    # A flat LRU touched first-to-last evicts the root page 1 first and keeps 2 and 3, which
    # can never hit again; the policy evicts the leaf 3 and keeps the prefix 1 2.
    requests = [[1, 2, 3], [4], [1, 2, 3]]
    cache = ReferenceLRU(3)
    for r in requests[:2]:
        cache.insert(r, 1)
    assert cache.contains_path([1, 2, 3]) == [True, True, False]
    assert reference_plain_lru(requests, 1, 3)[2] == 0
    assert reference_lru(requests, [True, False, False], [1] * 3, 3)[2] == 2
    assert _run(requests, [True, False, False], [1] * 3, [3]).hits[2, 0] == 2


def test_capacity_smaller_than_a_request_and_zero():
    requests = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]]
    res = _run(requests, [True, False], [1, 1], [0, 2, 5])
    assert res.hits[1].tolist() == [0, 2, 5]
    assert [reference_lru(requests, [True, False], [1, 1], c)[1] for c in (0, 2, 5)] == [0, 2, 5]


def test_page_weights_count_against_capacity():
    # Each page weighs 512 tokens: 3 pages fit in 1536 tokens, not in 1535.
    requests = [[1, 2, 3], [1, 2, 3]]
    res = _run(requests, [True, False], [512, 512], [1535, 1536])
    assert res.hits[1].tolist() == [2, 3]


def test_capacities_in_any_order_and_repeated():
    requests = [[1, 2, 3], [1, 2, 4], [1, 2, 3]]
    a = _run(requests, [True, False, False], [1] * 3, [5, 1, 3, 1])
    b = _run(requests, [True, False, False], [1] * 3, [1, 3, 5])
    assert a.hits[:, [1, 2, 0]].tolist() == b.hits.tolist()
    assert a.hits[:, 3].tolist() == a.hits[:, 1].tolist()


def test_reuse_gaps():
    requests = [[1, 2], [1, 2, 3], [7], [1, 9]]
    ts = np.array([0.0, 10.0, 20.0, 400.0])
    res = _run(requests, [True, False, False, False], [1] * 4, [], timestamps=ts)
    # request 1 reuses [1, 2] last used at t=0; request 3 reuses [1] last used at t=10.
    assert np.isnan(res.gap_s[0]) and np.isnan(res.gap_s[2])
    assert res.gap_s[1] == 10.0 and res.gap_s[3] == 390.0
    # hit tokens by gap: 2 tokens at 10 s (bin [10, 30)), 1 token at 390 s (bin [300, 600))
    edges = res.gap_edges_s.tolist()
    assert res.gap_tokens[edges.index(10)] == 2 and res.gap_tokens[edges.index(300)] == 1
    assert res.gap_tokens.sum() == 3


def test_token_pages_identify_prefixes():
    a = np.arange(40, dtype=np.int64)
    b = a.copy()
    b[20] = -1  # differs in the second 16-token page
    keys, offsets = token_pages(np.concatenate([a, b, a[:15]]), np.array([0, 40, 80, 95]), 16)
    assert np.diff(offsets).tolist() == [2, 2, 0]  # full pages only
    assert keys[0] == keys[2] and keys[1] != keys[3]


@st.composite
def _traces(draw):
    """Requests that share prefixes often (branching trees), with resets and page weights."""
    n = draw(st.integers(1, 25))
    requests: list[list[int]] = []
    for _ in range(n):
        if requests and draw(st.booleans()):
            base = requests[draw(st.integers(0, len(requests) - 1))]
            cut = draw(st.integers(0, len(base)))
            tail = draw(st.lists(st.integers(0, 3), max_size=5))
            requests.append(base[:cut] + tail)
        else:
            requests.append(draw(st.lists(st.integers(0, 3), max_size=9)))
    resets = [True] + [draw(st.integers(0, 9)) == 0 for _ in range(n - 1)]
    # Requests that share a first key share pages: give them one page weight.
    weights = [1 + (r[0] % 3 if r else 0) for r in requests]
    return requests, resets, weights


@settings(max_examples=300, deadline=None)
@given(_traces(), st.lists(st.integers(0, 40), min_size=1, max_size=6))
def test_kernel_equals_reference_lru(trace, caps):
    requests, resets, weights = trace
    res = _run(requests, resets, weights, caps)
    assert res.matched.tolist() == reference_match(requests, resets)
    for j, c in enumerate(caps):
        assert res.hits[:, j].tolist() == reference_lru(requests, resets, weights, c), c


@settings(max_examples=100, deadline=None)
@given(_traces(), st.integers(1, 30))
def test_reference_keeps_cached_pages_prefix_closed(trace, cap):
    requests, _, _ = trace
    cache = ReferenceLRU(cap)
    for r in requests:
        cache.insert(r, 1)
        for other in requests:
            present = cache.contains_path(other)
            assert present == sorted(present, reverse=True)
        assert cache.used <= cap


@settings(max_examples=100, deadline=None)
@given(_traces(), st.integers(1, 30))
def test_flat_reference_is_the_same_policy_on_chained_keys(trace, cap):
    requests, _, _ = trace
    # Chain the keys (key = the whole prefix) as Mooncake's block ids are.
    chained = [[hash(tuple(r[: i + 1])) for i in range(len(r))] for r in requests]
    want = reference_lru(chained, [True] + [False] * (len(chained) - 1), [1] * len(chained), cap)
    assert reference_flat_lru(chained, 1, cap) == want


def test_kernel_runs_without_jit():
    # The kernels as plain Python (coverage of the numba code paths, NUMBA_DISABLE_JIT=1).
    code = (
        "import numpy as np\n"
        "from xmemplan.prefix.lru import lru_match, reference_lru, token_pages\n"
        "reqs = [[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3], [1], [1, 2, 3, 4, 5]]\n"
        "keys = np.array([k for r in reqs for k in r], dtype=np.int64)\n"
        "offs = np.cumsum([0] + [len(r) for r in reqs])\n"
        "rs = [True] + [False] * 5\n"
        "res = lru_match(keys, offs, np.array(rs), 1, [2, 4, 9], timestamps=np.arange(6.0))\n"
        "for j, c in enumerate([2, 4, 9]):\n"
        "    assert res.hits[:, j].tolist() == reference_lru(reqs, rs, [1] * 6, c)\n"
        "k, o = token_pages(np.arange(40), np.array([0, 40]), 16)\n"
        "assert o.tolist() == [0, 2]\n"
        "print('ok')\n"
    )
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_driver_rejects_bad_arrays():
    keys, offsets = _flat([[1, 2]])
    with pytest.raises(ValueError):
        lru_match(keys, offsets, np.array([True, False]), 1, [1])
    with pytest.raises(ValueError):
        lru_match(keys, offsets, np.array([True]), 0, [1])
    with pytest.raises(ValueError):
        lru_match(keys, offsets, np.array([True]), 1, [-1])
