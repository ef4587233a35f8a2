"""`xmemplan validate`: real KV pages through a HiCache backend (or AIPerf's records of a
live server) vs the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from xmemplan import units
from xmemplan.defaults import SEED_GPU, SEED_MODEL

OUTPUT_FORMATS = ("table", "json")


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)


# What only the replay through a backend reads: refused with --aiperf, which judges
# AIPerf's own records instead (given there, they used to be ignored).
NOT_WITH_AIPERF = ("backend", "emulate", "real", "calibrate", "readers", "device", "layout",
                   "plan", "workload", "predict_bandwidth", "sessions", "rounds",
                   "prompt_tokens", "growth_tokens", "max_requests", "max_bytes", "repeats",
                   "show_requests", "page_tokens")
# The seed scenario's shape: a --plan, --workload or --traces gives the requests instead
# (refused with one; given there, they used to be ignored).
SEED_ONLY = ("sessions", "rounds", "prompt_tokens", "growth_tokens")


def validate(
    ctx: typer.Context,
    backend: str = typer.Option("xmem", "--backend", "-b", help="xmem or dram."),
    emulate: bool = typer.Option(
        False, "--emulate", help="Use the emulated node even where X-Mem hardware exists."
    ),
    real: bool = typer.Option(
        False, "--real", help="Insist on X-Mem hardware; fail (exit 4) without it."
    ),
    calibrate: bool = typer.Option(
        False, "--calibrate",
        help="Measure this machine's copy bandwidth (no shaping) and predict with it.",
    ),
    readers: int | None = typer.Option(
        None, "--readers", min=1, max=64,
        help="Simulated GPUs loading from one emulated node at once (threads; default 1, "
        "with --plan the plan's GPUs per X-Mem node)."),
    device: str | None = typer.Option(
        None, "--device", help="Emulated node: a name in data/devices or a TOML file "
        "(default xmem-node)."),
    page_tokens: int = typer.Option(64, "--page-tokens", min=1, max=4096,
                                    help="Tokens per KV page."),
    layout: str = typer.Option("page_first", "--layout",
                               help="Host pool layout: page_first or layer_first."),
    aiperf: Path | None = typer.Option(
        None, "--aiperf", help="Judge an AIPerf profile run: its artifact directory (with "
        "--traces, the mooncake_trace file it replayed)."),
    plan: Path | None = typer.Option(None, "--plan", help="A plan from 'xmemplan size' (JSON)."),
    workload: Path | None = typer.Option(
        None, "--workload", help="A workload profile from 'xmemplan hitrate' (JSON)."
    ),
    traces: Path | None = typer.Option(None, "--traces", help="A trace file or directory."),
    model: str | None = typer.Option(
        None, "--model", help="Catalog model name (default: the plan's, else the seed scenario's, "
        f"{SEED_MODEL})."
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="Catalog GPU name (default: the plan's, else "
        f"{SEED_GPU})."
    ),
    tier: str | None = typer.Option(
        None, "--tier", help="Catalog tier the prediction loads from: an X-Mem tier with "
        "--backend xmem (default xmem), a host DRAM tier with --backend dram (default "
        "host-dram-pcie5; another kind is refused, exit 2), the server's tier with --aiperf "
        "(default host-dram-pcie5)."
    ),
    tolerance: str = typer.Option(
        "15%", "--tolerance", help="Largest p50/p90 error that passes (15% or 0.15)."
    ),
    predict_bandwidth: str | None = typer.Option(
        None, "--predict-bandwidth",
        help="Use this bandwidth in the prediction only (e.g. 2GB/s), to see a mismatch fail.",
    ),
    sessions: int = typer.Option(2, "--sessions", help="Seed scenario: sessions (1 to 1,000,000)."),
    rounds: int = typer.Option(4, "--rounds",
                               help="Seed scenario: rounds per session (1 to 10,000)."),
    prompt_tokens: str = typer.Option(
        "4096", "--prompt-tokens", help="Seed scenario: first prompt (e.g. 4096, 8k; 1 to 1e8)."
    ),
    growth_tokens: str = typer.Option(
        "1024", "--growth-tokens", help="Seed scenario: tokens added per round."
    ),
    max_requests: int = typer.Option(12, "--max-requests",
                                     help="Replay at most N measured requests per reader "
                                     "(1 to 10,000); only those are built."),
    max_bytes: str = typer.Option(
        "4GB", "--max-bytes", help="Scale token counts so that at most this much KV moves."
    ),
    repeats: int = typer.Option(3, "--repeats",
                                help="Reads per request (1 to 100); the fastest is its load "
                                "time."),
    catalog: list[Path] = typer.Option(
        [], "--catalog", help="Extra catalog TOML files (repeatable), e.g. calibrate's overlay."
    ),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    show_requests: bool = typer.Option(False, "--requests", help="Also print every request."),
) -> None:
    """Push real KV pages through the X-Mem HiCache backend and compare with the model.

    Without X-Mem hardware an emulated node (its own device model, data/devices) runs, and
    the first lines say what was emulated and what the verdict covers. Exits 5 when the p50
    or p90 load time (and TTFT where compute was measured) of a request class is off by
    more than --tolerance. With --aiperf, judges AIPerf's per-request TTFT records instead.
    """
    from xmemplan import units
    from xmemplan.cli.views import render
    from xmemplan.errors import CheckFailedError, UsageError

    if fmt not in OUTPUT_FORMATS:
        raise UsageError(
            f"unknown output format '{fmt}'", f"use one of {', '.join(OUTPUT_FORMATS)}"
        )
    tol = units.parse_percent(tolerance, "--tolerance")
    if aiperf is not None:
        from xmemplan.cli.invocation import refuse_given

        refuse_given(ctx, NOT_WITH_AIPERF, "does not apply with --aiperf: it judges the "
                     "AIPerf run's own TTFT records, and replays nothing", "drop {flag}, or "
                     "drop --aiperf to replay KV pages through a backend")
        _aiperf(aiperf, traces, model, gpu, tier, tol, tuple(str(p) for p in catalog), fmt)
        return
    if show_requests and fmt == "json":
        raise UsageError("--requests prints the table of requests, and --format json "
                         "carries every request already (its 'requests' list)",
                         "drop --requests, or drop --format json for the table")
    if calibrate:
        from xmemplan.cli.invocation import refuse_given

        refuse_given(ctx, ("device",), "shapes the emulated X-Mem node, and --calibrate "
                     "runs it unshaped (at this machine's own copy speed)", "drop --device, "
                     "or drop --calibrate to replay through the shaped node")
    said: list[str] = []
    opts = _options({**locals(), "said": said}, tol)
    with render.progress(None, "Replaying") as bar:
        result = _run(opts, bar.update)
    result.warnings[:0] = said
    _report(result, fmt, show_requests)
    import sys

    sys.stdout.flush()  # the answer first, then what changed nothing (stderr)
    for w in result.warnings:
        render.warn(w)
    if not result.passed:
        from xmemplan.validate.verdict import worst_figure

        claim = _failed_claim(result)
        if claim is not None:
            raise CheckFailedError(
                f"the plan's {claim['claim']} is off by {claim['error']:.1%}, more than the "
                f"tolerance {result.tolerance:.0%}",
                "the plan's GPUs per X-Mem node (its GPUs over its nodes) do not get the "
                "load bandwidth it was sized with: size it again, or check the node count")
        figure, _ = worst_figure(result.classes)
        term = ("the compute half of TTFT (the model's efficiencies or fixed overhead) is off "
                "for this GPU; the load terms are in the table" if "TTFT" in figure else
                "the planner's bandwidth, contention or transfer-size term is off for this "
                "device")
        raise CheckFailedError(
            f"the {figure or 'largest'} error is {result.error:.1%} "
            f"(of {result.verdict_on}), more than the tolerance {result.tolerance:.0%}",
            f"See the table above: {term}",
        )


def _run(opts: Any, on_progress: Any) -> Any:
    from xmemplan.validate.harness import run_validate

    return run_validate(opts, on_progress)


def _options(flags: dict[str, Any], tol: float) -> Any:
    """ValidateOptions from the command's flags (workload files read here)."""
    from xmemplan import units
    from xmemplan.cli.invocation import refuse_given
    from xmemplan.errors import UsageError
    from xmemplan.validate.options import ValidateOptions
    from xmemplan.validate.workload import pairs_from_file, pairs_from_traces

    f = dict(flags)
    inputs = [p for p in (f["plan"], f["workload"], f["traces"]) if p is not None]
    if len(inputs) > 1:
        raise UsageError("give one of --plan, --workload, --traces")
    if inputs:
        given = "--plan" if f["plan"] is not None else (
            "--workload" if f["workload"] is not None else "--traces")
        refuse_given(f["ctx"], SEED_ONLY, f"shapes the seed scenario, and {given} gives "
                     "the requests replayed instead", "drop {flag}, or drop " + given +
                     " to replay the seed scenario")
        if f["plan"] is not None:
            refuse_given(f["ctx"], ("max_requests",), "does not apply with --plan: a plan "
                         "replays one request per reader (its p50 prompt at its hit ratio)",
                         "drop --max-requests; --workload or --traces replay several "
                         "requests")
    _check_sizes(f)
    pairs: tuple[tuple[int, int], ...] = ()
    kv_dtype: str | None = None
    claims: tuple[tuple[str, str], ...] = ()
    claimed: float | None = None
    source = "seed scenario (long prompts, high hit rate, scaled to this machine)"
    model, gpu = f["model"], f["gpu"]
    file_input = f["plan"] if f["plan"] is not None else f["workload"]
    if file_input is not None:
        got = pairs_from_file(file_input, f["max_requests"])
        pairs, source = got.pairs, got.source
        model, gpu = model or got.model, gpu or got.gpu
        if got.concurrency and got.concurrency > 1:
            source += (f"; the plan assumes {got.concurrency} prefills in flight per GPU, "
                       "validate replays one per reader")
        kv_dtype = got.kv_dtype
        if kv_dtype == "fp8":
            source += "; KV pages in fp8, as the plan was sized"
        if f["plan"] is not None:
            pairs, f["readers"], claims, claimed = _plan_claims(got, pairs, f)
    elif f["traces"] is not None:
        pairs, source = pairs_from_traces([f["traces"]], f["max_requests"])
    f["said"].extend(_max_requests_unused(f, pairs, source))
    if f["readers"] is None:
        f["readers"] = 1
    opts = ValidateOptions(
        backend=f["backend"], emulate=f["emulate"], real=f["real"], calibrate=f["calibrate"],
        model=model or SEED_MODEL, gpu=gpu or SEED_GPU, tier=f["tier"], device=f["device"],
        readers=f["readers"], page_tokens=f["page_tokens"], layout=f["layout"], tolerance=tol,
        predict_bandwidth_bytes_per_s=(
            units.parse_bandwidth(f["predict_bandwidth"], "--predict-bandwidth")
            if f["predict_bandwidth"] is not None else None),
        sessions=f["sessions"], rounds=f["rounds"],
        prompt_tokens=f["prompt_tokens"], growth_tokens=f["growth_tokens"],
        pairs=pairs, max_requests=f["max_requests"],
        max_bytes=units.parse_bytes(f["max_bytes"], "--max-bytes"), repeats=f["repeats"],
        catalog_files=tuple(str(p) for p in f["catalog"]), source=source, kv_dtype=kv_dtype,
        plan_claims=claims, claimed_bandwidth_bytes_per_s=claimed,
    )
    _check_built(opts)
    return opts


