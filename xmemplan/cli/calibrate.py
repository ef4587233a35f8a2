"""`xmemplan calibrate`: fit the TTFT model's constants to your own measurements."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from xmemplan import units


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


# What only one kind of fit reads: the loaded runs' deployment (a single-request point
# names its own engine, model and GPU in its row) and the single-request fit's extra
# constants. Given to the other kind, they are refused (they used to be ignored).
LOADED_ONLY = ("engine", "model", "gpu", "tp", "step_per_token")
POINTS_ONLY = ("per_token", "fit_hbm")


def calibrate(
    ctx: typer.Context,
    files: list[Path] = typer.Argument(
        None, help="CSV or JSON of (gpu, model, engine, tier, prompt_tokens, hit_tokens, "
        "concurrency, ttft_ms), or 'validate --format json' results.", show_default=False),
    extra: list[Path] = typer.Option(
        [], "--catalog", help="A TOML file that adds or overrides entries (repeatable)."),
    out: Path = typer.Option(
        Path("xmemplan-calibration.toml"), "--out", "-o",
        help="Where to write the catalog overlay (give it to size/validate --catalog)."),
    per_token: list[str] = typer.Option(
        [], "--per-token", help="Also fit a per-prompt-token host overhead for ENGINE."),
    fit_hbm: bool = typer.Option(
        False, "--fit-hbm", help="Also fit the HBM efficiency of the memory roofline."),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    loaded: list[Path] = typer.Option(
        [], "--loaded", help="A loaded run: a `vllm bench serve --save-result` JSON, an "
        "AIPerf artifact folder or a CSV as data/measurements/loaded.csv (repeatable); fits "
        "the engine's step overheads instead of the TTFT constants."),
    engine: str = typer.Option(
        "vllm", "--engine", help="With --loaded: the engine the JSON / AIPerf runs used "
        "(vllm or sglang)."),
    model: str | None = typer.Option(
        None, "--model", help="With --loaded: the catalog model the JSON / AIPerf runs "
        "served."),
    gpu: str | None = typer.Option(
        None, "--gpu", help="With --loaded: the catalog GPU the JSON / AIPerf runs used."),
    tp: int = typer.Option(1, "--tp", help="With --loaded: GPUs per replica (tensor "
                           "parallel) of the JSON / AIPerf runs."),
    step_per_token: bool = typer.Option(
        False, "--step-per-token", help="With --loaded: also fit the per-scheduled-token "
        "step overhead (decode-heavy runs cannot tell it from the per-request one)."),
) -> None:
    """Fit t0, bandwidths and efficiencies to measured TTFTs; write a catalog overlay.

    Full-hit points (hit >= 90 % of the prompt) fit each engine's fixed overhead and the
    tier bandwidths; miss and partial-hit points fit the compute efficiencies. Prints every
    point's error and its leave-one-out error, and refuses a fit the points cannot pin.

    With --loaded, fits the simulated engine's own overheads per step and per scheduled
    request (docs/model.md section 6) to loaded runs replayed through the engine, with the
    same per-point and leave-one-out report.
    """
    from xmemplan.catalog import load_catalog
    from xmemplan.cli.views import render
    from xmemplan.errors import InputError, UsageError
    from xmemplan.sizing import calibration as cal

    if fmt not in ("table", "json"):
        raise UsageError(f"unknown output format '{fmt}'", "use table or json")
    from xmemplan.jsonio import check_output

    files = list(files or [])
    if loaded and files:
        raise UsageError("give single-request measurement files or --loaded runs, not both",
                         "run calibrate once for each and pass both overlays with --catalog")
    if not loaded and not files:
        raise UsageError("no measurements given",
                         "pass measurement files, or loaded runs with --loaded")
    _refuse_other_fits(ctx, bool(loaded))
    check_output(out, "--out", [*files, *loaded, *extra])  # before the work
    if loaded:
        _calibrate_loaded(loaded, extra, out, fmt, engine=engine, model=model, gpu=gpu, tp=tp,
                          per_token=step_per_token)
        return
    cat = load_catalog(extra)
    points = [p for f in files for p in cal.read_measurements(f)]
    for p in points:
        for what, look in (("gpu", cat.gpu), ("model", cat.model)):
            try:
                look(getattr(p, what))
            except UsageError as exc:
                path, _, line = p.where.rpartition(":")
                raise InputError(exc.message, path=Path(path or p.where),
                                 line=int(line) if line.isdigit() else None, field=what,
                                 hint=exc.hint) from None
        for t in p.tier.split("/"):
            try:
                cat.tier(t)
            except UsageError as exc:
                path, _, line = p.where.rpartition(":")
                raise InputError(exc.message, path=Path(path or p.where),
                                 line=int(line) if line.isdigit() else None, field="tier",
                                 hint=exc.hint) from None
    plan = cal.plan_constants(points, cat, per_token=[e.lower() for e in per_token],
                              fit_hbm=fit_hbm)
    n_const = len(plan.load) + len(plan.compute)
    if len(points) <= n_const:
        raise InputError(
            f"the fit is underdetermined: {len(points)} points for {n_const} constants "
            f"({', '.join((*plan.load, *plan.compute))})", path=files[0],
            hint=f"add at least {n_const + 1 - len(points)} more points (leave-one-out "
            "needs one more than the constants)")
    from xmemplan.cli.views import render as _render

    with _render.spinner(f"Fitting {n_const} constants on {len(points)} points, then "
                         f"{len(points)} leave-one-out fits"):
        params = cal.fit_points(points, cat, plan)
        loo = cal.leave_one_out(points, cat, plan, params=params)
    rows = [(p, cal.predict(p, params, cat), lo) for p, lo in zip(points, loo, strict=True)]
    errs = [abs(pr - p.value) / p.value for p, pr, _ in rows]
    loo_errs = [abs(lo - p.value) / p.value for p, _, lo in rows if math.isfinite(lo)]
    med = float(sorted(errs)[len(errs) // 2]) if errs else math.nan
    med_loo = float(sorted(loo_errs)[len(loo_errs) // 2]) if loo_errs else math.nan
    kept = [n for n in ("eta_linear", "eta_attention", "host_eff", "xmem_bw", "layer_s")
            if n not in plan.load + plan.compute]
    notes = [f"not fitted (no points for it), shipped value kept: {n}" for n in kept]
    for t in sorted({t for p in points for t in p.tier.split("/")}):
        notes += [f"{t}: not published: {u}" for u in cat.tier(t).unpublished]
    _write_overlay(out, params, points, [*files, *extra])
    doc: dict[str, Any] = {
        "points": len(points), "constants": {n: params[n] for n in sorted(params)},
        "median_abs_error": med, "median_abs_loo_error": med_loo,
        "overlay": str(out),
        "rows": [{"id": p.id, "engine": p.engine, "tier": p.tier, "kind": p.kind,
                  "prompt_tokens": p.prompt_tokens, "hit_tokens": p.hit_tokens,
                  "measured_ms": p.value, "predicted_ms": pr,
                  "error": (pr - p.value) / p.value,
                  "loo_predicted_ms": lo if math.isfinite(lo) else None,
                  "loo_error": (lo - p.value) / p.value if math.isfinite(lo) else None}
                 for p, pr, lo in rows],
        "notes": notes,
    }
    if fmt == "json":
        render.emit_json(doc)
        return
    loo_txt = f"{med_loo:.1%}" if math.isfinite(med_loo) else "n/a (too few points)"
    render.line(f"Fitted {units.count(len(params), 'constant')} on "
                f"{len(points)} points: median |error| "
                f"{med:.1%}, leave-one-out {loo_txt}.")
    render.line(f"Overlay written to {out} (pass it to size/validate --catalog).")
    render.table(["constant", "value"],
                 [[cal._const_label(n)[0], cal.format_constant(n, params[n])]
                  for n in sorted(params)], title="Fitted constants")
    render.table(
        ["point", "kind", "measured", "predicted", "error", "LOO error"],
        [[p.id, p.kind, _v(p.quantity, p.value), _v(p.quantity, pr),
          f"{(pr - p.value) / p.value:+.1%}",
          f"{(lo - p.value) / p.value:+.1%}" if math.isfinite(lo) else "n/a"]
         for p, pr, lo in rows],
        title="Per point: ms (TTFT; decode: one step), GB/s (load rate), ratios as x; "
              "LOO = fitted without that point")
    for n in notes:
        render.line(f"note: {n}")


def _refuse_other_fits(ctx: typer.Context, loaded: bool) -> None:
    """A flag of the other kind of fit is an error naming it (exit 2)."""
    from xmemplan.cli.invocation import refuse_given

    if loaded:
        refuse_given(ctx, POINTS_ONLY, "does not apply with --loaded: it adds a constant to "
                     "the single-request TTFT fit, and --loaded fits the engine's step "
                     "overheads", "drop {flag} (--step-per-token fits the per-scheduled-token "
                     "step overhead), or run calibrate on measurement files for it")
        return
    refuse_given(ctx, tuple(n for n in LOADED_ONLY if n != "step_per_token"),
                 "applies with --loaded only: it describes the loaded runs, and the "
                 "single-request fit reads each point's engine, model and GPU from its row",
                 "drop {flag}, or pass loaded runs with --loaded")
    refuse_given(ctx, ("step_per_token",), "applies with --loaded only: it adds the "
                 "per-scheduled-token step overhead to the loaded runs' fit",
                 "drop --step-per-token (--per-token ENGINE fits a per-prompt-token host "
                 "overhead from measurement files), or pass loaded runs with --loaded")


def _calibrate_loaded(paths: list[Path], extra: list[Path], out: Path, fmt: str, *,
                      engine: str, model: str | None, gpu: str | None, tp: int,
                      per_token: bool) -> None:
    """`calibrate --loaded`: the engine's step overheads from loaded runs."""
    from xmemplan.catalog import load_catalog
    from xmemplan.cli.views import render
    from xmemplan.errors import InputError, UsageError
    from xmemplan.sizing import loaded as L
    from xmemplan.validate.loadedruns import read_loaded

    if engine not in L.ENGINES:
        raise UsageError(f"unknown engine '{engine}'", "use vllm or sglang")
    units.check_int(tp, "--tp", 1, 1024)
    cat = load_catalog(extra)
    for name, look in ((model, cat.model), (gpu, cat.gpu)):
        if name is not None:
            look(name)  # an unknown name: UsageError naming the catalog's entries
    dep = L.Deployment(engine=engine, model=model and cat.model(model).name,
                       gpu=gpu and cat.gpu(gpu).name, tp=tp)
    points = [p for f in paths for p in read_loaded(f, dep)]
    for p in points:
        for what, look in (("model", cat.model), ("gpu", cat.gpu)):
            try:
                look(getattr(p.run, what))
            except UsageError as exc:
                path, _, line = p.where.rpartition(":")
                raise InputError(exc.message, path=Path(path or p.where),
                                 line=int(line) if line.isdigit() else None, field=what,
                                 hint=exc.hint) from None
    names = ("base_s", "per_token_s", "per_seq_s") if per_token else ("base_s", "per_seq_s")
    for e in L.ENGINES:
        n_fit = sum(1 for p in points if p.run.engine == e and p.role == "fit")
        if 0 < n_fit <= len(names):
            raise InputError(
                f"the {e} fit is underdetermined: {n_fit} measured figures for "
                f"{len(names)} constants ({', '.join(names)})", path=paths[0],
                hint=f"add at least {len(names) + 1 - n_fit} more (leave-one-out needs one "
                "more than the constants): another run at a different load")
    if not any(p.role == "fit" for p in points):
        raise InputError("no point to fit (every row is held-out or excluded)", path=paths[0])
    sim = L.Simulator(catalog=tuple(extra))
    runs = len({p.run for p in points})
    with render.spinner(f"Fitting {len(names)} step constants per engine on {len(points)} "
                        f"figures of {runs} runs (each a full engine simulation)"):
        fits = L.fit_all(points, sim, constants=names)
    _write_step_overlay(out, fits, [*paths, *extra])
    doc: dict[str, Any] = {"mode": "loaded", "overlay": str(out), "engines": {}}
    for f in fits:
        doc["engines"][f.engine] = {
            "constants": f.constants, "fitted": f.fitted, "summary": L.summary(f),
            "notes": f.notes,
            "rows": [{"id": p.id, "role": p.role, "quantity": p.quantity,
                      "measured": p.value, "predicted": f.predicted[p.id],
                      "error": f.predicted[p.id] / p.value - 1,
                      "loo_predicted": f.loo.get(p.id),
                      "loo_error": (f.loo[p.id] / p.value - 1) if p.id in f.loo else None}
                     for p in f.points]}
    if fmt == "json":
        render.emit_json(doc)
        return
    for f in fits:
        sm = L.summary(f)
        s, h, c = sm["fit"], sm["held-out"], sm["check"]
        loo = s["median_abs_loo_error"]
        held = (f"; {h['points']} held out: {h['median_abs_error']:.1%}" if h["points"]
                else "") + (f"; {c['points']} check (scored, not fitted): "
                            f"{c['median_abs_error']:.1%}" if c["points"] else "")
        render.line(f"{f.engine}: fitted {', '.join(f.fitted) or 'nothing'} on {s['points']} "
                    f"figures: median |error| {s['median_abs_error']:.1%}, leave-one-out "
                    + (f"{loo:.1%}" if math.isfinite(loo) else "n/a") + held + ".")
    render.line(f"Overlay written to {out} (pass it to size/validate --catalog).")
    render.table(["engine", "per step", "per token", "per request"],
                 [[f.engine, f"{f.constants['base_s'] * 1e3:.3f} ms",
                   f"{f.constants['per_token_s'] * 1e6:.3f} us",
                   f"{f.constants['per_seq_s'] * 1e6:.1f} us"] for f in fits],
                 title="Fitted step overheads")
    rows = []
    for f in fits:
        for p in f.points:
            pr = f.predicted[p.id]
            lo = f.loo.get(p.id)
            fmt_v = "{:,.0f}" if p.quantity in ("out_tok_s",) else "{:,.2f}"
            rows.append([p.id, p.role, fmt_v.format(p.value), fmt_v.format(pr),
                         f"{pr / p.value - 1:+.1%}",
                         f"{lo / p.value - 1:+.1%}" if lo is not None else "n/a"])
    render.table(["figure", "role", "measured", "predicted", "error", "LOO"],
                 rows, title="Per figure (its quantity in its name: ms, tokens/s); LOO = "
                 "fitted without it (one Gauss-Newton step)")
    for f in fits:
        for n in f.notes:
            render.line(f"note: {n}")


