"""`hitrate`: read traces, replay them through a prefix cache, report hit ratios.

    from xmemplan.hitrate import HitrateOptions, analyze
    result = analyze([Path("traces/")], HitrateOptions(scope="session"))
    result.summary["token_hit_ratio"]

Per request, in replay order: find the longest cached prefix (in keys), then insert the
request. Hit tokens = min(matched keys x block_tokens, prompt_tokens), rounded down to whole
`page_size` pages for token-id traces. `scope="session"` keeps one cache per session;
`"global"` one cache for everything, requests ordered by timestamp; `"auto"` is session
scope unless a format has no sessions (Mooncake).

Session-complete batches (one file per session) are matched as they are read and dropped,
so memory stays bounded by the largest file, and files are spread over worker processes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.errors import UsageError
from xmemplan.hitrate.reported import reported_vs_reconstructed
from xmemplan.traces import schema as S
from xmemplan.traces._build import TextBatch, concat_text
from xmemplan.traces.base import ReadOptions, SkipLog, reader_failed
from xmemplan.traces.registry import Discovery, discover

if TYPE_CHECKING:
    import polars as pl

    from xmemplan.hitrate.capacity import CapacityPart, CapacityResult, CapacitySpec

SCOPES = ("auto", "session", "global")
EXECUTORS = ("local", "ray")


@dataclass
class HitrateOptions:
    scope: str = "auto"
    page_size: int = 1
    format_name: str | None = None
    subagents: bool = False
    strict: bool = False
    workers: int = 0  # 0 = one per core (at most the number of files); Ray: local CPUs
    executor: str = "local"  # local (worker processes) or ray (hitrate.ray_exec)
    ray_address: str | None = None  # None: RAY_ADDRESS, else a new local Ray
    tokenizer: str | None = None
    session_field: str | None = None
    timestamp_field: str | None = None
    # Finite caches, curve and tiers; None = infinite only.
    capacity: CapacitySpec | None = None
    hidden_prefix: str | None = None  # transcripts: auto, none or N (traces/hidden_prefix.py)
    tokens: str | None = None  # transcripts: "calibrated"

    def read_options(self) -> ReadOptions:
        return ReadOptions(
            subagents=self.subagents,
            strict=self.strict,
            tokenizer=self.tokenizer,
            session_field=self.session_field,
            timestamp_field=self.timestamp_field,
            hidden_prefix=self.hidden_prefix,
            tokens=self.tokens,
        )


@dataclass
class Replayed:
    """Per-request results of a replay, in replay order (numpy columns)."""

    session_id: list[str] = field(default_factory=list)
    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    capacity: list[CapacityPart] = field(default_factory=list)  # one per batch
    # per batch, (rows, len(prefix.groups.DEPTHS)) prefix fingerprints (zeros: unknown)
    # and the rows' tokens per key
    fingerprints: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    COLUMNS = (
        S.REQUEST_INDEX,
        S.TIMESTAMP_S,
        S.PROMPT_TOKENS,
        S.HIT_TOKENS,
        S.OUTPUT_TOKENS,
        S.REPORTED_CACHED_TOKENS,
        S.REPORTED_PROMPT_TOKENS,
    )

    def add(self, sessions: list[str], **cols: np.ndarray) -> None:
        self.session_id.extend(sessions)
        for name in self.COLUMNS:
            self.parts.setdefault(name, []).append(cols[name])

    def extend(self, other: Replayed) -> None:
        self.session_id.extend(other.session_id)
        for name, arrays in other.parts.items():
            self.parts.setdefault(name, []).extend(arrays)
        self.capacity.extend(other.capacity)
        self.fingerprints.extend(other.fingerprints)

    def fingerprint(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Every row's prefix fingerprints and tokens per key, or None when a batch did not
        record them."""
        n = len(self.session_id)
        if not self.fingerprints or sum(len(f) for f, _ in self.fingerprints) != n:
            return None
        return (np.concatenate([f for f, _ in self.fingerprints]),
                np.concatenate([b for _, b in self.fingerprints]))

    def column(self, name: str) -> np.ndarray:
        arrays = self.parts.get(name, [])
        if not arrays:
            return np.empty(0, dtype=np.float64 if name == S.TIMESTAMP_S else np.int64)
        return np.concatenate(arrays)


