"""`xmemplan hitrate TRACES...`: prefix-cache hit ratios of agent prompt traces."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from xmemplan import units

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import HitrateResult
    from xmemplan.hitrate.transcript_calls import CallsReport

OUTPUT_FORMATS = ("table", "json", "csv")


def register(app: typer.Typer) -> None:
    app.command("hitrate")(hitrate)


def hitrate(
    traces: list[Path] = typer.Argument(
        ..., help="Trace files or directories (walked recursively).", show_default=False
    ),
    fmt: str = typer.Option(
        "table", "--format", "-f",
        help="Output: table, json or csv. A trace format name here (e.g. mooncake) is taken "
        "as --trace-format.",
    ),
    trace_format: str | None = typer.Option(
        None, "--trace-format", "-t",
        help="Read every file as this format instead of sniffing "
        "(tokens, mooncake, claude-blocks, bailian, ...).",
    ),
    scope: str = typer.Option(
        "auto", "--scope",
        help="session: one cache per session; global: one cache, requests in time order; "
        "auto: session unless a format has no sessions.",
    ),
    page_size: int = typer.Option(
        1, "--page-size", min=1,
        help="Token-id traces: count hits in whole pages of N tokens (SGLang default 1, "
        "vLLM 16).",
    ),
    subagents: bool = typer.Option(
        False, "--subagents", help="Include sub-agent requests, merged into their session."
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Stop at the first bad line instead of skipping and counting."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write the per-request table to FILE.parquet or FILE.csv."
    ),
    workers: int = typer.Option(0, "--workers", min=0, help="Worker processes (0 = one per core)."),
    executor: str = typer.Option(
        "local", "--executor", help="local (worker processes) or ray (Ray tasks; needs the "
        "'ray' extra; docs/performance.md)."
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="With --executor ray: the cluster (auto, ray://HEAD:10001"
        "); default RAY_ADDRESS, else a new local Ray with --workers CPUs."
    ),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer",
        help="Text traces: a built-in tokenizer name (default qwen2.5), a Hugging Face "
        "tokenizer.json path, or 'list' to show the built-ins.",
    ),
    session_field: str | None = typer.Option(
        None, "--session-field",
        help="Request logs: the field holding the session id (dotted for nested fields).",
    ),
    timestamp_field: str | None = typer.Option(
        None, "--timestamp-field",
        help="Request logs: the field holding the request time (Unix s or ISO 8601).",
    ),
    capacity: list[str] = typer.Option(
        [], "--capacity",
        help="Also replay LRU caches of these sizes: tokens (3M) or bytes with --model "
        "(80GB,1TB). Comma-separated, or the flag repeated; each size once (1k and 1000 "
        "are one size and refused together; 1GB and 1GiB are two).",
    ),
    capacity_curve: str | None = typer.Option(
        None, "--capacity-curve",
        help="Hit ratio vs capacity, exact, in one pass: LOW:HIGH:POINTS (1M:100M:20), a "
        "list (1M,3M,10M; each size once) or auto.",
    ),
    tiers: str | None = typer.Option(
        None, "--tiers",
        help="Inclusive tiers, fastest first: HBM=60GB,DRAM=1TB,XMEM=24TB. Tokens served "
        "and bytes moved to the GPU per tier.",
    ),
    model: str | None = typer.Option(
        None, "--model", help="Model whose KV bytes per token turn byte sizes into tokens "
        "(see 'xmemplan catalog').",
    ),
    idle: str | None = typer.Option(
        None, "--idle", help="Working set: a session idle this long (5m) stops being live."
    ),
    profile_out: Path | None = typer.Option(
        None, "--profile-out", help="Write the workload profile (JSON, docs/profile.md) for "
        "'xmemplan size --workload'.",
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write PNG charts to DIR (needs the 'plot' extra: matplotlib)."
    ),
    hidden_prefix: str | None = typer.Option(
        None, "--hidden-prefix", help="Claude Code transcripts: put a stand-in for the "
        "system prompt and tools before each call: auto (its length measured from usage), "
        "N tokens, or none.",
    ),
    tokens: str | None = typer.Option(
        None, "--tokens", help="Claude Code transcripts: 'calibrated' scales each message "
        "to the API's token count (fitted from usage); default: the tokenizer's.",
    ),
    cache_model: str | None = typer.Option(
        None, "--cache-model", help="Finite caches (--capacity, --capacity-curve, --tiers): "
        "lru (default; exact, one pass), vllm (vLLM's block pool) or sglang (SGLang's radix "
        "cache), docs/capacity.md. Claude Code transcripts: anthropic replays the calls under "
        "the API's cache rules, beside the infinite cache.",
    ),
    prefill_only: bool = typer.Option(
        False, "--prefill-only", help="With --cache-model vllm|sglang: do not cache decoded "
        "tokens (by default the trace's output lengths are inserted, as the engines do).",
    ),
) -> None:
    """Replay traces through a prefix cache and report token-level hit ratios."""
    from xmemplan.cli.views import render
    from xmemplan.errors import InputError, UsageError
    from xmemplan.hitrate import HitrateOptions, analyze
    from xmemplan.traces.registry import READERS

    if tokenizer == "list":
        from xmemplan.text.tokenizer import builtin_rows

        render.table(["name", "vocabulary", "status"], builtin_rows(),
                     title="Built-in tokenizers (or --tokenizer PATH/tokenizer.json)")
        return
    if tokenizer is not None:  # fail early on a bad name, before reading any trace
        from xmemplan.text.tokenizer import resolve_name

        resolve_name(tokenizer)
    if fmt not in OUTPUT_FORMATS:
        hint = (f"--format is the output ({', '.join(OUTPUT_FORMATS)}); for the input "
                f"format pass --trace-format {fmt}") if fmt in READERS else (
                f"use one of {', '.join(OUTPUT_FORMATS)}, or --trace-format for the input")
        raise UsageError(f"unknown output format '{fmt}'", hint)
    from xmemplan.units import MAX_PAGE_TOKENS, check_int

    check_int(page_size, "--page-size", 1, MAX_PAGE_TOKENS, "tokens")
    if out is not None and out.suffix not in (".parquet", ".csv"):
        raise UsageError(f"cannot tell the type of '{out}'", "end --out with .parquet or .csv")
    # Outputs are checked before the replay: a missing folder or an input named as an output
    # fails now, not after minutes of work.
    from xmemplan.jsonio import check_output

    for flag, path in (("--out", out), ("--profile-out", profile_out)):
        if path is not None:
            check_output(path, flag, traces)
    if plot is not None:
        from xmemplan.jsonio import check_not_input

        check_not_input(plot, "--plot", traces)
    if out is not None and profile_out is not None and out.resolve() == profile_out.resolve():
        raise UsageError(f"--out and --profile-out are the same file '{out}'",
                         "give each output its own path")
    from xmemplan.cli.views import transcripts as tv
    from xmemplan.hitrate.capacity import CACHE_MODELS as FINITE_MODELS

    if cache_model is not None and cache_model not in FINITE_MODELS + tv.CACHE_MODELS:
        raise UsageError(f"unknown --cache-model '{cache_model}'",
                         f"use {', '.join(FINITE_MODELS + tv.CACHE_MODELS)}")
    finite_model = cache_model if cache_model in FINITE_MODELS else None
    cache_model = None if finite_model else cache_model  # the per-call report's model
    tv.check_flags(hidden_prefix, tokens, cache_model)
    if ray_address is not None and executor != "ray":
        raise UsageError("--ray-address applies to --executor ray",
                         "add --executor ray, or drop --ray-address")
    options = HitrateOptions(
        scope=scope, page_size=page_size, format_name=trace_format, subagents=subagents,
        strict=strict, workers=workers, executor=executor, ray_address=ray_address,
        tokenizer=tokenizer, session_field=session_field,
        timestamp_field=timestamp_field,
    )
    options.hidden_prefix, options.tokens = hidden_prefix, tokens
    from xmemplan.cli.views.capacity import cli_spec

    options.capacity = cli_spec(
        ",".join(capacity) if capacity else None, capacity_curve, tiers, model, idle,
        page_size, profile_out, plot, finite_model, prefill_only,
    )
    with render.progress(None, "Reading traces", unit="bytes") as bar:
        result = analyze(list(traces), options, bar.update)
    if result.unrecognized and strict:
        raise InputError(
            "matches no known trace format", path=result.unrecognized[0],
            hint="pass --trace-format NAME, or remove the file",
        )
    _scope_note(result)
    warn_unread_flags(result, {"--session-field": session_field,
                                "--timestamp-field": timestamp_field,
                                "--tokenizer": tokenizer, "--subagents": subagents,
                                "--tokens": tokens, "--hidden-prefix": hidden_prefix})
    if result.summary["requests"] == 0:
        _warn_skips(result)  # the notes say why (e.g. "add --subagents") before the error
        named = ", ".join(str(t) for t in traces[:3]) + (" ..." if len(traces) > 3 else "")
        if any("add --subagents" in n for n in result.notes):
            raise InputError(f"the input ({named}) holds only sub-agent requests",
                             hint="add --subagents to read them")
        raise InputError(
            f"no requests could be read from the input ({named})",
            hint=_skip_text(result) or "check the paths and --trace-format",
        )
    calls = None
    if hidden_prefix or tokens or cache_model:  # the per-call report: transcripts only
        from xmemplan.hitrate.transcript_calls import analyze_calls

        options.scope = result.scope
        calls = analyze_calls(list(traces), options)
    wrote = None
    if out is not None:
        import io

        from xmemplan.jsonio import write_output

        frame = result.requests_frame()
        if calls is not None:
            frame = tv.out_columns(frame, calls)
        buf = io.BytesIO()
        if out.suffix == ".parquet":
            frame.write_parquet(buf)
        else:
            frame.write_csv(buf)
        write_output(out, buf.getvalue(), "--out", traces)
        wrote = f"Wrote {len(frame):,} requests to {out}"
    _report(result, fmt, calls, cache_model, traces)  # the answer first, then its basis
    if calls is not None:
        tv.say_added(calls)  # stderr, whatever the format
        # The per-call pass reads the same paths: show only what the first did not.
        for note in (n for n in calls.notes if n not in result.notes):
            render.info(f"Note: {note}")
        if calls.skips.total > result.skips.total:
            render.warn(f"{calls.skips.total - result.skips.total:,} more lines skipped "
                        "by the per-call report.")
    if wrote:
        render.info(wrote)
    if result.capacity is not None:
        from xmemplan.cli.views.capacity import finish_cli

        finish_cli(result, fmt, list(traces), profile_out, plot)


def _transcript_hint(result: HitrateResult, calls: CallsReport | None) -> str | None:
    """Claude Code transcripts read bare miss what the API cached: the system prompt and
    tools (not in the files: --hidden-prefix) and the sub-agents' calls (files beside the
    session: --subagents). Say what to add, with the API's own figure, on the first screen."""
    if "claude-transcript" not in result.files_by_format:
        return None
    add = []
    if any("add --subagents" in n for n in result.notes):
        add.append("--subagents")
    if calls is None:
        add.append("--hidden-prefix auto")
    if not add:
        return None
    rep = (result.reported or {}).get("reported_token_hit_ratio")
    api = f" (the API reported {rep:.4f} for these calls)" if isinstance(rep, float) else ""
    return (f"these Claude Code transcripts are read without what the API cached{api}: add "
            f"{' '.join(add)} to count the system prompt and tools the files leave out and "
            "the sub-agents' calls (docs/text-traces.md)")


