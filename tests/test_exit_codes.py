"""Every documented exit code (xmemplan.errors.ExitCode, the table docs/cli.md is made from)
is what the command really returns in the situation the table describes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from xmemplan.errors import EXIT_MEANINGS, ExitCode
from xmemplan.traces import synth


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "m.jsonl"
    synth.write_mooncake(p, synth.agent_sessions(n_sessions=2, turns=3, seed=1))
    return p


def _boom(exc: BaseException):
    def raise_it(*_a, **_k):
        raise exc
    return raise_it


def case_ok(cli, trace, monkeypatch):
    return cli("hitrate", trace)


def case_internal(cli, trace, monkeypatch):
    monkeypatch.setattr("xmemplan.hitrate.analyze", _boom(RuntimeError("a bug")))
    return cli("hitrate", trace)


def case_usage(cli, trace, monkeypatch):
    return cli("hitrate", trace, "--format", "xml")


def case_input(cli, trace, monkeypatch):
    return cli("hitrate", trace.with_name("missing.jsonl"))


def case_not_available(cli, trace, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    return cli("hitrate", trace, "--plot", trace.parent / "charts")


def case_check_failed(cli, trace, monkeypatch):
    # Predicting a tier 100x faster than the emulated one must fail the check.
    return cli("validate", "--emulate", "--sessions", "1", "--rounds", "2", "--prompt-tokens",
               "2048", "--growth-tokens", "512", "--predict-bandwidth", "40TB/s")


def case_interrupted(cli, trace, monkeypatch):
    monkeypatch.setattr("xmemplan.hitrate.analyze", _boom(KeyboardInterrupt()))
    return cli("hitrate", trace)


def case_terminated(cli, trace, monkeypatch):
    import os
    import signal

    def term(*_a, **_k):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises at the next bytecode
        raise AssertionError("SIGTERM did not stop the run")
    monkeypatch.setattr("xmemplan.hitrate.analyze", term)
    return cli("hitrate", trace)


CASES = {
    ExitCode.OK: case_ok,
    ExitCode.INTERNAL: case_internal,
    ExitCode.USAGE: case_usage,
    ExitCode.INPUT: case_input,
    ExitCode.NOT_AVAILABLE: case_not_available,
    ExitCode.CHECK_FAILED: case_check_failed,
    ExitCode.INTERRUPTED: case_interrupted,
    ExitCode.TERMINATED: case_terminated,
}


def test_every_code_is_documented_and_tested():
    assert set(CASES) == set(ExitCode) == set(EXIT_MEANINGS)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    for code, meaning in EXIT_MEANINGS.items():
        assert f"| {int(code)} | {meaning} |" in doc


@pytest.mark.parametrize("code", list(ExitCode), ids=[c.name for c in ExitCode])
def test_code_is_returned(code, cli, trace, monkeypatch):
    r = CASES[code](cli, trace, monkeypatch)
    assert r.code == code, (r.code, r.err[-800:])
    assert "Traceback" not in r.err or code == ExitCode.INTERNAL
    if code not in (ExitCode.OK, ExitCode.CHECK_FAILED):
        assert r.err.strip(), "a failure says why on stderr"


@pytest.mark.parametrize("args, code", [
    (["catalog"], ExitCode.OK),
    (["hitrate", "examples/traces/", "--format", "json"], ExitCode.OK),
    (["hitrate", "examples/traces/", "--format", "xml"], ExitCode.USAGE),
])
def test_a_closed_stdout_keeps_the_commands_own_exit_code(args, code):
    """`xmemplan ... | head -1`: the reader leaving early is not an internal error (rich's
    default is SystemExit(1)); the command ends with its own code and no traceback."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    p = subprocess.Popen([sys.executable, "-m", "xmemplan", *args], cwd=root,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # before the command writes anything: every write meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == code, err
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_a_closed_stderr_too_keeps_the_exit_code():
    """`xmemplan ... 2>&1 | head -1`: notes and warnings meet the closed pipe as well."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    p = subprocess.Popen([sys.executable, "-m", "xmemplan", "hitrate", "examples/traces/"],
                         cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.stdout is not None
    p.stdout.close()
    assert p.wait(timeout=120) == ExitCode.OK


class _Panic(BaseException):
    """What polars' pyo3 PanicException is: a BaseException, not an Exception."""


