"""Netpreme coding-agent runs (netpreme/coding_agents trace_collection), tokenized offline.

A run folder `runs/<instance>/` is one session. Its `turn_traces.jsonl` has one line per
`/v1/messages` call, in call order (the turn is the line number): `request_time` (Unix s),
`tool_exec_ms`, `isl_text`, `isl_new_text`, `osl_text`. `isl_text` is the prompt written by
the recording proxy as `"\\n".join(chunks)` with chunks `SYSTEM:<system text>`,
`TOOLS:<json.dumps(tools)>`, then `MSG:<json.dumps(message)>` per message
(research/traces.md section 1). The older `telemetry/<id>/vllm_traces.jsonl` layout (`ts`
instead of `request_time`) reads the same way.

Each chunk is parsed back and rendered like a request log (`xmemplan.text.chat_template`), so the
three text readers tokenize the same conversation alike; a chunk that does not parse is
tokenized as it stands. `osl_text` gives the output length in tokens.

When the folder has `engine_metrics.jsonl` (vLLM Prometheus deltas: `isl`, `isl_new`,
`prefix_cache_hits`), its rows are paired with the turns by line, as Netpreme's own replay
loader does, and give the engine-reported figures: `reported_prompt_tokens` = `isl`,
`reported_cached_tokens` = `isl - isl_new`, i.e. the engine's hit ratio
`(isl - isl_new) / isl`.

The run folder's other files (`engine_metrics.jsonl`, `session.json`,
`claude_transcript.jsonl`: the same API calls again) and the stamp folder's
`run_config.json` are claimed by this reader and yield nothing, so that a folder of runs
reads without unrecognized files and without counting a call twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from xmemplan.text.chat_template import message_chunk, system_text, tools_text
from xmemplan.text.encoder import ChunkEncoder, get_encoder
from xmemplan.traces._build import BatchBuilder
from xmemplan.traces.base import (
    ReadOptions,
    SkipLog,
    first_json_line,
    iter_json_lines,
    read_input,
)
from xmemplan.traces.schema import RequestBatch

NAME = "netpreme"
HAS_SESSIONS = True
TOKEN_LEVEL = True
READS_COMPRESSED = True  # gzip/xz/bzip2 (zstd with zstandard) through base.read_input

TRACE_FILES = ("turn_traces.jsonl", "vllm_traces.jsonl")
METRICS_FILE = "engine_metrics.jsonl"
_COMPANIONS = (METRICS_FILE, "session.json", "claude_transcript.jsonl", "vllm_metrics.jsonl",
               "session_config.json")
_ISL_KEY = re.compile(rb'"isl_text"\s*:\s*"')
_CHUNK = re.compile(r"\n(?=(?:SYSTEM|TOOLS|MSG):)")


# A file of the run may be shipped compressed: its name is then one of these longer.
_PACKED = (".gz", ".xz", ".bz2", ".zst")


def _name(path: Path) -> str:
    """The file's name without a compression suffix (`turn_traces.jsonl.gz` ->
    `turn_traces.jsonl`)."""
    for suffix in _PACKED:
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return path.name


def _beside(path: Path, name: str) -> Path | None:
    """`name` in `path`'s folder, plain or compressed; None if neither is there."""
    for candidate in (name, *(name + s for s in _PACKED)):
        if (path.parent / candidate).is_file():
            return path.parent / candidate
    return None


def _trace_beside(path: Path) -> bool:
    return any(_beside(path, name) is not None for name in TRACE_FILES)


def sniff(path: Path, head: bytes) -> bool:
    name = _name(path)
    if name in _COMPANIONS and _trace_beside(path):
        return True
    if name == "run_config.json" and (path.parent / "runs").is_dir():
        return True
    obj = first_json_line(head)
    if obj is not None:
        return isinstance(obj.get("isl_text"), str)
    # A first line longer than the sniffed head (prompts are long): look at its start.
    first = head.lstrip().split(b"\n", 1)[0]
    return first.startswith(b"{") and _ISL_KEY.search(first) is not None


def _chunks(text: str, enc: ChunkEncoder) -> list[np.ndarray]:
    out = []
    for raw in _CHUNK.split(text):
        out.append(enc.memo(raw.encode("utf-8", "surrogatepass"), partial(_chunk, raw, enc)))
    return out


def _chunk(raw: str, enc: ChunkEncoder) -> np.ndarray:
    if raw.startswith("SYSTEM:"):
        return enc.chunk("system", system_text(raw[7:]))
    if raw.startswith("TOOLS:"):
        try:
            return enc.chunk("system", tools_text(orjson.loads(raw[6:])))
        except orjson.JSONDecodeError:
            pass
    elif raw.startswith("MSG:"):
        try:
            msg = orjson.loads(raw[4:])
        except orjson.JSONDecodeError:
            msg = None
        if isinstance(msg, dict):
            return enc.chunk(*message_chunk(msg))
    return enc.chunk("user", raw)


def _engine_rows(path: Path, skips: SkipLog) -> list[tuple[int, int] | None]:
    """(isl, cached) per engine_metrics row, None for a row that cannot be used (counted)."""
    rows: list[tuple[int, int] | None] = []
    for line, obj in iter_json_lines(path, read_input(path), skips):
        isl, new = _count(obj.get("isl")), _count(obj.get("isl_new"))
        if isl is None or new is None:
            name = "isl" if isl is None else "isl_new"
            skips.skip(path, line, "missing or not a token count", name)
            rows.append(None)
        elif new > isl:
            skips.skip(path, line, f"isl_new {new} exceeds isl {isl}", "isl_new")
            rows.append(None)
        else:
            rows.append((isl, isl - new))
    return rows


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def read_with(
    path: Path, options: ReadOptions, skips: SkipLog, enc: ChunkEncoder
) -> Iterator[RequestBatch]:
    name = _name(path)
    if name not in TRACE_FILES and (name in _COMPANIONS or name == "run_config.json"):
        return  # a companion file, read with its trace (or metadata)
    session = path.parent.name
    metrics_path = _beside(path, METRICS_FILE)
    engine = _engine_rows(metrics_path, skips) if metrics_path is not None else None
    builder = BatchBuilder(str(path), block_tokens=1)
    turns = 0
    for line, obj in iter_json_lines(path, read_input(path), skips):
        turn = turns
        turns += 1
        text = obj.get("isl_text")
        if not isinstance(text, str):
            skips.skip(path, line, "missing or not a string", "isl_text")
            continue
        ts = _number(obj.get("request_time", obj.get("ts")))
        keys = _chunks(text, enc)
        n_tokens = sum(k.shape[0] for k in keys)
        if n_tokens == 0:
            skips.skip(path, line, "empty prompt", "isl_text")
            continue
        osl = obj.get("osl_text")
        out = int(enc.tokenizer.encode_bounded(osl).shape[0]) if isinstance(osl, str) else None
        rep = engine[turn] if engine is not None and turn < len(engine) else None
        builder.add(
            session, ts, n_tokens, keys, output_tokens=out,
            reported_cached_tokens=rep[1] if rep else None,
            reported_prompt_tokens=rep[0] if rep else None,
        )
    if engine is not None and metrics_path is not None and len(engine) != turns:
        skips.skip(
            metrics_path, None,
            f"{len(engine)} engine rows for {turns} turns (paired by line; the extra "
            f"{'rows' if len(engine) > turns else 'turns'} have no partner)",
        )
    if len(builder):
        yield builder.build(complete_sessions=True)


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    yield from read_with(path, options, skips, get_encoder(options.tokenizer))
