"""`xmemplan plan TRACES... --ttft-slo 500ms -o runs/NAME/`: from traces to a decision.

One command runs what the docs' path runs by hand, with the defaults sizing needs: `hitrate`
at global scope (one cache shared by every session, as a server has), with an exact capacity
curve and the model's KV bytes; then `size` on that profile. It writes a run folder:

- command.txt: the exact command, the xmemplan and Python versions, each input's SHA-256;
- profile.json (`hitrate --profile-out`), hitrate.json (`hitrate --format json`),
  plan.json (`size --format json`, which `validate --plan` and `compare` read);
- the charts (PNG), summary.md, and report.html (one self-contained page, docs/report.md).

The first line printed is the answer; the folder is named last.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from xmemplan.defaults import SEED_GPU, SEED_MODEL

RUN_FILES = ("command.txt", "profile.json", "hitrate.json", "plan.json", "summary.md",
             "report.html")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)


def plan_cmd(
    ctx: typer.Context,
    traces: list[Path] = typer.Argument(
        ..., help="Trace files or directories (walked recursively).", show_default=False
    ),
    ttft_slo: str = typer.Option(..., "--ttft-slo", help="TTFT target with a unit: 500ms, 2s."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="The run folder to write (created; a previous run folder "
        "there is replaced file by file)."
    ),
    model: str = typer.Option(SEED_MODEL, "--model", "-m", help="Model name (see catalog)."),
    gpu: str = typer.Option(SEED_GPU, "--gpu", help="GPU name (see 'xmemplan catalog')."),
    rate: float | None = typer.Option(
        None, "--rate", help="Offered load: requests/s (the trace's sessions compressed to "
        "it; default: the trace's own timestamps)."
    ),
    users: int | None = typer.Option(
        None, "--users", help="Offered load: closed-loop users (each waits --think)."
    ),
    think: str = typer.Option("5s", "--think", help="Mean think time of --users."),
    engine: str = typer.Option("sglang", "--engine", help="sglang or vllm."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel GPUs per replica."),
    kv_dtype: str | None = typer.Option(
        None, "--kv-dtype", help="KV cache dtype: bf16, fp16 or fp8 (default: the model's)."),
    slo_at: str = typer.Option("p99", "--slo-at", help="Percentile of the SLO: p50/p90/p99."),
    catalog: list[Path] = typer.Option(
        [], "--catalog", help="TOML file adding or overriding catalog entries (repeatable)."
    ),
    requests: int = typer.Option(4000, "--requests", help="Requests simulated per run."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulated arrivals."),
    max_gpus: int = typer.Option(1024, "--max-gpus", help="Largest GPU count searched."),
    cost: str | None = typer.Option(
        None, "--cost", help="Prices, as size takes them: gpu=2.5/h,xmem-node=40/h (the "
        "report then shows costs)."),
    scope: str = typer.Option(
        "global", "--scope", help="Cache scope of the replay: global (one cache, as a "
        "server has; the default here) or session."
    ),
    capacity_curve: str = typer.Option(
        "auto", "--capacity-curve", help="Hit ratio vs capacity: auto, LOW:HIGH:POINTS or "
        "a list."
    ),
    tiers: str | None = typer.Option(
        None, "--tiers", help="Inclusive tiers, fastest first: HBM=60GB,DRAM=1TB,XMEM=24TB."
    ),
    trace_format: str | None = typer.Option(
        None, "--trace-format", "-t", help="Read every file as this format instead of "
        "sniffing."
    ),
    subagents: bool = typer.Option(
        False, "--subagents", help="Include sub-agent requests, merged into their session."
    ),
    validate: bool = typer.Option(
        False, "--validate", help="Also replay the plan's KV pages through an emulated X-Mem "
        "node (validate --emulate --plan; ~30 s): validation.json, and its verdict in the "
        "report."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json (the plan)."),
) -> None:
    """From traces to a decision: hitrate, then size, into a run folder with a report."""
    from xmemplan.cli.views import render
    from xmemplan.errors import InputError, UsageError
    from xmemplan.hitrate import HitrateOptions, analyze
    from xmemplan.hitrate.capacity import build_spec

    if fmt not in ("table", "json"):
        raise UsageError(f"unknown output format '{fmt}'", "use table or json")
    if scope not in ("global", "session"):
        raise UsageError(f"unknown scope '{scope}'", "use global or session")
    from xmemplan.cli.invocation import refuse_think_without_users

    refuse_think_without_users(ctx, users)
    from xmemplan.cli import invocation
    from xmemplan.cli.firstrun import first_run_notice

    first_run_notice()

    argv = ["xmemplan", *invocation.ARGV]
    _INPUTS[:] = [*traces, *catalog]
    run_dir = prepare_run_dir(out, _INPUTS)
    options = HitrateOptions(scope=scope, page_size=1, format_name=trace_format,
                             subagents=subagents)
    options.capacity = build_spec(None, capacity_curve, tiers, model, None, 1,
                                  want_curve=True)
    with render.progress(None, "Reading traces", unit="bytes") as bar:
        result = analyze(list(traces), options, bar.update)
    if result.summary["requests"] == 0:
        named = ", ".join(str(t) for t in traces[:3]) + (" ..." if len(traces) > 3 else "")
        raise InputError(f"no requests could be read from the input ({named})",
                         hint="check the paths and --trace-format")
    from xmemplan.cli.hitrate import json_payload, warn_unread_flags
    from xmemplan.profile import build_profile, save_profile

    warn_unread_flags(result, {"--subagents": subagents})

    save_profile(run_dir / "profile.json", build_profile(result, traces), _INPUTS)
    hit_doc = json_payload(result, paths=traces)
    write_file(run_dir / "hitrate.json", render.to_json(hit_doc) + "\n")

    from xmemplan.sizing.planner import plan
    from xmemplan.sizing.request import build_request

    req, notes = build_request(
        ttft_slo=ttft_slo, workload=run_dir / "profile.json", model=model, gpu=gpu,
        rate=rate, users=users, think=think, engine=engine, tp=tp, kv_dtype=kv_dtype,
        slo_at=slo_at, catalog=catalog, requests=requests, seed=seed, max_gpus=max_gpus,
        cost=cost,
    )
    with render.spinner("Sizing (simulated serving)"):
        res = plan(req, with_curve=True)
    notes = _input_warnings(result, subagents) + notes
    plan_doc = {**res.to_dict(), "warnings": notes}
    write_file(run_dir / "plan.json", render.to_json(plan_doc) + "\n")

    check = _validate(run_dir) if validate else None
    figures = _charts(result, plan_doc, run_dir)
    command = _command_text(argv, traces)
    write_file(run_dir / "command.txt", command)
    from xmemplan.cli.views import report

    run = report.load_run(run_dir)
    write_file(run_dir / "summary.md", report.summary_markdown(run))
    write_file(run_dir / "report.html", report.render_html(run))

    if fmt == "json":
        render.emit_json(plan_doc)
    else:
        render.answer(res.answer)
        render.line(f"Cheapest compliant option: {res.cheapest}. Load: {res.load}.")
        render.line(f"Token hit ratio {hit_doc['token_hit_ratio']:.4f} ({scope} scope, "
                    f"infinite cache); {model} on {gpu}.")
    sys.stdout.flush()
    for note in [*result.notes, *notes]:
        render.warn(note) if note in notes else render.info(f"Note: {note}")
    if not figures:
        render.warn("no charts: matplotlib is missing (pip install 'xmemplan[plot]'); the "
                    "report has tables only")
    if check is not None:
        verdict = "PASS" if check.get("passed") else "FAIL"
        render.line(f"{verdict}: emulated validation, largest error {check['error']:.1%} "
                    f"(tolerance {check['tolerance']:.0%}; {check['verdict_on']})")
    render.info(f"Wrote the run folder {run_dir}: report.html, summary.md, plan.json, "
                f"profile.json, hitrate.json, command.txt"
                + (", validation.json" if check is not None else "")
                + (f" and {len(figures)} charts" if figures else ""))


def _input_warnings(result: Any, subagents: bool) -> list[str]:
    """What the inputs leave out of the plan: Claude Code transcripts lack the system
    prompt and tools the API cached (and, without --subagents, the sub-agents' calls)."""
    if "claude-transcript" not in result.files_by_format:
        return []
    rep = (result.reported or {}).get("reported_token_hit_ratio")
    return [
        "Claude Code transcripts leave out the system prompt and tools the API cached"
        + (f" (the API reported {rep:.4f} for these calls)" if isinstance(rep, float)
           else "") + ": this plan's hit ratios are the files' own"
        + ("" if subagents else ", without the sub-agents' calls (add --subagents)")
        + ". For the calls as the API saw them: xmemplan hitrate TRACES --subagents "
        "--hidden-prefix auto (docs/text-traces.md)"]


def _validate(run_dir: Path) -> dict[str, Any]:
    """`validate --emulate --plan run_dir/plan.json --format json`, run as the command runs
    it (exit 5, a failed check, is a result here: the report says FAIL)."""
    import contextlib
    import io
    import json

    from xmemplan.cli.main import run
    from xmemplan.cli.views import render
    quiet = render.is_quiet()
    buf, err = io.StringIO(), io.StringIO()
    with render.spinner("Validating in emulation (replaying the plan's KV pages)"), \
            contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        code = run(["-q", "validate", "--emulate", "--plan", str(run_dir / "plan.json"),
                    "--format", "json"])
    render.set_quiet(quiet)
    if code not in (0, 5):
        raise RuntimeError(f"validate in emulation exited {code}: "
                            f"{err.getvalue().strip()[-500:]}")
    doc: dict[str, Any] = json.loads(buf.getvalue())
    write_file(run_dir / "validation.json", render.to_json(doc) + "\n")
    return doc


def prepare_run_dir(out: Path, inputs: list[Path]) -> Path:
    """Create `out`, or check that it is empty or an earlier run folder (its files are
    replaced one by one). Fails before any work."""
    from xmemplan.errors import UsageError
    from xmemplan.jsonio import check_not_input

    p = Path(out)
    check_not_input(p, "--out", inputs)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--out '{out}' is a file", "pass --out a folder (created if missing)")
    if p.is_dir():
        entries = [e.name for e in p.iterdir()]
        if entries and "command.txt" not in entries:
            raise UsageError(
                f"--out '{out}' is a folder that holds other files, not an earlier run",
                "pass a new or empty folder, e.g. runs/NAME/")
        for t in inputs:
            q = Path(t).resolve()
            if q == p.resolve() or p.resolve() in q.parents:
                raise UsageError(f"--out '{out}' holds the input '{t}'",
                                 "pass --out a folder outside the inputs")
    else:
        try:
            p.mkdir(parents=True)
        except OSError as exc:
            raise UsageError(f"cannot create the run folder '{out}' "
                             f"({exc.strerror or exc})", "pass --out a writable path") from exc
    return p


_INPUTS: list[Path] = []  # the run's inputs: no output may be one of them, or inside one


def write_file(path: Path, data: str | bytes) -> None:
    """Every file of the run folder goes through here: the project's one safe writer."""
    from xmemplan.jsonio import write_output

    write_output(path, data, "--out", _INPUTS)


def _charts(result: Any, plan_doc: dict[str, Any], run_dir: Path) -> list[Path]:
    """The hitrate charts and TTFT against load; [] when matplotlib is missing."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return []
    from xmemplan.cli.views.plots import hit_histogram, write_plots
    from xmemplan.cli.views.sizeplots import ttft_vs_load
    from xmemplan.profile import build_profile

    written = write_plots(result, run_dir, _INPUTS)
    hist = (build_profile(result, []).get("hit_ratio") or {}).get("histogram_all")
    if hist:
        written.append(hit_histogram(hist, run_dir / "hit_ratio_histogram.png", "--out",
                                     _INPUTS))
    if plan_doc.get("load_curve"):
        written.append(ttft_vs_load(plan_doc, run_dir / "ttft_vs_load.png", "--out", _INPUTS))
    return written


def input_files(paths: list[Path]) -> list[Path]:
    """The files under `paths`, sorted, hidden ones left out (what the readers walk)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(
                f for f in p.rglob("*")
                if f.is_file() and not any(part.startswith(".") for part in
                                           f.relative_to(p).parts)))
        elif p.is_file():
            files.append(p)
    return files


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _command_text(argv: list[str], traces: list[Path]) -> str:
    import datetime
    import platform

    from xmemplan import __version__

    files = input_files(traces)
    cmd = shlex.join(argv)
    lines = [
        cmd,
        "",
        f"xmemplan {__version__}, Python {platform.python_version()}, "
        f"{datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"working directory: {Path.cwd()}",
        f"inputs ({len(files)} files, SHA-256):",
        *(f"{_sha256(f)}  {f}" for f in files),
    ]
    return "\n".join(lines) + "\n"
