from __future__ import annotations

from pathlib import Path

import pytest

from xmemplan.cli.main import run
from xmemplan.errors import ExitCode, XmemplanError

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"
FAKE_XMEM = str(ROOT / "tests" / "fake_xmem")  # fake `xmem` SDK and `cuda` bindings


def forget_fake_xmem() -> None:
    """Drop imported `xmem`/`cuda` modules (the fake SDK is re-imported per test)."""
    import sys

    for name in [m for m in sys.modules if m == "xmem" or m.split(".")[0] == "cuda"]:
        del sys.modules[name]


@pytest.fixture
def fake_xmem_sdk(monkeypatch: pytest.MonkeyPatch):
    """Put the fake xmem/cuda packages (tests/fake_xmem) first on sys.path; forget them
    afterwards."""
    monkeypatch.syspath_prepend(FAKE_XMEM)
    forget_fake_xmem()
    yield
    forget_fake_xmem()


def shared_trace(*parts: str) -> Path:
    """A path under ../shared/traces, or skip the test when shared/ is absent."""
    path = SHARED_TRACES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is not checked out here)")
    return path


def unwrap(err: str) -> str:
    """stderr with the CLI's word wrapping undone (render.wrapped indents each continuation
    line by two spaces), so that assertions read whole messages at any terminal width."""
    return err.replace("\n  ", " ")


class CliResult:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `xmemplan ARGS...` in-process: (exit code, stdout, stderr unwrapped)."""
    capsys.readouterr()
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, unwrap(out.err)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run `xmemplan ARGS...` in-process; returns exit code, stdout and stderr."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")

    def invoke(*args: str) -> CliResult:
        capsys.readouterr()
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, unwrap(captured.err))

    return invoke


class _Accepted(XmemplanError):
    """Raised by `stubbed`: the flags were accepted (exit 0)."""

    exit_code = ExitCode.OK


def _accept(*_a: object, **_k: object) -> None:
    raise _Accepted("accepted")


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`size` and `validate` stop right after their flags are parsed (exit 0 = accepted)."""
    monkeypatch.setattr("xmemplan.sizing.planner.plan", _accept)
    monkeypatch.setattr("xmemplan.validate.harness.run_validate", _accept)
