"""`xmemplan compare`: decisions side by side, the differences first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import unwrap
from xmemplan.cli.main import run


def _plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, *args: str) -> Path:
    code = run(["size", "--ttft-slo", "500ms", "--requests", "1000", "--format", "json", *args])
    assert code == 0
    path = tmp_path / f"{name}.json"
    path.write_text(capsys.readouterr().out)
    return path


def test_differences_first(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    a = _plan(tmp_path, capsys, "h100", "--gpu", "h100-sxm")
    b = _plan(tmp_path, capsys, "h200", "--gpu", "h200-sxm")
    pa, pb = (json.loads(p.read_text()) for p in (a, b))
    assert run(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("h100 / h200:")
    assert "(setting differs: GPU" in " ".join(out.split())
    gx = [next(o["gpus"] for o in p["options"] if o["option"] == "xmem") for p in (pa, pb)]
    if gx[0] != gx[1]:
        assert f"GPUs, xmem {gx[0]} / {gx[1]}" in first
    # every line whole at 80 columns
    assert all(len(line) <= 80 for line in out.splitlines())
    assert pa["answer"] in " ".join(out.split()) or pa["answer"].split(":")[0] in out


def test_same_plan_twice_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _plan(tmp_path, capsys, "one")
    b = tmp_path / "two.json"
    b.write_text(a.read_text())
    assert run(["compare", str(a), str(b), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["headline"].startswith("The 2 runs agree")
    assert not any(r["differs"] for r in doc["rows"])


def test_needs_two_and_existing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _plan(tmp_path, capsys, "one")
    assert run(["compare", str(a)]) == 2
    assert "two or more" in capsys.readouterr().err
    code = run(["compare", str(a), str(tmp_path / "missing")])
    assert code == 3
    assert "no such run folder or plan file" in unwrap(capsys.readouterr().err)
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    assert run(["compare", str(a), str(bad)]) == 3
    assert "not an xmemplan plan" in unwrap(capsys.readouterr().err)


def test_same_path_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One plan named twice 'agreed' with itself (exit 0, nothing compared)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "one.json").write_text("{}")
    assert run(["compare", "one.json", "./one.json"]) == 2
    err = unwrap(capsys.readouterr().err)
    assert "Error: one.json is named twice. Pass each run or plan once." in err
