"""`xmemplan catalog`: placeholder until its issue lands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("catalog", help="(not built yet)")
    def _cmd() -> None:
        from xmemplan.errors import NotAvailableError

        raise NotAvailableError("'xmemplan catalog' is not built yet")
