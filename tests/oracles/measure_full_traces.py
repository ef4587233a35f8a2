"""Full shared traces through the engines' own cache classes (issue 22's "within 0.002 on the
full traces"): token hit ratio of vLLM 0.33.0's KVCacheManager and SGLang 0.5.23's RadixCache,
prefill only (or with outputs), global scope, one request at a time, at the capacities
asked. xmemplan's figure for the same run is `xmemplan hitrate TRACE --scope global
--capacity C --cache-model ENGINE --prefill-only` (docs/oracles.md).

Run in the engines venv (.ci/steps/engines.sh builds it), one job at a time:

    .ci-engines-venv/bin/python tests/oracles/measure_full_traces.py \\
        --trace claude-code-weka --page 64 --engine vllm --capacity 300k 1M 3M

Prints one line per capacity: the engine's token hit ratio and the seconds it took. Not a test: minutes per pass on the whole traces.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from oracle_scenarios import cache_scenario, iter_trace_requests  # noqa: E402
from oracle_support import SHARED_TRACES  # noqa: E402


def tokens(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True, help="path under ../shared/traces")
    ap.add_argument("--page", type=int, required=True)
    ap.add_argument("--engine", choices=["vllm", "sglang"], required=True)
    ap.add_argument("--capacity", nargs="+", required=True)
    ap.add_argument("--outputs", action="store_true", help="with outputs (default: prefill only)")
    args = ap.parse_args()
    if args.engine == "vllm":
        from oracle_drivers.cache_vllm import replay_hits
    else:
        from oracle_drivers.cache_sglang import replay_hits
    path = SHARED_TRACES / args.trace
    for cap in args.capacity:
        counts = {"requests": 0, "prompt": 0}

        def stream(counts: dict[str, int] = counts) -> Iterator[dict]:
            # one request's tokens at a time: the whole Claude Code trace is 361M tokens
            for r in iter_trace_requests([path]):
                counts["requests"] += 1
                counts["prompt"] += len(r["tokens"])
                yield r

        sc = cache_scenario(args.engine, [], page_size=args.page, capacity_tokens=tokens(cap),
                            with_outputs=args.outputs)
        sc["requests"] = stream()
        t1 = time.perf_counter()
        hits = replay_hits(sc)
        dt = time.perf_counter() - t1
        ratio = sum(hits) / counts["prompt"]
        print(f"{args.engine} {args.trace} page {args.page} capacity {cap} outputs "
              f"{args.outputs}: engine {ratio:.4f} ({sum(hits):,} of {counts['prompt']:,} "
              f"prompt tokens, {counts['requests']} requests); {dt:.0f} s", flush=True)


if __name__ == "__main__":
    main()
