"""The workload `size` plans for: prompt/hit samples, working set, arrival rate.

From flags (one prompt length and one hit ratio), from a `hitrate` profile (its
`requests_sample`, else its prompt-length and hit-ratio statistics), or the documented
default: the seed scenario of the Netpreme blog (Qwen3-30B-A3B-FP8 on an H100-class GPU,
64Ki-token prompts, 8 prefills in flight, hit ratio 0.98).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from xmemplan.defaults import SEED_HIT_RATE, SEED_MODEL, SEED_PROMPT_TOKENS
from xmemplan.errors import InputError, UsageError

if TYPE_CHECKING:
    from xmemplan.profile import Profile

__all__ = [
    "SEED_HIT_RATE", "SEED_MODEL", "SEED_PROMPT_TOKENS", "Workload", "from_flags", "from_profile",
]
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


def from_profile(prof: Profile) -> Workload:
    """Samples from `requests_sample` if present, else from the prompt histogram/quantiles."""
    path = prof.path
    h = prof.token_hit_ratio
    if h is None:
        h = prof.rounds_ge1_token_hit_ratio
    how: str
    if prof.sample_prompt.size:
        s = prof.sample_prompt[:MAX_SAMPLES]
        p = prof.sample_hit[:MAX_SAMPLES]
        keep = s > 0
        s, p = s[keep], p[keep]
        if h is None:
            h = float(p.sum() / s.sum()) if s.sum() else 0.0
        how = f"{len(s):,} sampled requests"
    else:
        if h is None:
            raise InputError("no hit ratio in the profile", path=path,
                             field="hit_ratio.token_hit_ratio")
        s = _prompt_samples(prof)
        p = np.floor(s * h)
        how = f"prompt-length distribution ({len(s)} points), hit ratio {h:.3f}"
    if len(s) == 0:
        raise InputError("the profile has no requests with a prompt", path=path,
                         field="requests_sample")
    check_hit_rate(h)
    # The capacity curve is only the deployment's when one cache served every session.
    curve = prof.capacity_curve if prof.scope == "global" else ()
    return Workload(
        description=f"profile {path} ({how})",
        prompt_tokens=s,
        hit_tokens=p,
        token_hit_ratio=float(h),
        working_set_tokens=prof.working_set_tokens,
        capacity_curve=curve,
        rate_rps=prof.rate_rps,
        model=prof.model,
        kv_bytes_per_token=prof.kv_bytes_per_token,
    )


def _prompt_samples(prof: Profile) -> np.ndarray:
    edges = np.asarray(prof.prompt_hist_edges, dtype=np.float64)
    counts = np.asarray(prof.prompt_hist_counts, dtype=np.float64)
    if len(edges) and len(edges) == len(counts) + 1 and counts.sum() > 0:
        mids = (edges[:-1] + edges[1:]) / 2
        reps = np.round(counts / counts.sum() * 1000).astype(int)
        s = np.repeat(mids, reps)
        if len(s):
            return np.maximum(1.0, s)
    if prof.prompt_p50 is None:
        if prof.prompt_mean is None:
            raise InputError("no prompt-length statistics in the profile", path=prof.path,
                             field="prompt_tokens")
        return np.array([max(1.0, prof.prompt_mean)])
    # Quantiles only: 100 points, 50 at p50, 40 at p90, 9 at p99, 1 at max.
    p50 = prof.prompt_p50
    p90 = prof.prompt_p90 if prof.prompt_p90 is not None else p50
    p99 = prof.prompt_p99 if prof.prompt_p99 is not None else p90
    mx = prof.prompt_max or p99
    return np.maximum(1.0, np.repeat([p50, p90, p99, mx], [50, 40, 9, 1]))
