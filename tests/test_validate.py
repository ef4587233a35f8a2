"""`xmemplan validate`: emulation, --calibrate, a forced mismatch, --real without hardware."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from xmemplan.cli.main import run
from xmemplan.errors import ExitCode
from xmemplan.validate.harness import run_validate
from xmemplan.validate.options import ValidateOptions

FAKE = str(Path(__file__).parent / "fake_xmem")
# A small seed scenario: 1 session, prompts of 1024, 1536, 2048 tokens (16-32 pages of 6 MiB).
SMALL = ["--sessions", "1", "--rounds", "3", "--prompt-tokens", "1024",
         "--growth-tokens", "512", "--repeats", "1"]


def cli(args, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code = run(["validate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_emulation_is_the_default_and_says_so(capsys, monkeypatch):
    code, out, err = cli(SMALL, capsys, monkeypatch)
    assert code == ExitCode.OK, err
    first = out.splitlines()[0]
    assert first.startswith(
        "validate: backend xmem on emulated X-Mem tier (no X-Mem hardware on this machine), "
        "time scale x")
    assert "PASS: p50 TTFT error" in out
    assert "every byte verified" in out


def test_emulation_agrees_with_the_model(capsys, monkeypatch):
    # Best of 3 reads per request: single reads on a shared 2-core machine can be slowed
    # past the emulated tier's time by other processes.
    code, out, err = cli([*SMALL, "--repeats", "3", "--format", "json"], capsys, monkeypatch)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert doc["backend_mode"] == "emulate" and doc["tier"] == "xmem"
    assert doc["time_scale"] > 1  # this machine copies slower than X-Mem
    warm = next(c for c in doc["classes"] if c["name"] == "warm")
    assert warm["requests"] == 2
    # Same model on both sides: within 10% at p50 (TTFT and the load term alone).
    assert warm["error_p50"] < 0.10 and warm["load_error_p50"] < 0.10
    assert doc["achieved_bandwidth_bytes_per_s"] == pytest.approx(
        doc["predicted_bandwidth_bytes_per_s"], rel=0.15)
    cold = next(c for c in doc["classes"] if c["name"] == "cold")
    assert cold["predicted_load_p50_ms"] == 0
    assert doc["bytes_read"] == 3 * (16 + 24) * 6 * 2**20  # hits of rounds 1 and 2, 3 reads
    assert doc["bytes_written"] == 32 * 6 * 2**20


def test_calibrate_uses_this_machines_bandwidth(capsys, monkeypatch):
    code, out, err = cli([*SMALL, "--calibrate", "--repeats", "3", "--format", "json"],
                         capsys, monkeypatch)
    doc = json.loads(out)
    assert code in (ExitCode.OK, ExitCode.CHECK_FAILED)  # a shared 2-core machine is noisy
    assert doc["calibrated"] and doc["time_scale"] == 1.0
    assert doc["predicted_bandwidth_bytes_per_s"] == doc["machine_copy_bandwidth_bytes_per_s"]
    ratio = doc["achieved_bandwidth_bytes_per_s"] / doc["predicted_bandwidth_bytes_per_s"]
    assert 0.3 < ratio < 3
    assert "calibrated to this machine (no shaping)" in err  # json: the note goes to stderr


def test_a_wrong_prediction_exits_5(capsys, monkeypatch):
    code, out, err = cli([*SMALL, "--predict-bandwidth", "2GB/s"], capsys, monkeypatch)
    assert code == ExitCode.CHECK_FAILED
    assert "FAIL: p50 TTFT error" in out
    assert err.startswith("Error: measured TTFT differs from the prediction by")


def test_real_without_hardware_exits_4(capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "fake_xmem" not in p])
    code, out, err = cli([*SMALL, "--real"], capsys, monkeypatch)
    assert code == ExitCode.NOT_AVAILABLE
    assert err.startswith("Error: X-Mem is not available on this machine")
    assert out == ""


def test_hardware_is_used_when_present(capsys, monkeypatch, tmp_path):
    lib = tmp_path / "libmtier.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("MTIER_LIB_PATH", str(lib))
    monkeypatch.setenv("FAKE_XMEM_BANK_BYTES", str(128 << 20))
    monkeypatch.syspath_prepend(FAKE)
    try:
        code, out, err = cli([*SMALL, "--tolerance", "1000%"], capsys, monkeypatch)
    finally:
        for name in [m for m in sys.modules if m == "xmem" or m.split(".")[0] == "cuda"]:
            del sys.modules[name]
    assert code == ExitCode.OK, err
    assert out.startswith("validate: backend xmem on real X-Mem hardware")


def test_dram_backend_without_gpu_emulates_the_host_tier(capsys, monkeypatch):
    code, out, err = cli([*SMALL, "--backend", "dram"], capsys, monkeypatch)
    assert code == ExitCode.OK, err
    assert out.startswith("validate: backend dram on host DRAM, emulated host-DRAM tier "
                          "(no GPU on this machine)")
    assert "tier host-dram-pcie5" in out


def test_workload_profile_input(capsys, monkeypatch, tmp_path):
    profile = {
        "schema": "xmemplan.profile", "schema_version": 1, "requests": 3,
        "prompt_tokens": {"p50": 2048}, "hit_ratio": {"token_hit_ratio": 0.9},
        "requests_sample": {"prompt_tokens": [1024, 2048, 1500],
                            "hit_tokens": [0, 1984, 1400]},
    }
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    code, out, err = cli(["--workload", str(path), "--repeats", "1", "--format", "json"],
                         capsys, monkeypatch)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert [(r["prompt_tokens"], r["hit_tokens"]) for r in doc["requests"]] == [
        (1024, 0), (2048, 1984), (1500, 1344)]  # hits in whole 64-token pages


def test_bad_plan_names_file_and_field(capsys, monkeypatch, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"schema": "xmemplan.plan", "schema_version": 1,
                                "model": "qwen3-30b-a3b", "gpu": "h100-sxm", "hit_ratio": 0.9}))
    code, out, err = cli(["--plan", str(path)], capsys, monkeypatch)
    assert code == ExitCode.INPUT
    assert f"{path}, field 'prompt_tokens_p50': missing or not a finite number" in err
    path.write_text(json.dumps({"workload": "flags", "hit_ratio": 0.9}))  # unversioned
    code, out, err = cli(["--plan", str(path)], capsys, monkeypatch)
    assert code == ExitCode.INPUT and "field 'schema'" in err


def test_plan_from_size(capsys, monkeypatch, tmp_path):
    """A plan written by `xmemplan size` drives validate: its prompt, hit ratio and model."""
    monkeypatch.setenv("COLUMNS", "200")
    assert run(["size", "--ttft-slo", "500ms", "--prompt-tokens", "2048", "--hit-rate", "0.9",
                "--model", "llama-3.1-8b", "--format", "json"]) == ExitCode.OK
    plan = tmp_path / "plan.json"
    plan.write_text(capsys.readouterr().out)
    code, out, err = cli(["--plan", str(plan), "--repeats", "1", "--format", "json"],
                         capsys, monkeypatch)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert doc["model"] == "llama-3.1-8b"
    assert [(r["prompt_tokens"], r["hit_tokens"]) for r in doc["requests"]] == [(2048, 1792)]
    assert any("assumes 8 prefills in flight" in n for n in doc["notes"])
    assert doc["classes"][0]["name"] == "warm"


def test_usage_errors(capsys, monkeypatch):
    assert cli(["--backend", "nvme"], capsys, monkeypatch)[0] == 2
    assert cli(["--real", "--emulate"], capsys, monkeypatch)[0] == 2
    assert cli(["--tolerance", "abc"], capsys, monkeypatch)[0] == 2


def test_backend_and_matcher_must_agree(monkeypatch):
    """A backend that loses pages is caught by the harness (exit 5), not averaged away."""
    from xmemplan.backends.xmem import XMemHiCacheStorage
    from xmemplan.errors import CheckFailedError

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
    assert "--calibrate" in proc.stdout


def test_trace_directory_input(capsys, monkeypatch):
    traces = Path(__file__).resolve().parent.parent / "examples" / "traces"
    code, out, err = cli(["--traces", str(traces), "--max-requests", "4", "--max-bytes", "1GB",
                          "--repeats", "1", "--format", "json"], capsys, monkeypatch)
    assert code == ExitCode.OK, err
    doc = json.loads(out)
    assert len(doc["requests"]) == 4
    assert all(r["hit_tokens"] <= r["prompt_tokens"] for r in doc["requests"])
    assert f"workload: traces {traces}" in err
