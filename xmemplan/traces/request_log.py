"""Request logs: JSONL of Anthropic Messages or OpenAI Chat Completions request bodies.

One request per line. The body is the line itself or sits under `request`, `body`,
`request_body` or `payload`; it has `messages` and, for Anthropic, `system` and `tools`
(OpenAI puts the system prompt among the messages and tools as `{type: function, ...}`):

    {"session_id": "s1", "timestamp": 1718000000.5,
     "request": {"model": "...", "system": "...", "tools": [...], "messages": [...]},
     "response": {"usage": {"input_tokens": 3, "cache_read_input_tokens": 9000, ...}}}

- Session: `--session-field NAME` (dotted for nested fields, e.g. `metadata.user_id`), else
  the first of `session_id`, `sessionId`, `conversation_id`, `session`,
  `metadata.session_id`, `metadata.user_id` that the line has, else the file is one session.
- Timestamp: `--timestamp-field NAME`, else the first of `timestamp`, `ts`, `time`,
  `request_time`, `created_at`, `created`: Unix seconds (values above 1e11 are taken as
  milliseconds), or ISO 8601 text. Without one, lines keep file order.
- Usage, when the line carries the response's (`response.usage` or `usage`): Anthropic
  `input_tokens` + `cache_read_input_tokens` + `cache_creation_input_tokens` with
  `cache_read_input_tokens` cached, or OpenAI `prompt_tokens` with
  `prompt_tokens_details.cached_tokens` cached, fill the API-reported figures.

The prompt is rendered system, tools, then messages (`xmemplan.text.chat_template`), with
`cache_control`, thinking signatures and Claude Code's billing header removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
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

NAME = "request-log"
HAS_SESSIONS = True
TOKEN_LEVEL = True
READS_COMPRESSED = True  # gzip/xz/bzip2 (zstd with zstandard) through base.read_input

BODY_KEYS = ("request", "body", "request_body", "payload")
SESSION_FIELDS = (
    "session_id", "sessionId", "conversation_id", "session", "metadata.session_id",
    "metadata.user_id",
)
TIMESTAMP_FIELDS = ("timestamp", "ts", "time", "request_time", "created_at", "created")
_MISSING = object()
_MESSAGES_KEY = re.compile(rb'"(messages|system|tools)"\s*:\s*[\[{"]')


def _body(obj: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(obj.get("messages"), list):
        return obj
    for key in BODY_KEYS:
        inner = obj.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("messages"), list):
            return inner
    return None


def sniff(path: Path, head: bytes) -> bool:
    obj = first_json_line(head)
    if obj is not None:
        return _body(obj) is not None
    # A first line longer than the sniffed head (a long system prompt): look at its start.
    first = head.lstrip().split(b"\n", 1)[0]
    return (
        first.startswith(b"{") and _MESSAGES_KEY.search(first) is not None
        and b'"parentUuid"' not in first and b'"isl_text"' not in first
    )


def _get(obj: dict[str, Any], dotted: str) -> Any:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _find(obj: dict[str, Any], body: dict[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        for where in (obj, body):
            v = _get(where, name)
            if v is not _MISSING and v is not None:
                return v
    return _MISSING


def _seconds(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _usage(obj: dict[str, Any]) -> tuple[int, int, int | None] | None:
    """(cached, prompt, output) from a logged response's usage, if the line has one."""
    usage = _get(obj, "response.usage")
    if not isinstance(usage, dict):
        usage = obj.get("usage")
    if not isinstance(usage, dict):
        return None
    if "input_tokens" in usage:  # Anthropic
        parts = [_count(usage.get(k, 0)) for k in
                 ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
        if any(p is None for p in parts):
            return None
        vals = [p for p in parts if p is not None]
        return vals[1], sum(vals), _count(usage.get("output_tokens"))
    prompt = _count(usage.get("prompt_tokens"))
    if prompt is None:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens", 0)) if isinstance(details, dict) else 0
    if cached is None or cached > prompt:
        return None
    return cached, prompt, _count(usage.get("completion_tokens"))


def _message(msg: dict[str, Any], enc: ChunkEncoder) -> np.ndarray:
    return enc.chunk(*message_chunk(msg))


def _prompt(body: dict[str, Any], enc: ChunkEncoder) -> list[np.ndarray]:
    chunks = []
    system = body.get("system")
    if system:
        chunks.append(enc.chunk("system", system_text(system)))
    tools = body.get("tools")
    if tools:
        raw = orjson.dumps(tools)
        chunks.append(enc.memo(raw, lambda: enc.chunk("system", tools_text(tools))))
    for msg in body["messages"]:
        if not isinstance(msg, dict):
            continue
        raw = orjson.dumps(msg)
        if msg.get("role") in ("system", "developer"):  # OpenAI system prompt: same noise rules
            chunks.append(enc.chunk("system", system_text(msg.get("content"))))
        else:
            chunks.append(enc.memo(raw, partial(_message, msg, enc)))
    return chunks


def read_with(
    path: Path, options: ReadOptions, skips: SkipLog, enc: ChunkEncoder
) -> Iterator[RequestBatch]:
    builder = BatchBuilder(str(path), block_tokens=1)
    # A compressed log's default session is its name without the compression suffix
    # (`log.jsonl.gz` -> `log`, as `log.jsonl` -> `log`).
    stem = Path(path.stem).stem if path.suffix in (".gz", ".xz", ".bz2", ".zst") else path.stem
    for line, obj in iter_json_lines(path, read_input(path), skips):
        body = _body(obj)
        if body is None:
            skips.skip(path, line, "no request body with a messages list", "messages")
            continue
        if not body["messages"]:
            skips.skip(path, line, "empty messages list", "messages")
            continue
        if options.session_field:
            session = _get(obj, options.session_field)
            if session is _MISSING:
                session = _get(body, options.session_field)
            if session is _MISSING or session is None or isinstance(session, dict | list):
                skips.skip(path, line, "missing or not a scalar", options.session_field)
                continue
        else:
            session = _find(obj, body, SESSION_FIELDS)
            if session is _MISSING or isinstance(session, dict | list):
                session = stem
        if options.timestamp_field:
            raw_ts = _get(obj, options.timestamp_field)
            ts = _seconds(raw_ts)
            if ts is None:
                skips.skip(path, line, "missing, or not seconds or ISO 8601 time",
                           options.timestamp_field)
                continue
        else:
            ts = _seconds(_find(obj, body, TIMESTAMP_FIELDS))
        keys = _prompt(body, enc)
        rep = _usage(obj)
        builder.add(
            str(session), ts, sum(k.shape[0] for k in keys), keys,
            output_tokens=rep[2] if rep else None,
            reported_cached_tokens=rep[0] if rep else None,
            reported_prompt_tokens=rep[1] if rep else None,
        )
    if len(builder):
        yield builder.build()


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    yield from read_with(path, options, skips, get_encoder(options.tokenizer))
