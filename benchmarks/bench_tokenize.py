"""Text traces end to end: per-message token cache vs tokenizing every prompt afresh.

    python benchmarks/bench_tokenize.py [--repeat 5] [--tokenizer qwen2.5] [--turns 100,300]

Inputs, each read by the Claude Code transcript reader (`--subagents`), in the same run and
with the same tokenizer (loaded once, before timing):
- `real`: the Claude Code 2.1.83 transcripts in ../shared/traces/claude-code-transcripts
  (skipped when ../shared is absent);
- `generated N`: one generated session of N tool-use turns (`--turns 100,300`; about 2 KB of
  tool output per turn), written to a temporary folder, never into the project.

Modes:
- `cached`: what `xmemplan hitrate` does: every distinct message tokenized once (xxh3-128
  content key), prompts built by concatenating cached token arrays; the cache starts empty
  in every timed run;
- `afresh`: the same reader and rendering with the cache off: every message of every prompt
  is tokenized again, as a tool that tokenizes each full prompt does.
Both must produce identical token arrays (checked). Prints the median of `--repeat` runs,
MB/s of transcript input (file bytes / seconds), the speed-up, and the resend factor (text
tokenized afresh / distinct text): how often the average message is sent, which bounds what
any per-message cache can gain.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from _util import machine, median_time

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xmemplan.text.encoder import ChunkEncoder  # noqa: E402
from xmemplan.text.tokenizer import get_tokenizer  # noqa: E402
from xmemplan.traces import claude_transcript  # noqa: E402
from xmemplan.traces.base import ReadOptions, SkipLog  # noqa: E402

REAL = ROOT.parent / "shared" / "traces" / "claude-code-transcripts"


def read_all(files: list[Path], enc: ChunkEncoder) -> list[np.ndarray]:
    opts = ReadOptions(subagents=True)
    out = []
    for f in files:
        for batch in claude_transcript.read_with(f, opts, SkipLog(), enc):
            out.append(batch.keys)
    return out


def make_long_session(folder: Path, turns: int) -> Path:
    """One generated session: user task, then `turns` x (assistant tool call, tool result)."""
    sid = "bench-0000-4000-8000-000000000001"
    rows = []
    parent = None

    def add(kind: str, message: dict) -> None:
        nonlocal parent
        uuid = f"{kind[0]}{len(rows):08d}"
        rows.append({"parentUuid": parent, "isSidechain": False, "sessionId": sid, "type": kind,
                     "uuid": uuid, "timestamp": f"2026-03-25T{10 + len(rows) // 3600:02d}:"
                     f"{len(rows) // 60 % 60:02d}:{len(rows) % 60:02d}.000Z",
                     "message": message})
        parent = uuid

    add("user", {"role": "user", "content": "Refactor the storage layer and keep tests green."})
    for k in range(turns):
        add("assistant", {
            "id": f"msg_{k:05d}", "role": "assistant", "model": "claude-opus-4-6",
            "content": [{"type": "text", "text": f"Step {k}: reading module {k % 37}."},
                        {"type": "tool_use", "id": f"toolu_{k:05d}", "name": "Read",
                         "input": {"file_path": f"/repo/storage/mod_{k % 37}.py"}}],
            "usage": {"input_tokens": 3, "cache_read_input_tokens": 1000 * k,
                      "cache_creation_input_tokens": 500, "output_tokens": 60}})
        body = "".join(
            f"{i:6d}\tdef handler_{k}_{i}(request, store):  # line {i} of module {k % 37}\n"
            for i in range(30)
        )
        add("user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{k:05d}", "content": body}]})
    path = folder / f"{sid}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bench(name: str, files: list[Path], tok_name: str, repeat: int) -> dict:
    tok = get_tokenizer(tok_name)
    size = sum(f.stat().st_size for f in files)
    cached_keys = read_all(files, ChunkEncoder(tok))
    afresh_keys = read_all(files, ChunkEncoder(tok, cache=False))
    assert len(cached_keys) == len(afresh_keys)
    assert all(np.array_equal(a, b) for a, b in zip(cached_keys, afresh_keys)), "keys differ"
    tokens = sum(k.shape[0] for k in cached_keys)
    t_cached, _ = median_time(lambda: read_all(files, ChunkEncoder(tok)), repeat=repeat)
    t_afresh, _ = median_time(
        lambda: read_all(files, ChunkEncoder(tok, cache=False)), repeat=max(3, repeat // 2)
    )
    probe, plain = ChunkEncoder(tok), ChunkEncoder(tok, cache=False)
    read_all(files, probe)
    read_all(files, plain)
    return {
        "input": name, "bytes": size, "prompt_tokens": tokens,
        # how often the average message is sent: the most a per-message cache can save
        "resend": plain.bytes_tokenized / max(probe.bytes_tokenized, 1),
        "cached_s": t_cached, "afresh_s": t_afresh,
        "cached_mb_s": size / t_cached / 1e6, "afresh_mb_s": size / t_afresh / 1e6,
        "speedup": t_afresh / t_cached,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tokenizer", default="qwen2.5")
    ap.add_argument("--turns", default="100,300", help="generated session lengths, comma list")
    args = ap.parse_args()
    print(f"machine: {machine()}; tokenizer: {args.tokenizer}; median of {args.repeat} runs")
    results = []
    if REAL.is_dir():
        results.append(bench("real", sorted(REAL.glob("*.jsonl")), args.tokenizer, args.repeat))
    else:
        print(f"(skipping real transcripts: {REAL} not present)")
    for turns in (int(t) for t in args.turns.split(",") if t):
        with tempfile.TemporaryDirectory() as tmp:
            long = make_long_session(Path(tmp), turns)
            results.append(bench(f"generated {turns}", [long], args.tokenizer, args.repeat))
    head = (f"{'input':<16}{'MB':>6}{'prompt tokens':>15}{'resend':>8}{'cached s':>10}"
            f"{'MB/s':>8}{'afresh s':>10}{'MB/s':>8}{'speed-up':>10}")
    print(head)
    for r in results:
        print(f"{r['input']:<16}{r['bytes'] / 1e6:>6.2f}{r['prompt_tokens']:>15,}"
              f"{r['resend']:>7.1f}x{r['cached_s']:>10.3f}{r['cached_mb_s']:>8.2f}"
              f"{r['afresh_s']:>10.3f}{r['afresh_mb_s']:>8.2f}{r['speedup']:>9.1f}x")


if __name__ == "__main__":
    main()
