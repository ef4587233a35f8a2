"""Hit-ratio metrics, named exactly as in DESIGN.md section 1.

Definitions differ between papers, so all of them are reported:
- `token_hit_ratio` = sum(hit tokens) / sum(prompt tokens) over all requests;
- `mean_request_hit_ratio` = mean over requests of hit / prompt;
- `rounds_ge1_*`: the same over requests after the first of their session (round >= 1):
  token-weighted, mean, median, and the share of requests with hit ratio >= 0.95;
- `session_token_hit_mean` / `_median`: each session's sum(hit) / sum(prompt), then the mean
  or median over sessions;
- `by_round`: per round bucket (0, 1, 2-4, 5-19, 20-99, 100+) the request count, token hit
  ratio, mean, median and share >= 0.95.
Requests with an empty prompt have no ratio and are left out of means and medians.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Summary metrics in display order, with their table labels (JSON uses the keys).
METRIC_LABELS: tuple[tuple[str, str], ...] = (
    ("token_hit_ratio", "token hit ratio (sum hit / sum prompt)"),
    ("mean_request_hit_ratio", "mean request hit ratio"),
    ("rounds_ge1_token_hit_ratio", "rounds >= 1: token hit ratio"),
    ("rounds_ge1_mean", "rounds >= 1: mean"),
    ("rounds_ge1_median", "rounds >= 1: median"),
    ("rounds_ge1_share_ge_95", "rounds >= 1: share >= 95%"),
    ("session_token_hit_mean", "session token hit: mean"),
    ("session_token_hit_median", "session token hit: median"),
)

ROUND_BUCKETS: list[tuple[str, int, int]] = [
    ("0", 0, 0),
    ("1", 1, 1),
    ("2-4", 2, 4),
    ("5-19", 5, 19),
    ("20-99", 20, 99),
    ("100+", 100, 1 << 62),
]


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den > 0 else math.nan


def _stats(hit: np.ndarray, prompt: np.ndarray) -> dict[str, float]:
    valid = prompt > 0
    r = hit[valid] / prompt[valid]
    return {
        "token_hit_ratio": _ratio(hit.sum(), prompt.sum()),
        "mean": float(r.mean()) if r.size else math.nan,
        "median": float(np.median(r)) if r.size else math.nan,
        "share_ge_95": float((r >= 0.95).mean()) if r.size else math.nan,
    }


def summarize(
    session_codes: np.ndarray, request_index: np.ndarray, prompt: np.ndarray, hit: np.ndarray
) -> dict[str, Any]:
    """All summary metrics of one replay. Arrays are per request; sessions as int codes."""
    prompt = prompt.astype(np.float64)
    hit = hit.astype(np.float64)
    n_sessions = int(np.unique(session_codes).size) if session_codes.size else 0
    overall = _stats(hit, prompt)
    later = request_index >= 1
    rounds = _stats(hit[later], prompt[later])
    if session_codes.size:
        n_codes = int(session_codes.max()) + 1
        s_hit = np.bincount(session_codes, weights=hit, minlength=n_codes)
        s_prompt = np.bincount(session_codes, weights=prompt, minlength=n_codes)
        present = np.bincount(session_codes, minlength=n_codes) > 0
        ok = present & (s_prompt > 0)
        per_session = s_hit[ok] / s_prompt[ok]
    else:
        per_session = np.empty(0)
    by_round = []
    for label, lo, hi in ROUND_BUCKETS:
        sel = (request_index >= lo) & (request_index <= hi)
        st = _stats(hit[sel], prompt[sel])
        by_round.append(
            {
                "round": label,
                "requests": int(sel.sum()),
                "prompt_tokens": int(prompt[sel].sum()),
                "token_hit_ratio": st["token_hit_ratio"],
                "mean": st["mean"],
                "median": st["median"],
                "share_ge_95": st["share_ge_95"],
            }
        )
    return {
        "sessions": n_sessions,
        "requests": int(prompt.size),
        "prompt_tokens": int(prompt.sum()),
        "hit_tokens": int(hit.sum()),
        "token_hit_ratio": overall["token_hit_ratio"],
        "mean_request_hit_ratio": overall["mean"],
        "rounds_ge1_requests": int(later.sum()),
        "rounds_ge1_token_hit_ratio": rounds["token_hit_ratio"],
        "rounds_ge1_mean": rounds["mean"],
        "rounds_ge1_median": rounds["median"],
        "rounds_ge1_share_ge_95": rounds["share_ge_95"],
        "session_token_hit_mean": float(per_session.mean()) if per_session.size else math.nan,
        "session_token_hit_median": (
            float(np.median(per_session)) if per_session.size else math.nan
        ),
        "by_round": by_round,
    }
