"""Small, realistic synthetic traces in every block/token format, for tests and examples.

Coding-agent sessions are modelled as the agents behave: a system prompt and tool list shared
by all sessions, then turns that resend the whole conversation plus the last output and a new
tool result; now and then a compaction replaces the history with a short summary. Generators
are deterministic for a given seed. Each writer returns the per-request token lists so that
tests can compute expected figures independently of the readers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import xxhash


@dataclass
class Session:
    session_id: str
    timestamps: list[float]
    prompts: list[np.ndarray]  # int64 token ids per request
    outputs: list[int]


def agent_sessions(
    n_sessions: int = 4,
    turns: int = 12,
    seed: int = 0,
    system_tokens: int = 600,
    turn_tokens: tuple[int, int] = (20, 400),
    compact_every: int = 0,
    vocab: int = 50_000,
) -> list[Session]:
    """Agent-like sessions: every request extends the previous one (plus occasional resets)."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, vocab, system_tokens, dtype=np.int64)
    sessions = []
    for s in range(n_sessions):
        t = float(rng.uniform(0, 60))
        context = np.concatenate([system, rng.integers(0, vocab, 50, dtype=np.int64)])
        prompts, stamps, outs = [], [], []
        for turn in range(turns):
            if compact_every and turn and turn % compact_every == 0:
                summary = rng.integers(0, vocab, 80, dtype=np.int64)
                context = np.concatenate([system, summary])
            prompts.append(context.copy())
            stamps.append(round(t, 3))
            out = int(rng.integers(5, 200))
            outs.append(out)
            new = rng.integers(0, vocab, out + int(rng.integers(*turn_tokens)), dtype=np.int64)
            context = np.concatenate([context, new])
            t += float(rng.uniform(1, 30))
        sessions.append(Session(f"sess-{seed}-{s}", stamps, prompts, outs))
    return sessions


def write_tokens_jsonl(path: Path, sessions: list[Session]) -> None:
    """xmemplan's own token-id format, requests of all sessions interleaved by time."""
    rows = []
    for s in sessions:
        for ts, p, o in zip(s.timestamps, s.prompts, s.outputs):
            rows.append(
                {"session_id": s.session_id, "timestamp": ts, "input_ids": p.tolist(),
                 "output_tokens": o}
            )
    rows.sort(key=lambda r: (r["timestamp"], r["session_id"]))
    with path.open("wb") as f:
        for r in rows:
            f.write(orjson.dumps(r) + b"\n")


class _ChainedIds:
    """Prefix-chained block ids numbered 1, 2, ... in order of first appearance."""

    def __init__(self, start: int = 1) -> None:
        self.ids: dict[bytes, int] = {}
        self.next = start

    def blocks(self, tokens: np.ndarray, block: int, partial: bool) -> list[int]:
        n = len(tokens) // block + (1 if partial and len(tokens) % block else 0)
        out = []
        h = xxhash.xxh3_64()
        for i in range(n):
            h.update(tokens[i * block : (i + 1) * block].tobytes())
            d = h.digest()
            if d not in self.ids:
                self.ids[d] = self.next
                self.next += 1
            out.append(self.ids[d])
        return out


