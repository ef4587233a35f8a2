"""Everything that reaches the terminal goes through here; the only module that imports rich.

Results go to stdout (tables, JSON, CSV); messages, warnings and progress go to stderr, so
`xmemplan hitrate traces/ --format json > out.json` stays clean.
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from xmemplan import jsonio
from xmemplan.errors import printable

if TYPE_CHECKING:
    from rich.progress import Progress

_quiet = False
_verbose = False
_lines = [0]  # lines of results written to stdout by line() and table()
_live: list[Any] = []  # the progress displays on stderr now (innermost last)


def set_quiet(quiet: bool) -> None:
    """Silence info messages and progress bars (warnings and errors still show)."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


def set_verbose(verbose: bool) -> None:
    """Show what a command keeps short by default (size: every assumption, the full table
    by SLO)."""
    global _verbose
    _verbose = verbose


def verbose() -> bool:
    return _verbose


def reset_counts() -> None:
    """Start a command's count of lines (and its verbosity) afresh."""
    global _verbose
    _verbose = False
    _lines[0] = 0


def lines_written() -> int:
    """Lines of results this command has written to stdout so far (line() and table())."""
    return _lines[0]


def _print(renderable: Any, **kwargs: Any) -> None:
    """Print to stdout through rich, counting the lines it takes."""
    console = out_console()
    try:
        with console.capture() as cap:
            console.print(renderable, **kwargs)
    except OSError as exc:  # rich flushed what it held to a stdout that cannot take it
        _stdout_failed(exc)
    text = cap.get()
    _lines[0] += text.count("\n")
    _write(text)


def _width() -> int | None:
    cols = os.environ.get("COLUMNS")
    return int(cols) if cols and cols.isdigit() else None


def stdout_closed(stream: Any = None) -> None:
    """The reader of stdout (or stderr) went away (`| head`): send the rest of that stream
    to /dev/null and carry on, so that the command still ends with its own exit code (a
    failed check stays 5), instead of rich's SystemExit(1), which reads as an internal
    error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (stream or sys.stdout).fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):  # captured: nothing to redirect
        pass


class _Console(Console):
    def on_broken_pipe(self) -> None:
        stdout_closed(self.file)


def out_console() -> Console:
    # Made per call so that redirected/captured sys.stdout is honoured.
    return _Console(file=sys.stdout, width=_width(), highlight=False, soft_wrap=False)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        _stdout_failed(exc)


def _stdout_failed(exc: OSError) -> None:
    """A closed reader (`| head`) is not an error; a full disk (> /dev/full) or an I/O
    error where stdout goes is (exit 2): the results were lost."""
    stdout_closed()
    if isinstance(exc, BrokenPipeError):
        return
    from xmemplan.errors import UsageError

    raise UsageError(f"cannot write to standard output ({exc.strerror or exc})",
                     "free space where it goes, or redirect it elsewhere") from None


def err_console() -> Console:
    return _Console(file=sys.stderr, width=_width(), highlight=False, soft_wrap=True)


def wrapped(text: str) -> str:
    """`text` wrapped at the terminal's width at spaces only: a number, a path or a flag is
    never split (a word longer than the width keeps its own line)."""
    import textwrap

    width = max(40, err_console().width)
    return "\n".join(
        textwrap.fill(line, width=width, subsequent_indent="  ", break_long_words=False,
                      break_on_hyphens=False)
        for line in text.split("\n")
    )


def info(message: str) -> None:
    """A note on stderr (not with -q); above the progress display when one is live, from
    any thread (numba's compile note comes from the thread that compiles)."""
    if not _quiet:
        console = _live[-1].console if _live else err_console()
        console.print(wrapped(printable(message)), markup=False)


def warn(message: str) -> None:
    err_console().print(wrapped(printable(f"Warning: {message}")), markup=False,
                        style="yellow")


def error(message: str) -> None:
    err_console().print(wrapped(printable(f"Error: {message}")), markup=False,
                        style="bold red")


class _Progress:
    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._progress = progress
        self._task = task

    def advance(self, n: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def update(self, completed: float, total: float | None = None) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, total=total)

    def set_description(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)


@contextmanager
def progress(
    total: float | None, description: str, unit: str = "items"
) -> Iterator[_Progress]:
    """A progress bar on stderr; silent when stderr is not a terminal or when quiet.

    `unit="bytes"` shows sizes and throughput instead of counts.
    """
    console = err_console()
    if _quiet or not console.is_terminal:
        yield _Progress(None, None)
        return
    # rich.progress only when a bar is shown (15 ms of import a command that shows none
    # would pay: captured output, -q)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    counter: list[ProgressColumn] = (
        [DownloadColumn(), TransferSpeedColumn()] if unit == "bytes" else [MofNCompleteColumn()]
    )
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        *counter,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=True) as prog, _showing(prog):
        task = prog.add_task(description, total=total)
        yield _Progress(prog, task)