def _has_sessions(result: HitrateResult) -> bool:
    """Whether any input format carries session ids (Mooncake's do not: each request is
    counted as its own session, which is no session count to show)."""
    from xmemplan.traces.registry import get_reader

    return any(get_reader(n).HAS_SESSIONS for n in result.files_by_format)


def _granularity(result: HitrateResult) -> str:
    """What hits are counted in: block traces by their block size, token traces by
    --page-size ('page size: 1' on Mooncake's 512-token blocks read as token-level)."""
    from xmemplan.traces.registry import get_reader

    blocks, tokens = [], False
    for name in sorted(result.files_by_format):
        size = getattr(get_reader(name), "BLOCK_TOKENS", None)
        if size is not None:
            blocks.append(f"{name} {size}-token blocks")
        elif name == "claude-blocks":
            blocks.append(f"{name} blocks of each file's block_size")
        else:
            tokens = True
    parts = blocks + ([f"page size: {result.page_size}"] if tokens else [])
    return "; ".join(parts)


def _skip_text(result: HitrateResult) -> str:
    from xmemplan.traces.base import skip_summary

    return skip_summary(result.skips, result.unrecognized, result.empty)


def _scope_note(result: HitrateResult) -> None:
    """`--scope session` on a format without sessions: every request is its own session, so
    the ratio is 0 by construction. Say so rather than print a bare 0.0."""
    from xmemplan.traces.registry import get_reader

    if result.scope != "session":
        return
    none = sorted(n for n in result.files_by_format if not get_reader(n).HAS_SESSIONS)
    if none:
        result.notes.append(
            f"{', '.join(none)} traces carry no session ids: under --scope session every "
            "request is its own session and can hit only itself (0 by construction); use "
            "--scope global (or auto)")


