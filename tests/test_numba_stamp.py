"""The engine's stale-cache check: an edit to any source the kernels compile from drops
the cached kernels once; an unchanged tree keeps them."""

from __future__ import annotations

from pathlib import Path

from xmemplan.sizing.engine._numba_stamp import drop_stale_cache


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    pkg = tmp_path / "engine"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "loop.py").write_text("x = 1\n")
    (pkg / "policy.py").write_text("y = 2\n")
    extra = tmp_path / "sim.py"
    extra.write_text("z = 3\n")
    return pkg, extra


def _cached(pkg: Path) -> Path:
    f = pkg / "__pycache__" / "loop.run-118.py311.nbi"
    f.write_bytes(b"old")
    return f


def test_an_edit_to_an_inlined_sibling_drops_the_cache(tmp_path):
    pkg, extra = _tree(tmp_path)
    assert drop_stale_cache(pkg, [extra])  # first stamp
    kept = _cached(pkg)
    assert not drop_stale_cache(pkg, [extra]) and kept.exists()  # unchanged: kept
    (pkg / "policy.py").write_text("y = 3\n")  # the loop's own file is untouched
    assert drop_stale_cache(pkg, [extra]) and not kept.exists()
    stale = _cached(pkg)
    extra.write_text("z = 4\n")  # sizing/sim.py helpers count too
    assert drop_stale_cache(pkg, [extra]) and not stale.exists()


def test_the_installed_engine_is_stamped():
    import xmemplan.sizing.engine as engine

    stamp = Path(engine.__file__).parent / "__pycache__" / "xmemplan-sources.sha1"
    assert stamp.exists() and len(stamp.read_text()) == 40
