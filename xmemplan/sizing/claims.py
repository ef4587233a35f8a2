"""The seed blog's X-Mem claims, re-derived with the shipped model (docs/model.md section 4).

    python -m xmemplan.sizing.claims    # prints the tables docs/model.md carries

"Up to ~6.7x TTFT" (single request, about 100 % hit) and "~3x at >95 % hit" (64Ki
prompts, 8 prefills in flight per GPU) are ratios of X-Mem TTFT over host-DRAM TTFT.
A test checks docs/model.md carries exactly what this module prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xmemplan.catalog import Catalog, load_catalog
from xmemplan.sizing.calibration import TRANSFERS, K
from xmemplan.sizing.model import (
    DEFAULT_CALIBRATION,
    SGLANG_HICACHE,
    VLLM_OFFLOAD,
    Transfer,
    ttft,
)

SEED = "qwen3-30b-a3b-fp8"  # the blog's model: FP8 weights, BF16 KV (96 KiB/token)


@dataclass(frozen=True)
class Sweep:
    label: str
    gpu: str
    model: str
    engine: str  # sglang: layer overlap; vllm: sum
    transfer: Transfer
    max_k: int  # prompts of 1K .. max_k K tokens
    tail: int  # tokens recomputed (SGLang: the last page; vLLM: one token)


SWEEPS = (
    Sweep("SGLang, H100, FP8 weights (the blog's setup)", "h100-sxm", SEED, "sglang",
          SGLANG_HICACHE, 90, SGLANG_HICACHE.page_tokens),
    Sweep("vLLM, H200, BF16 weights (netpreme/vllm_xmem benchmark)", "h200-sxm",
          "qwen3-30b-a3b", "vllm", TRANSFERS["vllm128"], 100, 1),
)


def single_request_ratios(s: Sweep, cat: Catalog) -> tuple[np.ndarray, np.ndarray,
                                                            np.ndarray]:
    """(prompt tokens, DRAM TTFT s, X-Mem TTFT s) of one request at ~100 % hit."""
    prompts = np.arange(1, s.max_k + 1) * float(K)
    hits = prompts - s.tail
    cal = DEFAULT_CALIBRATION.for_engine(s.engine)
    overlap = "layer" if s.engine == "sglang" else "sum"
    m, g = cat.model(s.model), cat.gpu(s.gpu)
    out = []
    for tier in ("host-dram-pcie5", "xmem"):
        b = ttft(m, g, cat.tier(tier), prompts, hits, overlap=overlap,
                 transfer=s.transfer, calibration=cal)
        out.append(np.asarray(b.ttft_s))
    return prompts, out[0], out[1]


def up_to_markdown(cat: Catalog | None = None) -> str:
    c = cat or load_catalog()
    lines = ["| setup | 1K | 10K | 50K | 80K | max (at) | DRAM / X-Mem TTFT at max |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for s in SWEEPS:
        p, d, x = single_request_ratios(s, c)
        r = d / x
        i = int(np.argmax(r))
        cells = [f"{r[k - 1]:.2f}x" for k in (1, 10, 50, 80)]
        lines.append(f"| {s.label} | " + " | ".join(cells)
                     + f" | {r[i]:.2f}x ({p[i] / K:.0f}K) | {d[i] * 1e3:.0f} / "
                     f"{x[i] * 1e3:.1f} ms |")
    return "\n".join(lines)


def sweep_markdown(s: Sweep = SWEEPS[1], at_k: tuple[int, ...] = (1, 10, 20, 50, 100),
                   cat: Catalog | None = None) -> str:
    """DRAM and X-Mem TTFT of one sweep at a few prompt lengths (docs/model.md: the
    H200 benchmark whose measured figures are an image)."""
    p, d, x = single_request_ratios(s, cat or load_catalog())
    idx = [k - 1 for k in at_k]
    head = "| prompt | " + " | ".join(f"{k}K" for k in at_k) + " |"
    return "\n".join([
        head, "|---|" + "---:|" * len(at_k),
        "| host DRAM TTFT | " + " | ".join(_ms(d[i]) for i in idx) + " |",
        "| X-Mem TTFT | " + " | ".join(_ms(x[i]) for i in idx) + " |",
        "| X-Mem/DRAM speed-up | " + " | ".join(f"{d[i] / x[i]:.2f}x" for i in idx) + " |",
    ])


def _ms(seconds: float) -> str:
    v = seconds * 1e3
    return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"


BURST = (("h100-sxm", "host-dram-pcie5", (0.95, 0.98, 0.99, 0.995, 1.0)),
         ("b200", "host-dram-pcie5", (0.98, 0.99)),
         ("gb200", "host-dram-c2c", (0.98, 0.99)))


def three_x_markdown(cat: Catalog | None = None, in_flight: int = 8,
                     prompt: float = 64 * K) -> str:
    """Mean TTFT of `in_flight` 64Ki prefills on one GPU, host DRAM over X-Mem."""
    c = cat or load_catalog()
    m = c.model(SEED)
    lines = ["| GPU | host tier | hit | sum (vLLM) | layer (SGLang) |", "|---|---|---:|---:|---:|"]
    for gpu, host, hits in BURST:
        g = c.gpu(gpu)
        for h in hits:
            cells = []
            for engine, overlap, tr in (("vllm", "sum", VLLM_OFFLOAD),
                                        ("sglang", "layer", SGLANG_HICACHE)):
                cal = DEFAULT_CALIBRATION.for_engine(engine)
                hit = min(prompt * h, prompt - 1)
                t = [float(np.asarray(ttft(m, g, c.tier(tier), prompt, hit,
                                           concurrency=in_flight, overlap=overlap,
                                           transfer=tr, calibration=cal).ttft_s))
                     for tier in (host, "xmem")]
                cells.append(f"{t[0] / t[1]:.2f}x")
            lines.append(f"| {g.name} | {host} | {h:g} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(up_to_markdown())
    print()
    print(sweep_markdown())
    print()
    print(three_x_markdown())