# The trace formats that read each format-specific flag (a folder may mix formats, so a
# flag one file ignores is not an error; one that no file read changed nothing).
FLAG_FORMATS = {
    "--session-field": ("request-log",), "--timestamp-field": ("request-log",),
    "--tokenizer": ("claude-transcript", "netpreme", "request-log"),
    "--subagents": ("claude-transcript", "claude-blocks"),
    "--tokens": ("claude-transcript",), "--hidden-prefix": ("claude-transcript",),
}


def warn_unread_flags(result: HitrateResult, given: dict[str, Any]) -> None:
    """Warn for each format-specific flag given when no file of a format that reads it was
    read: the flag changed nothing."""
    from xmemplan.cli.views import render

    read = sorted(result.files_by_format)
    for flag, value in given.items():
        if value in (None, False) or any(f in read for f in FLAG_FORMATS[flag]):
            continue
        fmts = FLAG_FORMATS[flag]
        to = fmts[0] if len(fmts) == 1 else f"{', '.join(fmts[:-1])} or {fmts[-1]}"
        render.warn(f"{flag} changed nothing: it applies to {to} files, and the files read "
                    f"are {', '.join(read) or 'none'}.")


def _warn_skips(result: HitrateResult) -> None:
    """Notes and skips go to stderr whatever the output format: nothing is dropped silently."""
    from xmemplan.cli.views import render

    for note in result.notes:
        render.info(f"Note: {note}")
    text = _skip_text(result)
    if text:
        render.warn(f"{text}.")
        for ex in result.skips.examples[:5]:
            render.warn(f"  {ex.where()}: {ex.reason}")
        for ex in result.skips.warn_examples[:5]:
            render.warn(f"  {ex.where()}: {ex.reason}")
        for p in result.unrecognized[:5]:
            render.warn(f"  {p}: matches no known trace format (skipped)")


