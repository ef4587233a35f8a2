"""Trace statistics: the length and hit distributions of a replay, as `aiperf analyze-trace`
shows lengths (mean and percentiles), plus each request's hit ratio.

- `prompt_tokens`: each request's prompt (input) length;
- `output_tokens`: its output length, over the requests whose trace gives one;
- `context_tokens`: prompt + output, the KV the request holds when it ends (over the requests
  with an output length): what must fit the model's context;
- `request_hit_ratio`: hit / prompt per request (infinite cache; empty prompts left out).

Each is `{count, mean, p25, p50, p75, p90, p99, max}` (None when no request has the value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import HitrateResult

STAT_KEYS = ("count", "mean", "p25", "p50", "p75", "p90", "p99", "max")
PERCENTILES = (25, 50, 75, 90, 99)
DISTRIBUTIONS = (
    ("prompt_tokens", "prompt tokens"),
    ("output_tokens", "output tokens"),
    ("context_tokens", "context (prompt + output)"),
    ("request_hit_ratio", "request hit ratio"),
)

# AIPerf's `cache_hit_rate` (aiperf analyze-trace, dataset/synthesis/prefix_analyzer.py;
# shared/docs/research/serving-sim.md 4.2): the unweighted mean over requests of the share of
# a request's hash blocks before its first unseen one, in file order, infinite cache. That is
# a mean over requests, as `mean_request_hit_ratio`, counted in whole blocks.
AIPERF_LINE = (
    "AIPerf's cache_hit_rate is an unweighted mean over requests of each one's hit share in "
    "whole blocks (file order, infinite cache): compare it with the mean request hit ratio "
    "{mean}, not the token hit ratio {token} (sum hit / sum prompt, which weights long "
    "prompts more)"
)


def distribution(values: np.ndarray) -> dict[str, Any]:
    """`{count, mean, p25, ..., max}` of `values` (finite ones only)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return {"count": 0, **{k: None for k in STAT_KEYS[1:]}}
    pct = np.percentile(v, PERCENTILES)
    return {
        "count": int(v.size),
        "mean": float(v.mean()),
        **{f"p{p}": float(x) for p, x in zip(PERCENTILES, pct)},
        "max": float(v.max()),
    }


def trace_stats(result: HitrateResult) -> dict[str, Any]:
    """The four distributions of a replay, and the AIPerf line (see the module docstring)."""
    from xmemplan.traces import schema as S

    r = result.replayed
    prompt = r.column(S.PROMPT_TOKENS).astype(np.float64)
    hit = r.column(S.HIT_TOKENS).astype(np.float64)
    out = r.column(S.OUTPUT_TOKENS)
    known = out >= 0
    valid = prompt > 0
    s = result.summary
    return {
        "prompt_tokens": distribution(prompt),
        "output_tokens": distribution(out[known]),
        "context_tokens": distribution(prompt[known] + out[known]),
        "request_hit_ratio": distribution(hit[valid] / prompt[valid]),
        "aiperf_cache_hit_rate": AIPERF_LINE.format(
            mean=_four(s.get("mean_request_hit_ratio")), token=_four(s.get("token_hit_ratio"))),
    }


def _four(x: Any) -> str:
    return "-" if x is None or x != x else f"{x:.4f}"
