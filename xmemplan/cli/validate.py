"""`xmemplan validate --backend xmem`: real KV pages through a HiCache backend vs the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from xmemplan.defaults import SEED_GPU, SEED_MODEL

OUTPUT_FORMATS = ("table", "json")


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)


def validate(
    backend: str = typer.Option("xmem", "--backend", "-b", help="xmem or dram."),
    emulate: bool = typer.Option(
        False, "--emulate", help="Use the emulated tier even where X-Mem hardware exists."
    ),
    real: bool = typer.Option(
        False, "--real", help="Insist on X-Mem hardware; fail (exit 4) without it."
    ),
    calibrate: bool = typer.Option(
        False, "--calibrate",
        help="Measure this machine's copy bandwidth (no shaping) and use it as the tier's "
        "bandwidth in the prediction.",
    ),
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
        None, "--tier", help="Catalog tier (default: xmem, or host-dram-pcie5 for dram)."
    ),
    tolerance: str = typer.Option(
        "15%", "--tolerance", help="Largest p50 TTFT error that passes (15% or 0.15)."
    ),
    predict_bandwidth: str | None = typer.Option(
        None, "--predict-bandwidth",
        help="Use this bandwidth in the prediction only (e.g. 2GB/s), to see a mismatch fail.",
    ),
    sessions: int = typer.Option(2, "--sessions", min=1, help="Seed scenario: sessions."),
    rounds: int = typer.Option(4, "--rounds", min=1, help="Seed scenario: rounds per session."),
    prompt_tokens: str = typer.Option(
        "4096", "--prompt-tokens", help="Seed scenario: first prompt (e.g. 4096, 8k)."
    ),
    growth_tokens: str = typer.Option(
        "1024", "--growth-tokens", help="Seed scenario: tokens added per round."
    ),
    max_requests: int = typer.Option(12, "--max-requests", min=1,
                                     help="Replay at most N measured requests."),
    max_bytes: str = typer.Option(
        "4GB", "--max-bytes", help="Scale token counts so that at most this much KV moves."
    ),
    repeats: int = typer.Option(3, "--repeats", min=1,
                                help="Reads per request; the fastest is its load time."),
    catalog: list[Path] = typer.Option(
        [], "--catalog", help="Extra catalog TOML files (repeatable)."
    ),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    show_requests: bool = typer.Option(False, "--requests", help="Also print every request."),
) -> None:
    """Push real KV pages through the X-Mem HiCache backend and compare with the model.

    Without X-Mem hardware the emulated tier runs, and the first line says so. Exits 5
    when the p50 TTFT error of a request class exceeds --tolerance.
    """
    from xmemplan import units
    from xmemplan.cli.views import render
    from xmemplan.errors import CheckFailedError, UsageError
    from xmemplan.validate.harness import run_validate
    from xmemplan.validate.options import ValidateOptions
    from xmemplan.validate.workload import pairs_from_file, pairs_from_traces

    if fmt not in OUTPUT_FORMATS:
        raise UsageError(
            f"unknown output format '{fmt}'", f"use one of {', '.join(OUTPUT_FORMATS)}"
        )
    inputs = [p for p in (plan, workload, traces) if p is not None]
    if len(inputs) > 1:
        raise UsageError("give one of --plan, --workload, --traces")
    pairs: tuple[tuple[int, int], ...] = ()
    source = "seed scenario (long prompts, high hit rate, scaled to this machine)"
    extra_notes: list[str] = []
    file_input = plan if plan is not None else workload
    if file_input is not None:
        got = pairs_from_file(file_input, max_requests)
        pairs, source = got.pairs, got.source
        model, gpu = model or got.model, gpu or got.gpu
        if got.concurrency and got.concurrency > 1:
            extra_notes.append(
                f"the plan assumes {got.concurrency} prefills in flight per GPU; validate "
                "replays one at a time, so its predictions are for concurrency 1")
    elif traces is not None:
        pairs, source = pairs_from_traces([traces], max_requests)
    opts = ValidateOptions(
        backend=backend, emulate=emulate, real=real, calibrate=calibrate,
        model=model or SEED_MODEL, gpu=gpu or SEED_GPU,
        tier=tier, tolerance=_fraction(tolerance),
        predict_bandwidth_bytes_per_s=(
            units.parse_bandwidth(predict_bandwidth, "--predict-bandwidth")
            if predict_bandwidth else None),
        sessions=sessions, rounds=rounds,
        prompt_tokens=units.parse_count(prompt_tokens, "--prompt-tokens"),
        growth_tokens=units.parse_count(growth_tokens, "--growth-tokens"),
        pairs=pairs, max_requests=max_requests,
        max_bytes=units.parse_bytes(max_bytes, "--max-bytes"), repeats=repeats,
        catalog_files=tuple(str(p) for p in catalog), source=source,
    )
    with render.progress(None, "Replaying") as bar:
        def on_progress(done: int, total: int) -> None:
            if bar._progress is not None:
                bar._progress.update(bar._task, completed=done, total=total)

        result = run_validate(opts, on_progress)
    result.notes.extend(extra_notes)
    _report(result, fmt, show_requests)
    if not result.passed:
        raise CheckFailedError(
            f"measured TTFT differs from the prediction by {result.error:.1%} at p50, more "
            f"than the tolerance {result.tolerance:.0%}",
            "See the table above; --calibrate predicts with this machine's real copy bandwidth",
        )


def _fraction(text: str) -> float:
    from xmemplan.errors import UsageError

    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UsageError(f"cannot read tolerance '{text}'", "write it like 15% or 0.15") from None
    if not value > 0:
        raise UsageError("--tolerance must be positive")
    return value


def _report(result: Any, fmt: str, show_requests: bool) -> None:
    from xmemplan.cli.views import render

    if fmt == "json":
        render.info(result.note)
        render.emit_json(result.as_dict())
        return
    render.line(result.note)
    render.table(
        ["class", "requests", "TTFT p50 ms", "predicted", "error", "TTFT p99 ms", "predicted",
         "error", "load p50 ms", "predicted", "error"],
        [(c.name, c.requests, c.ttft_p50_ms, c.predicted_ttft_p50_ms, _pct(c.error_p50),
          c.ttft_p99_ms, c.predicted_ttft_p99_ms, _pct(c.error_p99), c.load_p50_ms,
          c.predicted_load_p50_ms, _pct(c.load_error_p50)) for c in result.classes],
        title=f"Measured vs predicted TTFT ({result.model} on {result.gpu}, tier "
              f"{result.tier}; cold: hit < 50%, warm: hit >= 50%)",
    )
    gb = 1e9
    render.line(
        f"bandwidth: predicted {result.predicted_bandwidth_bytes_per_s / gb:.4g} GB/s, achieved "
        f"{result.achieved_bandwidth_bytes_per_s / gb:.4g} GB/s (tier time); this machine: "
        f"backend copies {result.machine_copy_bandwidth_bytes_per_s / gb:.3g} GB/s, numpy "
        f"memcpy {result.memcpy_bandwidth_bytes_per_s / gb:.3g} GB/s"
    )
    render.line(
        f"moved: {result.bytes_written / gb:.3g} GB written, {result.bytes_read / gb:.3g} GB "
        f"read, every byte verified; {len(result.requests)} requests in {result.wall_s:.1f} s"
    )
    if show_requests:
        render.table(
            ["session", "round", "prompt", "hit", "load ms", "predicted", "TTFT ms", "predicted"],
            [(r.session, r.round, r.prompt_tokens, r.hit_tokens, r.load_s * 1e3,
              r.predicted_load_s * 1e3, r.ttft_s * 1e3, r.predicted_ttft_s * 1e3)
             for r in result.requests],
            title="Requests",
        )
    for note in result.notes:
        render.line(f"note: {note}")
    verdict = "PASS" if result.passed else "FAIL"
    render.line(f"{verdict}: p50 TTFT error {result.error:.2%} (tolerance {result.tolerance:.0%})")


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:.1%}"
