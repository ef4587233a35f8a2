"""`xmemplan validate`: an emulated node that is not the planner, verdicts that can fail."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xmemplan.cli.main import run
from xmemplan.errors import CheckFailedError, ExitCode
from xmemplan.validate.harness import ClassSummary, rel_error, run_validate, verdict_error
from xmemplan.validate.options import ValidateOptions

DEVICES = Path(__file__).parent / "fixtures" / "devices"
# A small seed scenario: 1 session, prompts of 1024, 1536, 2048 tokens (16-32 pages of 6 MiB).
SMALL = ["--sessions", "1", "--rounds", "3", "--prompt-tokens", "1024",
         "--growth-tokens", "512", "--repeats", "2"]
# The right planner is off by a few percent here (thread wake-ups on a shared 2-core
# machine); a wrong one by 150-250 %. 30 % separates them with room for a busy machine.
TOL = ["--tolerance", "30%"]
# Tests of what validate reads (its requests, model, classes), not of its timing: a wide
# tolerance keeps one slow emulated copy on a loaded machine from failing them (the
# timing verdict has tests of its own)
WIDE = ["--tolerance", "1000%"]


# A right model's replay can still be failed once by the machine: CI 2026-12-04, a full run
# at load beside the other xdist worker, saw the DRAM probe's warm p50 off by 245 % and the
# steep curve's by 34 % (both pass alone and on rerun). The tests that a right model must
# pass replay up to TRIES times and pass on the first replay within tolerance; the tests of
# a wrong model run once and fail there (it is over 100 % off in each, so it fails every try).
# They are marked `timing`: .ci/run runs them in one process after the rest of the suite,
# with no other test beside them, and `pytest -n auto` (the README's) keeps the replays.
TRIES = 3


def cli(args, capsys, monkeypatch, columns: int = 80, tries: int = 1):
    """`validate ARGS` at COLUMNS, replayed while its timing verdict fails (exit 5), up to
    `tries` times."""
    monkeypatch.setenv("COLUMNS", str(columns))
    for _ in range(tries):
        code = run(["validate", *args])
        out = capsys.readouterr()
        if code != ExitCode.CHECK_FAILED:
            break
    return code, out.out, out.err


def warm(doc):
    return next(c for c in doc["classes"] if c["name"] == "warm")


@pytest.mark.timing
def test_default_run_says_what_was_emulated_and_what_the_verdict_covers(capsys, monkeypatch):
    code, out, err = cli(SMALL, capsys, monkeypatch, columns=400, tries=TRIES)
    assert code == ExitCode.OK, err
    answer, *lines = out.splitlines()
    assert answer.startswith("PASS: KV loads (no GPU: compute not measured) within ")
    assert lines[0].startswith("validate: backend xmem on emulated X-Mem node (no X-Mem "
                               "hardware on this machine)")
    assert lines[1].startswith("emulated: device 'xmem-node' (xmem-node.toml): link 478 GB/s, "
                               "banks 396/362 GB/s, node 4 TB/s as one token bucket shared by "
                               "1 reader, copy-size curve 64 KiB 92.3%, 256 MiB 100.0%")
    assert "benchmark_effective_bandwidth.py" in lines[2] and "lm-sys" in lines[2]
    assert lines[2].endswith("assumed: node_burst, op_latency, writes")
    assert lines[3].startswith("predicted by: the planner's catalog tier xmem, 1 reader")
    assert lines[4] == ("verdict covers: KV load times on this CPU (p50 and p90 per class); "
                        "no TTFT error: compute was not measured (no GPU)")
    assert "TTFT p50" not in out  # no compute measured: no TTFT column
    assert "PASS: largest error" in out and "every byte verified" in out


@pytest.mark.timing
def test_right_planner_passes(capsys, monkeypatch):
    code, out, err = cli([*SMALL, *TOL, "--format", "json"], capsys, monkeypatch, tries=TRIES)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert doc["backend_mode"] == "emulate" and doc["device"] == "xmem-node"
    assert doc["time_scale"] > 1 and not doc["compute_measured"]
    w = warm(doc)
    assert w["requests"] == 2 and w["ttft_p50_ms"] is None
    assert w["load_error_p50"] < 0.3 and w["load_error_p90"] < 0.3
    cold = next(c for c in doc["classes"] if c["name"] == "cold")
    assert cold["load_p50_ms"] == 0 and cold["predicted_load_p50_ms"] == 0
    assert doc["bytes_read"] == 2 * (16 + 24) * 6 * 2**20  # hits of rounds 1 and 2, 2 reads
    assert doc["bytes_written"] == 32 * 6 * 2**20
    assert all(r["ttft_s"] is None for r in doc["requests"])


def test_wrong_bandwidth_fails(capsys, monkeypatch):
    # The catalog's X-Mem figure is ~366 GB/s; a planner that believed 36 GB/s is 10x off.
    code, out, err = cli([*SMALL, *TOL, "--predict-bandwidth", "36GB/s"], capsys, monkeypatch)
    assert code == ExitCode.CHECK_FAILED
    assert "FAIL: largest error" in out
    # The verdict names its worst row over tolerance: warm or all (both are 10x off here;
    # which is worse depends on this CPU's timing of the cold pages).
    assert re.match(r"Error: the (warm|all) load p50 error is ", err), err
    assert "bandwidth, contention" in err


def test_zero_bandwidth_is_refused(capsys, monkeypatch):
    code, out, err = cli([*SMALL, "--predict-bandwidth", "0GB/s"], capsys, monkeypatch)
    assert code == ExitCode.USAGE and out == ""
    assert "--predict-bandwidth '0GB/s' is not positive" in err
    with pytest.raises(Exception, match="positive bandwidth"):
        run_validate(ValidateOptions(predict_bandwidth_bytes_per_s=0.0))


@pytest.mark.parametrize("args,said,hint", [
    (["--backend", "xmem", "--emulate", "--tier", "host-dram-pcie5"],
     "--tier host-dram-pcie5 is a tier of kind host, and --backend xmem replays pages "
     "through an X-Mem node", "Name an X-Mem tier: xmem (xmemplan catalog tiers), or drop "
     "--tier; --backend dram checks a host DRAM tier."),
    (["--backend", "dram", "--tier", "mpu"],
     "--tier mpu (xmem) is a tier of kind xmem, and --backend dram replays pages through "
     "host DRAM", "Name a host DRAM tier: host-dram-pcie5 or host-dram-c2c"),
    (["--backend", "dram", "--tier", "nvme-gen5"],
     "--tier nvme-gen5 is a tier of kind nvme", None),
])
def test_a_tier_of_the_wrong_kind_for_the_backend_is_refused(capsys, monkeypatch, args, said,
                                                             hint):
    """--backend xmem with a host tier predicted host-DRAM loads for pages replayed through
    the X-Mem node and failed by 87 % on the flag (exit 5); --backend dram with an X-Mem
    tier ignored it and passed (exit 0). Both are the user's flag, refused before any
    replay."""
    code, out, err = cli([*SMALL, *args], capsys, monkeypatch, columns=400)
    assert code == ExitCode.USAGE, err
    assert out == ""
    flat = " ".join(err.split())
    assert f"Error: {said}" in flat
    if hint is not None:
        assert hint in flat


@pytest.mark.timing
@pytest.mark.parametrize("planner_right", [False, True])
def test_contention_of_eight_readers(capsys, monkeypatch, planner_right):
    """A node of 1 TB/s shared by 8 readers: each gets ~125 GB/s, not the ~366 GB/s that a
    planner assuming the catalog's 4 TB/s node predicts."""
    args = [*SMALL, *TOL, "--readers", "8", "--device", str(DEVICES / "slow-node.toml"),
            "--format", "json"]
    if planner_right:
        args += ["--catalog", str(DEVICES / "planner-slow-node.toml")]
    code, out, err = cli(args, capsys, monkeypatch, tries=TRIES if planner_right else 1)
    doc = json.loads(out)
    assert doc["readers"] == 8 and len(doc["requests"]) == 24
    assert {r["reader"] for r in doc["requests"]} == set(range(8))
    measured = warm(doc)["load_p50_ms"]
    # The serving simulator, replaying the same rounds with fluid sharing, agrees with the
    # planner's equal share (both are told the same node).
    assert warm(doc)["simulated_load_p50_ms"] == pytest.approx(
        warm(doc)["predicted_load_p50_ms"], rel=0.02)
    if planner_right:
        assert code == ExitCode.OK, err
        assert doc["predicted_bandwidth_bytes_per_s"] == pytest.approx(125e9)
    else:
        assert code == ExitCode.CHECK_FAILED
        assert warm(doc)["predicted_load_p50_ms"] < measured / 2  # planner far too fast


