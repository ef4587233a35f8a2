"""Join-shortest-queue routing over many replicas (docs/performance.md, "Routing").

    python benchmarks/bench_routing.py [--replicas 64,1024,16384] [--requests 200000]

One simulation per replica count of Poisson traffic at 8 requests/s per replica (prompts
100-4,000 tokens, 0-90 from host DRAM, 1-40 output tokens), after a small run that
compiles or loads the kernel; prints seconds and the TTFT sum (equal across versions of
the kernel means equal results). Run it from two checkouts (PYTHONPATH) to compare.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from xmemplan.sizing.sim import Engine, Traffic, simulate


def run(replicas: int, requests: int) -> tuple[float, float]:
    rng = np.random.default_rng(1)

    def traffic(n: int) -> Traffic:
        return Traffic(np.cumsum(rng.exponential(1.0 / (replicas * 8), n)),
                       rng.integers(100, 4000, n).astype(float),
                       hit_dram=rng.integers(0, 90, n).astype(float),
                       output=rng.integers(1, 40, n))

    e = Engine(replicas=replicas, chunk_tokens=2048, max_batch=8, lin_s_per_token=2e-5,
               decode_fixed_s=0.004, dram_bandwidth=2e10, kv_bytes_per_token=1e5,
               fixed_s=0.002)
    simulate(traffic(2000), e)  # compile or load the kernel
    tr = traffic(requests)
    t = time.perf_counter()
    r = simulate(tr, e)
    return time.perf_counter() - t, float(r.ttft.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", default="64,1024,16384")
    ap.add_argument("--requests", type=int, default=200_000)
    a = ap.parse_args()
    for rep in (int(x) for x in a.replicas.split(",")):
        dt, total = run(rep, a.requests)
        print(f"{rep:>7,} replicas, {a.requests:,} requests: {dt:.3f} s (TTFT sum "
              f"{total:.6f} s)")


if __name__ == "__main__":
    main()
