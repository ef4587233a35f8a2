"""The arguments of the command being run, as `xmemplan.cli.main.run` received them (the
run folder's command.txt records them), and which options the user gave."""

from __future__ import annotations

from typing import Any

ARGV: list[str] = []


def given_flags(ctx: Any, names: tuple[str, ...]) -> list[str]:
    """The options among parameter `names` the user gave (on the command line or from the
    environment, not a default), each as its long flag: for refusing a flag the chosen mode
    would otherwise ignore."""
    out = []
    for p in ctx.command.params:
        if p.name in names and p.opts:
            src = ctx.get_parameter_source(p.name)
            if src is not None and src.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT"):
                out.append(max(p.opts, key=len))
    return out
