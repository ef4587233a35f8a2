"""The numba radix tree against the plain-Python reference trie."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.prefix.matcher import match
from xmemplan.prefix.reference import ReferencePrefixCache, reference_match


def _flat(requests):
    keys = np.array([k for r in requests for k in r], dtype=np.int64)
    offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in requests])
    return keys, offsets


def _both(requests, resets):
    keys, offsets = _flat(requests)
    got = match(keys, offsets, np.array(resets, dtype=bool)).tolist()
    want = reference_match(requests, [True] + list(resets[1:]))
    return got, want


def test_fixed_cases():
    requests = [
        [1, 2, 3, 4],
        [1, 2, 3, 4, 5, 6],  # extends: full hit of the first
        [1, 2, 9],  # splits an edge in the middle
        [1, 2, 9, 9],
        [1, 2],  # ends inside an edge
        [7],
        [],
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18],  # > 8-key compare blocks
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 0],
    ]
    got, want = _both(requests, [False] * len(requests))
    assert want == [0, 4, 2, 3, 2, 0, 0, 6, 17]
    assert got == want


def test_resets_start_a_new_cache():
    requests = [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3]]
    got, want = _both(requests, [True, False, True, False])
    assert got == want == [0, 3, 0, 3]


def test_negative_and_large_keys():
    big = 2**62
    requests = [[-1, big, -big], [-1, big, -big, 5], [-1, big, 0]]
    got, want = _both(requests, [False] * 3)
    assert got == want == [0, 3, 2]


def test_empty_input_and_bad_offsets():
    assert match(np.empty(0, np.int64), np.zeros(1, np.int64), np.zeros(0, bool)).size == 0
    try:
        match(np.arange(3), np.array([0, 5]), np.zeros(1, bool))
    except ValueError as exc:
        assert "offsets" in str(exc)
    else:
        raise AssertionError("bad offsets accepted")


requests_st = st.lists(st.lists(st.integers(0, 3), max_size=25), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(requests_st, st.data())
def test_agrees_with_reference_on_random_traces(requests, data):
    resets = data.draw(st.lists(st.booleans(), min_size=len(requests), max_size=len(requests)))
    got, want = _both(requests, resets)
    assert got == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.lists(st.integers(0, 2), max_size=12)),
                min_size=1, max_size=30))
def test_agrees_on_agent_like_traces(steps):
    # Each request keeps a prefix of the previous one and appends new keys.
    requests: list[list[int]] = []
    prev: list[int] = []
    for cut, tail in steps:
        cur = prev[: min(cut, len(prev))] + tail
        requests.append(cur)
        prev = cur
    got, want = _both(requests, [False] * len(requests))
    assert got == want


def test_reference_cache_basics():
    c = ReferencePrefixCache()
    assert c.match([1, 2]) == 0
    c.insert([1, 2, 3])
    assert c.match([1, 2, 4]) == 2


def test_kernel_runs_as_plain_python_for_coverage():
    # NUMBA_DISABLE_JIT=1 runs the kernels as Python: the same answers, and coverage sees them.
    code = (
        "import numpy as np\n"
        "from xmemplan.prefix.matcher import match\n"
        "k = np.array([1,2,3,1,2,4,1,2,3,5], dtype=np.int64)\n"
        "o = np.array([0,3,6,10], dtype=np.int64)\n"
        "print(match(k, o, np.zeros(3, bool)).tolist())\n"
    )
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 2, 3]"