@pytest.mark.timing
@pytest.mark.parametrize("planner_right", [False, True])
def test_transfer_size_curve(capsys, monkeypatch, planner_right):
    """layer_first pages are 96 copies of 64 KiB; this device reaches 40 % of its rate
    with them, the catalog's curve says 92 %."""
    args = [*SMALL, *TOL, "--layout", "layer_first", "--device",
            str(DEVICES / "steep-curve.toml"), "--format", "json"]
    if planner_right:
        args += ["--catalog", str(DEVICES / "planner-steep-curve.toml")]
    code, out, err = cli(args, capsys, monkeypatch, tries=TRIES if planner_right else 1)
    doc = json.loads(out)
    assert doc["layout"] == "layer_first"
    if planner_right:
        assert code == ExitCode.OK, err
    else:
        assert code == ExitCode.CHECK_FAILED
        assert warm(doc)["load_error_p50"] > 1.0


@pytest.mark.timing
def test_calibrate_predicts_with_this_machines_bandwidth(capsys, monkeypatch):
    code, out, err = cli([*SMALL, "--calibrate", "--tolerance", "50%", "--format", "json"],
                         capsys, monkeypatch, columns=400, tries=TRIES)
    doc = json.loads(out)
    assert code == ExitCode.OK, err
    assert doc["calibrated"] and doc["time_scale"] == 1.0
    assert doc["predicted_bandwidth_bytes_per_s"] == doc["machine_copy_bandwidth_bytes_per_s"]
    assert "unshaped (--calibrate)" in err  # json: the lines go to stderr
    assert "predicted by: this machine's copy bandwidth" in err