@pytest.mark.parametrize("sig, code", [("SIGTERM", ExitCode.TERMINATED),
                                       ("SIGINT", ExitCode.INTERRUPTED)])
def test_a_signal_that_surfaces_as_another_base_exception_is_still_an_interruption(
        sig, code, cli, trace, monkeypatch):
    """The handler's KeyboardInterrupt raised inside native code (polars writing a CSV
    through a Python file) can come back as a panic; the exit is still 143 / 130, no
    traceback (seen once in tests/fuzz/test_kill.py: exit 99 for `hitrate --out`)."""
    import os
    import signal

    def panic(*_a, **_k):
        try:
            os.kill(os.getpid(), getattr(signal, sig))
        except KeyboardInterrupt as exc:
            raise _Panic("KeyboardInterrupt in a native callback") from exc
        raise AssertionError("the signal did not reach the handler")
    monkeypatch.setattr("xmemplan.hitrate.analyze", panic)
    r = cli("hitrate", trace)
    assert r.code == code, (r.code, r.err[-800:])
    assert "Traceback" not in r.err and "interrupted" in r.err


def test_a_base_exception_without_a_signal_is_not_taken_for_one(cli, trace, monkeypatch):
    """Without a signal, such an exception is a bug and is not turned into exit 130."""
    monkeypatch.setattr("xmemplan.hitrate.analyze", _boom(_Panic("a real panic")))
    with pytest.raises(_Panic):
        cli("hitrate", trace)


def test_a_ctrl_c_while_the_cli_imports_is_an_interruption(cli, monkeypatch):
    """A KeyboardInterrupt that Python wraps (a RuntimeError from __set_name__ while a
    module imports, before the CLI's handlers are in place) still exits 130, no traceback;
    the same RuntimeError without one is not taken for it (the kill test's exit 99 case)."""
    from xmemplan.cli import main as M

    def importing(_args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from ki
    monkeypatch.setattr(M, "_run_with_signals", importing)
    r = cli("hitrate", "x")
    assert r.code == ExitCode.INTERRUPTED and "interrupted" in r.err
    assert "Traceback" not in r.err
    monkeypatch.setattr(M, "_run_with_signals", _boom(RuntimeError("a real bug")))
    with pytest.raises(RuntimeError):
        cli("hitrate", "x")


def test_a_signal_inside_llvmlites_bindings_lands_after_they_return():
    """The kill test's -11 (SIGSEGV; glibc's abort, -6, on other heaps): a SIGTERM while
    numba linked its runtime or a cached kernel landed between LLVMPY_LinkModules (which
    destroys the source module) and llvmlite's detaching its wrapper, and the wrapper
    disposed of the freed module when collected. Sent here at exactly that moment: the
    interrupt now comes once link_in has returned, the wrapper detached. Without the
    change it is raised inside link_modules, the wrapper left attached (detached here by
    hand, so that this process does not crash)."""
    import os
    import signal
    import sys
    import time

    import llvmlite.binding as llvm

    from xmemplan.jsonio import cleanup_on_signals, terminated

    def profile(frame, event, _arg):
        if event == "return" and frame.f_code.co_name == "__call__" and \
                frame.f_back is not None and frame.f_back.f_code.co_name == "link_modules":
            sys.setprofile(None)  # LLVMPY_LinkModules returned: the source is gone
            os.kill(os.getpid(), signal.SIGTERM)

    dst = llvm.parse_assembly("define i32 @f() {\n  ret i32 1\n}")
    src = llvm.parse_assembly("define i32 @g() {\n  ret i32 2\n}")
    where = "in link_in"
    with cleanup_on_signals():
        try:
            sys.setprofile(profile)
            dst.link_in(src)
            where = "after link_in"
            t = time.monotonic()
            while time.monotonic() < t + 5:  # the signal comes again a moment later
                time.sleep(0.001)
            where = "never"
        except KeyboardInterrupt:
            pass
        finally:
            sys.setprofile(None)
        detached = src.closed
        if not detached:
            src.detach()
    assert (where, detached) == ("after link_in", True)
    assert terminated()


def test_a_signal_elsewhere_still_lands_at_once():
    import os
    import signal

    from xmemplan.jsonio import cleanup_on_signals

    with cleanup_on_signals(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # bytecodes: the handler runs at the first of them
            pass
        raise AssertionError("the interrupt did not come at once")
