"""Claude Code session transcripts, tokenized offline.

Claude Code writes one JSON record per line to `~/.claude/projects/<project>/<session>.jsonl`,
and sub-agents to `<session>/subagents/agent-<id>.jsonl` (records with `isSidechain: true`).
Records carry `uuid`, `parentUuid`, `timestamp` (ISO 8601), `sessionId`, `type` (user,
assistant, system, attachment, file-history-snapshot, progress, ...); user and assistant
records carry the API `message` (research/traces.md section 2).

One request per API call: assistant records are grouped by `message.id` (a streamed response
can be written as several records) and the group's first record defines the prompt, namely
the records before it, found by following `parentUuid` back to the root or to a
`compact_boundary`. Parallel tool results are written as siblings (every `tool_result`
record's parent is the assistant record), and the API request carried them all, so the tool
results answering an assistant record on the chain are taken with it, in file order.
Consecutive records of one role form one message, as the API requires.

`message.usage` gives the API-reported figures: `reported_cached_tokens` =
`cache_read_input_tokens`, `reported_prompt_tokens` = `input_tokens +
cache_read_input_tokens + cache_creation_input_tokens`. Usage inside `progress` records
mirrors sub-agent messages that the sidechain files hold as well and is never counted.

Sub-agent (sidechain) requests are left out unless `--subagents`, which merges them into
the parent session, as for the Claude Code block traces. Sub-agent calls that appear only as
`agent_progress` copies (no sidechain file beside the session) are counted and reported, not
read: the copies are lossy (they lack the assistant messages' text blocks).

What the transcript lacks: the system prompt and tool definitions that Claude Code sends
before the messages are not written to it, so reconstructed prompts are shorter than the
API's by that prefix (docs/text-traces.md measures it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from xmemplan.text.chat_template import content_text
from xmemplan.text.encoder import ChunkEncoder, get_encoder
from xmemplan.traces._build import BatchBuilder
from xmemplan.traces.base import ReadOptions, SkipLog, iter_json_lines
from xmemplan.traces.schema import RequestBatch

NAME = "claude-transcript"
HAS_SESSIONS = True
TOKEN_LEVEL = True

# Record types Claude Code writes; others are counted as skips (and pass through chains).
KNOWN_TYPES = frozenset(
    {
        "user", "assistant", "system", "attachment", "file-history-snapshot", "progress",
        "summary", "queue-operation", "custom-title", "tag",
    }
)
_MARKERS = ("sessionId", "parentUuid", "leafUuid", "isSidechain", "messageId")
_TYPE_KEY = re.compile(
    rb'"type"\s*:\s*"(' + b"|".join(t.encode() for t in sorted(KNOWN_TYPES)) + rb')"'
)
_MARKER_KEY = re.compile(rb'"(' + b"|".join(k.encode() for k in _MARKERS) + rb')"\s*:')
_MISSING = object()  # usage key absent (unlike a usage of null)
_USAGE_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def sniff(path: Path, head: bytes) -> bool:
    lines = head.split(b"\n")
    for raw in lines[:-1] if len(lines) > 1 else lines:
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj.get("type") in KNOWN_TYPES and any(k in obj for k in _MARKERS)
        return False
    # A first line longer than the sniffed head (a pasted file): look at its start.
    first = head.lstrip().split(b"\n", 1)[0]
    return first.startswith(b"{") and bool(_TYPE_KEY.search(first)) and bool(
        _MARKER_KEY.search(first)
    )


@dataclass
class _Node:
    index: int  # position in the file
    line: int
    uuid: str | None
    parent: str | None
    kind: str
    role: str | None = None  # set for records that are part of the prompt
    text: str = ""
    msg_id: str | None = None
    tool_uses: frozenset[str] = frozenset()
    answers: frozenset[str] = frozenset()  # tool_use ids this user record answers
    sidechain: bool = False
    boundary: bool = False
    timestamp: float | None = None
    session: str = ""
    usage: Any = None
    agent: str | None = None  # agentId of a sub-agent record
    mirror: tuple[str, str] | None = None  # (agentId, message.id) of an agent_progress copy
    children: list[int] = field(default_factory=list)


def _timestamp(value: Any) -> float | None:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _node(
    i: int, line: int, obj: dict[str, Any], path: Path, skips: SkipLog, default_session: str
) -> _Node:
    kind = obj.get("type")
    uuid = obj.get("uuid")
    parent = obj.get("parentUuid")
    node = _Node(
        index=i, line=line,
        uuid=uuid if isinstance(uuid, str) else None,
        parent=parent if isinstance(parent, str) else None,
        kind=kind if isinstance(kind, str) else "",
        sidechain=obj.get("isSidechain") is True,
        timestamp=_timestamp(obj.get("timestamp")),
        session=str(obj.get("sessionId") or default_session),
        agent=obj["agentId"] if isinstance(obj.get("agentId"), str) else None,
    )
    if kind not in KNOWN_TYPES:
        skips.skip(path, line, f"unknown record type {kind!r}", "type")
        return node
    if kind == "system":
        node.boundary = obj.get("subtype") == "compact_boundary"
        return node
    if kind == "attachment":
        att = obj.get("attachment")
        if att is not None:  # injected into the context as user text
            node.role = "user"
            if isinstance(att, dict) and isinstance(att.get("content"), str | list):
                node.text = content_text(att["content"])
            else:
                node.text = orjson.dumps(att).decode()
        return node
    if kind == "progress":
        node.mirror = _mirrored_call(obj.get("data"))
        return node
    if kind not in ("user", "assistant"):
        return node
    msg = obj.get("message")
    if not isinstance(msg, dict):
        skips.skip(path, line, f"{kind} record without a message object", "message")
        return node
    content = msg.get("content")
    if content is None:
        skips.skip(path, line, f"{kind} message without content", "message.content")
        return node
    if kind == "assistant" and msg.get("model") == "<synthetic>":
        return node  # written by Claude Code itself (errors, interruptions); no API call
    node.role = "assistant" if kind == "assistant" else "user"
    node.text = content_text(content)
    blocks = content if isinstance(content, list) else []
    if kind == "assistant":
        mid = msg.get("id")
        node.msg_id = mid if isinstance(mid, str) else (node.uuid or f"line{line}")
        node.tool_uses = frozenset(
            b["id"] for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)
        )
        node.usage = msg.get("usage", _MISSING)
    else:
        node.answers = frozenset(
            b["tool_use_id"] for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_result"
            and isinstance(b.get("tool_use_id"), str)
        )
    return node


def _mirrored_call(data: Any) -> tuple[str, str] | None:
    """(agentId, message.id) of a sub-agent API response copied into an agent_progress."""
    if not isinstance(data, dict) or data.get("type") != "agent_progress":
        return None
    inner = data.get("message")
    msg = inner.get("message") if isinstance(inner, dict) else None
    agent = data.get("agentId")
    if (
        isinstance(inner, dict) and inner.get("type") == "assistant" and isinstance(msg, dict)
        and isinstance(msg.get("id"), str) and isinstance(agent, str)
    ):
        return agent, msg["id"]
    return None


def _progress_only_calls(path: Path, nodes: list[_Node]) -> int:
    """Sub-agent API calls seen only in agent_progress copies: no sidechain records here
    and no `agent-<id>.jsonl` beside the session (those copies are lossy: not read)."""
    here = {n.agent for n in nodes if n.sidechain and n.agent}
    calls: dict[str, set[str]] = {}
    for n in nodes:
        if n.mirror is not None and n.mirror[0] not in here:
            calls.setdefault(n.mirror[0], set()).add(n.mirror[1])
    missing = 0
    for agent, ids in calls.items():
        name = f"agent-{agent}.jsonl"
        beside = (path.parent / name, path.parent / "subagents" / name,
                  path.parent / path.stem / "subagents" / name)
        if not any(p.is_file() for p in beside):
            missing += len(ids)
    return missing


def _usage(usage: Any, line: int, path: Path, skips: SkipLog) -> tuple[int, int, int | None] | None:
    """(cached, prompt, output) reported by the API, or None (counted) when unusable."""
    if usage is _MISSING or not isinstance(usage, dict):
        skips.skip(path, line, "usage absent; request kept without API figures",
                   "message.usage")
        return None
    vals = []
    for name in _USAGE_FIELDS:
        v = usage.get(name, 0 if name != "input_tokens" else None)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            what = "absent" if v is None else f"{v!r} is not a count"
            skips.skip(path, line, f"usage {what}; request kept without API figures",
                       f"message.usage.{name}")
            return None
        vals.append(v)
    out = usage.get("output_tokens")
    out = out if isinstance(out, int) and not isinstance(out, bool) and out >= 0 else None
    return vals[1], sum(vals), out


class _Transcript:
    """The records of one file, and the prompt of each API call in it."""

    def __init__(self, path: Path, nodes: list[_Node], enc: ChunkEncoder, skips: SkipLog):
        self.path = path
        self.nodes = nodes
        self.enc = enc
        self.skips = skips
        self.by_uuid: dict[str, int] = {}
        for n in nodes:
            if n.uuid is not None:
                self.by_uuid.setdefault(n.uuid, n.index)
        for n in nodes:
            if n.parent is not None and n.parent in self.by_uuid:
                self.nodes[self.by_uuid[n.parent]].children.append(n.index)
        self._dangling: set[str] = set()
        self._messages: dict[tuple[int, ...], np.ndarray] = {}

    def chain(self, first: _Node) -> list[int]:
        """Indices of the records before `first` that form its prompt, in order."""
        up: list[int] = []
        seen: set[int] = set()
        uuid = first.parent
        while uuid is not None:
            i = self.by_uuid.get(uuid)
            if i is None:
                if uuid not in self._dangling:
                    self._dangling.add(uuid)
                    self.skips.skip(
                        self.path, first.line,
                        "parentUuid points to no record in this file; the prompt starts after it",
                        "parentUuid",
                    )
                break
            if i in seen:
                self.skips.skip(self.path, first.line, "parentUuid links form a loop",
                                "parentUuid")
                break
            seen.add(i)
            up.append(i)
            if self.nodes[i].boundary:
                break
            uuid = self.nodes[i].parent
        up.reverse()
        out: list[int] = []
        for pos, i in enumerate(up):
            out.append(i)
            node = self.nodes[i]
            if not node.tool_uses or pos + 1 >= len(up):
                continue
            # Parallel tool results are siblings; the request carried all written so far.
            nxt = up[pos + 1]
            extra = [
                c for c in node.children
                if c != nxt and c < first.index and self.nodes[c].answers & node.tool_uses
            ]
            if extra:
                out.extend(sorted(extra))
        return out

    def prompt(self, first: _Node) -> list[np.ndarray]:
        """The prompt as its messages' token arrays (concatenated once, by the builder)."""
        groups: list[list[int]] = []
        role = None
        for i in self.chain(first):
            n = self.nodes[i]
            if n.role is None:
                continue
            if n.role == role:
                groups[-1].append(i)
            else:
                groups.append([i])
                role = n.role
        return [self._message(tuple(g)) for g in groups]

    def _message(self, group: tuple[int, ...]) -> np.ndarray:
        if self.enc.cache:
            got = self._messages.get(group)
            if got is not None:
                return got
        nodes = [self.nodes[i] for i in group]
        text = "\n".join(n.text for n in nodes if n.text)
        ids = self.enc.chunk(nodes[0].role or "user", text)
        if self.enc.cache:
            self._messages[group] = ids
        return ids


