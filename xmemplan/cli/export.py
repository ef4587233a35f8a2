"""`xmemplan export TRACES --to aiperf -o FILE`: traces in another tool's format."""

from __future__ import annotations

from pathlib import Path

import typer

from xmemplan.defaults import SEED_MODEL

TARGETS = ("aiperf",)


def register(app: typer.Typer) -> None:
    app.command("export")(export)


# The synthetic workload's flags: refused with traces (they used to be ignored).
SYNTHETIC_ONLY = ("num_users", "session_turns_mean", "shared_system_prompt_length",
                  "user_context_prompt_length", "synthetic_input_tokens_mean", "osl")


def export(
    ctx: typer.Context,
    traces: list[Path] | None = typer.Argument(
        None, help="Trace files or directories (any format); none with --user-centric-rate."),
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
    format_name: str | None = typer.Option(
        None, "--trace-format", "-t", help="Read every file as this format instead of "
        "sniffing (as hitrate and plan take it)."),
    format_alias: str | None = typer.Option(
        None, "--format", hidden=True, help="Old spelling of --trace-format."),
    model: str = typer.Option(
        SEED_MODEL, "--model", "-m", help="Warn on rows longer than this model's context."),
    user_centric_rate: float | None = typer.Option(
        None, "--user-centric-rate", help="No traces: write the synthetic multi-turn "
        "workload at this QPS (AIPerf user-centric schedule; the flags below, as size "
        "--gpus takes them)."),
    num_users: int = typer.Option(15, "--num-users", help="Synthetic: users."),
    session_turns_mean: int = typer.Option(20, "--session-turns-mean",
                                           help="Synthetic: turns per session."),
    shared_system_prompt_length: int = typer.Option(
        1000, "--shared-system-prompt-length", help="Synthetic: tokens shared by all users."),
    user_context_prompt_length: int = typer.Option(
        20000, "--user-context-prompt-length", help="Synthetic: tokens unique per user."),
    synthetic_input_tokens_mean: int = typer.Option(
        26, "--synthetic-input-tokens-mean", "--isl", help="Synthetic: new tokens per turn."),
    osl: int = typer.Option(100, "--osl", help="Synthetic: output tokens per turn."),
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
    if format_alias is not None:  # the old spelling: --format was the input format here
        if format_name is not None and format_name != format_alias:
            raise UsageError("--format and --trace-format disagree",
                             "give the input format once, as --trace-format")
        format_name = format_alias
    if user_centric_rate is not None:
        from xmemplan.export.synthetic import export_synthetic
        from xmemplan.sizing.synthetic import SyntheticWorkload

        if traces:
            raise UsageError("give trace files or --user-centric-rate, not both",
                             "--user-centric-rate writes the synthetic workload")
        if spacing is not None or speedup != 1.0 or format_name is not None:
            raise UsageError("--spacing, --speedup and --trace-format apply to traces",
                             "the synthetic workload is written on its own schedule")
        w = SyntheticWorkload(
            shared_system_prompt_length=shared_system_prompt_length,
            user_context_prompt_length=user_context_prompt_length,
            synthetic_input_tokens_mean=synthetic_input_tokens_mean, osl=osl,
            session_turns_mean=session_turns_mean, num_users=num_users)
        res = export_synthetic(w, out, rate_rps=units.parse_rate(user_centric_rate,
                                                                 "--user-centric-rate"),
                               requests=limit or 300, block_tokens=block_tokens)
        render.line(f"wrote {res.rows:,} requests to {res.path} (mooncake_trace, "
                    f"{res.block_tokens}-token blocks: {res.blocks:,} hash_ids, "
                    f"{res.unique_blocks:,} distinct) from the synthetic workload")
        for note in res.notes:
            render.line(f"note: {note}")
        return
    if not traces:
        raise UsageError("no traces given", "name trace files or directories, or write the "
                         "synthetic workload with --user-centric-rate")
    from xmemplan.cli.invocation import refuse_given

    refuse_given(ctx, SYNTHETIC_ONLY, "applies to the synthetic workload "
                 "(--user-centric-rate), not to traces", "drop {flag}, or write the "
                 "synthetic workload with --user-centric-rate and no traces")
    if spacing is not None and speedup != 1.0:
        raise UsageError("--spacing replaces the trace's timestamps, so --speedup would "
                         "change nothing", "give one of them")
    from xmemplan.catalog import load_catalog

    spec = load_catalog().model(model)
    spacing_ms = (units.parse_duration(spacing, "--spacing", lo_open=True) * 1e3
                  if spacing is not None else None)
    with render.spinner("Exporting"):
        res = export_aiperf(traces, out, block_tokens=block_tokens, format_name=format_name,
                            speedup=speedup, limit=limit,
                            context=(model, spec.max_context) if spec.max_context else None,
                            spacing_ms=spacing_ms)
    render.line(f"wrote {res.rows:,} requests to {res.path} (mooncake_trace, "
                f"{res.block_tokens}-token blocks: {res.blocks:,} hash_ids, "
                f"{res.unique_blocks:,} distinct) from {units.count(res.files, 'file')}")
    for note in res.notes:
        render.line(f"note: {note}")
    import sys

    sys.stdout.flush()
    for warning in res.warnings:
        render.warn(warning)
