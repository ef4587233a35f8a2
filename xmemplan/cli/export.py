"""`xmemplan export TRACES --to aiperf -o FILE`: traces in another tool's format."""

from __future__ import annotations

from pathlib import Path

import typer

TARGETS = ("aiperf",)


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    traces: list[Path] = typer.Argument(..., help="Trace files or directories (any format)."),
    to: str = typer.Option(..., "--to", help="Target format: aiperf (mooncake_trace JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="File to write."),
    block_tokens: int = typer.Option(
        512, "--block-tokens", min=1, max=1 << 20,
        help="Tokens per hash_id block (give AIPerf the same --isl-block-size)."),
    speedup: float = typer.Option(1.0, "--speedup", help="Divide the timestamps by this."),
    spacing: str | None = typer.Option(
        None, "--spacing", help="Timestamps N x this (e.g. 200ms) instead of the trace's: "
        "one request at a time, in replay order."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Write the first N requests."),
    format_name: str | None = typer.Option(None, "--format", help="Force the input format."),
) -> None:
    """Write traces as AIPerf's mooncake_trace (replay them with 'aiperf profile').

    Shared prefixes stay shared: hash_ids are prefix-chained blocks of --block-tokens.
    Each row gets its own session_id and extra.xmemplan_row, which 'validate --aiperf'
    uses to match AIPerf's records back to the rows.
    """
    from xmemplan import units
    from xmemplan.cli.views import render
    from xmemplan.errors import UsageError
    from xmemplan.export.aiperf import export_aiperf

    if to not in TARGETS:
        raise UsageError(f"unknown export target '{to}'", f"use {', '.join(TARGETS)}")
    res = export_aiperf(traces, out, block_tokens=block_tokens, format_name=format_name,
                        speedup=speedup, limit=limit,
                        spacing_ms=units.parse_duration(spacing, "--spacing", lo_open=True) * 1e3
                        if spacing is not None else None)
    render.line(f"wrote {res.rows:,} requests to {res.path} (mooncake_trace, "
                f"{res.block_tokens}-token blocks: {res.blocks:,} hash_ids, "
                f"{res.unique_blocks:,} distinct) from {units.count(res.files, 'file')}")
    for note in res.notes:
        render.line(f"note: {note}")
