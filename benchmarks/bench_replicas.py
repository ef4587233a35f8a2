"""Per-replica caches and routers at 64 replicas (docs/performance.md, "Replicas").

    python benchmarks/bench_replicas.py [--replicas 64] [--requests 4000]

One evaluation = `Planner.run` of one option at a fixed GPU count: the router places every
request over per-replica HBM and the shared tier (xmemplan.sizing.routing), then the
simulator runs the traffic. The workload: 20,000-token prompts, hit rate 0.8, 250 prefix
groups, Poisson at 8 requests/s per replica. Each router once to compile or load its
kernel, then the median of 3 alternating runs per router (fresh planners: nothing cached);
the placement alone is timed apart. Budget (issue 25): a 64-replica evaluation under 5 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from _util import machine

from xmemplan.sizing import routing as RT
from xmemplan.sizing.planner import Planner
from xmemplan.sizing.request import build_request

ROUTERS = ("round-robin", "random", "session", "sglang-cache-aware", "llm-d-prefix",
           "llm-d-precise", "dynamo-kv")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4000)
    a = ap.parse_args()
    base, _ = build_request(ttft_slo="2s", prompt_tokens="20k", hit_rate=0.8,
                            rate=8 * a.replicas, prefix_groups=250, requests=a.requests,
                            max_gpus=max(1024, a.replicas))
    g = a.replicas * base.shape.gpus
    for r in ROUTERS:  # compile or load
        Planner(replace(base, router=r, requests=200)).run("xmem", g, 1)
    times: dict[str, list[float]] = {r: [] for r in ROUTERS}
    place: dict[str, list[float]] = {r: [] for r in ROUTERS}
    hits: dict[str, float] = {}
    for _ in range(3):
        for r in ROUTERS:
            p = Planner(replace(base, router=r))
            t = time.perf_counter()
            RT.place(p.stream(1.0), p.deployment("xmem", g, 1), r)
            place[r].append(time.perf_counter() - t)
            p = Planner(replace(base, router=r))
            t = time.perf_counter()
            pt = p.run("xmem", g, 1)
            times[r].append(time.perf_counter() - t)
            hits[r] = pt.split[0] if pt.split else 0.0
    print(f"{a.replicas} replicas, {a.requests:,} requests, X-Mem option; {machine()}")
    print(f"{'router':<20} {'evaluation s':>12} {'placement s':>12} {'own-HBM share':>14}")
    for r in ROUTERS:
        print(f"{r:<20} {statistics.median(times[r]):>12.3f} "
              f"{statistics.median(place[r]):>12.3f} {hits[r]:>14.3f}")


if __name__ == "__main__":
    main()
