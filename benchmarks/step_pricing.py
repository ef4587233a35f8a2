"""Step pricing candidates, each refit end to end: single-request fit, loaded fit, and an
unseen loaded MoE run (issue 19, "the MoE kernel's efficiency as a function of tokens per
step"; docs/model.md section 6, "Step pricing tried").

    .venv/bin/python benchmarks/step_pricing.py [--variants shipped,max,max-moe,add-moe]

A candidate sets how a forward pass's layer floor (layers x layer_latency) combines with
its rooflines, `add` (the shipped rule: on top) or `max` (the pass's minimum), and the MoE
kernels' fixed time per MoE layer and pass: 0, or the intercept of fused-MoE kernel time
against the expert bytes a pass touches, fitted here on the `benchmark_moe.py` table of
vllm-project/vllm PR #24700 (H100, Qwen3-30B-A3B fp8_w8a8, TP 1, the PR's configs, 1-128
tokens; the catalog's expert bytes and k/E). `add-tp` prices the tensor-parallel
all-reduces instead (2 a layer: 5 us + 2 (tp - 1) / tp x the activations over 370 / 450 of
NVLink's per-direction line rate; sources at ALLREDUCE_*). For each candidate:
1. the single-request fit (`xmemplan.sizing.calibration.fit`, data/measurements/
   public.csv, a third held out) is redone under it: layer floor, t0s, eta_attention;
2. the loaded fit (`xmemplan.sizing.loaded`, data/measurements/loaded.csv) is redone on
   that calibration: per-step and per-request overheads per engine;
3. an unseen loaded MoE run is replayed with the result: vllm-project/vllm PR #23151,
   "WO tuned configs (TP=1, EP=1, on H100)": Qwen3-30B-A3B BF16 on one H100, vLLM with
   its default fused-MoE configs, `benchmark_serving.py --dataset-name random
   --random-input 2048 --random-output 1024 --max-concurrency 10 --num-prompt 100`
   (204,169 input and 101,576 output tokens: 2,042 / 1,016 a request): median TTFT
   300.05 ms, median TPOT 13.17 ms, 739.79 output tokens/s. No fit uses it.
Nothing here changes the shipped constants. The slower checks (benchmarks/loaded_check.py,
replicas_check.py, rate_check.py) under the same candidates are in docs/model.md section 6.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

# vllm-project/vllm PR #24700 "[Perf] Improve default fused moe configs by analyzing tuned
# configs", "Benchmarks on H100", Qwen3 MoE FP8 (`benchmark_moe.py --model=Qwen/Qwen3-30B-A3B
# -tp=1 --dtype=fp8_w8a8`), the "# PR" column: tokens in the batch, kernel time in us
MOE_KERNEL_US = ((1, 40.44), (2, 56.15), (4, 78.10), (8, 118.64), (16, 164.64),
                 (24, 193.48), (32, 210.07), (48, 230.59), (64, 237.26), (96, 244.33),
                 (128, 247.67))
# Tensor-parallel all-reduces (candidate "add-tp"): latency per all-reduce, sgl-project/sglang
# PR #2904 (custom all-reduce on H100, 0.5-32 KB: 3.7-4.8 us at TP 2 and 4, 5.7-7.8 at TP 8);
# bus bandwidth share of NVLink's line rate, NVIDIA/nccl-tests issue #212 (NCCL maintainer:
# "With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s"
# of the 450 GB/s line rate)
ALLREDUCE_LATENCY_S = 5e-6
ALLREDUCE_BUS_SHARE = 370 / 450
# vllm-project/vllm PR #23151, "WO tuned configs (TP=1, EP=1, on H100)"
UNSEEN = {"ttft_p50_ms": 300.05, "tpot_p50_ms": 13.17, "out_tok_s": 739.79}


def moe_intercept() -> tuple[float, float]:
    """(fixed seconds per MoE layer, bytes/s) of kernel time = fixed + touched expert bytes
    / rate, least squares over the PR's table."""
    from xmemplan.catalog import load_catalog

    m = load_catalog().model("qwen3-30b-a3b-fp8")
    per_layer = m.expert_params / m.layers  # FP8: one byte a parameter
    t = np.array([x for x, _ in MOE_KERNEL_US], float)
    us = np.array([y for _, y in MOE_KERNEL_US])
    touched = per_layer * (1 - (1 - m.experts_per_token / m.experts) ** t)
    (a, b), *_ = np.linalg.lstsq(np.vstack([np.ones_like(t), touched]).T, us * 1e-6,
                                 rcond=None)
    return float(a), float(1 / b)