@pytest.mark.timing
def test_dram_backend_makes_real_copies_against_a_probe(capsys, monkeypatch):
    # Real copies on a shared 2-core machine: bursts of other tenants' memory traffic move
    # single requests by tens of percent; a load model that is wrong is off by far more.
    code, out, err = cli([*SMALL, "--repeats", "3", "--backend", "dram", "--tolerance", "100%"],
                         capsys, monkeypatch, columns=400, tries=TRIES)
    assert code == ExitCode.OK, err
    answer, *lines = out.splitlines()
    assert answer.startswith("PASS: ")
    assert lines[0].startswith("validate: backend dram on host DRAM, real copies (no GPU on "
                               "this machine)")
    assert lines[1].startswith("predicted by: this machine's copy bandwidth")
    assert lines[1].split(", 1 reader")[0].endswith("GB/s (probe: median of samples through "
                                                    "the run)")
    assert "tier host-dram-pcie5" in " ".join(out.split())


def test_readers_need_the_emulated_node(capsys, monkeypatch):
    code, _, err = cli([*SMALL, "--backend", "dram", "--readers", "2"], capsys, monkeypatch)
    assert code == ExitCode.USAGE and "needs the emulated node" in err


def test_real_without_hardware_exits_4(capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "fake_xmem" not in p])
    code, out, err = cli([*SMALL, "--real"], capsys, monkeypatch)
    assert code == ExitCode.NOT_AVAILABLE
    assert err.startswith("Error: X-Mem is not available on this machine")
    assert out == ""


def test_hardware_is_used_when_present(capsys, monkeypatch, tmp_path, fake_xmem_sdk):
    lib = tmp_path / "libmtier.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("MTIER_LIB_PATH", str(lib))
    monkeypatch.setenv("FAKE_XMEM_BANK_BYTES", str(128 << 20))
    code, out, err = cli(SMALL, capsys, monkeypatch)
    assert out.startswith("FAIL: KV loads (no GPU: compute not measured) off by ")
    assert out.splitlines()[2].startswith("validate: backend xmem on real X-Mem hardware")
    # The fake SDK is a host memcpy (~10 GB/s), nowhere near X-Mem's ~366 GB/s: the real
    # path's measured loads are judged against the planner, and this one fails.
    assert code == ExitCode.CHECK_FAILED
    assert "FAIL: largest error" in out
    assert "verdict covers: KV load times on this host" in out


