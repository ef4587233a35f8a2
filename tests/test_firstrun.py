"""The first run's note: printed to a terminal when the engine's kernels are not compiled
yet, never otherwise (so captured output does not depend on the cache)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import xmemplan.sizing.engine as E
from xmemplan.cli.firstrun import first_run_notice


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty, cached, says", [
    (True, False, True), (True, True, False), (False, False, False)])
def test_first_run_notice(monkeypatch: pytest.MonkeyPatch, tty: bool, cached: bool,
                          says: bool) -> None:
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(E, "kernels_cached", lambda: cached)
    first_run_notice()
    assert ("compiling the simulation kernels" in err.getvalue()) is says


def test_kernels_cached_reads_the_engines_cache(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(E, "_HERE", tmp_path)
    assert not E.kernels_cached()
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "loop.run_kernel-270.py311.nbi").write_bytes(b"")
    assert E.kernels_cached()
