"""`xmemplan compare RUN_OR_PLAN...`: decisions side by side, the differences first.

Each argument is a run folder (`xmemplan plan -o DIR`) or a plan document (`size --format
json`). The first line says what differs (or that nothing does); then each run's answer;
then one table, a column per run, with the rows that differ marked '*': the setting (model,
GPU, engine, shape, SLO, load), the cheapest option, the X-Mem nodes, GPUs, warm p99 TTFT and
goodput of each option, the costs when the plans have them, the hit ratios, and whether the
inputs were the same files (command.txt's hashes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

OUTPUT_FORMATS = ("table", "json")
OPTIONS = ("hbm-only", "host-dram", "xmem")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)


def compare(
    runs: list[Path] = typer.Argument(
        ..., help="Run folders (xmemplan plan -o DIR) or plan.json files, two or more.",
        show_default=False,
    ),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
) -> None:
    """Decisions side by side: answers, GPUs, nodes, costs, p99 and hit ratios."""
    from xmemplan.cli.views import render
    from xmemplan.cli.views.report import load_run
    from xmemplan.errors import UsageError

    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format '{fmt}'", "use table or json")
    if len(runs) < 2:
        raise UsageError("compare needs two or more runs or plans",
                         "pass two run folders, e.g. runs/h100 runs/b200")
    seen: dict[Path, Path] = {}
    for p in runs:  # the same run twice "agrees" with itself: nothing compared
        key = p.resolve()
        if key in seen:
            raise UsageError(f"{p} is named twice" + ("" if p == seen[key] else
                                                     f" (as {seen[key]})"),
                             "pass each run or plan once")
        seen[key] = p
    loaded = [load_run(p) for p in runs]
    names = _names(loaded)
    rows = comparison_rows(loaded)
    differ = [r for r in rows if r["differs"]]
    head = headline(names, differ)
    if fmt == "json":
        render.emit_json({
            "headline": head,
            "runs": [{"name": n, "path": str(r.path), "answer": r.plan.get("answer")}
                     for n, r in zip(names, loaded)],
            "rows": rows,
        })
        return
    render.answer(head)
    for n, r in zip(names, loaded):
        render.line(f"- {n}: {r.plan.get('answer', '-')}")
    # The table: what differs, and the decision's own rows whatever they hold; the rest of
    # what all runs share is one line under it.
    shown = [r for r in rows if r["differs"] or r["key"] in DECISION_KEYS]
    same = [r for r in rows if r not in shown]
    render.table(
        ["", *names],
        [[("* " if r["differs"] else "  ") + r["label"], *r["values"]] for r in shown],
        title="Side by side (* differs)",
    )
    if same:
        render.line("Same in all: " + "; ".join(f"{r['label']} {r['values'][0]}"
                                                for r in same) + ".")
    if len(shown) > 12 and differ:  # a long table: the answer again, last
        render.answer(head)


def _names(runs: list[Any]) -> list[str]:
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # same folder names: number them
        names = [f"{i + 1}:{n}" for i, n in enumerate(names)]
    return names


def _n(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"
    return str(v)


def _ratio(v: Any) -> str:
    return "-" if v is None or v != v else f"{v:.4f}"


def _money(v: Any, basis: Any) -> str:
    if v is None:
        return "-"
    per = "/h" if basis == "hour" else ""
    return f"${v:,.2f}{per}" if v < 1000 else f"${v:,.0f}{per}"


def _option(plan: dict[str, Any], name: str) -> dict[str, Any]:
    return next((o for o in plan.get("options", []) if o.get("option") == name), {})


def _inputs(command: str) -> str | None:
    """A short fingerprint of the run's inputs (their SHA-256 lines), None when unknown."""
    import hashlib

    hashes = re.findall(r"^([0-9a-f]{64})  ", command, flags=re.M)
    if not hashes:
        return None
    return hashlib.sha256("".join(sorted(hashes)).encode()).hexdigest()[:8] + (
        f", {len(hashes)} files")