def _ratio(x: float | None) -> str:
    """The answer's ratio at four places, zero included ('0.0000', not '0')."""
    return "-" if x is None or x != x else f"{x:.4f}"


def _report(
    result: HitrateResult, fmt: str, calls: CallsReport | None = None,
    cache_model: str | None = None, paths: list[Path] | None = None,
) -> None:
    from xmemplan.cli.views import render
    from xmemplan.cli.views import transcripts as tv
    from xmemplan.hitrate.metrics import METRIC_LABELS

    s = result.summary
    if fmt == "table":  # the answer first, then what it rests on
        counts = (f"{units.count(s['requests'], 'request')}, "
                  + (f"{units.count(s['sessions'], 'session')}" if _has_sessions(result)
                     else "no session ids"))
        caps = result.capacity.capacities if result.capacity is not None else []
        if caps:  # the user asked for a finite cache: that is the answer
            from xmemplan.cli.views.capacity import cap_label

            ratios = " / ".join(_ratio(c["token_hit_ratio"]) for c in caps)
            sizes = " / ".join(cap_label(c) for c in caps)
            render.line(
                f"Token hit ratio {ratios} with an LRU cache of {sizes} (infinite cache: "
                f"{_ratio(s['token_hit_ratio'])}; {counts})"
            )
        else:
            render.line(f"Token hit ratio {_ratio(s['token_hit_ratio'])} ({counts}, "
                        "infinite cache)")
        hint = _transcript_hint(result, calls)
        if hint:  # on the first screen, before the notes and tables
            import sys

            sys.stdout.flush()
            render.warn(hint)
    _warn_skips(result)
    if fmt == "json":
        render.emit_json(json_payload(result, calls, cache_model, paths=paths or []))
        return
    from xmemplan.hitrate.stats import DISTRIBUTIONS, STAT_KEYS, trace_stats

    stats = trace_stats(result)
    if fmt == "csv":
        keys = ["sessions", "requests", "prompt_tokens"] + [k for k, _ in METRIC_LABELS]
        extra = result.capacity.csv_rows() if result.capacity is not None else []
        extra += [(f"stats.{name}.{k}", stats[name][k]) for name, _ in DISTRIBUTIONS
                  for k in STAT_KEYS]
        rep = result.reported
        if rep is not None:
            extra += [(f"reported.{k}", rep[k]) for k in (
                "requests", "reported_token_hit_ratio", "reconstructed_token_hit_ratio",
                "difference")]
        if calls is not None:
            extra += tv.csv_rows(calls, cache_model)
        render.emit_csv(["metric", "value"], [(k, s[k]) for k in keys] + extra)
        return
    files = ", ".join(f"{name} {n:,}" for name, n in sorted(result.files_by_format.items()))
    render.info(f"Files by format: {files}; scope: {result.scope}; {_granularity(result)}")
    render.table(
        ["metric", "value"],
        [("sessions", s["sessions"] if _has_sessions(result) else "- (no session ids)"),
         ("requests", s["requests"]),
         ("prompt tokens", s["prompt_tokens"])]
        + [(label, s[key]) for key, label in METRIC_LABELS],
        title="Prefix-cache hit ratios (infinite cache)",
    )
    _stats_table(stats, s["requests"])
    rows = [
        (b["round"], b["requests"], b["token_hit_ratio"], b["mean"], b["median"], b["share_ge_95"])
        for b in s["by_round"] if b["requests"]
    ]
    spark = render.sparkline([b["mean"] for b in s["by_round"] if b["requests"]], 0.0, 1.0)
    render.table(
        ["round", "requests", "token hit", "mean", "median", "share >= 95%"],
        rows,
        title="By round (0 = first request of a session; empty rounds not shown)",
        caption=f"mean by round: {spark}" if spark.strip() else None,
    )
    _reported_and_calls(result, calls, cache_model)


