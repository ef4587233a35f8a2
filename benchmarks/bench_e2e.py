"""End to end: `xmemplan hitrate` vs a straightforward Python replay, on Claude Code block traces.

    python benchmarks/bench_e2e.py [--copies 8] [--repeat 3] [--source ../shared/traces/claude-code-weka]

Builds a few hundred MB of traces by copying the shared dev set under new session ids (in a
temporary folder, never in the project), then times, in the same run:
- baseline: for each file, `json.load`, then per request count the leading block ids already
  in the session's Python set and add them all (session scope, the same figures);
- `xmemplan hitrate DIR --format json` as a whole command (process start included), numba
  cache warm; and once with an empty numba cache (cold start: every kernel compiled).
Both must report the same hit tokens. Prints medians and the speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import machine, median_time

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "traces" / "claude-code-weka"


def build(source: Path, dest: Path, copies: int) -> int:
    total = 0
    for k in range(copies):
        for f in sorted(source.glob("*.json")):
            doc = json.loads(f.read_text())
            doc["id"] = f"{doc.get('id', f.stem)}-copy{k}"
            out = dest / f"{f.stem}-copy{k}.json"
            out.write_text(json.dumps(doc))
            total += out.stat().st_size
    return total


def baseline(folder: Path) -> tuple[int, int]:
    hit_total = prompt_total = 0
    for f in sorted(folder.glob("*.json")):
        with f.open() as fh:
            doc = json.load(fh)
        block = doc.get("block_size", 64)
        seen: set[int] = set()
        for req in doc["requests"]:
            if req.get("type") == "subagent":
                continue
            ids = req["hash_ids"]
            n = 0
            for h in ids:
                if h not in seen:
                    break
                n += 1
            seen.update(ids)
            hit_total += min(n * block, req["in"])
            prompt_total += req["in"]
    return hit_total, prompt_total


def run_cli(folder: Path, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "xmemplan", "-q", "hitrate", str(folder), "--format", "json"],
        capture_output=True, text=True, env=env, check=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--copies", type=int, nargs="+", default=[8, 16],
                    help="input sizes to run, in copies of the dev set (~33 MB each)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not args.source.exists():
        sys.exit(f"no source traces at {args.source}")
    print(f"machine: {machine()}")
    for copies in args.copies:
        run_size(args.source, copies, args.repeat)


def run_size(source: Path, copies: int, repeat: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="xmemplan-bench-"))
    try:
        data = tmp / "traces"
        data.mkdir()
        size = build(source, data, copies)
        print(f"\ninput: {len(list(data.glob('*.json')))} files, {size / 1e6:.0f} MB")
        env = dict(os.environ)
        cold_env = dict(env, NUMBA_CACHE_DIR=str(tmp / "numba-cold"))
        t0 = time.perf_counter()
        cold = run_cli(data, cold_env)
        t_cold = time.perf_counter() - t0
        hits = [0]

        def ours() -> None:
            hits[0] = run_cli(data, env)["hit_tokens"]

        t_ours, times = median_time(ours, repeat)
        t_base, base_times = median_time(lambda: baseline(data), repeat, warmup=0)
        base_hits, base_prompt = baseline(data)
        assert hits[0] == base_hits == cold["hit_tokens"], (hits[0], base_hits, cold["hit_tokens"])
        print(f"hit tokens agree: {base_hits:,} of {base_prompt:,} prompt tokens")
        print(f"baseline json.load + set : median {t_base:6.2f} s  ({size / 1e6 / t_base:5.0f} MB/s)  runs {[round(t, 2) for t in base_times]}")
        print(f"xmemplan hitrate (warm)  : median {t_ours:6.2f} s  ({size / 1e6 / t_ours:5.0f} MB/s)  runs {[round(t, 2) for t in times]}")
        print(f"xmemplan hitrate (cold)  : {t_cold:6.2f} s (empty numba cache)")
        print(f"speed-up: {t_base / t_ours:.1f}x")
        if shutil.which("time") or Path("/usr/bin/time").exists():
            out = subprocess.run(
                ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "xmemplan", "-q", "hitrate",
                 str(data), "--format", "json"],
                capture_output=True, text=True, check=True,
            )
            peak_kb = int(out.stderr.strip().splitlines()[-1])
            print(f"peak RSS of the largest process (parent or worker): {peak_kb / 1024:.0f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
