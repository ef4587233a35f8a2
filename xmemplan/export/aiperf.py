"""Any trace xmemplan reads -> AIPerf's `mooncake_trace` JSONL, for `aiperf profile`.

One row per request, in replay order (timestamp, then file order):
`{"timestamp": ms, "input_length": L, "output_length": n, "hash_ids": [...],
"session_id": "xm000042", "block_tokens": B, "extra": {"xmemplan_row": 42}}`.

hash_ids: the prompt cut into blocks of B tokens (`--block-tokens`, AIPerf's
`--isl-block-size`), each block's id chained on the one before it, so two requests share
ids exactly as far as they share a prefix (AIPerf synthesizes one cached token block per id).
A block is identified by (previous id, the source keys it covers, its offset and length):
a partial last block gets its own id (AIPerf refuses an id seen at two sizes), and tokens
that the source trace gives no key for (its last partial page) get ids of their own.
len(hash_ids) == ceil(L / B). Each row has its own `session_id` (AIPerf treats rows that
share one as delta turns of a chat, which would double-count the prefix); `extra` is merged
into the request body and lets a test server find the row. `block_tokens` is ignored by
AIPerf (unknown keys are allowed) and read back by `validate --aiperf`.

Format: research/serving-sim.md 4.1 (aiperf 0.13.0 `dataset/loader/mooncake_trace.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.errors import InputError, UsageError
from xmemplan.traces.base import SkipLog, skip_summary

if TYPE_CHECKING:
    from xmemplan.traces.registry import Discovery

ROW_PREFIX = "xm"
MAX_SPAN_MS = 1e15  # the longest replay the export writes: ~31,700 years (finite in JSON)


@dataclass(frozen=True)
class ExportResult:
    path: str
    rows: int
    block_tokens: int
    blocks: int  # hash ids written
    unique_blocks: int
    files: int
    skipped: int
    notes: list[str]
    warnings: list[str] = field(default_factory=list)


def skip_text(skips: SkipLog, found: Discovery) -> str:
    """What was not read, counted as `hitrate` counts it ('' if none)."""
    return skip_summary(skips, found.unrecognized, found.empty)


def chained_block_ids(keys: np.ndarray, source_block: int, prompt_tokens: int,
                      block_tokens: int, intern: dict[Any, int], row: int) -> list[int]:
    """The hash ids of one request: blocks of `block_tokens`, chained on the previous id."""
    ids: list[int] = []
    prev = -1
    covered = len(keys) * source_block  # tokens the source trace gives keys for
    for a in range(0, prompt_tokens, block_tokens):
        b = min(prompt_tokens, a + block_tokens)
        if b > covered:
            ident: Any = ("tail", row, a)  # no key for these tokens: never shared
        else:
            first, last = a // source_block, (b - 1) // source_block
            ident = (prev, keys[first:last + 1].tobytes(), a % source_block, b - a)
        got = intern.get(ident)
        if got is None:
            got = intern[ident] = len(intern)
        ids.append(got)
        prev = got
    return ids


def export_aiperf(paths: list[Path], out: Path, *, block_tokens: int = 512,
                  format_name: str | None = None, speedup: float = 1.0,
                  limit: int | None = None, default_output_tokens: int = 1,
                  spacing_ms: float | None = None,
                  context: tuple[str, int] | None = None) -> ExportResult:
    """Read `paths` (any format xmemplan reads) and write `out` as mooncake_trace JSONL.

    `spacing_ms`: timestamps row x spacing instead of the trace's (one request at a time,
    in replay order, when the spacing exceeds every TTFT). `context` (model name, context
    tokens): warn on rows longer than it (an engine rejects them)."""
    from xmemplan.traces.base import ReadOptions, reader_failed
    from xmemplan.traces.registry import discover
    from xmemplan.traces.schema import NULL_INT, concat_batches

    if block_tokens < 1:
        raise UsageError("--block-tokens must be at least 1")
    if not speedup > 0 or not math.isfinite(speedup):
        raise UsageError("--speedup must be a positive number")
    if spacing_ms is not None and (not spacing_ms > 0 or not math.isfinite(spacing_ms)):
        raise UsageError("--spacing must be a positive duration")
    from xmemplan.jsonio import check_output, json_line, open_output

    check_output(out, "--out", paths)  # before the work: never over or among the inputs
    found = discover(paths, format_name)
    skips = SkipLog()
    skips.merge(found.skips)  # folder entries that could not be read, counted
    if not found.files:
        raise InputError("no trace files recognized", path=paths[0],
                         hint=skip_text(skips, found) or "name the format with --format")
    batches = []
    for path, reader in found.files:
        try:
            batches += list(reader.read(path, ReadOptions(), skips))
        except Exception as exc:  # corrupt data, a record the reader cannot take: a skip
            reader_failed(path, exc, skips)
    if not batches or not sum(len(b) for b in batches):
        raise InputError("no requests could be read from the traces", path=paths[0],
                         hint=skip_text(skips, found) or None)
    t = concat_batches(batches)
    n = len(t)
    ts = np.asarray(t.timestamp_s, dtype=np.float64)
    known = ~np.isnan(ts)
    # Replay order: by timestamp where known (stable: file order breaks ties).
    order = np.argsort(np.where(known, ts, np.inf), kind="stable") if known.any() \
        else np.arange(n)
    if limit is not None:
        order = order[:limit]
    t0 = float(np.nanmin(ts)) if known.any() else 0.0
    if known.any() and spacing_ms is None:
        span_ms = (float(np.nanmax(ts)) - t0) * 1e3 / speedup
        if not math.isfinite(span_ms) or span_ms > MAX_SPAN_MS:
            raise UsageError(
                f"the exported timestamps would span {span_ms:.3g} ms (the trace's "
                f"{float(np.nanmax(ts)) - t0:.6g} s / --speedup {speedup:g}), more than "
                f"{MAX_SPAN_MS:.0e} ms (about 31,700 years)",
                "raise --speedup, or pass --spacing to replace the timestamps")
    if spacing_ms is not None and len(order) and \
            not (len(order) - 1) * spacing_ms <= MAX_SPAN_MS:
        raise UsageError(f"--spacing x {len(order):,} requests spans more than "
                         f"{MAX_SPAN_MS:.0e} ms", "lower --spacing or --limit")
    intern: dict[Any, int] = {}
    blocks = 0
    with open_output(out, "--out", paths) as f:
        for row, i in enumerate(order):
            keys = t.keys[t.key_offsets[i]:t.key_offsets[i + 1]]
            prompt = int(t.prompt_tokens[i])
            ids = chained_block_ids(keys, int(t.block_tokens[i]), prompt, block_tokens,
                                    intern, row)
            blocks += len(ids)
            rec: dict[str, Any] = {}
            if spacing_ms is not None:
                rec["timestamp"] = round(row * spacing_ms, 3)
            elif known[i]:
                ms = (float(ts[i]) - t0) * 1e3 / speedup
                rec["timestamp"] = round(ms, 3)
            out_tok = int(t.output_tokens[i])
            rec.update({
                "input_length": prompt,
                "output_length": out_tok if out_tok != NULL_INT and out_tok > 0
                else default_output_tokens,
                "hash_ids": ids, "session_id": f"{ROW_PREFIX}{row:06d}",
                "block_tokens": block_tokens, "extra": {"xmemplan_row": row}})
            f.write(json_line(rec))
    notes = list(found.notes)  # files named twice (read once), links, hidden files
    text = skip_text(skips, found)
    if text:
        notes.append(text)
        notes += [f"  {ex.where()}: {ex.reason}" for ex in skips.examples[:5]]
        notes += [f"  {ex.where()}: {ex.reason}" for ex in skips.warn_examples[:5]]
        notes += [f"  {p}: matches no known trace format (skipped)"
                  for p in found.unrecognized[:5]]
    if not known.all() and spacing_ms is None:
        notes.append(f"{int((~known).sum())} requests have no timestamp: written without one")
    return ExportResult(str(out), len(order), block_tokens, blocks, len(intern),
                        len(found.files), skips.total, notes,
                        _warnings(t, order, known, spacing_ms, context))


def _warnings(t: Any, order: np.ndarray, known: np.ndarray, spacing_ms: float | None,
              context: tuple[str, int] | None) -> list[str]:
    """Rows an engine would refuse (longer than the model's context) and sessions that all
    start at one instant (recorded sessions replayed from 0: a burst at t=0, not load)."""
    from xmemplan.traces.schema import NULL_INT

    out: list[str] = []
    if context is not None:
        name, limit = context
        prompt = np.asarray(t.prompt_tokens)[order]
        outp = np.asarray(t.output_tokens)[order]
        total = prompt + np.where(outp == NULL_INT, 0, np.maximum(outp, 0))
        over = int((total > limit).sum())
        if over:
            out.append(f"{over:,} of {len(order):,} rows are longer than {name}'s "
                       f"{limit:,}-token context (prompt + output; longest {int(total.max()):,})"
                       ": an engine serving that model rejects them. Drop them, or export for "
                       "a model with a longer context (--model)")
    if spacing_ms is None and known.any():
        ts = np.asarray(t.timestamp_s, dtype=np.float64)
        first: dict[str, float] = {}
        for i in order:
            if known[i]:
                sid = t.session_id[i]
                first[sid] = min(first.get(sid, math.inf), float(ts[i]))
        starts = np.fromiter(first.values(), dtype=np.float64, count=len(first))
        if starts.size > 1 and float(starts.max() - starts.min()) == 0.0:
            out.append(f"all {starts.size:,} sessions start at the same instant (t=0): the "
                       "replay opens with every session at once, a burst the recorded traffic "
                       "did not have. Spread them with --spacing, or expect the first "
                       "seconds to be an artefact")
    return out
