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

The prompts are built in time linear in the file: a record's prompt state (its closed
messages, a node of a per-file message trie, and the records of its last message) is its
parent's state plus the record, memoised per record, so a call that extends an earlier
call's chain by k records costs O(k); each distinct message is tokenized once; and a call
is kept, and given to the batch builder, as an earlier call's prompt plus its new messages
(`Extend`). The sibling tool results taken with a record depend on when the call was
written, so a memoised state says for which calls it holds and is rebuilt outside them.
Walks that loop, or that reach the call's own response, take the whole-chain walk
(`_Transcript.messages`), against which tests check the incremental prompts.

`message.usage` gives the API-reported figures: `reported_cached_tokens` =
`cache_read_input_tokens`, `reported_prompt_tokens` = `input_tokens +
cache_read_input_tokens + cache_creation_input_tokens`. Usage inside `progress` records
mirrors sub-agent messages that the sidechain files hold as well and is never counted.

Sub-agent (sidechain) requests are left out unless `--subagents`, which merges them into
the parent session, as for the Claude Code block traces; a sub-agent file whose session file
is not beside it (nor two folders up, as in `<session>/subagents/`) is read as it is.
Sub-agent calls that appear only as `agent_progress` copies (no sidechain file beside the
session) are counted and reported, not read: the copies are lossy (they lack the assistant
messages' text blocks).

What the transcript lacks: the system prompt and tool definitions that Claude Code sends
before the messages are not written to it, so reconstructed prompts are shorter than the
API's by that prefix. `--hidden-prefix auto|N` prepends a stand-in of the length measured from
usage, and `--tokens calibrated` scales each message to the API's token count
(`xmemplan/traces/hidden_prefix.py`; docs/text-traces.md).

`calls()` returns the per-call details (prompt parts, usage, context, timestamps) that the
per-call report (`xmemplan/hitrate/transcript_calls.py`) replays under the API's rules.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from xmemplan.text.chat_template import block_text, content_text
from xmemplan.text.encoder import ChunkEncoder
from xmemplan.text.tokenizer import get_tokenizer
from xmemplan.traces._build import BatchBuilder, Extend
from xmemplan.traces.base import ChainedList, ReadOptions, SkipLog, iter_json_lines, read_input
from xmemplan.traces.schema import RequestBatch

NAME = "claude-transcript"
HAS_SESSIONS = True
TOKEN_LEVEL = True
READS_COMPRESSED = True  # gzip/xz/bzip2 (zstd with zstandard) through base.read_input

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
_NO_KINDS = np.zeros(3, dtype=np.float64)  # Call.kinds when not asked for (shared, read-only)
_NO_KINDS.flags.writeable = False


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


@dataclass(slots=True)
class _Node:
    index: int  # position in the file
    line: int
    uuid: str | None
    parent: str | None
    kind: str
    role: str | None = None  # set for records that are part of the prompt
    text: str = ""  # or, once `calls` has stored it, "" and its place in `_Texts`
    span: tuple[int, int] | None = None
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
    kind_chars: tuple[int, int, int] = (0, 0, 0)  # characters of text, tool results, code
    version: str = ""  # Claude Code version (the hidden prefix depends on it)
    model: str = ""


# Message kinds for the token calibration (hidden_prefix.KINDS): prose and thinking, tool
# results, and code (tool calls: commands, edits, file paths).
def _kind(block: Any) -> int:
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "tool_result":
            return 1
        if kind in ("tool_use", "server_tool_use"):
            return 2
    return 0


def _text_and_kinds(content: Any) -> tuple[str, tuple[int, int, int]]:
    """`content_text(content)` and its characters by kind (text, tool results, code)."""
    if not isinstance(content, list):
        text = content_text(content)
        return text, (len(text), 0, 0)
    chars = [0, 0, 0]
    parts = []
    for b in content:
        t = block_text(b)
        if t:
            parts.append(t)
            chars[_kind(b)] += len(t) + 1
    return "\n".join(parts), (chars[0], chars[1], chars[2])


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
    if parent is not None and not isinstance(parent, str):
        # An int or a list cannot name a record: the chain is cut here, counted, not guessed.
        skips.skip(path, line, f"parentUuid is a {type(parent).__name__}, not a uuid string; "
                   "the prompt starts at this record", "parentUuid")
    version = obj.get("version")
    node = _Node(
        index=i, line=line,
        uuid=uuid if isinstance(uuid, str) else None,
        parent=parent if isinstance(parent, str) else None,
        kind=kind if isinstance(kind, str) else "",
        sidechain=obj.get("isSidechain") is True,
        timestamp=_timestamp(obj.get("timestamp")),
        session=sys.intern(str(obj.get("sessionId") or default_session)),
        agent=obj["agentId"] if isinstance(obj.get("agentId"), str) else None,
        version=sys.intern(version) if isinstance(version, str) else "",
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
            node.kind_chars = (len(node.text), 0, 0)
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
    node.text, node.kind_chars = _text_and_kinds(content)
    blocks = content if isinstance(content, list) else []
    if kind == "assistant":
        model = msg.get("model")
        node.model = sys.intern(model) if isinstance(model, str) else ""
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


class _Texts:
    """The records' texts of one file in one buffer (UTF-8), not one string each: a
    session's tool output is most of its file, and one buffer goes back to the system whole
    when the file is done, where thousands of strings leave the heap in holes."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def put(self, node: _Node) -> None:
        if node.text:
            data = node.text.encode("utf-8", "surrogatepass")
            node.span = (len(self.buf), len(self.buf) + len(data))
            self.buf += data
            node.text = ""

    def get(self, node: _Node) -> str:
        if node.span is None:
            return node.text
        return self.buf[node.span[0]:node.span[1]].decode("utf-8", "surrogatepass")


class _Transcript:
    """The records of one file, and the prompt of each API call in it."""

    def __init__(self, path: Path, nodes: list[_Node], enc: ChunkEncoder, skips: SkipLog,
                 texts: _Texts | None = None):
        self.path = path
        self.texts = texts if texts is not None else _Texts()
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
        self._kinds: dict[tuple[int, ...], np.ndarray] = {}
        self.compacted: bool = False  # set by chain(): the last chain stopped at a boundary
        self._forest()
        self._states: dict[int, _State] = {}

    def _forest(self) -> None:
        """Each record's parent (-1: none, or a uuid no record has), whether the walk up from
        it ends (at a root, a dangling link or a compact_boundary) without coming back to a
        record (`ok`), and entry/exit times of the forest those walks form (ancestor tests)."""
        nodes = self.nodes
        n = len(nodes)
        self.par = par = [-1] * n
        for nd in nodes:
            if nd.parent is not None:
                par[nd.index] = self.by_uuid.get(nd.parent, -1)
        ok = [0] * n  # 0: not known yet, 1: the walk ends, 2: it loops
        for i in range(n):
            path: list[int] = []
            on: set[int] = set()
            j = i
            while True:
                if ok[j]:
                    res = ok[j]
                    break
                if j in on:
                    res = 2
                    break
                path.append(j)
                on.add(j)
                if nodes[j].boundary or par[j] < 0:
                    res = 1
                    break
                j = par[j]
            for k in path:
                ok[k] = res
        self.ok = [v == 1 for v in ok]
        kids: list[list[int]] = [[] for _ in range(n)]
        roots = []
        for i in range(n):
            if not self.ok[i]:
                continue
            if nodes[i].boundary or par[i] < 0:
                roots.append(i)
            else:
                kids[par[i]].append(i)
        self.tin = tin = [0] * n
        self.tout = tout = [0] * n
        clock = 0
        for r in roots:
            stack = [(r, 0)]
            tin[r] = clock
            clock += 1
            while stack:
                i, k = stack[-1]
                if k < len(kids[i]):
                    stack[-1] = (i, k + 1)
                    c = kids[i][k]
                    tin[c] = clock
                    clock += 1
                    stack.append((c, 0))
                else:
                    stack.pop()
                    tout[i] = clock

    def _on_chain(self, g: int, p: int) -> bool:
        """Record `g` is on the walk up from record `p` (both `ok`)."""
        return self.ok[g] and self.tin[g] <= self.tin[p] < self.tout[g]

    def _state(self, p: int, first: _Node, msgs: _Messages) -> _State:
        """The prompt of the chain that ends at record `p` (`ok`), for the call whose
        response starts at `first`: built from the state of `p`'s parent, memoised per record,
        so a chain that extends an earlier one by k records costs O(k).

        The state of a record depends on the call only through the parallel tool results
        taken with an assistant record on the chain (those written before `first`): a
        memoised state holds for calls between `lo` and `hi` (record indices) and is rebuilt
        outside them."""
        t = first.index
        nodes = self.nodes
        path = []
        i = p
        st: _State | None = None
        while True:
            got = self._states.get(i)
            if got is not None and got.lo <= t <= got.hi:
                st = got
                break
            path.append(i)
            if nodes[i].boundary or self.par[i] < 0:
                break
            i = self.par[i]
        for i in reversed(path):
            node = nodes[i]
            if st is None:  # the top of the chain
                if not node.boundary and node.parent is not None:
                    self._dangle(node.parent, first)
                st = _State(0, (), None, node.boundary, 0, len(nodes))
            else:
                st = _State(st.closed, st.open, st.role, st.compacted, st.lo, st.hi)
                u = nodes[self.par[i]]
                if u.tool_uses:
                    # Parallel tool results are siblings; the request carried all written
                    # before it.
                    extra = sorted(
                        c for c in u.children if c != i and nodes[c].answers & u.tool_uses
                    )
                    for c in extra:
                        if c < t:
                            st.lo = max(st.lo, c + 1)
                            self._push(st, c, msgs)
                        else:
                            st.hi = min(st.hi, c)
            self._push(st, i, msgs)
            self._states[i] = st
        assert st is not None
        return st

    def _push(self, st: _State, i: int, msgs: _Messages) -> None:
        role = self.nodes[i].role
        if role is None:
            return
        if role == st.role:
            st.open = (*st.open, i)
        else:
            if st.open:
                st.closed = msgs.add(st.closed, st.open)
            st.open = (i,)
            st.role = role

    def _dangle(self, uuid: str, first: _Node) -> None:
        if uuid not in self._dangling:
            self._dangling.add(uuid)
            self.skips.skip(
                self.path, first.line,
                "parentUuid points to no record in this file; the prompt starts after it",
                "parentUuid",
            )

    def prompt_node(
        self, first: _Node, group: frozenset[int], msgs: _Messages
    ) -> tuple[int, tuple[int, ...], bool]:
        """(prompt node in `msgs`, records of its last message, compacted) of the call whose
        response starts at `first` (`group`: the response's records). The same prompt as
        `messages()`, built incrementally; walks that loop, or that pass through the
        response's own records, take `messages()` itself."""
        if first.parent is None:
            return 0, (), False
        p = self.by_uuid.get(first.parent)
        if p is None:
            self._dangle(first.parent, first)
            return 0, (), False
        if self.ok[p] and not any(g != first.index and self._on_chain(g, p) for g in group):
            st = self._state(p, first, msgs)
            node = msgs.add(st.closed, st.open) if st.open else st.closed
            return node, st.open, st.compacted
        node = 0
        groups = self.messages(first, group)
        for g in groups:
            node = msgs.add(node, g)
        return node, groups[-1] if groups else (), self.compacted

    def chain(self, first: _Node, group: frozenset[int] = frozenset()) -> list[int]:
        """Indices of the records before `first` that form its prompt, in order (a walk of
        the whole chain: `prompt_node` gives the same prompt incrementally).

        `group` holds the records of `first`'s own API response: a chain that loops back to
        them is cut there, so a reply never lands in its own prompt."""
        up: list[int] = []
        seen: set[int] = {first.index, *group}
        uuid = first.parent
        self.compacted = False
        while uuid is not None:
            i = self.by_uuid.get(uuid)
            if i is None:
                self._dangle(uuid, first)
                break
            if i in seen:
                self.skips.skip(self.path, first.line,
                                "parentUuid links form a loop; the prompt is cut where it closes",
                                "parentUuid")
                break
            seen.add(i)
            up.append(i)
            if self.nodes[i].boundary:
                self.compacted = True
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
                if c != nxt and c < first.index and c not in seen
                and self.nodes[c].answers & node.tool_uses
            ]
            if extra:
                out.extend(sorted(extra))
        return out

    def messages(self, first: _Node, group: frozenset[int] = frozenset()) -> list[tuple[int, ...]]:
        """The prompt's messages, each a tuple of record indices (consecutive same role)."""
        groups: list[list[int]] = []
        role = None
        for i in self.chain(first, group):
            n = self.nodes[i]
            if n.role is None:
                continue
            if n.role == role:
                groups[-1].append(i)
            else:
                groups.append([i])
                role = n.role
        return [tuple(g) for g in groups]

    def _message(self, group: tuple[int, ...], keep: bool = True) -> np.ndarray:
        """A message's tokens; `keep`: cached here too (`_Messages` keeps its own)."""
        if self.enc.cache:
            got = self._messages.get(group)
            if got is not None:
                return got
        nodes = [self.nodes[i] for i in group]
        text = "\n".join(self.texts.get(n) for n in nodes if n.text or n.span)
        ids = self.enc.chunk(nodes[0].role or "user", text)
        if self.enc.cache and keep:
            self._messages[group] = ids
        return ids

    def kind_tokens(self, group: tuple[int, ...], n_tokens: int) -> np.ndarray:
        """A message's tokens split by kind (text, tool results, code) in proportion to the
        characters of each kind (the chat markers count as text); cached per message."""
        got = self._kinds.get(group)
        if got is not None:
            return got
        chars = np.zeros(3, dtype=np.float64)
        for i in group:
            chars += self.nodes[i].kind_chars
        total = chars.sum()
        got = (chars / total * n_tokens if total > 0
               else np.array([n_tokens, 0, 0], dtype=np.float64))
        self._kinds[group] = got
        return got


class _Messages:
    """The prompts of one file as paths of a trie of messages (each a tuple of records of
    one role), every message tokenized once; node 0 is the empty prompt.

    A call's prompt is a node: its parent's messages followed by its own. Calls that share
    a conversation share nodes, so the file's prompts take memory and time in proportion to
    the distinct messages, not to calls x prompt length."""

    def __init__(self, t: _Transcript, kinds: bool) -> None:
        self.t = t
        self.kinds = kinds
        self.parent: list[int] = [-1]
        self.group: list[tuple[int, ...]] = [()]
        self.arrays: list[np.ndarray] = [np.empty(0, dtype=np.int32)]
        self.tokens: list[int] = [0]
        self.split: list[np.ndarray] = [np.zeros(3, dtype=np.float64)]
        self.child: dict[tuple[int, tuple[int, ...]], int] = {}

    def add(self, node: int, group: tuple[int, ...]) -> int:
        """The node of `node`'s prompt followed by the message of `group`'s records."""
        got = self.child.get((node, group))
        if got is not None:
            return got
        arr = self.t._message(group, keep=False)
        got = len(self.parent)
        self.child[(node, group)] = got
        self.parent.append(node)
        self.group.append(group)
        self.arrays.append(arr)
        self.tokens.append(self.tokens[node] + arr.shape[0])
        if self.kinds:
            self.split.append(self.split[node] + self.t.kind_tokens(group, arr.shape[0]))
        return got

    def path(self, node: int, stop: int = 0) -> list[int]:
        """The nodes after `stop` (an ancestor of `node`) up to `node`, in order."""
        out = []
        while node != stop:
            out.append(node)
            node = self.parent[node]
        out.reverse()
        return out


@dataclass(slots=True)
class _State:
    """The prompt of a chain up to one record: its closed messages (a `_Messages` node), the
    records of its last message so far (`open`, one role), and until which call it holds."""

    closed: int
    open: tuple[int, ...]
    role: str | None
    compacted: bool
    lo: int  # valid for calls whose response starts at a record index in [lo, hi]
    hi: int


@dataclass(slots=True)
class Call:
    """One API call of a transcript: its prompt as the transcript holds it, and its usage.

    The prompt is kept as an earlier call's prompt (`base`) followed by `new` messages, so
    a session's calls hold each message once; `parts` and `blocks` rebuild the whole list."""

    line: int
    session: str
    context: str  # the conversation it belongs to: the file and, for sub-agents, the agent
    timestamp: float | None  # the response's first record (replay order)
    sent: float | None  # the prompt's newest record: about when the request was sent
    base: Call | None  # an earlier call of the file whose prompt this one starts with
    new: list[np.ndarray]  # the messages after the base's prompt, as token arrays
    new_blocks: list[int]  # records (content blocks) per new message
    tokens: int  # prompt tokens (our tokenizer)
    kinds: np.ndarray  # tokens by kind over the whole prompt (text, tool results, code)
    reported: tuple[int, int, int | None] | None  # (cached, prompt, output) from usage
    creation: int  # cache writes (usage.cache_creation_input_tokens)
    creation_1h: int  # of which with the 1-hour TTL (usage.cache_creation)
    version: str
    model: str
    compacted: bool  # the chain stops at a compact_boundary
    sidechain: bool

    def _built(self) -> tuple[list[np.ndarray], list[int]]:
        """(parts, blocks) of the whole prompt: the new messages of each call of the base
        chain, oldest first. Started from the last prompt built when this call's chain
        passes through it (calls are read in order, so a session costs one pass over its
        messages, not one per call)."""
        chain: list[Call] = []
        last = _LAST_BUILT[0] if _LAST_BUILT else None
        c: Call | None = self
        start: tuple[list[np.ndarray], list[int]] = ([], [])
        while c is not None:
            if last is not None and c is last[0]:
                start = (last[1], last[2])
                break
            chain.append(c)
            c = c.base
        # Keyed by the calls: its base's messages are its first items, the same objects.
        parts = ChainedList(start[0], key=id(self),
                            parent=None if self.base is None else id(self.base))
        blocks = list(start[1])
        for c in reversed(chain):
            parts.extend(c.new)
            blocks.extend(c.new_blocks)
        _LAST_BUILT[:] = [(self, parts, blocks)]
        return parts, blocks

    @property
    def parts(self) -> list[np.ndarray]:
        """The prompt's messages as token arrays (built on each access; read-only)."""
        return self._built()[0]

    @property
    def blocks(self) -> list[int]:
        """Records (content blocks) per message of the prompt (read-only)."""
        return self._built()[1]


# The last (call, parts, blocks) built by Call._built: a strong reference, so a call's id is
# never reused while it is the start of the next build.
_LAST_BUILT: list[tuple[Call, list[np.ndarray], list[int]]] = []


@dataclass
class FileCalls:
    path: Path
    calls: list[Call]
    subagents_excluded: int = 0
    progress_only: int = 0
    shared_ids: int = 0  # message ids that name two API calls (merged into one)


def _creation(usage: Any) -> int:
    v = usage.get("cache_creation_input_tokens") if isinstance(usage, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def _creation_1h(usage: Any) -> int:
    cc = usage.get("cache_creation") if isinstance(usage, dict) else None
    v = cc.get("ephemeral_1h_input_tokens") if isinstance(cc, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def _usage_key(usage: Any) -> tuple[Any, ...] | None:
    if not isinstance(usage, dict):
        return None
    return tuple(usage.get(k) for k in _USAGE_FIELDS)


def calls(
    path: Path, options: ReadOptions, skips: SkipLog, enc: ChunkEncoder, kinds: bool = False
) -> FileCalls:
    """Every API call in one transcript file, in file order; `kinds` also splits each
    prompt's tokens by message kind (for the calibration report; costs a pass per call)."""
    data = read_input(path)
    texts = _Texts()
    nodes = []
    for i, (line, obj) in enumerate(iter_json_lines(path, data, skips)):
        rec = _node(i, line, obj, path, skips, path.stem)
        texts.put(rec)
        nodes.append(rec)
    del data  # the records hold what is needed; the file's bytes go before tokenizing
    t = _Transcript(path, nodes, enc, skips, texts)
    groups: dict[str, list[_Node]] = {}
    for n in nodes:
        if n.msg_id is not None:
            groups.setdefault(n.msg_id, []).append(n)
    out = FileCalls(path, [])
    # A sub-agent file without its main session (not beside it, nor two folders up as in
    # `<session>/subagents/`) is read as it is: nothing else holds those calls. Beside its
    # main session, sub-agent calls wait for --subagents.
    alone = bool(groups) and all(g[0].sidechain for g in groups.values()) and not any(
        (d / f"{s}.jsonl").is_file()
        for s in {g[0].session for g in groups.values()}
        for d in (path.parent, path.parent.parent.parent)
    )
    last_ts: float | None = None
    msgs = _Messages(t, kinds)
    row_of: dict[int, Call] = {}  # prompt node -> the latest call with that prompt
    contexts: dict[str, str] = {}  # one string per context, not one per call
    for mid, group in groups.items():
        first, last = group[0], group[-1]
        if first.sidechain and not (options.subagents or alone):
            out.subagents_excluded += 1
            continue
        keys = {_usage_key(n.usage) for n in group if n.usage is not _MISSING}
        keys.discard(None)
        if len(keys) > 1:
            # Records of one streamed response carry the same usage; two different usages
            # under one id are two API calls. Counted; merged into the first.
            out.shared_ids += 1
            skips.skip(path, last.line, f"two API calls share message.id {mid!r} (different "
                       "usage); merged into the first", "message.id")
        ts = first.timestamp if first.timestamp is not None else last_ts
        last_ts = ts
        members = frozenset(n.index for n in group)
        node, last_msg, compacted = t.prompt_node(first, members, msgs)
        # The request left when its newest prompt record was written (the first record of
        # the response is written when it ends): the cache's lifetimes count from there.
        stamps = [x for i in last_msg if (x := nodes[i].timestamp) is not None]
        sent = max(stamps) if stamps else ts
        n_tokens = msgs.tokens[node]
        if n_tokens == 0:
            skips.skip(path, first.line, "assistant record with no prompt before it", "parentUuid")
            continue
        # The nearest earlier call whose prompt this one starts with: the messages after it
        # are the only new ones (usually the previous call's reply and the results after it).
        new_nodes = []
        at = node
        while at and at not in row_of:
            new_nodes.append(at)
            at = msgs.parent[at]
        new_nodes.reverse()
        usage = next(
            (n.usage for n in (last, first) if n.usage is not _MISSING), _MISSING
        )
        rep = _usage(usage, last.line, path, skips)
        agent = first.agent if first.sidechain else None
        context = f"{path}#{agent}" if agent else str(path)
        call = Call(
            line=first.line, session=first.session,
            context=contexts.setdefault(context, context),
            timestamp=ts, sent=sent, base=row_of.get(at),
            new=[msgs.arrays[x] for x in new_nodes],
            new_blocks=[len(msgs.group[x]) for x in new_nodes], tokens=n_tokens,
            kinds=msgs.split[node].copy() if kinds else _NO_KINDS,
            reported=rep, creation=_creation(usage), creation_1h=_creation_1h(usage),
            version=first.version, model=first.model, compacted=compacted,
            sidechain=first.sidechain,
        )
        row_of[node] = call
        out.calls.append(call)
    out.progress_only = _progress_only_calls(path, nodes)
    return out


def read_with(
    path: Path, options: ReadOptions, skips: SkipLog, enc: ChunkEncoder
) -> Iterator[RequestBatch]:
    """`read` with an explicit encoder (the benchmark passes one without a cache)."""
    from xmemplan.traces.hidden_prefix import prepare

    found = calls(path, options, skips, enc)
    hidden = getattr(options, "hidden_prefix", None)
    tokens = getattr(options, "tokens", None)
    prepared = prepare(found.calls, hidden, tokens == "calibrated")
    builder = BatchBuilder(str(path), block_tokens=1)
    call = None
    for i, call in enumerate(found.calls):  # row i is call i
        rep = call.reported
        base = prepared.base[i]
        builder.add(
            call.session, call.timestamp, prepared.tokens[i],
            Extend(base, prepared.new[i]) if base is not None else list(prepared.new[i]),
            output_tokens=rep[2] if rep else None,
            reported_cached_tokens=rep[0] if rep else None,
            reported_prompt_tokens=rep[1] if rep else None,
        )
    batch = builder.build(complete_sessions=not options.subagents)
    if found.subagents_excluded:
        batch.extras["subagent_requests_excluded"] = found.subagents_excluded
    if found.progress_only:
        batch.extras["subagent_requests_progress_only"] = found.progress_only
    if found.shared_ids:
        batch.extras["message_ids_shared_by_two_calls"] = found.shared_ids
    if prepared.added_tokens:
        batch.extras["hidden_prefix_tokens_added"] = prepared.added_tokens
    # The batch holds all the replay needs: the calls go before it is handed on (this frame
    # waits at the yield while the caller replays).
    # (`call`, the last call, would keep them all: each holds the one it extends)
    del found, prepared, builder, enc, call
    prompts = getattr(batch, "prompts", None)
    if prompts is not None and prompts.tokens.shape[0] >= _TRIM_TOKENS:
        _trim_heap()
    if len(batch) or batch.extras:
        yield batch


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    """The file's calls as one batch. The file gets its own token cache, dropped with it
    (the batch holds each distinct message's tokens once): the process-wide cache would keep
    a second copy of them while the batch is replayed (72 MB on a 20,000-call session)."""
    # The encoder is made in the call so that only read_with's frame holds it (and drops it).
    yield from read_with(path, options, skips, ChunkEncoder(get_tokenizer(options.tokenizer)))


# A file whose distinct prompt tokens reach this many (8 MB as int32) hands the heap it
# freed back to the system before its batch is replayed.
_TRIM_TOKENS = 1 << 21


def _trim_heap() -> None:
    """Give the heap's free pages back to the system: the records, states and token arrays
    freed after a long file sit between live objects, where the allocator keeps them
    (20,000 calls: 150 MiB). glibc's `malloc_trim(0)` releases free pages anywhere in the
    heap since glibc 2.8 (man7.org/linux/man-pages/man3/malloc_trim.3.html); where the C
    library has no such call this does nothing."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
