"""SIGTERM and SIGINT at random moments, 50 times per writing command: no partial or
temporary file is ever left, and the previous output stays whole (the old bytes, or a whole
new output). The runs fork from one warmed process (tests/fuzz/killer.py), so 50 kills take
seconds, not minutes. Class 1 of docs/reliability.md."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from xmemplan.traces import synth

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RUNS = 50  # kills per command (issue 21)

PRELOAD = ["polars", "numpy", "xmemplan.cli.main", "xmemplan.hitrate.pipeline",
           "xmemplan.traces.mooncake", "xmemplan.export.aiperf", "xmemplan.sizing.planner",
           "xmemplan.sizing.calibration", "xmemplan.profile", "xmemplan.cli.views.plots",
           "matplotlib.pyplot", "xmemplan.catalog"]


def _points(path: Path) -> None:
    # Every third public point (9 points, 6 constants): calibrate fits them in 0.7 s.
    lines = (ROOT / "data" / "measurements" / "public.csv").read_text().splitlines()
    path.write_text("\n".join([lines[0], *lines[1::3]]) + "\n")


COMMANDS = {
    "export": (["export", "{d}/in/t.jsonl", "--to", "aiperf", "-o", "{d}/out/e.jsonl"],
               "out/e.jsonl"),
    "calibrate": (["calibrate", "{d}/in/p.csv", "-o", "{d}/out/o.toml"], "out/o.toml"),
    "hitrate-out": (["hitrate", "{d}/in/t.jsonl", "--out", "{d}/out/r.csv"], "out/r.csv"),
    "profile-out": (["hitrate", "{d}/in/t.jsonl", "--capacity", "1M", "--profile-out",
                     "{d}/out/p.json"], "out/p.json"),
    "hitrate-plot": (["hitrate", "{d}/in/t.jsonl", "--capacity", "1M", "--plot",
                      "{d}/out/charts"], "out/charts"),
    "size-plot": (["size", "--ttft-slo", "2s", "--requests", "200", "--plot",
                   "{d}/out/s.png"], "out/s.png"),
}


def _whole(path: Path, data: bytes) -> bool:
    """The file is a complete output of its kind."""
    name = path.name
    if name.endswith(".png"):
        return data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")
    if name.endswith(".json"):
        json.loads(data)
        return True
    if name.endswith(".jsonl"):
        return data.endswith(b"\n") and all(json.loads(x) for x in data.splitlines())
    if name.endswith(".toml"):
        import tomllib

        return bool(tomllib.loads(data.decode()))
    if name.endswith(".csv"):
        return data.endswith(b"\n") and len({x.count(b",") for x in data.splitlines()}) == 1
    return False


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_kill_at_random_moments(tmp_path: Path, name: str) -> None:
    if name.endswith("plot"):
        pytest.importorskip("matplotlib")
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    synth.write_mooncake(tmp_path / "in" / "t.jsonl",
                         synth.agent_sessions(n_sessions=4, turns=5, seed=3))
    _points(tmp_path / "in" / "p.csv")
    inputs = {p: hashlib.sha256(p.read_bytes()).hexdigest()
              for p in (tmp_path / "in").iterdir()}
    argv, output = COMMANDS[name]
    spec = {"argv": [a.format(d=tmp_path) for a in argv], "cwd": str(tmp_path),
            "output": str(tmp_path / output), "versions": str(tmp_path / "versions"), "runs": RUNS, "seed": 7, "preload": PRELOAD}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    subprocess.run([sys.executable, str(HERE / "killer.py"), str(tmp_path / "spec.json"),
                    str(tmp_path / "result.json")], check=True, timeout=240)
    res = json.loads((tmp_path / "result.json").read_text())
    versions = tmp_path / "versions"
    first = res["first"]
    assert first["code"] == 0 and first["files"], first
    assert first["temps"] == []
    codes: dict[int, int] = {}
    for run in res["runs"]:
        codes[run["code"]] = codes.get(run["code"], 0) + 1
        assert run["temps"] == [], run  # never a temporary file left
        # Finished, or stopped as documented; -15/-2: the signal came before the CLI took
        # the signals or after it gave them back (nothing being written then). A crash is
        # not accepted any more: the -11 (seen twice in ~600 kills when this test was
        # written) and CI's one -6 were llvmlite's wrapper of a module that
        # LLVMPY_LinkModules had destroyed, left attached by the handler's interrupt and
        # disposed again when collected (faulthandler stacks via KILLER_FAULTS=DIR:
        # ModuleRef._dispose from ObjectRef.__del__, the interrupt raised in link_modules
        # while numba linked its runtime). The handler now waits until llvmlite's bindings
        # have returned (jsonio._on_signal): 4 crashes in 1,700 forked SIGTERMs at
        # 40-210 ms before, none in 900 at 120-210 ms after (docs/reliability.md).
        assert run["code"] in (0, 130, 143, -15, -2), run
        assert set(run["files"]) == set(first["files"]), run  # none lost, no partial added
    for run in [first, *res["runs"]]:  # every version ever seen is a whole output
        for f, sha in run["files"].items():
            assert _whole(Path(f), (versions / sha).read_bytes()), (f, run)
    assert codes.get(130, 0) + codes.get(143, 0) > 0, codes  # some kills did land mid-run
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs} == inputs
