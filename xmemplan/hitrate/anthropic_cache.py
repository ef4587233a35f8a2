"""The Anthropic API's prompt-cache rules, as a cache model to replay transcripts through.

xmemplan's own replay is a prefix cache that can hit at any token (infinite, or an LRU of a
given size): what a server-side tier such as SGLang's radix cache gives. The Anthropic API
caches differently. From its prompt-caching documentation
(https://platform.claude.com/docs/en/build-with-claude/prompt-caching, formerly
docs.anthropic.com/en/docs/build-with-claude/prompt-caching; figures as quoted in
anthropics/anthropic-sdk-python issue #1194 and docs.orq.ai/docs/proxy/prompt-caching):

- **Breakpoints.** A request marks up to 4 content blocks with `cache_control`; the prefix up
  to each breakpoint is written to the cache. Claude Code marks the system prompt and the
  newest message, so a call writes the end of the hidden prefix and the end of its prompt.
- **Reads only at written positions.** A read is a prefix ending exactly where an earlier
  request wrote one. The API checks the breakpoint and the block boundaries before it, up to
  about 20 blocks back, and reads the longest prefix found (no partial block reads).
- **Minimum cacheable length.** 4,096 tokens for Claude Opus 4.6 / 4.5 and Haiku 4.5; 2,048
  for Sonnet 4.6, Haiku 3.5 and Haiku 3; 1,024 for Sonnet 4.5, Opus 4.1, Opus 4, Sonnet 4 and
  Sonnet 3.7. A shorter prefix is not written (no error).
- **Lifetime.** 5 minutes by default, refreshed by every read; 1 hour when written with
  `ttl: "1h"` (usage reports those writes as `cache_creation.ephemeral_1h_input_tokens`).
- **Scope.** The cache is shared by the organization's requests, not kept per conversation,
  so the model keeps one cache for everything read, in time order.

Positions are message boundaries of the reconstructed prompt (a message is one or more
content blocks; the lookback counts blocks). The model is a pure function of the calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TTL_5M_S = 300.0
TTL_1H_S = 3600.0
LOOKBACK_BLOCKS = 20

# Minimum cacheable prompt length (tokens) by model-name prefix; first match wins.
MIN_CACHEABLE: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-6", 4096), ("claude-opus-4-5", 4096), ("claude-haiku-4-5", 4096),
    ("claude-sonnet-4-6", 2048), ("claude-3-5-haiku", 2048), ("claude-3-haiku", 2048),
    ("claude-haiku-3", 2048),
    ("claude-sonnet-4-5", 1024), ("claude-opus-4-1", 1024), ("claude-opus-4", 1024),
    ("claude-sonnet-4", 1024), ("claude-3-7-sonnet", 1024),
)
DEFAULT_MIN_CACHEABLE = 1024


def min_cacheable(model: str) -> int:
    for prefix, n in MIN_CACHEABLE:
        if model.startswith(prefix):
            return n
    return DEFAULT_MIN_CACHEABLE


@dataclass
class ModelCall:
    """One call as the cache model sees it."""

    universe: int  # calls of different universes never share entries
    timestamp: float  # s; NaN = unknown (no expiry checks)
    bounds: np.ndarray  # int64 token positions of the message ends, ascending
    hashes: list[int]  # chained content hash of the prefix ending at each bound
    blocks: np.ndarray  # int64 cumulative content blocks at each bound
    breakpoints: list[int]  # indices into bounds that are written (cache_control)
    ttl_s: float
    min_len: int
    warm: int = 0  # tokens the API's shared cache held before the conversation's first call


def windowed_call(*, cum: Sequence[int], hashes: Sequence[int], blocks: Sequence[int],
                  breakpoints: list[int], **fields: object) -> ModelCall:
    """A call holding only the bounds `replay` can look at: the lookback window before the
    last breakpoint, and the breakpoints. `cum` is the tokens up to each message end (cum[0]
    = 0), `hashes` the chained hash at each message end, `blocks` the content blocks per
    message. Only the window is read, so a call costs its window, not its length (a session
    of N calls would build N^2/2 entries); `replay` gives it the hits of the whole call."""
    n = len(hashes)
    if not n:
        return ModelCall(bounds=np.zeros(0, np.int64), hashes=[],
                         blocks=np.zeros(0, np.int64), breakpoints=list(breakpoints),
                         **fields)  # type: ignore[arg-type]
    last_bp = max(breakpoints) if breakpoints else n - 1
    first, tail = last_bp, 0  # tail: blocks after `first` up to the last breakpoint
    while first > 0 and tail + blocks[first] <= LOOKBACK_BLOCKS:
        tail += blocks[first]
        first -= 1
    keep = sorted(set(range(first, last_bp + 1)) | set(breakpoints))
    upto = sum(blocks[: last_bp + 1])  # cumulative blocks at the last breakpoint
    cum_blocks = {}
    run = upto
    for j in range(last_bp, first - 1, -1):
        cum_blocks[j] = run
        run -= blocks[j]
    for j in breakpoints:
        if j not in cum_blocks:  # before the window (e.g. the stand-in, message 0)
            cum_blocks[j] = sum(blocks[: j + 1])
    at = {j: k for k, j in enumerate(keep)}
    return ModelCall(
        bounds=np.array([cum[j + 1] for j in keep], dtype=np.int64),
        hashes=[hashes[j] for j in keep],
        blocks=np.array([cum_blocks[j] for j in keep], dtype=np.int64),
        breakpoints=[at[j] for j in breakpoints], **fields)  # type: ignore[arg-type]


def _window_start(blocks: np.ndarray, last_bp: int) -> int:
    """First bound within LOOKBACK_BLOCKS blocks of the last breakpoint (blocks are
    cumulative, so the window is one run ending there)."""
    lo = blocks[last_bp] - LOOKBACK_BLOCKS
    return int(np.searchsorted(blocks[: last_bp + 1], lo, side="left"))


@dataclass
class ModelHit:
    tokens: int  # read from cache
    without_ttl: int  # the same without expiry
    blocked_by_min_length: bool  # a longer read existed but was never written (too short)


def replay(calls: Sequence[ModelCall]) -> list[ModelHit]:
    """Hits of each call (in the order given, which must be time order)."""
    expiry: dict[tuple[int, int], float] = {}  # (universe, prefix hash) -> expiry time
    ever: set[tuple[int, int]] = set()  # written at some time (for the no-TTL reading)
    seen_short: set[tuple[int, int]] = set()  # breakpoints not written: below the minimum
    out = []
    for c in calls:
        n = len(c.bounds)
        last_bp = max(c.breakpoints) if c.breakpoints else n - 1
        first = _window_start(c.blocks, last_bp) if n else 0
        candidates = set(range(first, min(last_bp, n - 1) + 1))
        candidates.update(j for j in c.breakpoints if j <= last_bp)
        now = c.timestamp
        best = best_nottl = 0
        blocked = False
        for j in sorted(candidates, reverse=True):
            key = (c.universe, c.hashes[j])
            pos = int(c.bounds[j])
            if key in ever and best_nottl == 0:
                best_nottl = pos
            exp = expiry.get(key)
            if exp is not None and (np.isnan(now) or now <= exp):
                best = pos
                if not np.isnan(now):  # a read refreshes the entry's lifetime
                    expiry[key] = max(exp, now + c.ttl_s)
                break
            if key in seen_short and best == 0:
                blocked = True
        best = max(best, c.warm)
        best_nottl = max(best_nottl, best)
        for j in c.breakpoints:  # writes (and refreshes) at this call's breakpoints
            key = (c.universe, c.hashes[j])
            if c.bounds[j] < c.min_len:
                seen_short.add(key)
                continue
            t = now if not np.isnan(now) else 0.0
            expiry[key] = max(expiry.get(key, -np.inf), t + c.ttl_s)
            ever.add(key)
        out.append(ModelHit(int(best), int(best_nottl), blocked and best < best_nottl))
    return out