@dataclass
class HitrateResult:
    """What `analyze` found; `summary` holds the DESIGN.md metrics by their exact names."""

    summary: dict[str, Any]
    scope: str
    page_size: int
    files_by_format: dict[str, int]
    unrecognized: list[str]
    empty: list[str]
    skips: SkipLog
    notes: list[str]
    replayed: Replayed
    reported: dict[str, Any] | None = None
    capacity: CapacityResult | None = None  # when options.capacity is set

    def requests_frame(self) -> pl.DataFrame:
        """The per-request table as a polars DataFrame."""
        import polars as pl

        r = self.replayed
        prompt = r.column(S.PROMPT_TOKENS)
        hit = r.column(S.HIT_TOKENS)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(prompt > 0, hit / np.maximum(prompt, 1), np.nan)

        def nullable(a: np.ndarray) -> pl.Series:
            return pl.Series(a).replace(S.NULL_INT, None)

        return pl.DataFrame(
            {
                S.SESSION_ID: r.session_id,
                S.REQUEST_INDEX: r.column(S.REQUEST_INDEX),
                S.TIMESTAMP_S: pl.Series(r.column(S.TIMESTAMP_S)).fill_nan(None),
                S.PROMPT_TOKENS: prompt,
                S.HIT_TOKENS: hit,
                S.HIT_RATIO: pl.Series(ratio).fill_nan(None),
                S.OUTPUT_TOKENS: nullable(r.column(S.OUTPUT_TOKENS)),
                S.REPORTED_CACHED_TOKENS: nullable(r.column(S.REPORTED_CACHED_TOKENS)),
                S.REPORTED_PROMPT_TOKENS: nullable(r.column(S.REPORTED_PROMPT_TOKENS)),
                # with --capacity: hit tokens per cache size, e.g. `hit_tokens_lru_3M`
                **(self.capacity.request_columns(r) if self.capacity is not None else {}),
            }
        )


def _order_in_sessions(batch: S.RequestBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, session codes in that order, request_index in that order).

    Requests are grouped by session in order of first appearance and, inside a session,
    ordered by timestamp (stable: equal or missing timestamps keep input order).
    """
    codes_of: dict[str, int] = {}
    codes = np.fromiter(
        (codes_of.setdefault(s, len(codes_of)) for s in batch.session_id),
        dtype=np.int64,
        count=len(batch),
    )
    ts = np.nan_to_num(batch.timestamp_s, nan=np.inf)
    if np.all(np.isinf(ts)):
        order = np.argsort(codes, kind="stable")
    else:
        order = np.lexsort((np.arange(len(batch)), ts, codes))
    sorted_codes = codes[order]
    new = np.ones(len(batch), dtype=bool)
    new[1:] = sorted_codes[1:] != sorted_codes[:-1]
    starts = np.flatnonzero(new)
    index = np.arange(len(batch)) - np.repeat(starts, np.diff(np.append(starts, len(batch))))
    return order, sorted_codes, index


def _take(batch: S.RequestBatch, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keys and offsets of the batch's requests in `order`."""
    lengths = np.diff(batch.key_offsets)[order]
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if np.array_equal(order, np.arange(len(order))):
        return batch.keys, offsets
    starts = batch.key_offsets[:-1][order]
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return batch.keys[idx], offsets


