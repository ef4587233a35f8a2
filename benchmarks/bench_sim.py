"""Simulated requests per second per core of the prefill-serving simulator (numba kernel).

    python benchmarks/bench_sim.py [--requests 1000000]

Three traffic shapes on the seed hardware (Qwen3-30B-A3B-FP8 on H100, X-Mem tier, SGLang
layer overlap, 8 GPUs): Poisson arrivals with prefill only (1 output token), Poisson with
100 output tokens (decode steps interleaved), and closed-loop sessions (each request
follows the previous one of its user after a think time). One thread (numba kernels are
single-threaded), compiled once before timing; the figure is requests / median seconds.
"""

from __future__ import annotations

import argparse

import numpy as np
from _util import machine, median_time

from xmemplan.catalog import load_catalog
from xmemplan.sizing.sim import Traffic, simulate
from xmemplan.sizing.simmodel import Setup, engine_for


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    n = a.requests
    cat = load_catalog()
    s = Setup(model=cat.model("qwen3-30b-a3b-fp8"), gpu=cat.gpu("h100-sxm"),
              host=cat.tier("host-dram-pcie5"), xmem=cat.tier("xmem"))
    e = engine_for(s, replicas=8, nodes=1)
    rng = np.random.default_rng(0)
    prompt = rng.integers(2_000, 64_000, n).astype(np.float64)
    hit = np.floor(prompt * 0.97)
    # 8 GPUs at about 70 % busy with prefill only at these prompts.
    rate = 50.0
    arr = np.cumsum(rng.exponential(1.0 / rate, n))
    users = 64
    prev = np.arange(n) - users
    prev[prev < 0] = -1
    cases = {
        "poisson, prefill only": Traffic(arr, prompt, hit_xmem=hit),
        # decode of 100 tokens at these contexts roughly halves what a GPU sustains
        "poisson, 100 output tokens": Traffic(arr * 2.5, prompt, hit_xmem=hit,
                                              output=np.full(n, 100)),
        f"closed loop, {users} users, 1 s think": Traffic(
            np.zeros(n), prompt, hit_xmem=hit, prev=prev, think=np.full(n, 1.0),
            route=np.where(prev >= 0, -2, -1)),
    }
    small = Traffic(arr[:1000], prompt[:1000], hit_xmem=hit[:1000])
    simulate(small, e)  # compile (or load the cache) outside the timing
    print(f"# bench_sim: {n:,} requests, {machine()}")
    print(f"{'traffic':<36} {'seconds':>8} {'requests/s':>12} {'util':>5} {'p99 ms':>8}")
    for name, tr in cases.items():
        result = simulate(tr, e)
        t, _ = median_time(lambda tr=tr: simulate(tr, e), repeat=a.repeat, warmup=0)
        print(f"{name:<36} {t:8.3f} {n / t:12,.0f} {result.utilisation():5.2f} "
              f"{np.percentile(result.ttft, 99) * 1e3:8.0f}")


if __name__ == "__main__":
    main()
