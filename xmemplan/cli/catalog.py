"""`xmemplan catalog`: list the models, GPUs and KV tiers the planner knows, with sources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

KINDS = ("models", "gpus", "tiers")


def register(app: typer.Typer) -> None:
    app.command("catalog")(catalog)


def catalog(
    kind: str = typer.Argument("all", help="models, gpus, tiers or all."),
    extra: list[Path] = typer.Option(
        [], "--catalog", help="A TOML file that adds or overrides entries (repeatable)."
    ),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or csv."),
    sources: bool = typer.Option(False, "--sources", help="Show where each number comes from."),
) -> None:
    """List catalog entries (the numbers `size` uses) and where they come from."""
    from xmemplan.catalog import load_catalog
    from xmemplan.catalog.report import catalog_rows
    from xmemplan.cli.views import render
    from xmemplan.errors import UsageError

    if kind not in KINDS + ("all",):
        raise UsageError(f"unknown catalog section '{kind}'", "use models, gpus, tiers or all")
    if fmt not in ("table", "json", "csv"):
        raise UsageError(f"unknown output format '{fmt}'", "use table, json or csv")
    if sources and fmt == "json":  # it used to be ignored there
        raise UsageError("--sources adds the source column to the table or CSV, and --format "
                         "json carries every entry's sources already (its 'sources')",
                         "drop --sources, or use --format table or csv")
    cat = load_catalog(extra)
    wanted = KINDS if kind == "all" else (kind,)
    sections = {k: catalog_rows(cat, k) for k in wanted}
    if fmt == "json":
        render.emit_json({k: v for k, v in sections.items()})
        return
    for k, rows in sections.items():
        _print(render, k, rows, fmt, sources)


def _print(render: Any, kind: str, rows: list[dict[str, Any]], fmt: str, sources: bool) -> None:
    if not rows:
        return
    notes = "not_published"  # a list of sentences: printed under the table, not in a cell
    columns = [c for c in rows[0] if c not in ("sources", "source", notes)]
    if sources:
        columns.append("source")
    if fmt == "csv":
        render.emit_csv(["section"] + columns, [[kind] + [r.get(c) for c in columns] for r in rows])
        return
    title = {"models": "Models", "gpus": "GPUs", "tiers": "KV tiers"}[kind]
    render.table(columns, [[r.get(c) for c in columns] for r in rows], title=title)
    for r in rows:
        for text in r.get(notes) or []:
            render.line(f"Not published ({r['name']}): {text}")
