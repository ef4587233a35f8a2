"""Transcripts read bare say on the first screen what to add (--subagents, --hidden-prefix)."""

from __future__ import annotations

import pytest

from tests.conftest import shared_trace, unwrap
from xmemplan.cli.main import run


def test_transcripts_say_what_to_add(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path = shared_trace("claude-code-transcripts")
    assert run(["hitrate", str(path)]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("Token hit ratio 0.6334")
    first = unwrap(cap.err).split("\n")[0]  # the first thing after the answer
    assert first.startswith("Warning: these Claude Code transcripts are read without what "
                            "the API cached (the API reported 0.9427")
    assert "add --subagents --hidden-prefix auto" in first
    assert run(["hitrate", str(path), "--subagents", "--hidden-prefix", "auto"]) == 0
    assert "read without what the API cached" not in capsys.readouterr().err


def test_no_hint_for_other_formats(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import ROOT

    assert run(["hitrate", str(ROOT / "examples" / "traces")]) == 0
    assert "API cached" not in capsys.readouterr().err


def test_plan_on_transcripts_warns_in_terminal_and_report(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    path = shared_trace("claude-code-transcripts")
    out = tmp_path / "run"
    assert run(["plan", str(path), "--ttft-slo", "500ms", "--requests", "500", "-o",
                str(out)]) == 0
    err = unwrap(capsys.readouterr().err)
    assert "the API reported 0.9427 for these calls" in err and "add --subagents" in err
    assert "the API reported 0.9427" in (out / "report.html").read_text()