def read_with(
    path: Path, options: ReadOptions, skips: SkipLog, enc: ChunkEncoder
) -> Iterator[RequestBatch]:
    """`read` with an explicit encoder (the benchmark passes one without a cache)."""
    data = path.read_bytes()
    nodes = [
        _node(i, line, obj, path, skips, path.stem)
        for i, (line, obj) in enumerate(iter_json_lines(path, data, skips))
    ]
    t = _Transcript(path, nodes, enc, skips)
    firsts: dict[str, _Node] = {}
    lasts: dict[str, _Node] = {}
    for n in nodes:
        if n.msg_id is not None:
            firsts.setdefault(n.msg_id, n)
            lasts[n.msg_id] = n
    builder = BatchBuilder(str(path), block_tokens=1)
    excluded = 0
    last_ts: float | None = None
    for mid, first in firsts.items():
        if first.sidechain and not options.subagents:
            excluded += 1
            continue
        last = lasts[mid]
        ts = first.timestamp if first.timestamp is not None else last_ts
        last_ts = ts
        keys = t.prompt(first)
        n_tokens = sum(k.shape[0] for k in keys)
        if n_tokens == 0:
            skips.skip(path, first.line, "assistant record with no prompt before it", "parentUuid")
            continue
        usage = next(
            (n.usage for n in (last, first) if n.usage is not _MISSING), _MISSING
        )
        rep = _usage(usage, last.line, path, skips)
        builder.add(
            first.session, ts, n_tokens, keys,
            output_tokens=rep[2] if rep else None,
            reported_cached_tokens=rep[0] if rep else None,
            reported_prompt_tokens=rep[1] if rep else None,
        )
    batch = builder.build(complete_sessions=not options.subagents)
    if excluded:
        batch.extras["subagent_requests_excluded"] = excluded
    progress_only = _progress_only_calls(path, nodes)
    if progress_only:
        batch.extras["subagent_requests_progress_only"] = progress_only
    if len(batch) or batch.extras:
        yield batch


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    yield from read_with(path, options, skips, get_encoder(options.tokenizer))
