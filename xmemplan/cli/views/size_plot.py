"""`size --plot FILE.png`: TTFT against hit rate per tier (matplotlib, imported lazily)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xmemplan.cli.views.plots import _pyplot, save_figure
from xmemplan.sizing.planner import SizeRequest, SizeResult, ttft_percentiles


def plot_ttft(req: SizeRequest, result: SizeResult, path: Path) -> None:
    plt = _pyplot()
    s = float(result.sensitivity["prompt_tokens"])
    hit_rates = np.linspace(0.90, 1.0, 41)
    nodes = result.recommended_nodes or result.nodes_for_capacity
    series = [
        ("host DRAM", req.host, 1.0),
        (f"X-Mem, {nodes} node(s)", req.xmem, float(nodes)),
    ]
    from dataclasses import replace

    from xmemplan.sizing.workload import Workload

    one = replace(req, workload=Workload("", np.array([s]), np.array([0.0]), 1.0))
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for label, tier, n in series:
        p50, p99 = [], []
        for h in hit_rates:
            (a, z), _ = ttft_percentiles(one, tier, np.array([np.floor(s * h)]), nodes=n)
            p50.append(a * 1e3)
            p99.append(z * 1e3)
        line = ax.plot(hit_rates, p50, label=f"{label} p50")[0]
        ax.plot(hit_rates, p99, linestyle="--", color=line.get_color(), label=f"{label} p99")
    ax.axhline(result.ttft_slo_ms, color="black", linewidth=1, label="SLO")
    ax.set_xlabel("prefix hit rate")
    ax.set_ylabel("TTFT (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{result.model} on {result.gpu}, {s:,.0f}-token prompts, "
                 f"{result.concurrency} in flight", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        save_figure(fig, path, "--plot")
    finally:
        plt.close(fig)
