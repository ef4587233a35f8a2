"""Long agent sessions: time and peak memory of text traces as the session grows.

    python benchmarks/bench_long_sessions.py [--calls 1000,4000,20000] [--whole 1000,2000]

Two measurements, each in a fresh subprocess (peak RSS: its VmHWM, else `getrusage`):
- `stage`: what `hitrate` does after the reader: each call is the previous call's prompt
  plus an assistant message and a ~2 KB tool result (tokenized once), given to the batch
  builder as `Extend(previous row, new messages)`; the builder interns them and the replay
  matches them (`hitrate.replay`, session scope). This is the part that held every
  prompt's tokens before (a 1,000-call session was 440 M keys).
- `whole`: the whole command, `python -m xmemplan -q hitrate DIR --format json`, on a
  generated Claude Code transcript of N tool-use calls (`bench_tokenize.make_long_session`),
  reader included, after one untimed run on a 20-call session (numba compiles its kernels
  when their cache is stale, and the compiler's time and memory are not the command's).
Prints calls, prompt tokens, distinct tokens, seconds and peak RSS (MiB), and the machine's
load average before and after (the VM is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import machine

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

STAGE = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
from xmemplan.hitrate.pipeline import replay
from xmemplan.text.encoder import ChunkEncoder
from xmemplan.text.tokenizer import get_tokenizer
from xmemplan.traces._build import BatchBuilder
try:
    from xmemplan.traces._build import Extend
except ImportError:  # a checkout from before the interned prompts (--root): full lists
    Extend = None

calls = int(sys.argv[1])
enc = ChunkEncoder(get_tokenizer("qwen2.5"))
t0 = time.perf_counter()
b = BatchBuilder("generated", block_tokens=1)
conv = [enc.chunk("user", "Refactor the storage layer and keep tests green.")]
total = 0
n = conv[0].shape[0]  # prompt tokens, kept as a running sum (as a linear reader would)
for k in range(calls):
    body = "".join(f"{i:6d}\tdef handler_{k}_{i}(request, store):  # line {i} of module {k % 37}\n"
                   for i in range(30))
    # each call is the previous one plus its two new messages, as a linear reader gives it
    b.add("s", float(k), n, list(conv) if k == 0 or Extend is None else Extend(k - 1, conv[-2:]))
    total += n
    conv.append(enc.chunk("assistant", f"Step {k}: reading module {k % 37}. [tool_use Read]"))
    conv.append(enc.chunk("user", body))
    n += conv[-2].shape[0] + conv[-1].shape[0]
batch = b.build(complete_sessions=True)
hit = replay(batch, "session", 1).column("hit_tokens")
t1 = time.perf_counter()
assert int(batch.prompt_tokens.sum()) == total
rss = peak() / 1024
print(json.dumps({"calls": calls, "prompt_tokens": total, "hit_tokens": int(hit.sum()),
                  "distinct_tokens": int(batch.prompts.tokens.shape[0])
                  if hasattr(batch, "prompts") else int(batch.keys.shape[0]),
                  "seconds": t1 - t0, "peak_rss_mib": rss}))
"""


def stage(calls: int, root: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PEAK + STAGE, str(calls), str(root)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


# The command's own peak: VmHWM (Linux) belongs to the memory the program got at exec, where
# getrusage's ru_maxrss also counts the parent's high-water mark when the child was
# spawned by vfork (CPython's subprocess does so on Linux), as under pytest.
PEAK = ("def peak():\n    try:\n        for line in open('/proc/self/status'):\n"
        "            if line.startswith('VmHWM:'):\n                return int(line.split()[1])\n"
        "    except OSError:\n        pass\n    import resource\n"
        "    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n")


def _command(folder: str) -> list[str]:
    return [sys.executable, "-c",
            PEAK + "import runpy, sys; sys.argv = ['xmemplan'] + sys.argv[1:]\n"
            "code = 0\ntry:\n    runpy.run_module('xmemplan', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code or 0\n"
            "print(peak() / 1024, file=sys.stderr); sys.exit(code)",
            "-q", "hitrate", folder, "--format", "json"]


def whole(calls: int) -> dict:
    sys.path.insert(0, str(HERE))
    from bench_tokenize import make_long_session

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "warm").mkdir()
        make_long_session(Path(tmp) / "warm", 20)
        subprocess.run(_command(str(Path(tmp) / "warm")), capture_output=True, check=True,
                       cwd=ROOT)
        (Path(tmp) / "long").mkdir()
        path = make_long_session(Path(tmp) / "long", calls)
        size = path.stat().st_size
        cmd = _command(str(path.parent))
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        seconds = time.perf_counter() - t0
        summary = json.loads(out.stdout)
        rss = float(out.stderr.strip().splitlines()[-1])
    return {"calls": calls, "bytes": size, "prompt_tokens": summary["prompt_tokens"],
            "token_hit_ratio": summary["token_hit_ratio"], "seconds": seconds,
            "peak_rss_mib": rss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", default="1000,4000,20000", help="stage: session lengths")
    ap.add_argument("--whole", default="1000",
                    help="whole command: session lengths ('' none), e.g. 1000,4000,20000")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="stage: the checkout to import xmemplan from (e.g. a worktree of an "
                    "older commit, for the before figures: it then gets full message lists)")
    args = ap.parse_args()
    load = "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {machine()}; stage from {args.root}; {load}")
    print(f"{'what':<7}{'calls':>8}{'prompt tokens':>16}{'distinct':>12}{'s':>8}{'peak MiB':>10}")
    for n in (int(c) for c in args.calls.split(",") if c):
        r = stage(n, args.root)
        print(f"{'stage':<7}{n:>8,}{r['prompt_tokens']:>16,}{r['distinct_tokens']:>12,}"
              f"{r['seconds']:>8.2f}{r['peak_rss_mib']:>10.0f}")
    for n in (int(c) for c in args.whole.split(",") if c):
        r = whole(n)
        print(f"{'whole':<7}{n:>8,}{r['prompt_tokens']:>16,}{'':>12}"
              f"{r['seconds']:>8.2f}{r['peak_rss_mib']:>10.0f}")
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