def fmt(value: Any, digits: int = 4) -> str:
    """Format one cell: floats with `digits` significant places, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if 1e3 <= abs(value) < 1e15:  # whole, with separators: 2,306 not 2306.04
            return f"{value:,.0f}"
        if value != 0 and (abs(value) >= 1e15 or abs(value) < 1e-3):
            return f"{value:.{digits}g}"
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") if "." in f"{value}" else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return printable(str(value))


def _is_value(cell: str) -> bool:
    """A cell that must never be cut: a number, a quantity with its unit, or '-'."""
    head = cell.lstrip("-+~<>=(").replace(",", "")
    return cell == "-" or (bool(head) and (head[0].isdigit() or head[:3] in ("inf", "nan")))


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    title: str | None = None,
    caption: str | None = None,
    right_align_from: int = 1,
) -> None:
    """Print a table to stdout. Columns from `right_align_from` on are right-aligned.

    Values are never cut: every column is at least as wide as its widest number, headers
    and text wrap instead. When even that does not fit the terminal, each row is printed
    as its own two-column table (field, value), which fits any width a value fits.
    """
    cells = [[fmt(v) for v in row] for row in rows]
    title, caption = (printable(x) if x else x for x in (title, caption))
    # Values (and the first column, which names the row) keep their full width; other
    # text may wrap, down to 8 characters.
    need = [
        max([len(r[i]) for r in cells if i < len(r) and (i == 0 or _is_value(r[i]))]
            + [min(8, max([len(r[i]) for r in cells if i < len(r)] + [1]))])
        for i in range(len(columns))
    ]
    columns = [c.replace("_", " ") for c in columns]
    # A header wraps at spaces only: each column is at least its longest header word wide.
    need = [max(n, max((len(w) for w in c.split()), default=1)) for n, c in zip(need, columns,
                                                                                  strict=False)]
    width = out_console().width
    if sum(need) + 3 * len(columns) + 1 > width and len(columns) > 2:
        _transposed(columns, cells, title, caption, width)
        return
    def build(table_width: int | None, body: Sequence[Sequence[str]]) -> Table:
        t = Table(title=title, caption=caption, title_justify="left", caption_justify="left",
                  width=table_width)
        for i, name in enumerate(columns):
            # min_width holds each column at its widest value and longest header word, so
            # rich shrinks only wrapping text, never a number or a header word
            t.add_column(name, justify="right" if i >= right_align_from else "left",
                         min_width=need[i], overflow="fold")
        for row in body:
            t.add_row(*row)
        return t

    # A table whose every cell and header fits at its natural width is laid out at that
    # width, nothing shrunk or wrapped: its rows close, so no check is needed.
    natural = [max([cell_len(r[i]) for r in cells if i < len(r)] + [cell_len(c)])
               for i, c in enumerate(columns)]
    if sum(natural) + 3 * len(columns) + 1 <= width:
        _print(build(None, cells))
        return
    # rich can lay a table out one or two characters wider than the terminal when it
    # shrinks columns, and the terminal then crops the right border: try narrower table
    # widths until every row closes, else print it transposed. The check renders only
    # the rows that set a column's width (its longest cell and its longest word): rich
    # sizes columns from those, so the whole table lays out the same.
    probe = [cells[i] for i in _widest_rows(cells)]
    for table_width in (None, *range(width - 1, width - 8, -1)):
        if _closes(build(table_width, probe), width):
            _print(build(table_width, cells))
            return
    _transposed(columns, cells, title, caption, width)


def _widest_rows(cells: Sequence[Sequence[str]]) -> list[int]:
    """Indices of the rows holding each column's longest cell and longest word."""
    keep: set[int] = set()
    ncols = max((len(r) for r in cells), default=0)
    for j in range(ncols):
        col = [(r[j] if j < len(r) else "") for r in cells]
        keep.add(max(range(len(col)), key=lambda i: len(col[i])))
        keep.add(max(range(len(col)), key=lambda i: max((len(w) for w in col[i].split()),
                                                        default=0)))
    return sorted(keep)


