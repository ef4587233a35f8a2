"""Per API call of Claude Code transcripts: what the API served from cache, what we
reconstruct, and why the two differ.

For each call, in the API's tokens unless noted:
- `api_cached_tokens` (C): `cache_read_input_tokens`;
- `hit_tokens_plain` (h0, our tokens): the infinite-cache hit of the prompt as the transcript
  holds it (what `hitrate` reports without these options);
- `hit_tokens_hidden`: the same with the stand-in hidden prefix, in the run's units;
- `hit_tokens_ceiling` (hw): with the stand-in and calibrated tokens; a conversation's first
  call also gets the part of the prefix the API's shared cache already held (its own usage
  says how much: `min(H, C)`), as other sessions of the same client keep it warm;
- `hit_tokens_anthropic` (a): the same calls through the API's cache rules
  (`anthropic_cache`): breakpoints, minimum length, 5-minute / 1-hour lifetimes.

The difference `C - h0` is split into parts that sum to it: `tokens` (hc - h0, our
tokenizer vs the API's, with hc the calibrated hit without the stand-in), `hidden_prefix`
(hw - hc), then the gap `C - hw`:
- above the ceiling: `unrecorded`, the part beyond the whole previous prompt of the
  conversation (the API's own count), or beyond the warm prefix on a first call: content no
  earlier call in the transcript carried, so a request the transcript does not hold wrote it
  (Claude Code sends cache warm-up requests that it does not record:
  anthropics/claude-agent-sdk-python issue #445);
- below it: `compaction` or `edit` (the prompt does not extend the previous one: the whole
  shortfall), else what the API's rules predict, at most the shortfall: `ttl` (an entry
  expired: more than 5 minutes, or 1 hour, since it was last used), `min_length`, or
  `breakpoint` (the longest written prefix ends before the previous prompt does);
- a per-call `tokens` residual (the API's length of the previous prompt vs our calibrated
  one), and what is left, `unexplained`.
The call's `reason` is the largest part. Lifetimes count from when a request was sent (the
time of its newest prompt record), not from when the response was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from xmemplan.hitrate import anthropic_cache as A
from xmemplan.traces.base import SkipLog
from xmemplan.traces.base import shared_objects as _shared_objects
from xmemplan.traces.hidden_prefix import Estimate, prepare

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import HitrateOptions
    from xmemplan.traces.claude_transcript import Call

REASONS = ("tokens", "hidden_prefix", "ttl", "breakpoint", "min_length", "edit", "compaction",
           "unrecorded")


@dataclass
class CallsReport:
    rows: list[dict[str, Any]]  # one per call, in time order
    estimates: dict[str, Estimate]
    files: list[dict[str, Any]]  # per file: ratios before/after
    explained_share: float  # sum |explained parts| / sum |C - h0|
    unexplained_tokens: int
    difference_tokens: int
    cache_rules: dict[str, Any] = field(default_factory=dict)  # what the model assumed
    # What this pass did not read: folder entries and lines skipped (counted), discovery's
    # notes (files named twice, links, hidden files). The CLI shows what `hitrate`'s own
    # pass over the same paths did not already show.
    skips: SkipLog = field(default_factory=SkipLog)
    notes: list[str] = field(default_factory=list)


class _Chains:
    """Chained content hashes of message lists (one per message: the prefix ending there).

    A session resends its history: a list that starts with the previous list's own message
    arrays reuses that list's hashes, so a session of N calls hashes each message once
    instead of once per call (N^2/2). `last_shared` is how many leading messages the last
    list shared with the one before it."""

    def __init__(self, memo: dict[int, int]) -> None:
        self.memo = memo
        self.parts: Sequence[np.ndarray] = ()
        self.chain: list[int] = []
        self.cum: list[int] = [0]  # tokens up to the end of each message
        self.last_shared = 0

    def __call__(self, parts: Sequence[np.ndarray]) -> list[int]:
        """The chain of `parts` (valid until the next call: a list that extends the last
        one grows it in place rather than copying its shared part)."""
        prev = self.parts
        k = _shared_objects(parts, prev, min(len(prev), len(parts)))
        if k == len(self.chain):
            chain, cum = self.chain, self.cum
        else:
            chain, cum = self.chain[:k], self.cum[: k + 1]
        h = chain[-1] if k else 0
        total = cum[-1]
        memo = self.memo
        for p in parts[k:]:
            d = memo.get(id(p))
            if d is None:
                d = memo[id(p)] = xxhash.xxh3_64_intdigest(np.ascontiguousarray(p).tobytes())
            h = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little") + d.to_bytes(8, "little"))
            chain.append(h)
            total += p.shape[0]
            cum.append(total)
        self.parts, self.chain, self.cum, self.last_shared = parts, chain, cum, k
        return chain


class _Trie:
    """Infinite prefix cache over prompts given as lists of token arrays (messages)."""

    def __init__(self, memo: dict[int, int]) -> None:
        self.children: dict[int, list[np.ndarray]] = {}  # prefix hash -> next parts seen
        self.nodes: set[int] = set()
        self.chains = _Chains(memo)

    def match_insert(self, parts: Sequence[np.ndarray]) -> int:
        hashes = self.chains(parts)
        # The messages this prompt shares (the same arrays) with the last one are cached
        # whole: every message of the last prompt was inserted when it was matched.
        k = self.chains.last_shared
        hit = self.chains.cum[k]
        prev = hashes[k - 1] if k else 0
        full = True
        for p, h in zip(parts[k:], hashes[k:]):
            if full and h in self.nodes:
                hit += p.shape[0]
            elif full:
                best = 0
                for q in self.children.get(prev, ()):
                    m = min(p.shape[0], q.shape[0])
                    neq = np.flatnonzero(p[:m] != q[:m])
                    best = max(best, int(neq[0]) if neq.size else m)
                hit += best
                full = False
            if h not in self.nodes:
                self.nodes.add(h)
                self.children.setdefault(prev, []).append(p)
            prev = h
        return hit


class _CallParts(Sequence[list[np.ndarray]]):
    """Each call's messages, built when asked for (not all held at once: a session of N
    calls would hold N^2/2 message references)."""

    def __init__(self, calls: Sequence[Call]) -> None:
        self.calls = calls

    def __len__(self) -> int:
        return len(self.calls)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.calls[j].parts for j in range(*i.indices(len(self)))]
        return self.calls[i].parts


def _infinite(parts: Sequence[list[np.ndarray]], universe: list[Any], order: np.ndarray,
              memo: dict[int, int], warm_parts: dict[int, list[np.ndarray]] | None = None
              ) -> np.ndarray:
    tries: dict[Any, _Trie] = {}
    hit = np.zeros(len(parts), dtype=np.int64)
    for i in order:
        t = tries.get(universe[i])
        if t is None:
            t = tries[universe[i]] = _Trie(memo)
        hit[i] = t.match_insert(parts[i])
    return hit


def _extends(prev: Sequence[np.ndarray], cur: Sequence[np.ndarray]) -> bool:
    """The current prompt starts with the whole previous one (same message arrays)."""
    if len(cur) < len(prev):
        return False
    k = len(prev) - 1
    same = _shared_objects(prev, cur, k)
    for a, b in zip(prev[same:k], cur[same:]):
        if a is not b and not np.array_equal(a, b):
            return False
    last, here = prev[-1], cur[len(prev) - 1]
    return bool(here.shape[0] >= last.shape[0]
                and np.array_equal(here[: last.shape[0]], last))


def analyze_calls(paths: list[Path], options: HitrateOptions) -> CallsReport | None:
    """The per-call report of the Claude Code transcripts among `paths`; None if none."""
    from xmemplan.text.encoder import get_encoder
    from xmemplan.traces import claude_transcript as CT
    from xmemplan.traces.registry import discover

    found = discover(paths, options.format_name, strict=options.strict)
    files = [p for p, r in found.files if r.NAME == CT.NAME]
    if not files:
        return None
    enc = get_encoder(options.tokenizer)
    ro = options.read_options()
    calls: list[Call] = []
    file_of: list[str] = []
    skips = SkipLog(strict=options.strict)
    skips.merge(found.skips)  # folder entries that could not be read, counted
    for p in files:
        fc = CT.calls(p, ro, skips, enc, kinds=True)
        calls.extend(fc.calls)
        file_of.extend([str(p)] * len(fc.calls))
    if not calls:
        return None
    rep = report(calls, file_of, options)
    rep.skips = skips
    rep.notes = list(found.notes)
    return rep


def report(calls: Sequence[Call], file_of: Sequence[str], options: HitrateOptions
           ) -> CallsReport:
    mode = options.hidden_prefix if options.hidden_prefix not in (None, "none") else "auto"
    calibrated = options.tokens == "calibrated"
    plain = _CallParts(calls)
    run = prepare(calls, mode, calibrated)  # the run's units, with the stand-in
    cal = prepare(calls, None, True)  # API units, no stand-in
    full = prepare(calls, mode, True)  # API units, with the stand-in
    est = full.estimates
    n = len(calls)
    ts = np.array([np.nan if c.timestamp is None else c.timestamp for c in calls])
    order = np.lexsort((np.arange(n), np.nan_to_num(ts, nan=np.inf)))
    sent = np.array([np.nan if c.sent is None else c.sent for c in calls])
    scope = options.scope if options.scope in ("session", "global") else "session"
    universe: list[Any] = [c.session if scope == "session" else 0 for c in calls]
    memo: dict[int, int] = {}
    h0 = _infinite(plain, universe, order, memo)
    hh = _infinite(run.parts, universe, order, memo)
    hc = _infinite(cal.parts, universe, order, memo)
    hw = _infinite(full.parts, universe, order, memo)

    # Conversation order, previous call, warm prefix on a conversation's first call.
    prev: list[int | None] = [None] * n
    last: dict[str, int] = {}
    warm = np.zeros(n, dtype=np.int64)
    for i in order:
        c = calls[i]
        j = last.get(c.context)
        prev[i] = j
        last[c.context] = i
        if j is None and c.reported is not None:
            warm[i] = min(full.hidden[i], c.reported[0])
    hw = np.maximum(hw, warm)

    # The API's cache rules over the calibrated calls with the stand-in.
    one_hour = _one_hour_contexts(calls)
    mcalls = []
    chains = _Chains(memo)
    for i, c in enumerate(calls):
        parts = full.parts[i]
        hashes = chains(parts)
        blocks = c.blocks
        if full.hidden[i]:
            blocks = [1, *blocks]
        bps = [0] if full.hidden[i] and len(parts) > 1 else []
        bps.append(len(parts) - 1)
        mcalls.append(A.windowed_call(
            cum=chains.cum, hashes=hashes, blocks=blocks, breakpoints=bps,
            universe=0, timestamp=float(sent[i]),
            ttl_s=A.TTL_1H_S if c.context in one_hour else A.TTL_5M_S,
            min_len=A.min_cacheable(c.model), warm=int(warm[i])))
    # The model replays in the order requests were sent.
    sorder = np.lexsort((np.arange(n), np.nan_to_num(sent, nan=np.inf)))
    mhits = A.replay([mcalls[i] for i in sorder])
    a = np.zeros(n, dtype=np.int64)
    a_nottl = np.zeros(n, dtype=np.int64)
    blocked = np.zeros(n, dtype=bool)
    for i, h in zip(sorder, mhits):
        a[i], a_nottl[i], blocked[i] = h.tokens, h.without_ttl, h.blocked_by_min_length

    rows = []
    abs_diff = abs_unexpl = 0.0
    for i in order:
        c = calls[i]
        j = prev[i]
        edit = j is not None and not c.compacted and not _extends(calls[j].parts, c.parts)
        compaction = c.compacted and (j is None or not calls[j].compacted
                                      or calls[j].tokens > c.tokens)
        part = dict.fromkeys(REASONS, 0.0)
        rep = c.reported
        row: dict[str, Any] = {
            "file": file_of[i], "session_id": c.session, "context": c.context, "line": c.line,
            "timestamp_s": None if np.isnan(ts[i]) else float(ts[i]),
            "model": c.model, "version": c.version,
            "prompt_tokens_plain": c.tokens, "hit_tokens_plain": int(h0[i]),
            "prompt_tokens_hidden": int(run.tokens[i]),
            "hit_tokens_hidden": int(hh[i]), "hidden_prefix_tokens": int(run.hidden[i]),
            "prompt_tokens_calibrated": int(full.tokens[i]),
            "hit_tokens_ceiling": int(hw[i]), "hit_tokens_anthropic": int(a[i]),
            "api_cached_tokens": rep[0] if rep else None,
            "api_prompt_tokens": rep[1] if rep else None,
        }
        if rep is None:
            row.update(reason=None, unexplained_tokens=None, **{f"d_{k}": None for k in REASONS})
            rows.append(row)
            continue
        cached = rep[0]
        diff = cached - h0[i]
        part["tokens"] = float(hc[i] - h0[i])
        part["hidden_prefix"] = float(hw[i] - hc[i])
        gap = float(cached - hw[i])  # what the API read beyond (+) or short of (-) the ceiling
        # The API's previous prompt vs our calibrated length of it: a per-call token residual.
        resid = 0.0
        base = float(warm[i])
        if j is not None and not edit and not compaction and calls[j].reported:
            ours_prev = float(full.tokens[j])
            resid = calls[j].reported[1] - ours_prev
            base = float(calls[j].reported[1])
        rest = gap
        if gap > 0:
            # Beyond the whole previous prompt (the API's own count), or beyond the warm
            # prefix on a first call: content that no earlier recorded call carried.
            unrec = max(0.0, cached - max(float(hw[i]), base))
            part["unrecorded"] = unrec
            rest -= unrec
        elif gap < 0:
            name = None
            if compaction:
                name = "compaction"
            elif edit:
                name = "edit"
            elif a_nottl[i] > a[i]:
                name = "ttl"
            elif a[i] < hw[i]:
                name = "min_length" if blocked[i] else "breakpoint"
            if name is not None:
                # A structural cause explains all of the shortfall; the cache rules explain
                # what the model predicts, at most the shortfall.
                take = gap if name in ("compaction", "edit") else max(gap, float(a[i] - hw[i]))
                part[name] += take
                rest -= take
        if rest * resid > 0:
            take = float(np.sign(rest) * min(abs(rest), abs(resid)))
            part["tokens"] += take
            rest -= take
        row.update({f"d_{k}": v for k, v in part.items()})
        row["unexplained_tokens"] = float(rest)
        # The reason: the largest cause other than the two every call has (tokens, hidden
        # prefix) when it is material (16 tokens or more), else the largest part.
        causes = {k: v for k, v in part.items() if k not in ("tokens", "hidden_prefix")}
        big = max(causes, key=lambda k: abs(causes[k]))
        if abs(causes[big]) < 16:
            big = max(part, key=lambda k: abs(part[k]))
        row["reason"] = big if abs(part[big]) > 0 else "none"
        abs_diff += abs(diff)
        abs_unexpl += abs(rest)
        rows.append(row)

    files = _per_file(rows)
    share = 1.0 - abs_unexpl / abs_diff if abs_diff else 1.0
    return CallsReport(
        rows=rows, estimates=est, files=files, explained_share=share,
        unexplained_tokens=int(round(abs_unexpl)), difference_tokens=int(round(abs_diff)),
        cache_rules={"ttl_s": A.TTL_5M_S, "ttl_1h_contexts": len(one_hour),
                     "lookback_blocks": A.LOOKBACK_BLOCKS,
                     "min_cacheable": {c.model: A.min_cacheable(c.model) for c in calls}},
    )


def _one_hour_contexts(calls: Sequence[Call]) -> set[str]:
    """Conversations whose cache entries live 1 hour: their usage reports 1-hour writes; or
    it reports no write at all (every entry it read was written by requests the transcript
    does not hold, with a lifetime it cannot tell) and it is a main conversation, which
    Claude Code writes with 1 hour on a subscription (code.claude.com/docs/en/prompt-caching,
    "which TTL each request gets", as quoted in anthropics/claude-code issue #84253;
    sub-agents get 5 minutes)."""
    writes: dict[str, tuple[int, int, bool]] = {}
    for c in calls:
        w, w1, side = writes.get(c.context, (0, 0, c.sidechain))
        writes[c.context] = (w + c.creation, w1 + c.creation_1h, side)
    return {ctx for ctx, (w, w1, side) in writes.items() if w1 > 0 or (w == 0 and not side)}


def _ratio(rows: list[dict[str, Any]], hit: str, prompt: str) -> float:
    h = sum(r[hit] for r in rows)
    p = sum(r[prompt] for r in rows)
    return h / p if p else float("nan")


def _per_file(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name in dict.fromkeys(r["file"] for r in rows):
        sel = [r for r in rows if r["file"] == name and r["api_cached_tokens"] is not None]
        if not sel:
            continue
        reasons: dict[str, float] = {}
        for r in sel:
            for k in REASONS:
                reasons[k] = reasons.get(k, 0.0) + abs(r[f"d_{k}"])
        diff = sum(abs(r["api_cached_tokens"] - r["hit_tokens_plain"]) for r in sel)
        unexpl = sum(abs(r["unexplained_tokens"]) for r in sel)
        out.append({
            "file": name, "calls": len(sel),
            "api": _ratio(sel, "api_cached_tokens", "api_prompt_tokens"),
            "plain": _ratio(sel, "hit_tokens_plain", "prompt_tokens_plain"),
            "hidden": _ratio(sel, "hit_tokens_hidden", "prompt_tokens_hidden"),
            "ceiling": _ratio(sel, "hit_tokens_ceiling", "prompt_tokens_calibrated"),
            "anthropic": _ratio(sel, "hit_tokens_anthropic", "prompt_tokens_calibrated"),
            "explained_share": 1.0 - unexpl / diff if diff else 1.0,
            "reason_tokens": reasons,
        })
    return out
