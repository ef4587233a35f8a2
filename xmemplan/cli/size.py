"""`xmemplan size --ttft-slo 500ms`: which KV tier and how many X-Mem nodes meet a TTFT SLO."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from xmemplan.defaults import SEED_GPU

OUTPUT_FORMATS = ("table", "json", "csv")


def register(app: typer.Typer) -> None:
    app.command("size")(size)


def size(
    ttft_slo: str = typer.Option(..., "--ttft-slo", help="TTFT target with a unit: 500ms, 2s."),
    workload: Path | None = typer.Option(
        None, "--workload", "-w", help="A profile from 'xmemplan hitrate --profile-out'."
    ),
    prompt_tokens: str | None = typer.Option(
        None, "--prompt-tokens", help="Prompt length: 64Ki (65,536) or 64k (64,000)."
    ),
    hit_rate: float | None = typer.Option(
        None, "--hit-rate", help="Share of prompt tokens served from cache, 0 to 1."
    ),
    model: str | None = typer.Option(None, "--model", "-m", help="Model name (see catalog)."),
    gpu: str = typer.Option(SEED_GPU, "--gpu", help="GPU name (see 'xmemplan catalog')."),
    concurrency: int = typer.Option(8, "--concurrency", "-c", help="Prefills in flight per GPU."),
    rate: float | None = typer.Option(
        None, "--rate", help="Arrival rate over all GPUs (requests/s); adds queueing delay."
    ),
    gpus: int = typer.Option(8, "--gpus", help="GPUs loading from the same X-Mem nodes."),
    working_set: str | None = typer.Option(
        None, "--working-set", help="KV working set to keep (bytes like 20TB, or tokens)."
    ),
    engine: str = typer.Option(
        "sglang", "--engine", help="sglang (HiCache: layer overlap, 64-token pages, kernel "
        "copies) or vllm (OffloadingConnector: load then compute, 16-token blocks, DMA)."
    ),
    overlap: str | None = typer.Option(
        None, "--overlap", help="sum, layer or max (default: the engine's)."
    ),
    page_tokens: int | None = typer.Option(None, "--page-tokens", help="Tokens per KV page."),
    slo_at: str = typer.Option("p99", "--slo-at", help="Percentile the SLO applies to: p50/p99."),
    host_tier: str = typer.Option("host-dram-pcie5", "--host-tier", help="Host tier name."),
    xmem_tier: str = typer.Option("xmem", "--xmem-tier", help="X-Mem tier name."),
    catalog: list[Path] = typer.Option(
        [], "--catalog", help="TOML file adding or overriding catalog entries (repeatable)."
    ),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or csv."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw TTFT against hit rate per tier to FILE.png (matplotlib)."
    ),
) -> None:
    """Predict TTFT per KV tier and the X-Mem node count that meets a TTFT SLO."""
    from xmemplan.cli.views import render
    from xmemplan.errors import UsageError
    from xmemplan.sizing.planner import plan
    from xmemplan.sizing.request import build_request

    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format '{fmt}'", "use table, json or csv")
    if plot is not None and plot.suffix.lower() != ".png":
        raise UsageError(f"cannot tell the type of '{plot}'", "end --plot with .png")
    req, notes = build_request(
        ttft_slo=ttft_slo, workload=workload, prompt_tokens=prompt_tokens, hit_rate=hit_rate,
        model=model, gpu=gpu, concurrency=concurrency, rate=rate, gpus=gpus,
        working_set=working_set, engine=engine, overlap=overlap, page_tokens=page_tokens,
        slo_at=slo_at, host_tier=host_tier, xmem_tier=xmem_tier, catalog=catalog,
    )
    result = plan(req)
    if plot is not None:
        from xmemplan.cli.views.size_plot import plot_ttft

        plot_ttft(req, result, plot)
    for note in notes:
        render.warn(note)
    _report(result, fmt)
    if plot is not None:
        render.info(f"Wrote {plot}")


def _report(r: Any, fmt: str) -> None:
    from xmemplan.cli.views import render

    if fmt == "json":
        render.emit_json(r.to_dict())
        return
    cols = ["option", "nodes", "hit_ratio", "effective_gb_per_s", "compute_ms", "load_ms",
            "ttft_p50_ms", "ttft_p99_ms", "meets_slo"]
    rows = [[o.option, o.nodes, o.hit_ratio, o.effective_bandwidth_gb_per_s, o.compute_ms,
             o.load_ms, o.ttft_p50_ms, o.ttft_p99_ms, o.meets_slo] for o in r.options]
    if fmt == "csv":
        render.emit_csv(cols, rows)
        return
    render.line(f"Workload: {r.workload}")
    render.line(
        f"Model {r.model} on {r.gpu} x {r.gpus}; engine {r.engine} (overlap {r.overlap}); "
        f"TTFT SLO {r.ttft_slo_ms:g} ms at p{r.slo_percentile:g}")
    render.table(
        ["option", "nodes", "hit ratio", "GB/s per GPU", "compute ms", "load ms",
         "TTFT p50 ms", "TTFT p99 ms", "meets SLO"],
        [[o.option, o.nodes, round(o.hit_ratio, 3), round(o.effective_bandwidth_gb_per_s, 1),
          round(o.compute_ms, 1), round(o.load_ms, 1), round(o.ttft_p50_ms, 1),
          round(o.ttft_p99_ms, 1), o.meets_slo] for o in r.options],
        title="Options (compute and load: one median request alone)",
    )
    render.table(
        ["", "value"],
        [("nodes for bandwidth", r.nodes_for_bandwidth),
         ("nodes for capacity", r.nodes_for_capacity),
         ("recommended nodes", r.recommended_nodes),
         ("needed GB/s per GPU", None if r.required_bandwidth_per_gpu_gb_per_s is None
          else round(r.required_bandwidth_per_gpu_gb_per_s, 1)),
         ("X-Mem GB/s per GPU (ceiling)", round(r.xmem_per_gpu_limit_gb_per_s, 1)),
         ("speed-up vs host DRAM (p50)", _x(r.speedup_vs_host_dram_p50)),
         ("speed-up vs host DRAM (p99)", _x(r.speedup_vs_host_dram_p99)),
         ("TTFT p99, unlimited bandwidth (ms)", round(r.compute_only_ttft_p99_ms, 1)),
         ("max prefills in flight meeting SLO", r.max_concurrency_meeting_slo)],
        title="X-Mem sizing",
    )
    render.line(r.verdict)
    for reason in r.reasons:
        render.line(f"- {reason}")
    s = r.sensitivity
    render.table(
        ["hit rate"] + [f"{b:g} GB/s" for b in s["bandwidths_gb_per_s"]],
        [[f"{h:.2f}"] + [round(v) for v in row] for h, row in zip(s["hit_rates"],
                                                                  s["ttft_p99_ms"])],
        title=f"TTFT p99 (ms) by hit rate and effective bandwidth per GPU "
        f"({s['prompt_tokens']:,.0f}-token prompts, {r.concurrency} in flight)",
    )
    for a in r.assumptions:
        render.info(f"Assumption: {a}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"