def write_claude_blocks(
    folder: Path, sessions: list[Session], block: int = 64, subagents: int = 0, seed: int = 0
) -> None:
    """One kv-cache-tester JSON file per session: full 64-token blocks, local ids.

    With `subagents`, each session gets that many sub-agent entries spawned mid-session,
    whose own requests reuse the system prompt (same local id space).
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for s in sessions:
        ids = _ChainedIds()
        reqs: list[dict[str, Any]] = []
        t0 = s.timestamps[0]
        for ts, p, o in zip(s.timestamps, s.prompts, s.outputs):
            reqs.append(
                {"t": round(ts - t0, 3), "type": "n", "model": "claude-opus-4-5", "in": len(p),
                 "out": o, "hash_ids": ids.blocks(p, block, partial=False),
                 "input_types": ["tool_result"], "output_types": ["tool_use"], "stop": "tool_use"}
            )
        for k in range(subagents):
            spawn = round(float(rng.uniform(0, max(s.timestamps[-1] - t0, 1))), 3)
            base = s.prompts[0][: len(s.prompts[0]) // 2]
            sub = []
            ctx = base
            for j in range(3):
                sub.append(
                    {"t": round(2.0 * j, 3), "type": "n", "model": "claude-haiku", "in": len(ctx),
                     "out": 10, "hash_ids": ids.blocks(ctx, block, partial=False)}
                )
                ctx = np.concatenate([ctx, rng.integers(0, 50_000, 150, dtype=np.int64)])
            reqs.append(
                {"type": "subagent", "t": spawn, "agent_id": f"a{k}", "requests": sub}
            )
        reqs.sort(key=lambda r: r["t"])
        doc = {"id": s.session_id, "models": ["claude-opus-4-5"], "block_size": block,
               "hash_id_scope": "local", "tool_tokens": 0, "system_tokens": 0,
               "requests": reqs}
        (folder / f"{s.session_id}.json").write_bytes(orjson.dumps(doc))


def write_mooncake(path: Path, sessions: list[Session], block: int = 512) -> list[np.ndarray]:
    """Mooncake rows (ms timestamps, ceil blocks, global chained ids), sorted by time.

    Returns the prompts in file order.
    """
    ids = _ChainedIds(start=0)
    rows = []
    for s in sessions:
        for ts, p, o in zip(s.timestamps, s.prompts, s.outputs):
            rows.append((int(ts * 1000), len(p), o, p))
    rows.sort(key=lambda r: r[0])
    with path.open("wb") as f:
        for ts_ms, n, o, p in rows:
            doc = {"timestamp": ts_ms, "input_length": n, "output_length": o,
                   "hash_ids": ids.blocks(p, block, partial=True)}
            f.write(orjson.dumps(doc) + b"\n")
    return [r[3] for r in rows]


def bailian_rows(n_roots: int = 5, depth: int = 4, seed: int = 0, block: int = 16) -> list[dict]:
    """Qwen-Bailian-like rows: conversation trees with per-block (not chained) hash ids.

    Every conversation shares one boilerplate block at position 1 behind a different first
    block: keyed per block that is a false hit, keyed by path it is a miss. Children extend
    their parent's prompt; some parents have two children (a regenerated answer).
    """
    rng = np.random.default_rng(seed)
    boiler = rng.integers(0, 1000, block, dtype=np.int64)
    block_id: dict[bytes, int] = {}
    rows: list[dict] = []
    chat = 0
    t = 0.0

    def ids_of(tokens: np.ndarray) -> list[int]:
        out = []
        for i in range(math.ceil(len(tokens) / block)):
            key = tokens[i * block : (i + 1) * block].tobytes()
            out.append(block_id.setdefault(key, len(block_id) + 1))
        return out

    for _ in range(n_roots):
        first = rng.integers(0, 1000, block, dtype=np.int64)
        prompt = np.concatenate([first, boiler, rng.integers(0, 1000, 40, dtype=np.int64)])
        frontier = [(-1, prompt, 1)]
        while frontier:
            parent, p, turn = frontier.pop(0)
            t += float(rng.uniform(0.5, 5))
            me = chat
            chat += 1
            rows.append({"chat_id": me, "parent_chat_id": parent, "timestamp": round(t, 3),
                         "input_length": int(len(p)), "output_length": 30, "type": "text",
                         "turn": turn, "hash_ids": ids_of(p)})
            if turn < depth:
                kids = 2 if rng.random() < 0.3 else 1
                for _k in range(kids):
                    ext = rng.integers(0, 1000, int(rng.integers(20, 90)), dtype=np.int64)
                    frontier.append((me, np.concatenate([p, ext]), turn + 1))
    rows.sort(key=lambda r: r["timestamp"])
    return rows


def write_bailian(path: Path, rows: list[dict]) -> None:
    with path.open("wb") as f:
        for r in rows:
            f.write(orjson.dumps(r) + b"\n")
