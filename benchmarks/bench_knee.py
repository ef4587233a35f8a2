"""Throughput past the knee: closed-loop users against one replica, by engine rule.

Qwen3-30B-A3B FP8 (FP8 KV) on one H100 (`--mem-fraction 0.9`: an 844K-token pool),
engine defaults as `size` sets them (vLLM 8,192-token budget), every user sending its next
request as soon as its reply is done, prompts lognormal around the given median (sigma
0.3, no shared prefix), fixed outputs. Requests/s over the run after the first fifth of
replies, preemptions per request, time-average KV use. Rules: vLLM 0.33 as shipped
(`scheduler_reserve_full_isl` on, prefix caching on), with the full-sequence reserve off
(`--no-scheduler-reserve-full-isl`), and off with prefix caching off too (a preempted
request then recomputes all it had); SGLang 0.5.23 (retraction, new_token_ratio).
docs/size.md "The simulator" quotes this table.

    .venv/bin/python benchmarks/bench_knee.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np

RULES = (  # label, policy, reserve_full_isl, prefix caching
    ("vLLM", "vllm", True, True),
    ("vLLM no reserve", "vllm", False, True),
    ("vLLM no reserve, no cache", "vllm", False, False),
    ("SGLang", "sglang", True, True),
)
SHAPES = ((32768, 512), (65536, 256), (16384, 1024), (8192, 2048))


def closed_loop(prompt: int, output: int, users: int, *, policy: str = "vllm",
                full_isl: bool = True, caching: bool = True, per_user: int = 12,
                ) -> tuple[float, float, float]:
    """(requests/s after the first fifth of replies, preemptions per request, KV use)."""
    from xmemplan.sizing.engine import run
    from xmemplan.sizing.request import build_request
    from xmemplan.sizing.sim import Traffic
    from xmemplan.sizing.simmodel import config_for, requests_for

    req, _ = build_request(ttft_slo="10s", prompt_tokens=str(prompt), hit_rate=0.0, users=8,
                           model="qwen3-30b-a3b-fp8", gpu="h100-sxm", engine=policy,
                           kv_dtype="fp8", mem_fraction=0.9, tp=1)
    n = users * per_user
    rng = np.random.default_rng(0)
    p = np.round(prompt * np.exp(rng.normal(0.0, 0.3, n)))
    prev = np.arange(n) - users
    prev[prev < 0] = -1
    tr = Traffic(np.zeros(n), p, output=np.full(n, output, np.int64), prev=prev,
                 think=np.zeros(n))
    cfg = config_for(req.setup, replicas=1, nodes=1, load_tier="host", policy=policy,
                     prompt_p50=float(prompt)).replace(reserve_full_isl=full_isl,
                                                       prefix_caching=caching)
    er = requests_for(tr, shared=np.zeros(n), tier_tokens=np.zeros(n), tier=-1,
                      block_tokens=cfg.block_tokens)
    r, *_ = run(er, cfg)
    done = np.sort(r.done)
    t0 = done[n // 5]
    return (n - 1 - n // 5) / float(done[-1] - t0), r.preemptions_per_request(), r.kv_usage()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", default="8,16,32,48,64,96,128")
    a = ap.parse_args()
    users = [int(u) for u in a.users.split(",")]
    t = time.perf_counter()
    print(f"requests/s by closed-loop users ({', '.join(map(str, users))}); peak -> last; "
          "preemptions per request at the last")
    for prompt, output in SHAPES:
        for label, pol, fi, ca in RULES:
            rows = [closed_loop(prompt, output, u, policy=pol, full_isl=fi, caching=ca)
                    for u in users]
            rps = [x[0] for x in rows]
            peak = max(rps)
            print(f"{prompt // 1024:>3}K/{output:<5} {label:26} "
                  + " ".join(f"{x:5.2f}" for x in rps)
                  + f"  {rps[-1] / peak - 1:+4.0%} pre {rows[-1][1]:4.2f} "
                  f"KV {rows[-1][2]:3.0%}")
    print(f"({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
