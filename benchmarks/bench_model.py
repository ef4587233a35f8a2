"""Benchmark of the TTFT model with the issue-11 terms (docs/performance.md, "model").

A 10,000-configuration grid (10 prompt lengths x 10 hit rates x 10 concurrencies x 10
X-Mem node counts) through `xmemplan.sizing.model.ttft` in one vectorized call, with the
memory roofline (active experts, KV reads), a TP4/EP4 deployment shape, SM interference
(SGLang layer overlap, kernel copies) and the node-shared X-Mem bandwidth all on; plus
the same grid for vLLM (sum overlap, DMA). Target: < 1 s. Prints the median of --runs.

    .venv/bin/python benchmarks/bench_model.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _util import positive_int


def bench(runs: int) -> list[float]:
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing.calibration import VLLM16
    from xmemplan.sizing.model import SGLANG_HICACHE, Shape, ttft

    cat = load_catalog()
    m, g, x = cat.model("qwen3-30b-a3b-fp8"), cat.gpu("h100-sxm"), cat.tier("xmem")
    prompts = np.geomspace(1024, 131_072, 10)[:, None, None, None]
    hits = np.linspace(0.0, 1.0, 10)[None, :, None, None]
    conc = np.arange(1, 11)[None, None, :, None]
    nodes = np.arange(1, 11)[None, None, None, :]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        a = ttft(m, g, x, prompts, np.floor(prompts * hits), concurrency=conc, nodes=nodes,
                 gpus_loading=64, overlap="layer", transfer=SGLANG_HICACHE,
                 shape=Shape(tp=4, ep=4))
        b = ttft(m, g, x, prompts, np.floor(prompts * hits), concurrency=conc, nodes=nodes,
                 gpus_loading=64, overlap="sum", transfer=VLLM16, shape=Shape(tp=4, ep=4))
        times.append(time.perf_counter() - t)
        assert np.shape(a.ttft_s) == (10, 10, 10, 10) and np.all(np.isfinite(b.ttft_s))
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=positive_int, default=7)
    times = bench(ap.parse_args().runs)
    print(f"model: 2 x 10,000 configurations in {statistics.median(times) * 1e3:.1f} ms "
          f"median (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}; target < 1 s)")


if __name__ == "__main__":
    main()
