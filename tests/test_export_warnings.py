"""export: the input format flag spelled as elsewhere (old --format kept), and warnings on rows
longer than the model's context and on sessions that all start at t=0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, unwrap
from xmemplan.cli.main import run

MOONCAKE = ROOT / "examples" / "other" / "mooncake.jsonl"


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_trace_format_and_the_old_spelling(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run(["export", str(MOONCAKE), "--to", "aiperf", "-o", str(a),
                "--trace-format", "mooncake"]) == 0
    assert run(["export", str(MOONCAKE), "--to", "aiperf", "-o", str(b),
                "--format", "mooncake"]) == 0
    assert a.read_bytes() == b.read_bytes()
    capsys.readouterr()
    assert run(["export", "--help"]) == 0
    helptext = capsys.readouterr().out
    assert "--trace-format" in helptext and "--format" not in helptext.replace(
        "--trace-format", "")


def _mooncake(tmp_path: Path, rows: list[tuple[float, int]]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({
        "timestamp": ts, "input_length": n, "output_length": 10,
        "hash_ids": list(range(i * 1000, i * 1000 + (n + 511) // 512))}) + "\n"
        for i, (ts, n) in enumerate(rows)))
    return p


def test_warns_on_rows_longer_than_the_context(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    src = _mooncake(tmp_path, [(0, 1000), (1000, 300_000), (2000, 2000)])
    out = tmp_path / "o.jsonl"
    assert run(["export", str(src), "--to", "aiperf", "-o", str(out)]) == 0
    err = unwrap(capsys.readouterr().err)
    assert "1 of 3 rows are longer than qwen3-30b-a3b-fp8's 262,144-token context" in err
    assert "start at the same instant" not in err
    assert len(_rows(out)) == 3  # warned, not dropped


def test_warns_when_every_session_starts_at_zero(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src = _mooncake(tmp_path, [(0, 1000), (0, 2000), (0, 3000)])
    assert run(["export", str(src), "--to", "aiperf", "-o", str(tmp_path / "o.jsonl")]) == 0
    err = unwrap(capsys.readouterr().err)
    assert "all 3 sessions start at the same instant (t=0)" in err
    assert "longer than" not in err