def test_table_figures_stay_whole_at_80_columns(capsys, monkeypatch):
    from xmemplan.cli import validate as view
    from xmemplan.cli.views.render import fmt
    from xmemplan.validate.harness import ValidateResult

    monkeypatch.setenv("COLUMNS", "80")
    classes = [ClassSummary("warm", 24, 123.4567, 118.2345, 0.0442, 150.7891, 141.0023,
                            0.0694, 1234.567, 1200.891, 0.028)]
    res = ValidateResult(
        note="validate: test", preamble=["predicted by: test"], backend="xmem",
        backend_mode="emulate", tier="xmem", model="qwen3-30b-a3b", gpu="h100-sxm",
        device="xmem-node", readers=8, page_tokens=64, layout="page_first", calibrated=False,
        compute_measured=True, time_scale=52.3, page_bytes=6 << 20,
        predicted_bandwidth_bytes_per_s=365.9e9, achieved_bandwidth_bytes_per_s=349.8e9,
        machine_copy_bandwidth_bytes_per_s=10.3e9, memcpy_bandwidth_bytes_per_s=12.8e9,
        bytes_read=8_000_000_000, bytes_written=1_260_000_000, wall_s=6.8, tolerance=0.15,
        error=0.0694, verdict_on="load p50/p90 and TTFT p50", passed=True, classes=classes,
        requests=[])
    view._report(res, "table", False)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    c = classes[0]
    for value in (c.load_p50_ms, c.predicted_load_p50_ms, c.load_p90_ms,
                  c.predicted_load_p90_ms, c.ttft_p50_ms, c.predicted_ttft_p50_ms):
        assert fmt(value) in out, fmt(value)
    for pct in ("4.4%", "6.9%", "2.8%"):
        assert pct in out


def test_nothing_predicted_but_something_measured_is_an_infinite_error():
    assert rel_error(1.0, 0.0) == float("inf")
    assert rel_error(0.0, 0.0) != rel_error(0.0, 0.0)  # nan: nothing to judge
    c = ClassSummary("warm", 1, 1.0, 0.0, float("inf"), 1.0, 0.0, float("inf"))
    assert verdict_error([c]) == float("inf")


def test_p90_is_judged_only_with_enough_requests():
    few = ClassSummary("warm", 9, 1.0, 1.0, 0.0, 2.0, 1.0, 1.0)
    many = ClassSummary("warm", 10, 1.0, 1.0, 0.0, 2.0, 1.0, 1.0)
    assert verdict_error([few]) == 0.0 and verdict_error([many]) == 1.0


def test_points_for_calibrate_only_where_ttft_was_measured(tmp_path):
    from xmemplan.sizing.calibration import read_measurements
    from xmemplan.validate.points import points_from_validate, write_points

    req = {"prompt_tokens": 4096, "hit_tokens": 3584, "load_s": 0.01, "compute_s": 0.02,
           "ttft_s": 0.05}
    doc = {"gpu": "h200-sxm", "model": "qwen3-30b-a3b", "tier": "host-dram-pcie5",
           "backend": "dram", "readers": 1, "requests": [req] * 4 + [
               dict(req, ttft_s=None, compute_s=None)]}
    pts = points_from_validate(doc)
    assert len(pts) == 4 and pts[0]["ttft_ms"] == 50.0 and pts[0]["load_ms"] == 10.0
    write_points(pts, tmp_path / "p.json", tmp_path / "p.csv")
    assert [p["role"] for p in pts] == ["fit", "fit", "held-out", "fit"]
    for f in ("p.json", "p.csv"):  # calibrate reads both
        got = read_measurements(tmp_path / f)
        assert [(m.prompt_tokens, m.hit_tokens, m.value) for m in got] == [(4096, 3584, 50.0)] * 4
        assert [m.role for m in got] == ["fit", "fit", "held-out", "fit"]