MAX_READERS = 64  # threads sharing one emulated node (--readers' range)


def _max_requests_unused(f: dict[str, Any], pairs: tuple[tuple[int, int], ...],
                         source: str) -> list[str]:
    """--max-requests N where the input holds fewer requests to replay: all of them are,
    so N changes nothing (or only up to what there is); a profile without requests_sample
    replays its p50 request alone. A plan is refused before (one request per reader)."""
    from xmemplan.cli.invocation import given_flags

    n = f["max_requests"]
    if f["plan"] is not None or not given_flags(f["ctx"], ("max_requests",)):
        return []
    if f["workload"] is not None and source.endswith("(p50 request)"):
        return [f"--max-requests {n:,} changed nothing: the profile {f['workload']} has no "
                "requests_sample, so validate replays its p50 request (at its token hit "
                "ratio) alone; make the profile with hitrate --profile-out to sample its "
                "requests"]
    if pairs:
        have, what = len(pairs), ("the profile's requests_sample" if f["workload"]
                                  is not None else f"the traces {f['traces']}")
    else:
        have, what = f["sessions"] * f["rounds"], (
            f"the seed scenario (--sessions {f['sessions']:,} x --rounds {f['rounds']:,})")
    if have >= n:
        return []
    default = 12
    return [f"--max-requests {n:,} is more than the {have:,} requests {what} holds: all "
            f"{have:,} are replayed" + (", as without the flag" if have <= default else "")]


