"""Colour on a terminal, NO_COLOR honoured: the answer bold, PASS green, FAIL red, warnings
yellow; nothing but text when the output is not a terminal."""

from __future__ import annotations

import pytest

from xmemplan.cli.views import render

BOLD, GREEN, RED, YELLOW = "\x1b[1m", "\x1b[32m", "\x1b[31m", "\x1b[33m"


def _show(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    render.answer("1 X-Mem node for 4 GPUs")
    render.line("PASS: within 3%")
    render.line("FAIL: off by 40%")
    render.warn("a profile made per session")
    cap = capsys.readouterr()
    return cap.out, cap.err


def test_colours_on_a_terminal(capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich: act as on a terminal
    out, err = _show(capsys)
    assert BOLD in out.splitlines()[0]
    assert GREEN in out.splitlines()[1] and RED in out.splitlines()[2]
    assert YELLOW in err


def test_no_color_drops_the_colours(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    out, err = _show(capsys)
    assert GREEN not in out and RED not in out and YELLOW not in err


def test_plain_text_off_a_terminal(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    out, err = _show(capsys)
    assert "\x1b[" not in out + err
    assert out.splitlines() == ["1 X-Mem node for 4 GPUs", "PASS: within 3%",
                                "FAIL: off by 40%"]
