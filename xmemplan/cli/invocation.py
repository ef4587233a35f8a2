"""The arguments of the command being run, as `xmemplan.cli.main.run` received them (the
run folder's command.txt records them), and which options the user gave."""

from __future__ import annotations

from typing import Any

ARGV: list[str] = []


def given_flags(ctx: Any, names: tuple[str, ...]) -> list[str]:
    """The options among parameter `names` the user gave (on the command line or from the
    environment, not a default), each as its first long flag with its aliases after it:
    for refusing a flag the chosen mode would otherwise ignore."""
    out = []
    for p in ctx.command.params:
        if p.name in names and p.opts:
            src = ctx.get_parameter_source(p.name)
            if src is not None and src.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT"):
                longs = [o for o in p.opts if o.startswith("--")] or list(p.opts)
                out.append(longs[0] + (f" ({', '.join(longs[1:])})" if len(longs) > 1
                                       else ""))
    return out
