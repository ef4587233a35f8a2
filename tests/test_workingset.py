"""Working set over time and reuse gaps, on cases worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.hitrate.workingset import arrival, reuse_summary, working_set

# Session A: t=0 (100 prompt + 10 out), t=10 (200 + 20). Session B: t=5 (50 + 0),
# t=20 (60 + unknown output).
SESSIONS = ["A", "B", "A", "B"]
TS = np.array([0.0, 5.0, 10.0, 20.0])
PROMPT = np.array([100, 50, 200, 60])
OUTPUT = np.array([10, 0, 20, -1])


def test_live_from_first_to_last_request():
    ws, series = working_set(SESSIONS, TS, PROMPT, OUTPUT, None, None)
    assert ws is not None and series is not None
    # [0,5): 110; [5,10): 160; at 10 A's context becomes 220 for an instant (its last
    # request) on top of B's 50; [10,20): 50; at 20 B's 60 for an instant.
    assert ws["peak_tokens"] == 270 and ws["peak_time_s"] == 10.0
    assert ws["mean_tokens"] == pytest.approx((110 * 5 + 160 * 5 + 50 * 10) / 20)
    assert ws["p99_tokens"] == 160
    assert ws["sessions_peak"] == 2 and ws["duration_s"] == 20.0
    assert ws["peak_bytes"] is None
    assert series.times.tolist() == [0.0, 5.0, 10.0, 20.0]
    assert series.tokens.tolist() == [110, 160, 50, 0]


def test_idle_timeout_ends_liveness_and_bytes_use_the_model():
    ws, series = working_set(SESSIONS, TS, PROMPT, OUTPUT, 3.0, 1000)
    assert ws is not None and series is not None
    # A: [0,3) 110, [10,13) 220; B: [5,8) 50, [20,23) 60.
    assert ws["peak_tokens"] == 220 and ws["peak_bytes"] == 220_000
    assert ws["mean_tokens"] == pytest.approx((110 * 3 + 50 * 3 + 220 * 3 + 60 * 3) / 23)
    assert series.tokens.tolist() == [110, 0, 50, 0, 220, 0, 60, 0]
    assert ws["sessions_peak"] == 1


def test_requests_without_time_are_left_out():
    ts = TS.copy()
    ts[1] = np.nan
    ws, _ = working_set(SESSIONS, ts, PROMPT, OUTPUT, None, None)
    assert ws is not None and ws["requests_without_time"] == 1
    none, series = working_set(SESSIONS, np.full(4, np.nan), PROMPT, OUTPUT, None, None)
    assert none is None and series is None


def test_arrival():
    a = arrival(TS)
    assert a == {"requests": 4, "duration_s": 20.0, "rate_rps": 3 / 20}
    assert arrival(np.array([1.0, np.nan])) is None


def test_reuse_summary():
    edges = np.array([0, 10, 300, np.inf])
    gap = np.array([np.nan, 5.0, 100.0, 1000.0, 7.0])
    hit = np.array([0, 10, 10, 10, 0])  # the last request has a gap but no hit: left out
    s = reuse_summary(gap, hit, edges, np.array([30.0, 60.0, 10.0]))
    assert s["requests_with_gap"] == 3
    assert s["gap_s_p50"] == 100.0 and s["gap_s_max"] == 1000.0
    assert s["hit_token_share_within_300s"] == pytest.approx(0.9)
    assert s["hit_token_share_within_3600s"] == pytest.approx(0.9)  # [300, inf) is beyond
    assert s["histogram"]["edges_s"][-1] is None  # infinity in JSON
    empty = reuse_summary(np.full(2, np.nan), np.zeros(2), edges, np.zeros(3))
    assert empty["gap_s_p50"] is None and empty["hit_token_share_within_300s"] is None
    assert not math.isnan(s["gap_s_p90"])


@st.composite
def _sessions(draw):
    n = draw(st.integers(1, 6))
    sids, ts, prompt, out = [], [], [], []
    for s in range(n):
        t = float(draw(st.integers(0, 50)))
        for _ in range(draw(st.integers(1, 5))):
            sids.append(f"s{s}")
            ts.append(t)
            prompt.append(draw(st.integers(0, 1000)))
            out.append(draw(st.integers(-1, 100)))
            t += float(draw(st.integers(0, 20)))
    idle = draw(st.one_of(st.none(), st.integers(1, 15).map(float)))
    return sids, np.array(ts), np.array(prompt), np.array(out), idle


def _brute(sids, ts, prompt, out, idle, t):
    """KV of live sessions at time t, straight from the definition."""
    total = 0
    for s in set(sids):
        idx = [i for i in range(len(sids)) if sids[i] == s]
        idx.sort(key=lambda i: (ts[i], i))
        for k, i in enumerate(idx):
            nxt = ts[idx[k + 1]] if k + 1 < len(idx) else None
            if nxt is not None and (idle is None or nxt - ts[i] <= idle):
                end = nxt
            else:
                end = ts[i] + (idle or 0.0)
            if ts[i] <= t < end:
                total += prompt[i] + max(out[i], 0)
    return total


@settings(max_examples=150, deadline=None)
@given(_sessions(), st.floats(0, 1))
def test_series_equals_definition(case, frac):
    sids, ts, prompt, out, idle = case
    ws, series = working_set(sids, ts, prompt, out, idle, None)
    assert ws is not None and series is not None
    times = series.times
    for i in range(len(times) - 1):  # strictly between events, where no instant interferes
        t = times[i] + (times[i + 1] - times[i]) * min(max(frac, 0.01), 0.99)
        assert series.tokens[i] == _brute(sids, ts, prompt, out, idle, t)
    assert series.tokens[-1] == 0
    assert ws["peak_tokens"] >= max(series.tokens)
