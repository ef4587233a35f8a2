"""`xmemplan size` and `xmemplan catalog` through the CLI: outputs, exit codes, errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from xmemplan.cli.main import run
from xmemplan.profile import save_profile


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_default_workload_is_named_on_the_first_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("Workload: default seed scenario")
    assert "qwen3-30b-a3b-fp8" in out.splitlines()[0] + out.splitlines()[1]
    assert "65,536-token prompts" in out
    assert "Compute alone breaks the 500 ms SLO" in out
    assert "hbm-only" in out and "host-dram" in out and "xmem" in out
    assert "Assumption:" in err and "Traceback" not in err


def test_json_has_unit_keys_and_all_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "size", "--ttft-slo", "300ms", "--prompt-tokens", "32Ki",
                        "--hit-rate", "1.0", "--concurrency", "2", "--gpus", "72",
                        "--format", "json")
    assert code == 0
    doc = json.loads(out)
    for key in ("ttft_p50_ms", "ttft_p99_ms", "nodes_for_bandwidth", "nodes_for_capacity",
                "recommended_nodes", "required_bandwidth_per_gpu_gb_per_s",
                "speedup_vs_host_dram_p50", "sensitivity", "verdict", "reasons", "options"):
        assert key in doc
    assert [o["option"] for o in doc["options"]] == ["hbm-only", "host-dram", "xmem"]
    assert doc["recommended_nodes"] >= doc["nodes_for_bandwidth"] >= 1
    assert doc["prompt_tokens_p50"] == 32_768
    xm = doc["options"][2]
    assert xm["meets_slo"] and xm["ttft_p99_ms"] <= 300
    assert doc["ttft_p99_ms"] == xm["ttft_p99_ms"]
    assert len(doc["sensitivity"]["ttft_p99_ms"]) == len(doc["sensitivity"]["hit_rates"])


def test_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "size", "--ttft-slo", "1s", "-f", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["option"] for r in rows] == ["hbm-only", "host-dram", "xmem"]
    assert float(rows[2]["ttft_p99_ms"]) <= float(rows[1]["ttft_p99_ms"])


def test_vllm_engine_uses_sum_overlap(capsys: pytest.CaptureFixture[str]) -> None:
    _, out_s, _ = _run(capsys, "size", "--ttft-slo", "1s", "-f", "json")
    _, out_v, _ = _run(capsys, "size", "--ttft-slo", "1s", "-f", "json", "--engine", "vllm")
    s, v = json.loads(out_s), json.loads(out_v)
    assert s["overlap"] == "layer" and v["overlap"] == "sum"
    assert v["options"][1]["ttft_p50_ms"] > s["options"][1]["ttft_p50_ms"]


def _profile(tmp_path: Path, **extra: object) -> Path:
    p = tmp_path / "profile.json"
    doc: dict[str, object] = {
        "source": {"paths": ["x"], "formats": {"tokens": 1}, "scope": "session"},
        "requests": 4, "sessions": 1, "model": "qwen3-30b-a3b",
        "kv_bytes_per_token": 98_304,
        "prompt_tokens": {"mean": 30_000, "p50": 30_000, "p90": 50_000, "p99": 60_000,
                          "max": 60_000},
        "hit_ratio": {"token_hit_ratio": 0.95},
        "requests_sample": {"prompt_tokens": [10_000, 20_000, 40_000, 60_000],
                            "hit_tokens": [0, 19_000, 39_500, 59_800]},
        "working_set": {"peak_tokens": 5e9, "p99_tokens": 4e9, "peak_bytes": None,
                        "p99_bytes": None},
    }
    doc.update(extra)
    save_profile(p, doc)
    return p


def test_workload_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = _profile(tmp_path)
    code, out, err = _run(capsys, "size", "--ttft-slo", "2s", "--workload", str(p), "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"].startswith(f"profile {p}")
    assert doc["model"] == "qwen3-30b-a3b"
    assert doc["nodes_for_capacity"] == 21  # 5e9 tokens x 98,304 B = 491.5 TB / 24 TB
    assert doc["prompt_tokens_p50"] == 30_000


def test_workload_profile_without_sample(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    p = _profile(tmp_path, requests_sample=None, working_set=None)
    code, out, err = _run(capsys, "size", "--ttft-slo", "2s", "--workload", str(p), "-f", "json")
    assert code == 0, err
    assert json.loads(out)["hit_ratio"] == 0.95


def test_profile_of_another_schema_version(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"schema": "xmemplan.profile", "schema_version": 99,
                             "requests": 1, "prompt_tokens": {}, "hit_ratio": {}}))
    code, _, err = _run(capsys, "size", "--ttft-slo", "500ms", "--workload", str(p))
    assert code == 3
    assert "schema version 99" in err and "schema_version" in err


@pytest.mark.parametrize("args, code, needle", [
    (["--ttft-slo", "500"], 2, "no time unit"),
    (["--ttft-slo", "500ms", "--hit-rate", "1.5"], 2, "outside [0, 1]"),
    (["--ttft-slo", "500ms", "--prompt-tokens", "0"], 2, "at least 1"),
    (["--ttft-slo", "500ms", "--model", "llama-3.1-9b"], 2, "known models"),
    (["--ttft-slo", "500ms", "--gpu", "h10"], 2, "Closest: h100-sxm"),
    (["--ttft-slo", "500ms", "--format", "xml"], 2, "unknown output format"),
    (["--ttft-slo", "500ms", "--plot", "x.svg"], 2, "End --plot with .png"),
])
def test_bad_input_exit_codes(capsys: pytest.CaptureFixture[str], args: list[str], code: int,
                              needle: str) -> None:
    got, _, err = _run(capsys, "size", *args)
    assert got == code
    assert needle in err and "Traceback" not in err


def test_catalog_file_errors_through_size(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[tier.xmem]\nsource = "mine"\nnode_bandwidth = 8000\n')
    code, _, err = _run(capsys, "size", "--ttft-slo", "500ms", "--catalog", str(bad))
    assert code == 3 and "node_bandwidth" in err and "unit" in err
    good = tmp_path / "good.toml"
    good.write_text('[tier.xmem]\nsource = "what-if"\nnode_bandwidth = "8TB/s"\n')
    args = ["size", "--ttft-slo", "100ms", "--prompt-tokens", "32Ki", "--hit-rate", "1",
            "--concurrency", "2", "--gpus", "72", "-f", "json"]
    code, out, _ = _run(capsys, *args, "--catalog", str(good))
    assert code == 0
    code2, out2, _ = _run(capsys, *args)
    assert code2 == 0
    # Doubling node bandwidth halves the bandwidth-driven node count (2 -> 1).
    assert json.loads(out2)["nodes_for_bandwidth"] == 2
    assert json.loads(out)["nodes_for_bandwidth"] == 1


def test_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "ttft.png"
    code, _, err = _run(capsys, "size", "--ttft-slo", "500ms", "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = _run(capsys, "size", "--ttft-slo", "500ms", "--plot",
                        str(tmp_path / "x.png"))
    assert code == 4 and "matplotlib" in err


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys\n"
        "from xmemplan.cli.main import run\n"
        "rc = run(['size', '--help'])\n"
        "heavy = [m for m in ('numba', 'polars', 'matplotlib', 'numpy') if m in sys.modules]\n"
        "print(rc, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().endswith("0 []"), out