@dataclass(frozen=True)
class Variant:
    name: str
    rule: str
    moe: bool
    tp_comm: bool = False


VARIANTS = {v.name: v for v in (Variant("shipped", "add", False), Variant("max", "max", False),
                                Variant("max-moe", "max", True),
                                Variant("add-moe", "add", True),
                                Variant("add-tp", "add", False, True))}


def run_variant(v: Variant, moe_s: float) -> dict[str, Any]:
    from xmemplan.sizing import calibration as C
    from xmemplan.sizing import loaded as L
    from xmemplan.sizing import model as M

    base = replace(M.DEFAULT_CALIBRATION, floor_rule=v.rule,
                   moe_layer_latency_s=moe_s if v.moe else 0.0,
                   allreduce_latency_s=ALLREDUCE_LATENCY_S if v.tp_comm else 0.0,
                   allreduce_bus_share=ALLREDUCE_BUS_SHARE if v.tp_comm else 0.0)
    res = C.fit(base=base)
    rows = C.fit_table(res.params, base=res.calibration)
    single = C.summary(rows)
    cal = res.calibration

    class Sim(L.Simulator):
        def setup(self, run: L.Run) -> Any:
            s = super().setup(run)
            return replace(s, calibration=cal.for_engine(run.engine))

    sim = Sim()
    fits = L.fit_all(L.public_points(), sim)
    loaded = {f.engine: (f.constants, L.summary(f)) for f in fits}
    ov = loaded["vllm"][0]
    run = L.Run(engine="vllm", model="qwen3-30b-a3b", gpu="h100-sxm", tp=1,
                prompt_tokens=2042, output_tokens=1016, requests=100, concurrency=10)
    fig = sim.figures(run, (ov["base_s"], ov["per_token_s"], ov["per_seq_s"]))
    return {"params": res.params, "single": single, "loaded": loaded,
            "unseen": {k: fig[k] / UNSEEN[k] - 1 for k in UNSEEN}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="shipped,max,max-moe,add-moe,add-tp",
                    help="comma-separated: " + ", ".join(VARIANTS))
    args = ap.parse_args()
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        ap.error(f"unknown variant {bad[0]!r}; use " + ", ".join(VARIANTS))
    a, bw = moe_intercept()
    t0 = time.perf_counter()
    out = {n: run_variant(VARIANTS[n], a) for n in names}
    print(f"step pricing, refit end to end ({time.perf_counter() - t0:.0f} s): single-request "
          "held-out median, loaded held-out medians, unseen MoE run errors")
    print(f"MoE kernel fixed time {a * 1e6:.1f} us per MoE layer and pass, expert bytes at "
          f"{bw / 1e12:.2f} TB/s (vLLM PR #24700, H100, 1-128 tokens)")
    hdr = (f"{'variant':8} {'floor':>6} {'t0 vllm':>8} {'single':>7} {'vllm ovh':>15} "
           f"{'vllm':>11} {'sglang ovh':>15} {'sglang':>11} {'TTFT':>6} {'TPOT':>6} "
           f"{'tok/s':>6}")
    print(hdr)
    for n, r in out.items():
        p, s, ld, u = r["params"], r["single"], r["loaded"], r["unseen"]

        def ovh(e: str) -> str:
            c = ld[e][0]
            return f"{c['base_s'] * 1e3:.2f}ms+{c['per_seq_s'] * 1e6:.0f}us"

        def med(e: str) -> str:
            s_ = ld[e][1]
            return (f"{s_['fit']['median_abs_error']:.0%}/"
                    f"{s_['held-out']['median_abs_error']:.0%}")

        print(f"{n:8} {p['layer_s'] * 1e6:5.0f}us {p['t0:vllm'] * 1e3:6.1f}ms "
              f"{s['held-out']:7.1%} {ovh('vllm'):>15} {med('vllm'):>11} "
              f"{ovh('sglang'):>15} {med('sglang'):>11} {u['ttft_p50_ms']:+6.0%} "
              f"{u['tpot_p50_ms']:+6.0%} {u['out_tok_s']:+6.0%}")
    print("floor: the refit layer floor per layer; single: held-out single-request median "
          "|error| (guardrail 12.7 %); vllm / sglang: loaded fit / held-out median |error|; "
          "TTFT, TPOT, tok/s: the unseen PR #23151 run")
    if any(not math.isfinite(r["single"]["held-out"]) for r in out.values()):
        raise SystemExit("a fit produced no held-out figure")


if __name__ == "__main__":
    main()