def _write_step_overlay(out: Path, fits: list[Any], inputs: list[Path]) -> None:
    from xmemplan.jsonio import write_output

    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Engine step overheads fitted by `xmemplan calibrate --loaded`; pass this",
             "# file to `xmemplan size --catalog` or `xmemplan validate --catalog`.", ""]
    for f in fits:
        c = f.constants
        src = (f"xmemplan calibrate --loaded on {', '.join(str(p) for p in inputs)} "
               f"({len(f.points)} figures, {stamp})")
        lines += [f"[calibration.{f.engine}]", f"source = {_toml_str(src)}",
                  f'step_base = "{c["base_s"] * 1e6:.4f}us"',
                  f'step_per_token = "{c["per_token_s"] * 1e6:.6f}us"',
                  f'step_per_seq = "{c["per_seq_s"] * 1e6:.4f}us"',
                  f"points = {sum(1 for p in f.points if p.role == 'fit')}", ""]
    write_output(out, "\n".join(lines), "--out", inputs)


def _write_overlay(out: Path, params: dict[str, float], points: list[Any],
                   inputs: list[Path]) -> None:
    from xmemplan.jsonio import write_output

    files = inputs
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    src = (f"xmemplan calibrate on {', '.join(str(f) for f in files)} "
           f"({len(points)} points, {stamp})")
    glob: list[str] = []
    for key, name, fmt in (("eta_linear", "eta_linear", "{:.4f}"),
                           ("eta_attention", "eta_attention", "{:.4f}"),
                           ("host_eff", "host_efficiency", "{:.4f}"),
                           ("xmem_bw", "xmem_bandwidth", '"{:.4f}GB/s"'),
                           ("hbm_eff", "hbm_efficiency", "{:.4f}"),
                           ("layer_s", "layer_latency", '"{:.3f}us"')):
        if key in params:
            v = (params[key] / 1e9 if key.endswith("_bw") else
                 params[key] * 1e6 if key == "layer_s" else params[key])
            glob.append(f"{name} = {fmt.format(v)}")
    lines = ["# TTFT-model constants fitted by `xmemplan calibrate`; pass this file to",
             "# `xmemplan size --catalog` or `xmemplan validate --catalog`.", ""]
    for e in sorted({p.engine for p in points}):
        lines.append(f"[calibration.{e}]")
        lines.append(f"source = {_toml_str(src)}")
        if f"t0:{e}" in params:
            lines.append(f'fixed_overhead = "{params[f"t0:{e}"] * 1e3:.4f}ms"')
        if f"per_token:{e}" in params:
            lines.append(f'per_token_overhead = "{params[f"per_token:{e}"] * 1e6:.5f}us"')
        lines += glob
        lines.append(f"points = {sum(1 for p in points if p.engine == e)}")
        lines.append("")
    write_output(out, "\n".join(lines), "--out", inputs)


def _v(quantity: str, v: float) -> str:
    """A ratio as '4.60x'; a time (TTFT, decode step) in ms; a load rate in GB/s."""
    return f"{v:.2f}x" if quantity.startswith("ratio") else f"{v:,.1f}"


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
