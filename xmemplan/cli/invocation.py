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


def refuse_given(ctx: Any, names: tuple[str, ...], why: str, hint: str) -> None:
    """A usage error for the first of parameter `names` the user gave: "FLAG WHY", with
    `hint` (`{flag}` in either stands for the flag). For a flag the chosen mode would
    otherwise ignore."""
    from xmemplan.errors import UsageError

    stray = given_flags(ctx, names)
    if stray:
        flag = stray[0]
        raise UsageError(f"{flag} {why.format(flag=flag)}", hint.format(flag=flag))


def refuse_think_without_users(ctx: Any, users: int | None) -> None:
    """--think is the closed-loop users' think time: alone it would change nothing."""
    if users is None:
        refuse_given(ctx, ("think",), "is the think time of --users (closed-loop users)",
                     "add --users N, or drop --think")
