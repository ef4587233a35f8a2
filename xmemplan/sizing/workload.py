"""The workload `size` plans for: prompt/hit samples, working set, arrival rate.

From flags (one prompt length and one hit ratio), from a `hitrate` profile (its
`requests_sample`, else its prompt-length and hit-ratio statistics), or the documented
default: the seed scenario of the Netpreme blog (Qwen3-30B-A3B-FP8 on an H100-class GPU,
64Ki-token prompts, 8 prefills in flight, hit ratio 0.98).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.errors import InputError, UsageError

SEED_MODEL = "qwen3-30b-a3b-fp8"
SEED_GPU = "h100-sxm"
SEED_PROMPT_TOKENS = 65_536
SEED_HIT_RATE = 0.98
SEED_CONCURRENCY = 8
MAX_SAMPLES = 10_000


@dataclass(frozen=True)
class Workload:
    """Per-request samples (tokens) and what is known about the deployment's KV needs."""

    description: str
    prompt_tokens: np.ndarray
    hit_tokens: np.ndarray
    token_hit_ratio: float
    working_set_tokens: float | None = None
    capacity_curve: tuple[tuple[float, float], ...] = ()
    rate_rps: float | None = None
    model: str | None = None
    kv_bytes_per_token: int | None = None

    @property
    def prompt_p50(self) -> float:
        return float(np.median(self.prompt_tokens))

    def hit_at_capacity(self, capacity_tokens: float, working_set_tokens: float) -> float:
        """Token hit ratio when the cache holds `capacity_tokens` (<= the unlimited one).

        From the profile's capacity curve when it has one, else the unlimited ratio scaled
        by the share of the working set that fits (LRU with uniform reuse, a rough guide).
        """
        h = self.token_hit_ratio
        if self.capacity_curve:
            caps = np.array([c for c, _ in self.capacity_curve])
            hits = np.array([r for _, r in self.capacity_curve])
            return float(min(h, np.interp(capacity_tokens, caps, hits)))
        if working_set_tokens <= 0:
            return h
        return h * min(1.0, capacity_tokens / working_set_tokens)


def check_hit_rate(h: float) -> float:
    if not (0.0 <= h <= 1.0) or math.isnan(h):
        raise UsageError(f"hit rate {h:g} is outside [0, 1]", "write it as a ratio, like 0.98")
    return h


def from_flags(prompt_tokens: int, hit_rate: float, description: str) -> Workload:
    if prompt_tokens <= 0:
        raise UsageError("prompt tokens must be at least 1", "write it like '64Ki' or '8k'")
    check_hit_rate(hit_rate)
    s = np.array([float(prompt_tokens)])
    return Workload(description, s, np.floor(s * hit_rate), hit_rate)


def _num(doc: dict[str, Any], *keys: str) -> float | None:
    cur: Any = doc
    for k in keys:
        if not isinstance(cur, dict) or cur.get(k) is None:
            return None
        cur = cur[k]
    return float(cur) if isinstance(cur, int | float) and not isinstance(cur, bool) else None


def from_profile(path: Path, doc: dict[str, Any]) -> Workload:
    """Samples from `requests_sample` if present, else from the prompt histogram/quantiles."""
    sample = doc.get("requests_sample") or {}
    prompts = sample.get("prompt_tokens") if isinstance(sample, dict) else None
    hits = sample.get("hit_tokens") if isinstance(sample, dict) else None
    h = (_num(doc, "hit_ratio", "token_hit_ratio")
         or _num(doc, "hit_ratio", "rounds_ge1_token_hit_ratio"))
    how: str
    if prompts and hits:
        if len(prompts) != len(hits):
            raise InputError("prompt_tokens and hit_tokens differ in length", path=path,
                             field="requests_sample")
        s = np.asarray(prompts, dtype=np.float64)[:MAX_SAMPLES]
        p = np.asarray(hits, dtype=np.float64)[:MAX_SAMPLES]
        keep = s > 0
        if not np.all((p >= 0) & (p <= s) | ~keep):
            raise InputError("a hit_tokens value is negative or above its prompt_tokens",
                             path=path, field="requests_sample.hit_tokens")
        s, p = s[keep], p[keep]
        if h is None:
            h = float(p.sum() / s.sum()) if s.sum() else 0.0
        how = f"{len(s):,} sampled requests"
    else:
        if h is None:
            raise InputError("no hit ratio in the profile", path=path,
                             field="hit_ratio.token_hit_ratio")
        s = _prompt_samples(path, doc)
        p = np.floor(s * h)
        how = f"prompt-length distribution ({len(s)} points), hit ratio {h:.3f}"
    if len(s) == 0:
        raise InputError("the profile has no requests with a prompt", path=path,
                         field="requests_sample")
    check_hit_rate(h)
    ws = _num(doc, "working_set", "peak_tokens") or _num(doc, "working_set", "p99_tokens")
    if ws is None:
        ws_bytes = _num(doc, "working_set", "peak_bytes")
        kvb = _num(doc, "kv_bytes_per_token")
        if ws_bytes is not None and kvb:
            ws = ws_bytes / kvb
    curve: tuple[tuple[float, float], ...] = ()
    scope = (doc.get("source") or {}).get("scope") if isinstance(doc.get("source"), dict) else None
    raw_curve = doc.get("capacity_curve")
    if isinstance(raw_curve, list) and scope == "global":
        pts = [(float(c["capacity_tokens"]), float(c["token_hit_ratio"])) for c in raw_curve
               if isinstance(c, dict) and c.get("capacity_tokens") is not None
               and c.get("token_hit_ratio") is not None]
        curve = tuple(sorted(pts))
    kvb_doc = doc.get("kv_bytes_per_token")
    return Workload(
        description=f"profile {path} ({how})",
        prompt_tokens=s,
        hit_tokens=p,
        token_hit_ratio=float(h),
        working_set_tokens=ws,
        capacity_curve=curve,
        rate_rps=_num(doc, "arrival", "rate_rps"),
        model=doc.get("model") if isinstance(doc.get("model"), str) else None,
        kv_bytes_per_token=int(kvb_doc) if isinstance(kvb_doc, int) else None,
    )


def _prompt_samples(path: Path, doc: dict[str, Any]) -> np.ndarray:
    hist = (doc.get("prompt_tokens") or {}).get("histogram") if isinstance(
        doc.get("prompt_tokens"), dict) else None
    if isinstance(hist, dict) and hist.get("edges") and hist.get("counts"):
        edges = np.asarray(hist["edges"], dtype=np.float64)
        counts = np.asarray(hist["counts"], dtype=np.float64)
        if len(edges) == len(counts) + 1 and counts.sum() > 0:
            mids = (edges[:-1] + edges[1:]) / 2
            reps = np.round(counts / counts.sum() * 1000).astype(int)
            s = np.repeat(mids, reps)
            if len(s):
                return np.maximum(1.0, s)
    qs = [_num(doc, "prompt_tokens", k) for k in ("p50", "p90", "p99")]
    if qs[0] is None:
        mean = _num(doc, "prompt_tokens", "mean")
        if mean is None:
            raise InputError("no prompt-length statistics in the profile", path=path,
                             field="prompt_tokens")
        return np.array([max(1.0, mean)])
    # Quantiles only: 100 points, 50 at p50, 40 at p90, 9 at p99, 1 at max.
    p50 = float(qs[0])
    p90 = float(qs[1]) if qs[1] is not None else p50
    p99 = float(qs[2]) if qs[2] is not None else p90
    mx = _num(doc, "prompt_tokens", "max") or p99
    return np.maximum(1.0, np.repeat([p50, p90, p99, mx], [50, 40, 9, 1]))