def comparison_rows(runs: list[Any]) -> list[dict[str, Any]]:
    """[{key, label, values, differs}], one per compared figure."""
    def plan_field(key: str, show: Any = _n) -> list[str]:
        return [show(r.plan.get(key)) for r in runs]

    rows: list[tuple[str, str, list[str]]] = [
        ("model", "model", plan_field("model")),
        ("gpu", "GPU", plan_field("gpu")),
        ("engine", "engine", plan_field("engine")),
        ("shape", "replica shape", plan_field("shape")),
        ("ttft_slo_ms", "SLO (ms)", [f"{_n(r.plan.get('ttft_slo_ms'))} at "
                                    f"p{r.plan.get('slo_percentile', 99):g}" for r in runs]),
        ("load", "load", plan_field("load")),
        ("cheapest", "cheapest option", plan_field("cheapest")),
        ("answer.gpus", "GPUs (answer)", [_n(_option(r.plan, str(r.plan.get("cheapest")))
                                             .get("gpus")) for r in runs]),
        ("recommended_nodes", "X-Mem nodes (answer)", plan_field("recommended_nodes")),
    ]
    for name in OPTIONS:
        rows.append((f"{name}.gpus", f"GPUs, {name}",
                     [_n(_option(r.plan, name).get("gpus")) for r in runs]))
    rows.append(("xmem.nodes", "nodes, xmem", [_n(_option(r.plan, "xmem").get("nodes"))
                                               for r in runs]))
    for name in OPTIONS:
        rows.append((f"{name}.warm_p99_ms", f"warm p99 ms, {name}",
                     [_n(((_option(r.plan, name).get("ttft_ms") or {}).get("warm") or {})
                         .get("p99")) for r in runs]))
    for name in OPTIONS:
        rows.append((f"{name}.goodput_rps", f"max r/s, {name}",
                     [_goodput(_option(r.plan, name)) for r in runs]))
    rows.append(("gpus_saved_by_xmem", "GPUs saved by X-Mem", plan_field("gpus_saved_by_xmem")))
    if any(r.plan.get("cost") is not None for r in runs):
        rows.append(("cost", "cost (answer)", [_money(r.plan.get("cost"),
                                                      r.plan.get("cost_basis")) for r in runs]))
    for name in OPTIONS:
        if any(_option(r.plan, name).get("cost") is not None for r in runs):
            rows.append((f"{name}.cost", f"cost, {name}",
                         [_money(_option(r.plan, name).get("cost"), r.plan.get("cost_basis"))
                          for r in runs]))
    rows.append(("hit_ratio", "hit ratio (simulated)", plan_field("hit_ratio", _ratio)))
    if any(r.hitrate for r in runs):
        rows.append(("token_hit_ratio", "token hit ratio (trace)",
                     [_ratio((r.hitrate or {}).get("token_hit_ratio")) for r in runs]))
        rows.append(("mean_request_hit_ratio", "mean request hit (trace)",
                     [_ratio((r.hitrate or {}).get("mean_request_hit_ratio")) for r in runs]))
    if any(r.validation for r in runs):
        rows.append(("validation", "emulated validation", [
            "-" if not r.validation else
            f"{'PASS' if r.validation.get('passed') else 'FAIL'} "
            f"{r.validation.get('error', float('nan')):.1%}" for r in runs]))
    if any(r.command for r in runs):
        rows.append(("inputs", "inputs (SHA-256)", [_inputs(r.command) or "-" for r in runs]))
    return [{"key": k, "label": label, "values": v, "differs": len(set(v)) > 1}
            for k, label, v in rows]


def _goodput(o: dict[str, Any]) -> str:
    v = o.get("goodput_rps")
    if v is None:
        return "-"
    return f">={v:,.0f}" if o.get("goodput_capped") else f"{v:,.1f}"


# Rows the table always shows: the decision itself.
DECISION_KEYS = ("cheapest", "answer.gpus", "recommended_nodes", "xmem.gpus",
                 "host-dram.gpus", "cost")

# The rows the first line names, in this order, when they differ.
HEADLINE_KEYS = ("answer.gpus", "recommended_nodes", "cheapest", "xmem.gpus",
                 "host-dram.gpus", "cost", "xmem.warm_p99_ms", "token_hit_ratio")


def headline(names: list[str], differ: list[dict[str, Any]]) -> str:
    """The first line: what differs in the decision, runs in order separated by ' / '."""
    if not differ:
        return f"The {len(names)} runs agree: same answer, GPUs, nodes and figures."
    by_key = {r["key"]: r for r in differ}
    parts = [f"{by_key[k]['label']} {' / '.join(by_key[k]['values'])}"
             for k in HEADLINE_KEYS if k in by_key]
    setting = [r["label"] for r in differ if r["key"] in (
        "model", "gpu", "engine", "shape", "ttft_slo_ms", "load", "inputs")]
    if not parts:
        return (f"The same decision from {' / '.join(names)}; they differ in "
                f"{', '.join(r['label'] for r in differ)}.")
    text = f"{' / '.join(names)}: " + "; ".join(parts)
    if setting:
        text += f" (setting differs: {', '.join(setting)})"
    return text + "."
