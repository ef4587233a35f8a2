"""Working set over time and the time between reuses of a prefix.

Working set: the KV of the sessions that are live at time t, summed. A session's KV after
its request j is that request's context, `prompt_tokens + output_tokens` (output counted
when known: engines cache the decoded tokens too, and the next turn resends them). Without
an idle timeout a session is live from its first to its last request; with `idle_s`, a gap
longer than the timeout ends its liveness `idle_s` after the request before the gap (its KV
could be dropped), and the next request starts it again. A request's footprint therefore
lives on [t_j, t_(j+1)) when the session continues within the timeout, else on
[t_j, t_j + idle_s) (or only at the instant t_j, without a timeout, for the last request).
Instants count for the peak but weigh nothing in the time-weighted mean and percentiles.

Timestamps are whatever the trace carries: absolute, or relative to each session's start
(Claude Code block traces), in which case sessions are overlaid as if they started together.
Requests without a timestamp are left out and counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Series:
    """The working set as a step function: `tokens[i]` holds from `times[i]` to `times[i+1]`."""

    times: np.ndarray  # float64, seconds, ascending, distinct
    tokens: np.ndarray  # int64
    sessions: np.ndarray  # int64, live sessions


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    if values.size == 0 or weights.sum() <= 0:
        return math.nan
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    i = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(values[order][min(i, values.size - 1)])


def working_set(
    session_ids: Sequence[str],
    timestamps: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    idle_s: float | None,
    kv_bytes_per_token: int | None,
) -> tuple[dict[str, Any] | None, Series | None]:
    """Peak, p99 and mean working set (time-weighted) and its series; None without times."""
    ts = np.asarray(timestamps, dtype=np.float64)
    known = np.isfinite(ts)
    if not known.any():
        return None, None
    codes_of: dict[str, int] = {}
    codes = np.fromiter(
        (codes_of.setdefault(s, len(codes_of)) for s in session_ids), np.int64, len(session_ids)
    )[known]
    ts = ts[known]
    foot = (np.asarray(prompt)[known] + np.maximum(np.asarray(output)[known], 0)).astype(np.int64)
    order = np.lexsort((np.arange(ts.size), ts, codes))
    codes, ts, foot = codes[order], ts[order], foot[order]
    first = np.ones(ts.size, dtype=bool)
    first[1:] = codes[1:] != codes[:-1]
    starts = ts[first]
    # more than one session, all starting at one instant (recorded sessions replayed from
    # t=0): the working set's early peak is then an artefact of the trace, not load
    together = bool(starts.size > 1 and float(starts.max() - starts.min()) == 0.0)
    same_next = np.zeros(ts.size, dtype=bool)
    same_next[:-1] = codes[1:] == codes[:-1]
    nxt = np.append(ts[1:], np.inf)
    gap = nxt - ts
    hold = 0.0 if idle_s is None else idle_s
    continues = same_next if idle_s is None else same_next & (gap <= idle_s)
    end = np.where(continues, nxt, ts + hold)

    # Events at one instant: removals of intervals that end there, then additions (so a
    # session's next request replaces its previous context without a double count), then
    # removals of zero-length intervals (so instants still count for the peak).
    zero = end <= ts
    times = np.concatenate([ts, end])
    kind = np.concatenate([np.ones(ts.size), np.where(zero, 2, 0)])
    d_tok = np.concatenate([foot, -foot])
    d_ses = np.concatenate([np.ones(ts.size, np.int64), -np.ones(ts.size, np.int64)])
    ev = np.lexsort((kind, times))
    times, d_tok, d_ses = times[ev], d_tok[ev], d_ses[ev]
    tok = np.cumsum(d_tok)
    ses = np.cumsum(d_ses)
    dur = np.append(np.diff(times), 0.0)
    peak_i = int(np.argmax(tok))
    span = float(times[-1] - times[0])
    mean = float((tok * dur).sum() / span) if span > 0 else math.nan
    p99 = _weighted_quantile(tok.astype(np.float64), dur, 0.99)
    ses_p99 = _weighted_quantile(ses.astype(np.float64), dur, 0.99)
    # The series: the value after the last event at each distinct time.
    last = np.append(times[1:] != times[:-1], True)
    series = Series(times[last], tok[last], ses[last])

    def b(x: float) -> float | None:
        if kv_bytes_per_token is None or not math.isfinite(x):
            return None
        return float(x) * kv_bytes_per_token

    return (
        {
            "idle_s": idle_s,
            "sessions": int(np.unique(codes).size),
            "requests_with_time": int(known.sum()),
            "requests_without_time": int((~known).sum()),
            "duration_s": span,
            "peak_tokens": int(tok[peak_i]),
            "peak_time_s": float(times[peak_i]),
            "p99_tokens": None if math.isnan(p99) else int(p99),
            "mean_tokens": None if math.isnan(mean) else mean,
            "peak_bytes": b(float(tok[peak_i])),
            "p99_bytes": b(p99),
            "mean_bytes": b(mean),
            "sessions_peak": int(ses.max()),
            "sessions_mean": float((ses * dur).sum() / span) if span > 0 else None,
            "sessions_p99": None if math.isnan(ses_p99) else int(ses_p99),
            "sessions_start_together": together,
        },
        series,
    )


def arrival(timestamps: np.ndarray) -> dict[str, Any] | None:
    """Span and mean arrival rate of the requests that have a timestamp."""
    ts = np.asarray(timestamps, dtype=np.float64)
    ts = ts[np.isfinite(ts)]
    if ts.size < 2:
        return None
    span = float(ts.max() - ts.min())
    return {
        "requests": int(ts.size),
        "duration_s": span,
        "rate_rps": (ts.size - 1) / span if span > 0 else None,
    }


def reuse_summary(
    gap_s: np.ndarray, hit: np.ndarray, edges_s: np.ndarray, gap_tokens: np.ndarray
) -> dict[str, Any]:
    """Time between reuses of a prefix (infinite cache).

    Per request with a hit: seconds since the deepest page of its hit prefix was last used
    (by any request). Per hit token: seconds since that token's page was last used, as a
    histogram over `edges_s`; the shares within 5 min and 1 h say how much of the hit an
    entry TTL of that length would keep.
    """
    sel = np.isfinite(gap_s) & (np.asarray(hit) > 0)
    g = gap_s[sel]
    total = float(gap_tokens.sum())

    def within(limit: float) -> float | None:
        if total <= 0:
            return None
        upper = edges_s[1:]
        return float(gap_tokens[upper <= limit].sum()) / total

    def q(p: float) -> float | None:
        return float(np.quantile(g, p)) if g.size else None

    return {
        "requests_with_gap": int(g.size),
        "gap_s_p50": q(0.5),
        "gap_s_p90": q(0.9),
        "gap_s_p99": q(0.99),
        "gap_s_max": float(g.max()) if g.size else None,
        "hit_token_share_within_300s": within(300.0),
        "hit_token_share_within_3600s": within(3600.0),
        "histogram": {
            "edges_s": [float(e) if math.isfinite(e) else None for e in edges_s],
            "hit_tokens": [float(x) for x in gap_tokens],
        },
    }
