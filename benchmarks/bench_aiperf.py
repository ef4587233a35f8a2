"""Peer comparison: `xmemplan hitrate` vs `aiperf analyze-trace` on the Mooncake trace.

    python -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf
    python benchmarks/bench_aiperf.py [--aiperf /tmp/aiperf-venv/bin/aiperf] [--repeat 5]

Both are whole commands in a subprocess, start-up included, on the same file, interleaved
run by run (xmemplan, aiperf, xmemplan, aiperf, ...) so that both see the same machine
load; one untimed run of each first (page cache, numba cache). AIPerf runs from its own
venv (its dependencies stay out of ours). Prints each run, the medians and the ratio, and
both tools' hit rates for the record (AIPerf's "Theoretical Hit Rates" row is its own
per-request definition; xmemplan prints token-weighted and per-request means).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _util import machine

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "mooncake-fast25" / "conversation_trace.jsonl"


def ours(trace: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "xmemplan", "-q", "hitrate", str(trace),
                          "--format", "json"], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    return time.perf_counter() - t0, json.loads(out.stdout)


def theirs(aiperf: str, trace: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run([aiperf, "analyze-trace", str(trace), "--block-size", "512"],
                         capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": "/tmp"})
    return time.perf_counter() - t0, out.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aiperf", default="/tmp/aiperf-venv/bin/aiperf")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not Path(args.aiperf).exists():
        sys.exit(f"no aiperf at {args.aiperf}: python -m venv /tmp/aiperf-venv && "
                 "/tmp/aiperf-venv/bin/pip install aiperf")
    version = subprocess.run([str(Path(args.aiperf).parent / "pip"), "show", "aiperf"],
                             capture_output=True, text=True).stdout
    ver = re.search(r"Version: (\S+)", version)
    print(f"machine: {machine()}; aiperf {ver.group(1) if ver else '?'}; {args.trace.name}")
    ours(args.trace)
    theirs(args.aiperf, args.trace)
    a, b = [], []
    summary: dict = {}
    report = ""
    for i in range(args.repeat):
        t, summary = ours(args.trace)
        a.append(t)
        t2, report = theirs(args.aiperf, args.trace)
        b.append(t2)
        print(f"run {i + 1}: xmemplan {t:.3f} s, aiperf {t2:.3f} s")
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"median of {args.repeat}: xmemplan {ma:.3f} s, aiperf analyze-trace {mb:.3f} s; "
          f"xmemplan is {mb / ma:.1f}x faster")
    row = re.search(r"Theoretical Hit Rates\s*[│|]\s*([0-9.]+)", report)
    print(f"hit rates: aiperf mean {row.group(1) if row else '?'}; xmemplan "
          f"mean_request_hit_ratio {summary['mean_request_hit_ratio']:.4f}, "
          f"token_hit_ratio {summary['token_hit_ratio']:.4f}")


if __name__ == "__main__":
    main()
