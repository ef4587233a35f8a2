"""The `xmemplan` command: the app, global flags and the one error boundary."""

from __future__ import annotations

import sys
import warnings

import typer
from typer.exceptions import TyperException

from xmemplan import __version__
from xmemplan.cli import calibrate, catalog, compare, export, hitrate, plan, size, validate

app = typer.Typer(
    name="xmemplan",
    help=(
        "Size tiered KV-cache memory (HBM, host DRAM, X-Mem) for LLM serving of coding "
        "agents, from their real prompt traces.\n\n"
        "hitrate: prefix-cache hit ratios of traces. size: X-Mem nodes and GPUs for a TTFT "
        "SLO, from simulated traffic. validate: real KV pages through a HiCache storage "
        "backend, measured against the planner. calibrate: fit the model to your own "
        "measurements. export: write traces as AIPerf input. catalog: the numbers used."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"xmemplan {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or info."),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Everything a command keeps short by default (size: "
        "every assumption with its source, the full table by SLO)."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    from xmemplan.cli.views import render

    _state["debug"] = debug
    render.set_quiet(quiet)
    render.set_verbose(verbose)


for _module in (plan, hitrate, size, validate, compare, catalog, calibrate, export):
    _module.register(app)


_INTERRUPTED = "interrupted. Outputs are replaced only whole: no file was left half-written"


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (see `xmemplan.errors` for the table)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run_with_signals(args)
    except BaseException as exc:
        # A Ctrl-C while the CLI still imports (before its handlers are in place) can come
        # out wrapped: Python turns a KeyboardInterrupt inside a class body's __set_name__
        # into a RuntimeError (seen in the kill test: rich.progress imported 19 ms in).
        if isinstance(exc, SystemExit) or not (isinstance(exc, KeyboardInterrupt)
                                                or _during_interrupt(exc)):
            raise
        sys.stderr.write(f"xmemplan: {_INTERRUPTED}\n")
        return 130  # ExitCode.INTERRUPTED


def _run_with_signals(args: list[str]) -> int:
    _state["debug"] = "--debug" in args
    from xmemplan.cli import invocation

    invocation.ARGV[:] = args
    from xmemplan import provenance

    provenance.ARGV[:] = args  # the command recorded in the documents written
    from xmemplan.cli.views import render

    render.reset_counts()  # per run (in-process runs share the module)
    with warnings.catch_warnings():
        if not _state["debug"]:
            # numpy's "Mean of empty slice" and "invalid value" warnings are about values the
            # commands already handle (NaN shown as '-'): not for the user's terminal.
            warnings.simplefilter("ignore", RuntimeWarning)
        from xmemplan.jsonio import cleanup_on_signals, signalled, terminated

        with cleanup_on_signals():
            try:
                code = _run(args)
            except BaseException as exc:
                # The signal's KeyboardInterrupt raised inside a library's native code can
                # come out as another BaseException (polars' pyo3 PanicException, seen once
                # in the kill test while `hitrate --out` wrote its CSV), or a second signal
                # can land in _run's own handler: still an interruption, not a traceback.
                if isinstance(exc, SystemExit) or not signalled():
                    raise
                render.error(_INTERRUPTED)
                code = 130  # ExitCode.INTERRUPTED
            if code == 130 and terminated():  # SIGTERM unwinds as Ctrl-C does; says so
                return 143  # ExitCode.TERMINATED
            return code


def _run(args: list[str]) -> int:
    from xmemplan import errors
    from xmemplan.cli.views import render

    try:
        _refuse_empty_values(args)
        result = app(args=args, prog_name="xmemplan", standalone_mode=False)
        code = int(result) if isinstance(result, int) else errors.ExitCode.OK
        if code == errors.ExitCode.INTERRUPTED:  # click returns Ctrl-C's Exit(130) here
            render.error(_INTERRUPTED)
        return code
    except typer.Exit as exc:  # typer turns Ctrl-C into Exit(130)
        if exc.exit_code == errors.ExitCode.INTERRUPTED:
            render.error(_INTERRUPTED)
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        render.error(_INTERRUPTED)
        return errors.ExitCode.INTERRUPTED
    except TyperException as exc:  # bad flags: typer prints usage and the problem
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            render.error(exc.format_message())
        return errors.ExitCode.USAGE
    except MemoryError:
        if _state["debug"]:
            raise
        render.error("out of memory: the input needs more memory than this machine (or its "
                     "ulimit) allows. Split the input, or run it on a larger machine")
        return errors.ExitCode.INPUT
    except errors.XmemplanError as exc:
        if _state["debug"]:
            raise
        render.error(exc.render())
        return exc.exit_code
    except Exception as exc:  # a bug: say so, keep the traceback for --debug
        from xmemplan.jsonio import signalled

        # cleanup that failed while Ctrl-C unwound, or anything after a signal: still Ctrl-C
        if _during_interrupt(exc) or signalled():
            render.error(_INTERRUPTED)
            return errors.ExitCode.INTERRUPTED
        if _state["debug"]:
            raise
        render.error(
            f"internal error ({type(exc).__name__}: {exc}). "
            "Rerun with --debug and report the traceback"
        )
        return errors.ExitCode.INTERNAL


def _refuse_empty_values(args: list[str]) -> None:
    """An empty flag value (`--model ''`, `--gpu=`) is an error, not the default: `x or
    DEFAULT` in a command would silently take the default model for it."""
    from xmemplan.errors import UsageError

    for i, a in enumerate(args):
        if a == "--":
            return
        flag, eq, value = a.partition("=")
        if not a.strip() and not (i and args[i - 1].startswith("-") and "=" not in args[i - 1]
                                  and _takes_value(args[i - 1])):
            raise UsageError("an empty argument ('') was given", "an empty path would read "
                             "the current folder: pass the path, or leave it out")
        if not flag.startswith("--"):
            continue
        if eq and not value.strip():
            raise UsageError(f"{flag} is given an empty value", f"pass {flag} a value, or "
                             "leave the flag out for its default")
        if not eq and i + 1 < len(args) and not args[i + 1].strip() and _takes_value(flag):
            raise UsageError(f"{flag} is given an empty value ('')", f"pass {flag} a "
                             "value, or leave the flag out for its default")


def _takes_value(flag: str) -> bool:
    """Whether some command's `flag` takes a value (not a switch like --strict)."""
    import typer.main

    group = typer.main.get_command(app)
    for cmd in getattr(group, "commands", {}).values():
        for p in cmd.params:
            if flag in getattr(p, "opts", ()) and not getattr(p, "is_flag", False):
                return True
    return False


def _during_interrupt(exc: BaseException) -> bool:
    """Whether `exc` was raised while a KeyboardInterrupt was being handled, or from one."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc.__context__, exc.__cause__]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        todo += [cur.__context__, cur.__cause__]
    return False


def _reopen_closed_streams() -> None:
    """A closed stdout or stderr (`>&-`): Python sets it to None. Point it at /dev/null so
    that the command runs (its files are still written) instead of failing on its first
    line."""
    import os

    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115


def main() -> None:
    _reopen_closed_streams()
    code = run()
    import signal

    # The run is over and its outputs are in place: a late Ctrl-C or SIGTERM ends the
    # process quietly (no KeyboardInterrupt traceback from the exit).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:  # what is still buffered: a reader that left early (`| head`) is not an error
        sys.stdout.flush()
    except OSError as exc:
        from xmemplan.cli.views.render import error, stdout_closed

        stdout_closed()
        if not isinstance(exc, BrokenPipeError):  # a full disk: the results were lost
            error(f"cannot write to standard output ({exc.strerror or exc}). Free space "
                  "where it goes, or redirect it elsewhere")
            code = code or 2  # ExitCode.USAGE
    if code in (130, 143):  # ExitCode.INTERRUPTED, TERMINATED
        _leave_after_interrupt(code)
    sys.exit(code)


def _leave_after_interrupt(code: int) -> None:
    """After Ctrl-C: end the worker processes (they leave SIGINT to this process, see
    xmemplan.traces.registry) and exit without the interpreter's exit hooks, which would wait
    for a pool that a Ctrl-C in the middle of a submit can leave waiting for ever."""
    import multiprocessing
    import os

    for child in multiprocessing.active_children():
        child.terminate()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