def _stats_table(stats: dict[str, Any], requests: int) -> None:
    """Lengths and per-request hit ratios, one row each (tokens as 14.7k, ratios at 4
    places), whole at 80 columns."""
    from xmemplan.cli.views import render
    from xmemplan.hitrate.stats import DISTRIBUTIONS, STAT_KEYS

    keys = STAT_KEYS[1:]
    rows = []
    for name, label in DISTRIBUTIONS:
        d = stats[name]
        if not d["count"]:
            continue
        show = _ratio if name == "request_hit_ratio" else _tokens
        label = label.split(" (")[0]
        if d["count"] != requests:
            label += f" ({d['count']:,})"
        rows.append((label, *(show(d[k]) for k in keys)))
    render.table(["per request", *keys], rows, title="Trace statistics (per request)",
                 caption=stats["aiperf_cache_hit_rate"] + ".")


def _tokens(x: float | None) -> str:
    if x is None:
        return "-"
    return units.format_count(x) if x >= 1000 else f"{x:,.0f}"


def json_payload(result: HitrateResult, calls: CallsReport | None = None,
                 cache_model: str | None = None, *, paths: Sequence[Path] = ()
                 ) -> dict[str, Any]:
    """The document `hitrate --format json` prints (also the run folder's hitrate.json);
    `provenance` names the tool's version, the command and a hash of each file of
    `paths`."""
    from xmemplan.cli.views import transcripts as tv
    from xmemplan.hitrate.stats import trace_stats
    from xmemplan.provenance import provenance

    s = result.summary
    payload = {
        **{k: v for k, v in s.items()},
        "scope": result.scope,
        "page_size": result.page_size,
        "files_by_format": result.files_by_format,
        "unrecognized_files": result.unrecognized,
        "empty_files": result.empty,
        "notes": result.notes,
        "warnings": dict(result.skips.warned),
    }
    if result.reported is not None:
        payload["reported"] = result.reported
    if result.capacity is not None:
        payload["capacity"] = result.capacity.to_json()
    if calls is not None:
        payload["transcripts"] = tv.to_json(calls, cache_model)
    payload["stats"] = trace_stats(result)
    payload["provenance"] = provenance(list(paths))
    return payload


def _reported_and_calls(result: HitrateResult, calls: CallsReport | None,
                        cache_model: str | None) -> None:
    from xmemplan.cli.views import render
    from xmemplan.cli.views import transcripts as tv

    rep = result.reported
    if rep is not None:
        render.table(
            ["", "requests", "reported", "reconstructed", "difference"],
            [("all", rep["requests"], rep["reported_token_hit_ratio"],
              rep["reconstructed_token_hit_ratio"], rep["difference"])]
            + [(x["session_id"], x["requests"], x["reported_token_hit_ratio"],
                x["reconstructed_token_hit_ratio"], x["difference"]) for x in rep["sessions"]],
            title="Reported by the API/engine vs reconstructed (token-weighted)",
            caption=(
                "Reconstructed replays only what the trace holds, with the chosen tokenizer. "
                "Claude Code transcripts omit the system prompt and tools, which the API "
                "serves from a cache shared across sessions: expect reported > "
                "reconstructed (docs/text-traces.md)."
            ),
        )
    if calls is not None:
        tv.show(calls, cache_model)