def test_gpu_check_dry_run(tmp_path):
    """benchmarks/gpu_check.sh --dry-run: the GPU script's steps, on this CPU."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.sh"
    env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4/4 points for xmemplan calibrate" in proc.stdout
    for name in ("validate_dram_calibrate.json", "validate_dram.json", "sweep.json",
                 "gpu_check_points.json", "gpu_check_points.csv", "env.txt"):
        assert (tmp_path / name).is_file(), name
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert sorted({r["prompt_tokens"] for r in sweep["requests"]}) == [1024, 2048]
    assert json.loads((tmp_path / "gpu_check_points.json").read_text()) == {"points": []}


def test_workload_profile_input(capsys, monkeypatch, tmp_path):
    profile = {
        "schema": "xmemplan.profile", "schema_version": 1, "requests": 3,
        "prompt_tokens": {"p50": 2048}, "hit_ratio": {"token_hit_ratio": 0.9},
        "requests_sample": {"prompt_tokens": [1024, 2048, 1500],
                            "hit_tokens": [0, 1984, 1400]},
    }
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    code, out, err = cli(["--workload", str(path), "--repeats", "1", *WIDE, "--format", "json"],
                         capsys, monkeypatch)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert [(r["prompt_tokens"], r["hit_tokens"]) for r in doc["requests"]] == [
        (1024, 0), (2048, 1984), (1500, 1344)]  # hits in whole 64-token pages


def test_bad_plan_names_file_and_field(capsys, monkeypatch, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"schema": "xmemplan.plan", "schema_version": 1,
                                "model": "qwen3-30b-a3b", "gpu": "h100-sxm", "hit_ratio": 0.9}))
    code, out, err = cli(["--plan", str(path)], capsys, monkeypatch, columns=200)
    assert code == ExitCode.INPUT
    assert f"{path}, field 'prompt_tokens_p50': missing or not a finite number" in err
    path.write_text(json.dumps({"workload": "flags", "hit_ratio": 0.9}))  # unversioned
    code, out, err = cli(["--plan", str(path)], capsys, monkeypatch, columns=200)
    assert code == ExitCode.INPUT and "field 'schema'" in err


def test_plan_from_size(capsys, monkeypatch, tmp_path):
    """A plan written by `xmemplan size` drives validate: its prompt, hit ratio and model."""
    monkeypatch.setenv("COLUMNS", "200")
    assert run(["size", "--ttft-slo", "500ms", "--prompt-tokens", "2048", "--hit-rate", "0.9",
                "--model", "llama-3.1-8b", "--format", "json"]) == ExitCode.OK
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    code, out, err = cli(["--plan", str(plan), "--repeats", "1", *WIDE, "--format", "json"],
                         capsys, monkeypatch, columns=400)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert doc["model"] == "llama-3.1-8b"
    assert [(r["prompt_tokens"], r["hit_tokens"]) for r in doc["requests"]] == [(2048, 1792)]
    assert doc["classes"][0]["name"] == "warm"


def test_plan_kv_dtype_sets_the_page_size(capsys, monkeypatch, tmp_path):
    """A plan sized with --kv-dtype fp8 is replayed with fp8 pages (half the bytes of the
    same plan in bf16), and validate says so; a bad kv_dtype_bytes names the field."""
    monkeypatch.setenv("COLUMNS", "200")
    page = {}
    for dtype in ("bf16", "fp8"):
        assert run(["size", "--ttft-slo", "500ms", "--prompt-tokens", "2048", "--hit-rate",
                    "0.9", "--model", "qwen3-30b-a3b", "--kv-dtype", dtype,
                    "--format", "json"]) == ExitCode.OK
        plan = tmp_path / f"plan-{dtype}.json"
        plan.write_text(capsys.readouterr().out)
        code, out, err = cli(["--plan", str(plan), "--repeats", "1", *TOL, "--format", "json"],
                             capsys, monkeypatch, columns=400)
        # What is tested is the page size; the verdict is timing on a shared machine (it
        # failed once in a full run: one repeat of an emulated replay beside other tests).
        assert code in (ExitCode.OK, ExitCode.CHECK_FAILED), err
        doc = json.loads(out)
        page[dtype] = doc["page_bytes"]
    assert page["fp8"] * 2 == page["bf16"] == 64 * 98_304
    bad = json.loads((tmp_path / "plan-fp8.json").read_text())
    bad["kv_dtype_bytes"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    code, _, err = cli(["--plan", str(tmp_path / "bad.json")], capsys, monkeypatch,
                       columns=200)
    assert code == ExitCode.INPUT and "field 'kv_dtype_bytes'" in err


def test_usage_errors(capsys, monkeypatch):
    assert cli(["--backend", "nvme"], capsys, monkeypatch)[0] == ExitCode.USAGE
    assert cli(["--real", "--emulate"], capsys, monkeypatch)[0] == ExitCode.USAGE
    assert cli(["--tolerance", "abc"], capsys, monkeypatch)[0] == ExitCode.USAGE
    assert cli(["--tolerance", "0%"], capsys, monkeypatch)[0] == ExitCode.USAGE
    assert cli(["--layout", "diagonal"], capsys, monkeypatch)[0] == ExitCode.USAGE
    assert cli(["--device", "no-such-node"], capsys, monkeypatch)[0] == ExitCode.USAGE


def test_backend_and_matcher_must_agree(monkeypatch):
    """A backend that loses pages is caught by the harness (exit 5), not averaged away."""
    from xmemplan.backends.xmem import XMemHiCacheStorage

    monkeypatch.setattr(XMemHiCacheStorage, "batch_exists", lambda self, keys, extra=None: 0)
    with pytest.raises(CheckFailedError, match="radix matcher says"):
        run_validate(ValidateOptions(sessions=1, rounds=2, prompt_tokens=512,
                                     growth_tokens=256, repeats=1))


def test_help_does_not_import_heavy_modules():
    code = ("import sys; from xmemplan.cli.main import run; run(['validate', '--help']); "
            "heavy = [m for m in ('numba', 'polars', 'torch', 'xmem', 'sglang') "
            "if m in sys.modules]; assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "--calibrate" in proc.stdout and "--aiperf" in proc.stdout


def test_trace_directory_input(capsys, monkeypatch):
    traces = Path(__file__).resolve().parent.parent / "examples" / "traces"
    code, out, err = cli(["--traces", str(traces), "--max-requests", "4", "--max-bytes", "1GB",
                          "--repeats", "1", *WIDE, "--format", "json"], capsys, monkeypatch)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert len(doc["requests"]) == 4
    assert all(r["hit_tokens"] <= r["prompt_tokens"] for r in doc["requests"])
    assert f"workload: traces {traces}" in err


class _FakeSink:
    """Stands in for the CUDA destination: host copies, timed."""

    def __init__(self, nbytes: int) -> None:
        import numpy as np

        self.dst = np.empty(max(nbytes, 1), dtype=np.uint8)

    def copy(self, *host) -> float:
        import time

        import numpy as np

        t0 = time.perf_counter()
        off = 0
        for h in host:
            flat = np.ascontiguousarray(h).reshape(-1).view(np.uint8)
            self.dst[off:off + flat.size] = flat
            off += flat.size
        return time.perf_counter() - t0


def test_gpu_path_with_a_stand_in_gpu(monkeypatch):
    """The GPU branch (pinned pool, pages copied to the device, compute timed, TTFT judged)
    run with a host stand-in for CUDA: it has never run on a GPU here, so at least its
    plumbing is tested."""
    import types

    import numpy as np

    from xmemplan.validate import harness, points, verdict

    class FakeTensor:
        def __init__(self, n):
            self.a = np.empty(n, dtype=np.uint8)

        def numpy(self):
            return self.a

    pinned_calls: list[bool] = []

    def empty(n, dtype=None, pin_memory=False):
        pinned_calls.append(pin_memory)
        return FakeTensor(n)

    fake_torch = types.SimpleNamespace(uint8="uint8", empty=empty)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(harness, "cuda_sink", lambda n: _FakeSink(n))
    monkeypatch.setattr(verdict, "gpu_matmul_seconds", lambda flops: flops / 400e12)
    res = run_validate(ValidateOptions(backend="dram", sessions=1, rounds=3, prompt_tokens=1024,
                                       growth_tokens=512, repeats=1, tolerance=10.0))
    # the pool is page-locked, as SGLang's: pages.host_pool(pinned=True) calls torch.empty
    assert pinned_calls and all(pinned_calls), pinned_calls
    assert res.backend_mode == "dram" and res.compute_measured
    assert res.preamble[-1] == ("verdict covers: KV load times and TTFT (compute measured on "
                                "this GPU)")
    assert res.preamble[0].startswith("predicted by: the planner's host-DRAM tier "
                                      "host-dram-pcie5 (shipped calibration)")
    warm = next(c for c in res.classes if c.name == "warm")
    assert warm.ttft_p50_ms is not None and warm.ttft_error_p50 is not None
    hit = [r for r in res.requests if r.hit_pages]
    assert all(r.compute_s is not None and r.ttft_s is not None for r in res.requests)
    assert all(r.ttft_s is not None and r.ttft_s >= r.load_s for r in hit)
    pts = points.points_from_validate(res.as_dict())
    assert len(pts) == 3 and pts[0]["gpu"] == res.gpu and pts[0]["tier"] == "host-dram-pcie5"


def _xmem_plan(capsys, tmp_path):
    """A multi-GPU X-Mem plan at tp2 (128Ki-token full hits at 300 ms, 20 requests/s)."""
    assert run(["size", "--ttft-slo", "300ms", "--prompt-tokens", "128Ki", "--hit-rate", "1",
                "--rate", "20", "--output-tokens", "1", "--requests", "1000", "--tp", "2",
                "--format", "json"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["cheapest"] == "xmem" and doc["claims"]["gpus"] >= 2, doc["answer"]
    return doc


@pytest.mark.timing
def test_plan_replays_its_gpus_per_node_and_shape(capsys, monkeypatch, tmp_path):
    """validate --plan replays the plan's own decision: its GPUs over its X-Mem nodes are
    the readers of the emulated node, each loading its tp share of every request's KV, and
    the plan's per-GPU load bandwidth at that sharing is judged; what cannot be replayed
    here is named 'not checked'."""
    doc = _xmem_plan(capsys, tmp_path)
    c = doc["claims"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    code, out, err = cli(["--plan", str(plan), "--repeats", "1", "--max-bytes", "1GB", *TOL,
                          "--format", "json"], capsys, monkeypatch, columns=400, tries=TRIES)
    assert code == ExitCode.OK, err
    res = json.loads(out)
    per = -(-c["gpus"] // c["nodes"])
    assert res["readers"] == per
    p50 = doc["prompt_tokens_p50"]
    assert res["requests"][0]["prompt_tokens"] <= -(-int(p50) // 2)  # tp2: half each
    how = {x["claim"]: x["replayed"] for x in res["plan_checks"]}
    assert any(v.startswith("replayed: each reader loads its GPU's 1/2") for v in how.values())
    assert any(v.startswith("not checked") for v in how.values())
    judged = [x for x in res["plan_checks"] if x["replayed"] == "judged"]
    assert judged and judged[0]["error"] <= 0.3


def test_plan_with_a_wrong_node_count_fails(capsys, monkeypatch, tmp_path):
    """The same plan claiming that one node serves 64 GPUs (the bandwidth it was sized
    with is 2 GPUs' share): the replay at 64 readers per node is far off, and it fails."""
    doc = _xmem_plan(capsys, tmp_path)
    doc["claims"]["gpus"], doc["claims"]["nodes"] = 64, 1
    plan = tmp_path / "wrong.json"
    plan.write_text(json.dumps(doc))
    code, out, err = cli(["--plan", str(plan), "--repeats", "1", *TOL],
                         capsys, monkeypatch, columns=200)
    assert code == ExitCode.CHECK_FAILED, out + err
    assert out.startswith("FAIL: the plan's load bandwidth per GPU at 64 GPUs per node")
    assert "node count" in err


def test_plan_without_claims_says_not_checked(capsys, monkeypatch, tmp_path):
    doc = {"schema": "xmemplan.plan", "schema_version": 1, "model": "llama-3.1-8b",
           "gpu": "h100-sxm", "prompt_tokens_p50": 2048, "hit_ratio": 0.9}
    plan = tmp_path / "old.json"
    plan.write_text(json.dumps(doc))
    # what is under test is the claims line, not the timing: a wide tolerance keeps one
    # slow copy on a shared machine from failing it (CI 2026-12-03: warm load p50 +325 %)
    code, out, err = cli(["--plan", str(plan), "--repeats", "1", "--tolerance", "1000%"],
                         capsys, monkeypatch, columns=200)
    assert code == ExitCode.OK, err
    assert "not checked: the plan carries no claims" in out
    bad = dict(doc, claims={"option": "xmem", "gpus": 0, "nodes": 1, "tp": 1})
    plan.write_text(json.dumps(bad))
    code, _, err = cli(["--plan", str(plan)], capsys, monkeypatch, columns=200)
    assert code == ExitCode.INPUT and "field 'claims.gpus'" in err


def test_any_row_over_tolerance_fails_the_verdict():
    """The 'all' row counts too (validate --traces --readers 8 printed PASS with 'all' at
    16.4 % against a 15 % tolerance)."""
    from xmemplan.validate.verdict import ClassSummary, worst_figure

    def row(name, e):
        return ClassSummary(name, 20, 1.0, 1.0, e, 1.0, 1.0, 0.0)

    fig, err = worst_figure([row("cold", 0.05), row("warm", 0.1), row("all", 0.164)])
    assert fig == "all load p50" and err == 0.164


PLAN_DOC = {"schema": "xmemplan.plan", "schema_version": 1, "model": "llama-3.1-8b",
            "gpu": "h100-sxm", "prompt_tokens_p50": 2048, "hit_ratio": 0.9}


@pytest.mark.parametrize("source", ["--plan", "--workload", "--traces"])
@pytest.mark.parametrize("flag", [["--sessions", "3"], ["--rounds", "2"],
                                  ["--prompt-tokens", "2k"], ["--growth-tokens", "0"]])
def test_a_seed_scenario_flag_with_a_workload_file_is_refused(capsys, monkeypatch, tmp_path,
                                                              source, flag):
    """A plan, profile or traces give the requests: the seed scenario's shape given with one
    is an error naming it (it used to be ignored, exit 0, the same replay)."""
    f = tmp_path / "in.json"
    f.write_text(json.dumps(PLAN_DOC))
    code, out, err = cli([source, str(f), *flag], capsys, monkeypatch, columns=200)
    assert code == ExitCode.USAGE, (code, out, err)
    assert f"Error: {flag[0]} shapes the seed scenario, and {source} gives the requests" in err
    assert out == ""


@pytest.mark.parametrize("args,message", [
    (["--plan", "PLAN", "--max-requests", "3"], "--max-requests does not apply with --plan"),
    (["--backend", "dram", "--emulate"], "--emulate applies to --backend xmem"),
    (["--backend", "dram", "--device", "xmem-node"], "--device names the emulated X-Mem node, "
     "and this run uses host DRAM"),
    (["--requests", "--format", "json"], "--requests prints the table of requests, and "
     "--format json carries every request already"),
])
def test_a_flag_the_replay_mode_does_not_read_is_refused(capsys, monkeypatch, tmp_path, args,
                                                          message):
    """Each of these changed nothing in its mode (exit 0, the same replay): now an error
    naming the flag, before anything is replayed."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN_DOC))
    args = [str(plan) if a == "PLAN" else a for a in args]
    code, out, err = cli([*args, *SMALL[-2:]], capsys, monkeypatch, columns=200)
    assert code == ExitCode.USAGE, (code, out, err)
    assert f"Error: {message}" in err
    assert out == ""


def test_device_on_x_mem_hardware_without_emulate_is_refused(capsys, monkeypatch):
    """Where X-Mem hardware runs (found, no --emulate), --device would change nothing."""
    import xmemplan.backends.media as media

    monkeypatch.setattr(media, "xmem_installed", lambda: True)
    code, out, err = cli([*SMALL, "--device", "xmem-node"], capsys, monkeypatch, columns=200)
    assert code == ExitCode.USAGE, (code, out, err)
    assert "Error: --device names the emulated X-Mem node, and this run uses real X-Mem " \
        "hardware" in err
    assert "add --emulate" in err


# -- round 10: flags that changed nothing on this input or machine -----------------------

def _runw(capsys, *args):
    """(exit code, stdout, stderr with the wrapping undone)."""
    from conftest import unwrap

    capsys.readouterr()
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, unwrap(out.err)


SMALL_RUN = ["validate", "--sessions", "1", "--rounds", "3", "--prompt-tokens", "1024",
         "--growth-tokens", "512", "--repeats", "1", "--tolerance", "1000%"]


def test_validate_max_requests_with_a_profile_without_sample_is_warned(capsys, tmp_path):
    from xmemplan.profile import save_profile

    p = tmp_path / "p.json"
    save_profile(p, {
        "source": {"paths": ["x"], "formats": {"tokens": 1}, "scope": "global"},
        "requests": 4, "sessions": 2,
        "prompt_tokens": {"mean": 2048, "p50": 2048, "p90": 3000, "p99": 3000, "max": 3000},
        "hit_ratio": {"token_hit_ratio": 0.5}})
    code, out, err = _runw(capsys, "validate", "--workload", str(p), "--max-requests", "5",
                           "--repeats", "1", "--tolerance", "1000%", "-f", "json")
    assert code == 0, err
    said = (f"--max-requests 5 changed nothing: the profile {p} has no requests_sample, so "
            "validate replays its p50 request (at its token hit ratio) alone")
    assert f"Warning: {said}" in err
    assert json.loads(out)["warnings"][0].startswith(said)


def test_validate_max_requests_over_the_seed_scenario_is_warned(capsys):
    code, _, err = _runw(capsys, *SMALL_RUN, "--max-requests", "50")
    assert code == 0, err
    assert ("Warning: --max-requests 50 is more than the 3 requests the seed scenario "
            "(--sessions 1 x --rounds 3) holds: all 3 are replayed, as without the flag"
            ) in err


def test_validate_calibrate_on_dram_without_a_gpu_says_it_changed_nothing(capsys, monkeypatch):
    import xmemplan.validate.harness as harness

    monkeypatch.setattr(harness, "cuda_sink", lambda nbytes: None)  # no GPU, as here
    code, _, err = _runw(capsys, *SMALL_RUN, "--backend", "dram", "--calibrate")
    assert code == 0, err
    assert ("Warning: --calibrate changed nothing: with no GPU on this machine, --backend "
            "dram is predicted from this machine's copy bandwidth already") in err


def test_validate_calibrate_with_device_is_refused(capsys):
    code, out, err = _runw(capsys, *SMALL_RUN, "--calibrate", "--device", "xmem-node")
    assert code == 2
    assert ("Error: --device shapes the emulated X-Mem node, and --calibrate runs it "
            "unshaped") in err
    assert out == ""


def test_validate_small_max_bytes_calibrates(capsys):
    """5 calibration pages in 6 slots over 4 banks held 4: 'the tier did not take the 5
    calibration pages' (exit 4) at --max-bytes 200MB; every bank now holds whole pages."""
    code, _, err = _runw(capsys, *SMALL_RUN, "--max-bytes", "200MB")
    assert code == 0, err
    assert "did not take" not in err
