"""The tolerance of .ci/steps/aiperf.sh's live checks (.ci/load_tolerance.py): 15% on a
machine that is not oversubscribed, widened with the load per core, never past a bound at
which the step's 1.5x slower server and a 2x regression still fail. One CI run failed with
a p50 TTFT error of 18.9% at load 4-6 on 2 cores: judged here through `validate --aiperf`
on records that far from the model."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from test_aiperf import cli, predicted_ms, trace, write_records  # noqa: F401 - fixture

from xmemplan.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent
STEP = ROOT / ".ci" / "steps" / "aiperf.sh"
spec = importlib.util.spec_from_file_location("load_tolerance", ROOT / ".ci" / "load_tolerance.py")
assert spec is not None and spec.loader is not None
LT = importlib.util.module_from_spec(spec)
spec.loader.exec_module(LT)


@pytest.mark.parametrize("load,cores,want", [
    (0.0, 2, 0.15), (1.9, 2, 0.15), (2.0, 2, 0.15),  # up to one runnable process per core
    (2.4, 2, 0.18), (3.0, 2, 0.225),  # 15% x load per core
    (4.0, 2, 0.30), (6.0, 2, 0.30), (40.0, 2, 0.30),  # at most 30%
    (6.0, 16, 0.15),
])
def test_tolerance_follows_the_load_per_core(load: float, cores: int, want: float) -> None:
    tol, said = LT.tolerance(load, cores)
    assert tol == pytest.approx(want)
    assert said.startswith(f"load average {load:.1f} on {cores} cores")
    assert ("oversubscribed" in said) == (want > 0.15)


def test_the_step_prints_its_tolerance_first() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "load_tolerance.py")],
                         capture_output=True, text=True, check=True).stdout
    assert re.fullmatch(r"0\.\d+ load average \d+\.\d on \d+ cores .*\n", out), out
    assert 0.15 <= float(out.split()[0]) <= LT.CAP


@pytest.mark.parametrize("factor,load,passes", [
    (1.189, 1.0, False),  # the CI failure: 18.9% fails on a machine that is not loaded
    (1.189, 5.0, True),  # ... and passes at load 5 on 2 cores, where it was measured
    (1.5, 5.0, False),  # the step's slow server still fails at the widest tolerance
    (2.0, 40.0, False),  # a 2x regression fails at any load
])
def test_widened_tolerance_still_fails_a_regression(tmp_path, trace, capsys,  # noqa: F811
                                                    monkeypatch, factor, load, passes):
    tol, _ = LT.tolerance(load, 2)
    art = write_records(tmp_path / "art", predicted_ms(trace), factor)
    code, out, err = cli(["--aiperf", str(art), "--traces", str(trace), "--tolerance",
                          f"{tol:g}"], capsys, monkeypatch)
    assert code == (ExitCode.OK if passes else ExitCode.CHECK_FAILED), out + err


def test_the_step_judges_every_live_run_at_that_tolerance() -> None:
    text = STEP.read_text()
    judged = re.findall(r"-m xmemplan validate --aiperf [^\n]*\\\n([^\n]*)", text)
    assert len(judged) == 3 and all('--tolerance "$TOL"' in x for x in judged), judged
    assert len(re.findall(r"-m xmemplan validate --aiperf", text)) == 3
    body = text.split("profile() {", 1)[1].split("\n}\n", 1)[0]
    assert "\n  tolerance " in body  # sampled before each replay starts its own load
    assert ".ci/load_tolerance.py" in text