_OPEN, _CLOSE = "┏┃┡│└", "┓┃┩│┘"


def _closes(t: Table, width: int) -> bool:
    """Whether `t`, printed `width` wide, ends every bordered row with its right border."""
    buf = io.StringIO()
    Console(file=buf, width=width, highlight=False, soft_wrap=False, no_color=True).print(t)
    rows = [ln.rstrip() for ln in buf.getvalue().splitlines() if ln[:1] in _OPEN]
    return all(ln and ln[-1] in _CLOSE and len(ln) <= width for ln in rows)


def _transposed(columns: Sequence[str], cells: list[list[str]], title: str | None,
                caption: str | None, width: int) -> None:
    """Rows become columns, in as many side-by-side groups as the width needs."""
    field_w = max(len(c) for c in columns[1:]) + 3
    groups: list[list[list[str]]] = [[]]
    used = field_w + 1
    for r in cells:
        w = min(max(len(x) for x in r), width // 2) + 3
        if groups[-1] and used + w > width:
            groups.append([])
            used = field_w + 1
        groups[-1].append(r)
        used += w
    for k, group in enumerate(groups):
        part = f" ({k + 1}/{len(groups)})" if len(groups) > 1 else ""
        t = Table(title=(title or "") + part, title_justify="left")
        t.add_column(columns[0], overflow="fold")
        for r in group:
            # the row's name heads its column: whole where it fits half the width (the
            # group widths above reserve that much), folded beyond
            t.add_column(r[0], justify="right", overflow="fold",
                         min_width=max([len(x) for x in r[1:] if _is_value(x)]
                                       + [min(len(r[0]), width // 2), 1]))
        for i, name in enumerate(columns[1:], start=1):
            t.add_row(name, *(r[i] if i < len(r) else "" for r in group))
        _print(t)
    if caption:
        line(caption)


def line(text: str = "", style: str | None = None) -> None:
    """Print a plain line of results to stdout. Styles show only on a terminal (rich drops
    them when stdout is not one; NO_COLOR drops the colours): `style`, else green for a
    line that starts with PASS and red for FAIL."""
    text = printable(text)
    _print(text, markup=False, highlight=False, style=style or verdict_style(text))


def answer(text: str) -> None:
    """The answer line: bold on a colour terminal."""
    line(text, style="bold")


def verdict_style(text: str) -> str | None:
    """green for a PASS line, red for a FAIL line, None otherwise."""
    head = text.lstrip()
    if head.startswith("PASS"):
        return "green"
    if head.startswith("FAIL"):
        return "red"
    return None


@contextmanager
def spinner(description: str) -> Iterator[None]:
    """A spinner with elapsed time on stderr while a step runs (terminal only, not -q)."""
    console = err_console()
    if _quiet or not console.is_terminal:
        yield
        return
    from rich.progress import Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("{task.description}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as prog, _showing(prog):
        prog.add_task(description, total=None)
        yield


@contextmanager
def _showing(prog: Any) -> Iterator[None]:
    _live.append(prog)
    try:
        yield
    finally:
        _live.remove(prog)


def to_json(obj: Any) -> str:
    return jsonio.to_json(obj)


def emit_json(obj: Any) -> None:
    _write(to_json(obj) + "\n")


def emit_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    text = buf.getvalue()
    _write(printable(text) if sys.stdout.isatty() else text)


_SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], lo: float | None = None, hi: float | None = None) -> str:
    """A one-line chart of `values` (NaN shown as a space)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return ""
    lo = min(finite) if lo is None else lo
    hi = max(finite) if hi is None else hi
    span = hi - lo or 1.0
    chars = []
    for v in values:
        if v is None or not math.isfinite(v):
            chars.append(" ")
        else:
            k = int((min(max(v, lo), hi) - lo) / span * (len(_SPARKS) - 1) + 0.5)
            chars.append(_SPARKS[k])
    return "".join(chars)
