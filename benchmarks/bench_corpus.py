"""Corpus scale: a >= 1 B prompt-token block-trace corpus end to end, and text traces in MB/s
per core, locally and on Ray.

    python benchmarks/bench_corpus.py [--copies 3,12] [--text-copies 20] [--skip-ray]

Inputs are built in a temporary folder (never in the project) from the shared dev sets:
- `blocks`: the Claude Code block traces (../shared/traces/claude-code-weka, 44 sessions,
  64-token blocks, ~360 M prompt tokens) copied N times under new session ids: 3 copies
  hold ~1.1 B prompt tokens, 12 copies ~4.3 B; the whole command
  `python -m xmemplan -q hitrate DIR --format json` runs on each, timed, with the peak RSS
  of its largest process (`getrusage(RUSAGE_CHILDREN)`: the parent or one worker). Peak RSS
  must not grow with the number of files: sessions are matched where they are read and only
  per-request figures are kept;
- `text`: the Claude Code transcripts (../shared/traces/claude-code-transcripts) copied N
  times under new session ids, every message's text tagged with its copy (so that no copy
  is served by the token cache of another), read with `--subagents` by the whole command:
  MB/s per core with one worker, two local worker processes, and Ray tasks on a local
  2-CPU cluster (`ray start --head`, started before timing; each command connects to it).
  Median of 3; the figures of every run must be equal.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _util import machine
from bench_e2e import build

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
sys.path.insert(0, str(ROOT))


def build_blocks(dest: Path, copies: int) -> int:
    return build(SHARED / "claude-code-weka", dest, copies)


def _mark(value: object, tag: str) -> object:
    """Prefix every text of a message with `tag`, so that each copy tokenizes afresh."""
    if isinstance(value, str):
        return tag + value
    if isinstance(value, list):
        return [_mark(v, tag) for v in value]
    if isinstance(value, dict):
        return {k: (_mark(v, tag) if k in ("text", "content", "thinking") else v)
                for k, v in value.items()}
    return value


def build_text(dest: Path, copies: int) -> int:
    """Each copy: the session and its sub-agents under a fresh session id, every message's
    text prefixed with the copy's tag (distinct text: no copy is served by the token cache
    of an earlier one)."""
    src = SHARED / "claude-code-transcripts"
    total = 0
    for k in range(copies):
        sid_new = str(uuid.UUID(int=k + 1))
        folder = dest / f"copy{k}"
        folder.mkdir()
        for f in sorted(src.glob("*.jsonl")):
            lines = []
            for line in f.read_text().splitlines():
                try:
                    obj = json.loads(line)
                except ValueError:
                    lines.append(line)
                    continue
                if isinstance(obj, dict):
                    if obj.get("sessionId"):
                        obj["sessionId"] = sid_new
                    msg = obj.get("message")
                    if isinstance(msg, dict) and "content" in msg:
                        msg["content"] = _mark(msg["content"], f"[copy {k}] ")
                lines.append(json.dumps(obj))
            name = f.name if f.name.startswith("agent-") else f"{sid_new}.jsonl"
            out = folder / name
            out.write_text("\n".join(lines) + "\n")
            total += out.stat().st_size
    return total


def command(folder: Path, *extra: str) -> tuple[float, float, dict]:
    """(seconds, peak RSS MiB of the largest process, summary) of the whole command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "xmemplan", "-q", "hitrate", str(folder), "--format", "json",
         *extra], capture_output=True, text=True, check=True, cwd=ROOT,
    )
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # RUSAGE_CHILDREN keeps the largest ever seen: a run that stays below an earlier one
    # reports the earlier peak, so runs go from the smallest input up.
    return seconds, max(peak, before) / 1024, json.loads(out.stdout)


def blocks(copies_list: list[int]) -> None:
    print("\nblock traces (claude-blocks, 64-token blocks), whole command, default workers")
    print(f"{'files':>7}{'MB':>8}{'prompt tokens':>16}{'s':>8}{'MB/s':>8}{'peak MiB':>10}")
    for copies in sorted(copies_list):
        tmp = Path(tempfile.mkdtemp(prefix="xmemplan-corpus-"))
        try:
            size = build_blocks(tmp, copies)
            command(tmp)  # warm the page cache and the numba cache
            s, peak, summary = command(tmp)
            files = len(list(tmp.glob("*.json")))
            print(f"{files:>7}{size / 1e6:>8.0f}{summary['prompt_tokens']:>16,}{s:>8.2f}"
                  f"{size / 1e6 / s:>8.0f}{peak:>10.0f}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def text(copies: int, ray: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="xmemplan-text-"))
    started = False
    try:
        size = build_text(tmp, copies)
        print(f"\ntext traces: {copies} tagged copies of the shared Claude Code transcripts, "
              f"{size / 1e6:.1f} MB, --subagents, whole command (start-up included)")
        runs = [("local, 1 worker", 1, ["--workers", "1"]),
                ("local, 2 workers", 2, ["--workers", "2"])]
        if ray:
            t0 = time.perf_counter()
            subprocess.run([str(Path(sys.executable).parent / "ray"), "start", "--head",
                            "--num-cpus", "2", "--include-dashboard", "false"],
                           capture_output=True, check=True)
            started = True
            print(f"(a local Ray cluster of 2 CPUs started in {time.perf_counter() - t0:.1f} s,"
                  " before timing)")
            runs.append(("ray, 2 local CPUs", 2, ["--executor", "ray", "--ray-address", "auto"]))
        command(tmp, "--subagents", "--workers", "1")  # page cache, numba cache
        ref = None
        print(f"{'run':<20}{'s':>8}{'MB/s':>8}{'MB/s per core':>15}")
        for name, cores, extra in runs:
            times = []
            for _ in range(3):
                s, _, summary = command(tmp, "--subagents", *extra)
                times.append(s)
            if ref is None:
                ref = summary
            assert summary == ref, f"{name}: figures differ"
            best = sorted(times)[1]  # median of 3
            print(f"{name:<20}{best:>8.2f}{size / 1e6 / best:>8.1f}"
                  f"{size / 1e6 / best / cores:>15.1f}")
        print("(figures equal in every run)")
    finally:
        if started:
            subprocess.run([str(Path(sys.executable).parent / "ray"), "stop"],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", default="3,12", help="block corpus sizes, copies of the dev set")
    ap.add_argument("--text-copies", type=int, default=20)
    ap.add_argument("--skip-ray", action="store_true")
    args = ap.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"no shared traces at {SHARED}")
    print(f"machine: {machine()}")
    if args.copies:
        blocks([int(c) for c in args.copies.split(",")])
    if args.text_copies:
        text(args.text_copies, ray=not args.skip_ray)


if __name__ == "__main__":
    main()
