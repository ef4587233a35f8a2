"""Engine steps and simulated requests per second per core of the serving simulator
(xmemplan.sizing.engine, numba kernels).

    python benchmarks/bench_sim.py [--requests 200000]

Three traffic shapes on the seed hardware (Qwen3-30B-A3B-FP8 on H100, X-Mem tier, SGLang
policy, 8 GPUs): Poisson arrivals with prefill only (1 output token), Poisson with 100
output tokens (decode steps), and closed-loop sessions (each request extends the previous
one of its user after a think time: its prefix hits in HBM where its blocks survived).
One thread (numba kernels are single-threaded), compiled once before timing; the figures
are engine steps / median seconds and requests / median seconds. A run of decode-only
steps is priced in one event; "steps" counts every step of it.
"""

from __future__ import annotations

import argparse

import numpy as np
from _util import machine, median_time

from xmemplan.catalog import load_catalog
from xmemplan.sizing.engine import run
from xmemplan.sizing.sim import Traffic
from xmemplan.sizing.simmodel import Setup, config_for, requests_for


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policy", default="sglang")
    a = ap.parse_args()
    n = a.requests
    cat = load_catalog()
    s = Setup(model=cat.model("qwen3-30b-a3b-fp8"), gpu=cat.gpu("h100-sxm"),
              host=cat.tier("host-dram-pcie5"), xmem=cat.tier("xmem"))
    rng = np.random.default_rng(0)
    prompt = rng.integers(2_000, 64_000, n).astype(np.float64)
    hit = np.floor(prompt * 0.97)
    cfg = config_for(s, replicas=8, nodes=1, policy=a.policy, prompt_p50=33_000)
    # 8 GPUs at about 70 % busy with prefill only at these prompts.
    rate = 50.0
    arr = np.cumsum(rng.exponential(1.0 / rate, n))
    users = 64
    prev = np.arange(n) - users
    prev[prev < 0] = -1

    def reqs(tr: Traffic, shared: np.ndarray) -> object:
        return requests_for(tr, shared=shared, tier_tokens=hit[: len(tr)], tier=1,
                            block_tokens=cfg.block_tokens)

    zero = np.zeros(n)
    cases = {
        "poisson, prefill only": reqs(Traffic(arr, prompt), zero),
        "poisson, 100 output tokens": reqs(Traffic(arr * 2.5, prompt,
                                                   output=np.full(n, 100)), zero),
        f"closed loop, {users} users, 1 s think": reqs(Traffic(
            np.zeros(n), prompt, prev=prev, think=np.full(n, 1.0), output=np.full(n, 50),
            route=np.where(prev >= 0, -2, -1)), hit),
    }
    small = reqs(Traffic(arr[:1000], prompt[:1000]), zero[:1000])
    run(small, cfg)  # compile (or load the cache) outside the timing
    print(f"# bench_sim: {n:,} requests, policy {a.policy}, {machine()}")
    print(f"{'traffic':<36} {'seconds':>8} {'steps/s':>12} {'requests/s':>12} {'util':>5} "
          f"{'p99 ms':>8} {'KV':>4} {'HBM/hits':>8}")
    for name, er in cases.items():
        result, *_ = run(er, cfg)  # type: ignore[arg-type]
        t, _ = median_time(lambda er=er: run(er, cfg), repeat=a.repeat, warmup=0)
        print(f"{name:<36} {t:8.3f} {result.steps / t:12,.0f} {n / t:12,.0f} "
              f"{result.utilisation():5.2f} {np.percentile(result.ttft, 99) * 1e3:8.0f} "
              f"{result.kv_usage():4.0%} {result.hbm_share_of_hits():8.0%}")


if __name__ == "__main__":
    main()