def _plan_claims(got: Any, pairs: tuple[tuple[int, int], ...], f: dict[str, Any]
                 ) -> tuple[tuple[tuple[int, int], ...], int, tuple[tuple[str, str], ...],
                            float | None]:
    """What of a plan's decision the replay reproduces: (pairs, readers, claims, the
    per-GPU load bandwidth judged). The GPUs sharing one X-Mem node are the readers of the
    emulated node (the plan's GPUs over its nodes: one node replayed, the others carry the
    same share); at tp N each reader loads its GPU's 1/N of every request's KV (DP
    attention: each rank its requests' whole KV). What cannot be replayed here is named
    "not checked"."""
    c = got.claims
    readers = f["readers"]
    if c is None:
        return pairs, readers or 1, (
            ("GPU count, replica shape, GPUs per X-Mem node", "not checked: the plan "
             "carries no claims (written before validate replayed them)"),), None
    out: list[tuple[str, str]] = []
    claimed = None
    if c.tp > 1 and not c.dp_attention:
        pairs = tuple((-(-p // c.tp), -(-h // c.tp)) for p, h in pairs)
        out.append((f"replica shape tp{c.tp}", f"replayed: each reader loads its GPU's 1/"
                    f"{c.tp} of every request's KV"))
    elif c.tp > 1:
        out.append((f"replica shape tp{c.tp}, DP attention", "replayed: each reader loads "
                    "its requests' whole KV (a rank attends alone)"))
    if c.option == "xmem" and f["backend"] == "xmem":
        per = c.gpus_per_node or 1
        if readers is not None and readers != per:
            out.append((f"{c.gpus:,} GPUs over {c.nodes:,} X-Mem nodes", f"not checked: "
                        f"--readers {readers} replaces the plan's {per} GPUs per node"))
        elif per > MAX_READERS:
            readers = MAX_READERS
            out.append((f"{c.gpus:,} GPUs over {c.nodes:,} X-Mem nodes", f"not checked: "
                        f"{per} GPUs per node, more than the {MAX_READERS} readers one "
                        "emulated node takes"))
        else:
            readers = per
            claimed = c.load_bandwidth_per_gpu_bytes_per_s
            out.append((f"{c.gpus:,} GPUs over {c.nodes:,} X-Mem nodes",
                        f"replayed: {per} readers share one emulated node (the other "
                        f"{c.nodes - 1:,} serve the same share)" if c.nodes > 1 else
                        f"replayed: {per} readers share the node"))
    elif c.option == "host-dram":
        out.append((f"{c.gpus:,} GPUs loading from host DRAM", "not checked: the GPUs "
                    "sharing a server's host links (validate replays one reader per link; "
                    "--backend dram replays host-DRAM loads)"))
    elif c.option == "hbm-only":
        out.append(("HBM only", "not checked: the plan loads nothing from a tier"))
    out.append(("TTFT percentile under load", "not checked: the replay runs requests in "
                "lock-step, not the plan's queueing (size's simulator)"))
    return pairs, readers or 1, tuple(out), claimed


def _failed_claim(result: Any) -> dict[str, Any] | None:
    """The judged plan claim when it is over the tolerance, else None."""
    for c in result.plan_checks:
        if "error" in c and not c["error"] <= result.tolerance:
            return dict(c)
    return None


def _check_sizes(f: dict[str, Any]) -> None:
    """Range-check the flags that size the replay (exit 2 naming the flag and the range);
    `prompt_tokens` and `growth_tokens` are replaced by their parsed values."""
    from xmemplan import units
    from xmemplan.errors import UsageError
    from xmemplan.validate.options import MAX_REPEATS, MAX_REPLAYED, MAX_ROUNDS

    units.check_int(f["sessions"], "--sessions", 1, units.MAX_SESSIONS)
    units.check_int(f["rounds"], "--rounds", 1, MAX_ROUNDS)
    units.check_int(f["max_requests"], "--max-requests", 1, MAX_REPLAYED, unit="requests")
    units.check_int(f["repeats"], "--repeats", 1, MAX_REPEATS)
    f["prompt_tokens"] = units.parse_tokens(f["prompt_tokens"], "--prompt-tokens")
    f["growth_tokens"] = units.parse_count(f["growth_tokens"], "--growth-tokens", 0,
                                           units.MAX_PROMPT_TOKENS)
    rounds = min(f["rounds"], f["max_requests"])  # the rounds replayed (workload.py)
    last = f["prompt_tokens"] + (rounds - 1) * f["growth_tokens"]
    if last > units.MAX_PROMPT_TOKENS:
        raise UsageError(
            f"the last replayed round's prompt would be {last:,} tokens (--prompt-tokens + "
            f"(--rounds - 1) x --growth-tokens), more than {units.MAX_PROMPT_TOKENS:,}",
            "lower --rounds, --growth-tokens or --prompt-tokens")


def _check_built(opts: Any) -> None:
    """The page keys the replay builds before scaling stay under MAX_BUILT_PAGES."""
    from xmemplan.errors import UsageError
    from xmemplan.validate.options import MAX_BUILT_PAGES
    from xmemplan.validate.workload import built_pages

    pages = built_pages(opts) * opts.readers
    if pages > MAX_BUILT_PAGES:
        flags = ("--max-requests, --page-tokens or --readers" if opts.pairs else
                 "--sessions, --rounds, --prompt-tokens, --growth-tokens, --max-requests, "
                 "--page-tokens or --readers")
        raise UsageError(
            f"the replay would build {pages:,} KV page keys before scaling to --max-bytes, "
            f"more than {MAX_BUILT_PAGES:,}", f"lower {flags}")


def _report(result: Any, fmt: str, show_requests: bool) -> None:
    from xmemplan.cli.views import render

    if fmt == "json":
        for text in (result.note, *result.preamble):
            render.info(text)
        render.emit_json(result.as_dict())
        return
    from xmemplan.validate.verdict import worst_figure

    figure, _ = worst_figure(result.classes)
    ttft = result.compute_measured
    scope = "KV loads and TTFT" if ttft else "KV loads (no GPU: compute not measured)"
    claim = _failed_claim(result)
    if claim is not None:
        render.line(  # the answer first: the plan's own claim did not hold
            f"FAIL: the plan's {claim['claim']} is off by {claim['error']:.1%} (measured "
            f"{claim['measured_bytes_per_s'] / 1e9:.3g} GB/s, the plan "
            f"{claim['claimed_bytes_per_s'] / 1e9:.3g} GB/s; tolerance "
            f"{result.tolerance:.0%})")
    else:
        how = "within" if result.passed else "off by"
        unchecked = sum(c["replayed"].startswith("not checked") for c in result.plan_checks)
        render.line(  # the answer first
            f"{'PASS' if result.passed else 'FAIL'}: {scope} {how} {result.error:.1%} of the "
            f"planner's prediction (tolerance {result.tolerance:.0%}"
            + (f"; largest: {figure}" if figure else "") + ")"
            + (f"; {units.count(unchecked, 'claim')} of the plan not checked (below)"
               if unchecked else ""))
    render.line(result.note)
    for text in result.preamble:
        render.line(text)
    for c in result.plan_checks:
        extra = ("" if "error" not in c else
                 f" (measured {c['measured_bytes_per_s'] / 1e9:.3g} GB/s, the plan "
                 f"{c['claimed_bytes_per_s'] / 1e9:.3g} GB/s, error {c['error']:.1%})")
        render.line(f"plan: {c['claim']}: {c['replayed']}{extra}")
    cols = ["class", "requests", "load p50 ms", "model", "error", "load p90 ms",
            "model", "error"] + (["TTFT p50 ms", "model", "error"] if ttft else [])
    rows = []
    for c in result.classes:
        row = [c.name, c.requests, c.load_p50_ms, c.predicted_load_p50_ms,
               _pct(c.load_error_p50), c.load_p90_ms, c.predicted_load_p90_ms,
               _pct(c.load_error_p90)]
        if ttft:
            row += [c.ttft_p50_ms, c.predicted_ttft_p50_ms, _pct(c.ttft_error_p50)]
        rows.append(row)
    render.table(cols, rows, title=f"Measured vs the model's KV loads ({result.model} on "
                 f"{result.gpu}, tier {result.tier}, {units.count(result.readers, 'reader')}; "
                 "cold: hit "
                 "< 50%, warm: hit >= 50%)")
    for c in result.classes:
        if c.name == "warm" and c.simulated_load_p50_ms is not None:
            render.line(
                f"simulator (xmemplan.sizing.sim, same requests in lock-step, fluid sharing; "
                f"reported, not judged): warm load p50 {render.fmt(c.simulated_load_p50_ms)} "
                f"ms ({_pct(c.simulated_load_error_p50)} off the measured), p90 "
                f"{render.fmt(c.simulated_load_p90_ms)} ms")
    gb = 1e9
    render.line(
        f"bandwidth per reader: predicted {result.predicted_bandwidth_bytes_per_s / gb:.4g} "
        f"GB/s, achieved {result.achieved_bandwidth_bytes_per_s / gb:.4g} GB/s; this "
        f"machine: backend copies {result.machine_copy_bandwidth_bytes_per_s / gb:.3g} GB/s, "
        f"numpy memcpy {result.memcpy_bandwidth_bytes_per_s / gb:.3g} GB/s")
    render.line(
        f"moved: {result.bytes_written / gb:.3g} GB written, {result.bytes_read / gb:.3g} GB "
        f"read, every byte verified; {len(result.requests)} requests in {result.wall_s:.1f} s")
    if show_requests:
        render.table(
            ["reader", "session", "round", "prompt", "hit", "load ms", "predicted"],
            [(r.reader, r.session, r.round, r.prompt_tokens, r.hit_tokens, r.load_s * 1e3,
              r.predicted_load_s * 1e3) for r in result.requests],
            title="Requests",
        )
    for note in result.notes:
        render.line(f"note: {note}")
    verdict = "PASS" if result.passed else "FAIL"
    render.line(f"{verdict}: largest error {result.error:.2%} ({result.verdict_on}; tolerance "
                f"{result.tolerance:.0%})")


def _aiperf(directory: Path, traces: Path | None, model: str | None, gpu: str | None,
            tier: str | None, tol: float, catalogs: tuple[str, ...], fmt: str) -> None:
    from xmemplan.cli.views import render
    from xmemplan.errors import CheckFailedError, UsageError
    from xmemplan.validate.aiperf import AiperfOptions, judge

    if traces is None:
        raise UsageError("--aiperf needs --traces: the mooncake_trace file AIPerf replayed",
                         "write it with 'xmemplan export TRACES --to aiperf -o FILE'")
    res = judge(AiperfOptions(
        directory=directory, trace=traces, model=model or SEED_MODEL, gpu=gpu or SEED_GPU,
        tier=tier or "host-dram-pcie5", tolerance=tol, catalog_files=catalogs))
    if fmt == "json":
        for text in res.preamble:
            render.info(text)
        render.emit_json(res.as_dict())
    else:
        # Answer first: the verdict, then what ran and the figures behind it.
        render.line(f"{'PASS' if res.passed else 'FAIL'}: largest p50 TTFT error "
                    f"{res.error:.2%} (tolerance {res.tolerance:.0%})")
        for text in res.preamble:
            render.line(text)
        render.table(
            ["class", "requests", "p50 ms", "model p50", "error", "p90 ms", "model p90",
             "error"],
            [(c.name, c.requests, _ms(c.ttft_p50_ms), _ms(c.predicted_ttft_p50_ms),
              _pct(c.error_p50), _ms(c.ttft_p90_ms), _ms(c.predicted_ttft_p90_ms),
              _pct(c.error_p90)) for c in res.classes],
            title=f"AIPerf TTFT: measured and predicted, ms ({res.model} on {res.gpu}, "
                  f"tier {res.tier})")
        for note in res.notes:
            render.line(f"note: {note}")
    if not res.passed:
        raise CheckFailedError(
            f"AIPerf's measured TTFT differs from the prediction by {res.error:.1%} at p50, "
            f"more than the tolerance {res.tolerance:.0%}",
            "See the table above; check --model, --gpu and --tier match the server")


def _ms(x: float | None) -> str:
    """A TTFT in ms at 0.1 ms (AIPerf's and the model's figures; '-' when absent)."""
    if x is None or x != x:
        return "-"
    return f"{x:,.1f}"


def _pct(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return "inf" if x == float("inf") else f"{x:.1%}"
