"""The compile note: printed to a terminal when numba compiles one of our kernels (a first
run, or a cache that holds nothing this run can use), once per process; never otherwise
(so captured output does not depend on the cache)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numba
import pytest

import xmemplan.cli.firstrun as F
from xmemplan.cli.views import render


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """firstrun's state as in a new process; its listener removed afterwards."""
    from numba.core import event

    monkeypatch.setattr(F, "_state", {"listener": None, "said": False}, raising=False)
    yield
    if F._state["listener"] is not None:
        event.unregister("numba:compile", F._state["listener"])


def _kernel(module: str):  # noqa: ANN202 - a numba dispatcher
    """A new jitted function of `module` (not cached: calling it compiles)."""
    scope = {"__name__": module}
    exec("def twice(x):\n    return 2 * x\n", scope)  # noqa: S102 - a fixed function
    return numba.njit(cache=False)(scope["twice"])


def test_says_it_when_our_kernel_compiles(monkeypatch: pytest.MonkeyPatch,
                                          fresh: None) -> None:
    """Whatever the cache folder holds: this checkout has the engine's cache files, which
    the note used to be decided from, and a kernel compiled without a word (a cache made
    on another CPU, or for other argument types, is there and cannot be used)."""
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    F.first_run_notice()
    assert err.getvalue() == ""  # nothing compiled yet
    assert _kernel("xmemplan.sizing.probe")(3) == 6
    assert _kernel("xmemplan.prefix.probe")(4) == 8
    text = " ".join(err.getvalue().split())
    assert text.count("Compiling the simulation kernels for this machine") == 1, text
    assert "Once: 2-3 minutes on 2 cores" in text


@pytest.mark.parametrize("tty,quiet,module", [
    (False, False, "xmemplan.sizing.probe"),  # not a terminal
    (True, True, "xmemplan.sizing.probe"),  # -q
    (True, False, "someone_elses"),  # not one of ours
])
def test_says_nothing_otherwise(monkeypatch: pytest.MonkeyPatch, fresh: None, tty: bool,
                                quiet: bool, module: str) -> None:
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(render, "_quiet", quiet)
    F.first_run_notice()
    assert _kernel(module)(5) == 10
    assert err.getvalue() == ""
    assert (F._state["listener"] is None) is not tty


def test_a_loaded_kernel_says_nothing(monkeypatch: pytest.MonkeyPatch, fresh: None) -> None:
    k = _kernel("xmemplan.sizing.probe")
    k(1)  # compiled before the command starts: what a cache load gives
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    F.first_run_notice()
    assert k(2) == 4
    assert err.getvalue() == ""