def _hits(matched: np.ndarray, block: np.ndarray, prompt: np.ndarray, page: int) -> np.ndarray:
    hit = np.minimum(matched * block, prompt)
    if page > 1:
        token_level = block == 1
        hit = np.where(token_level, hit // page * page, hit)
    return hit


def _match_chained(
    batch: S.RequestBatch, keys: np.ndarray, offsets: np.ndarray, resets: np.ndarray
) -> np.ndarray | None:
    """Block traces in one cache with prefix-chained ids (Mooncake): numpy sorts, when numba
    is not loaded yet and the input is small enough that its start-up (~0.3 s) would be
    most of the run. The figures are the radix tree's either way (tests)."""
    import sys

    if "numba" in sys.modules or resets[1:].any() or (batch.block_tokens <= 1).any():
        return None
    from xmemplan.prefix.chained import MAX_KEYS, match_chained

    return match_chained(keys, offsets) if keys.shape[0] <= MAX_KEYS else None


def replay(
    batch: S.RequestBatch, scope: str, page_size: int, capacity: CapacitySpec | None = None
) -> Replayed:
    """Match one batch (all of it is one cache universe under `scope`)."""
    n = len(batch)
    out = Replayed()
    if n == 0:
        return out
    order, codes, index = _order_in_sessions(batch)
    if scope == "global":
        ts = np.nan_to_num(batch.timestamp_s[order], nan=np.inf)
        g = np.lexsort((np.arange(n), ts)) if not np.all(np.isinf(ts)) else np.arange(n)
        order, index = order[g], index[g]
        resets = np.zeros(n, dtype=bool)
    else:
        resets = np.ones(n, dtype=bool)
        resets[1:] = codes[1:] != codes[:-1]
    prompt = batch.prompt_tokens[order]
    from xmemplan.prefix.groups import DEPTHS, fingerprints

    fp = np.zeros((n, len(DEPTHS)), np.uint64)  # text prompts: not fingerprinted
    if capacity is None and isinstance(batch, TextBatch):
        # text prompts stay interned messages: matched without materialising a prompt
        from xmemplan.prefix.chunks import match_prompts

        matched = match_prompts(batch.prompts, batch.nodes[order], resets)
        hit = _hits(matched, batch.block_tokens[order], prompt, page_size)
    elif capacity is None:
        keys, offsets = _take(batch, order)
        chained = _match_chained(batch, keys, offsets, resets)
        if chained is None:
            from xmemplan.prefix.matcher import match

            chained = match(keys, offsets, resets)
        hit = _hits(chained, batch.block_tokens[order], prompt, page_size)
        fp = fingerprints(keys, offsets, batch.block_tokens[order])
    else:
        # one LRU pass also gives the infinite cache's hits (tests check they agree)
        keys, offsets = _take(batch, order)
        from xmemplan.hitrate.capacity import replay_capacity

        part = replay_capacity(
            keys, offsets, resets, batch.block_tokens[order], prompt,
            batch.timestamp_s[order], page_size, capacity, batch.output_tokens[order],
        )
        out.capacity.append(part)
        hit = part.infinite_hit_tokens
        fp = fingerprints(keys, offsets, batch.block_tokens[order])

    def opt(a: np.ndarray | None) -> np.ndarray:
        return a[order] if a is not None else S.empty_int(n)

    out.fingerprints.append((fp, batch.block_tokens[order].astype(np.int64)))
    out.add(
        [batch.session_id[i] for i in order],
        **{
            S.REQUEST_INDEX: index,
            S.TIMESTAMP_S: batch.timestamp_s[order],
            S.PROMPT_TOKENS: prompt,
            S.HIT_TOKENS: hit,
            S.OUTPUT_TOKENS: batch.output_tokens[order],
            S.REPORTED_CACHED_TOKENS: opt(batch.reported_cached_tokens),
            S.REPORTED_PROMPT_TOKENS: opt(batch.reported_prompt_tokens),
        },
    )
    return out


@dataclass
class _FileResult:
    replayed: Replayed
    pending: list[S.RequestBatch]
    skips: SkipLog
    extras: dict[str, float]
    size: int


def _read_file(
    path: Path, reader: ModuleType, options: HitrateOptions, scope: str
) -> _FileResult:
    """Read one file; match session-complete batches at once under session scope."""
    skips = SkipLog(strict=options.strict)
    done = Replayed()
    pending: list[S.RequestBatch] = []
    extras: dict[str, float] = {}
    try:
        for batch in reader.read(path, options.read_options(), skips):
            for k, v in batch.extras.items():
                extras[k] = extras.get(k, 0) + v
            if scope == "session" and batch.complete_sessions:
                done.extend(replay(batch, scope, options.page_size, options.capacity))
            else:
                pending.append(batch)
    except Exception as exc:  # corrupt data, a record the reader cannot take: a counted skip
        reader_failed(path, exc, skips)
        done, pending, extras = Replayed(), [], {}
    return _FileResult(done, pending, skips, extras, path.stat().st_size)


def _read_job(args: tuple[Path, str, HitrateOptions, str]) -> _FileResult:
    from xmemplan.traces.registry import get_reader

    path, name, options, scope = args
    return _read_file(path, get_reader(name), options, scope)


def _resolve_scope(scope: str, found: Discovery) -> str:
    if scope not in SCOPES:
        raise UsageError(f"unknown scope '{scope}'", "use session, global or auto")
    if scope != "auto":
        return scope
    return "global" if any(not r.HAS_SESSIONS for _, r in found.files) else "session"


TEXT_FORMATS = ("claude-transcript", "netpreme", "request-log")


def _warm_kernels(formats: set[str], with_lru: bool) -> None:
    """Load the numba kernels these formats need in this process, so that forked workers
    inherit them (each cached kernel costs 5-125 ms to load: only the needed ones)."""
    one = np.zeros(1, dtype=np.int64)
    offsets = np.array([0, 1], dtype=np.int64)
    if formats & set(TEXT_FORMATS):
        from xmemplan.prefix.chunks import match_prompts
        from xmemplan.traces._build import BatchBuilder

        b = BatchBuilder("warm-up", 1)
        b.add("s", None, 1, [one])
        t = b.build()
        assert isinstance(t, TextBatch)
        match_prompts(t.prompts, t.nodes, np.ones(1, dtype=bool))
    if formats - set(TEXT_FORMATS):
        from xmemplan.prefix.matcher import match

        match(one, offsets, np.ones(1, dtype=bool))
    if "claude-blocks" in formats:
        from xmemplan.traces.fastjson import extract
        from xmemplan.traces.keys import namespace

        namespace(one, "warm-up")
        extract(b'{"hash_ids":[1]}', "hash_ids")
    if with_lru:
        from xmemplan.prefix.lru import lru_match

        lru_match(one, offsets, np.ones(1, dtype=bool), 1, [1], prompt=np.ones(1, np.int64),
                  timestamps=np.zeros(1))


def _iter_results(
    found: Discovery, options: HitrateOptions, scope: str
) -> Iterator[_FileResult]:
    jobs = [(p, r.NAME, options, scope) for p, r in found.files]
    if options.executor == "ray":
        from xmemplan.hitrate.ray_exec import iter_results

        yield from iter_results(jobs, options.ray_address, options.workers or None)
        return
    workers = options.workers or (os.cpu_count() or 1)
    workers = min(workers, len(jobs))
    total = sum(p.stat().st_size for p, _ in found.files)
    if workers <= 1 or total < 8 << 20:  # small inputs: process start-up is not worth it
        for job in jobs:
            yield _read_job(job)
        return
    # forked workers inherit the loaded kernels
    _warm_kernels({r.NAME for _, r in found.files}, options.capacity is not None)
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        yield from pool.map(_read_job, jobs, chunksize=1)
    except KeyboardInterrupt:
        _abandon(pool)
        raise
    pool.shutdown(wait=True)


def _abandon(pool: ProcessPoolExecutor) -> None:
    """Drop a pool that Ctrl-C interrupted. Waiting for it (what `with` does) can fail: when
    the signal lands while the pool starts, its manager thread exists but never started, and
    joining it raises RuntimeError, which would replace the interrupt (an 'internal error'
    and exit 1 instead of 130). The CLI ends the workers itself."""
    with contextlib.suppress(Exception):  # a half-started pool; the interrupt is what matters
        pool.shutdown(wait=False, cancel_futures=True)


def analyze(
    paths: list[Path],
    options: HitrateOptions | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> HitrateResult:
    """Read, replay and summarize. `on_progress(bytes_done, bytes_total)` is called per file."""
    from xmemplan.hitrate.metrics import summarize

    options = options or HitrateOptions()
    if options.page_size < 1:
        raise UsageError(f"page size {options.page_size} is below 1", "use --page-size 1 or more")
    if options.executor not in EXECUTORS:
        raise UsageError(f"unknown executor '{options.executor}'", "use --executor local or ray")
    found = discover(paths, options.format_name, strict=options.strict)
    scope = _resolve_scope(options.scope, found)
    skips = SkipLog(strict=options.strict)
    skips.merge(found.skips)  # folder entries that could not be read, counted
    replayed = Replayed()
    pending: list[S.RequestBatch] = []
    extras: dict[str, float] = {}
    total = sum(p.stat().st_size for p, _ in found.files)
    done_bytes = 0
    for res in _iter_results(found, options, scope):
        skips.merge(res.skips)
        replayed.extend(res.replayed)
        pending.extend(res.pending)
        for k, v in res.extras.items():
            extras[k] = extras.get(k, 0) + v
        done_bytes += res.size
        if on_progress:
            on_progress(done_bytes, total)
    if pending:
        replayed.extend(
            replay(_concat(pending), scope, options.page_size, options.capacity)
        )

    notes = list(found.notes)  # files named twice (read once), links, hidden files
    if options.executor == "ray" and pending:
        notes.append(
            f"--executor ray: files were read by Ray tasks; {sum(len(b) for b in pending):,} "
            "requests whose cache spans files (--scope global, or sessions that may continue "
            "in another file) were replayed on this machine, in one ordered pass"
        )
    if options.page_size > 1 and any(
        r.NAME not in ("tokens",) and not getattr(r, "TOKEN_LEVEL", False) for _, r in found.files
    ):
        notes.append("--page-size applies to token-level traces; block traces keep their blocks")
    if extras.get("subagent_requests_excluded"):
        notes.append(
            f"{int(extras['subagent_requests_excluded']):,} sub-agent requests not included "
            "(add --subagents to merge them into their sessions)"
        )
    if extras.get("subagent_requests_progress_only"):
        notes.append(
            f"{int(extras['subagent_requests_progress_only']):,} sub-agent requests appear only "
            "as progress records (no sidechain file beside the session): not counted"
        )
    dupes = _duplicate_sessions(replayed)
    if dupes:
        notes.append(f"{dupes} session ids appear in more than one file; they are kept apart")

    codes_of: dict[str, int] = {}
    codes = np.fromiter(
        (codes_of.setdefault(s, len(codes_of)) for s in replayed.session_id),
        dtype=np.int64,
        count=len(replayed.session_id),
    )
    prompt = replayed.column(S.PROMPT_TOKENS)
    hit = replayed.column(S.HIT_TOKENS)
    summary = summarize(codes, replayed.column(S.REQUEST_INDEX), prompt, hit)
    summary["skipped"] = {
        "lines": skips.lines,
        "files": skips.files,
        "by_reason": dict(skips.counts),
        "unrecognized_files": len(found.unrecognized),
        "empty_files": len(found.empty),
    }
    return HitrateResult(
        summary=summary,
        scope=scope,
        page_size=options.page_size,
        files_by_format=found.by_format(),
        unrecognized=[str(p) for p in found.unrecognized],
        empty=[str(p) for p in found.empty],
        skips=skips,
        notes=notes,
        replayed=replayed,
        reported=reported_vs_reconstructed(codes, replayed, hit, prompt),
        capacity=_capacity(replayed, codes, options, scope),
    )


def _concat(batches: list[S.RequestBatch]) -> S.RequestBatch:
    """One batch of all; text batches keep their prompts interned (never materialised)."""
    text = [b for b in batches if isinstance(b, TextBatch)]
    if len(text) == len(batches) and len(text) > 1:
        return concat_text(text)
    return S.concat_batches(batches)


def _capacity(
    replayed: Replayed, codes: np.ndarray, options: HitrateOptions, scope: str
) -> CapacityResult | None:
    if options.capacity is None:
        return None
    from xmemplan.hitrate.capacity import summarize_capacity

    return summarize_capacity(replayed, codes, options.capacity, scope)


def _duplicate_sessions(replayed: Replayed) -> int:
    # A session id whose request_index restarts at 0 more than once came from two files.
    index = replayed.column(S.REQUEST_INDEX)
    firsts = [s for s, i in zip(replayed.session_id, index) if i == 0]
    return len(firsts) - len(set(firsts))
