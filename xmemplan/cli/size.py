"""`xmemplan size`: placeholder until its issue lands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("size", help="(not built yet)")
    def _cmd() -> None:
        from xmemplan.errors import NotAvailableError

        raise NotAvailableError("'xmemplan size' is not built yet")
