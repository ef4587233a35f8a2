"""`xmemplan size` through the CLI: answer first, JSON, widths, exit codes, errors."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from xmemplan.profile import save_profile


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")


_run = run_cli


def _whole_at_80(out: str) -> None:
    for line in out.splitlines():
        assert len(line) <= 80, line
    # no number is cut by a table border or a wrap: every table cell parses whole
    for line in out.splitlines():
        if line.startswith("│"):
            for cell in line.strip("│").split("│"):
                c = cell.strip()
                assert c == "-" or not re.fullmatch(r"[\d,.]*", c) or re.fullmatch(
                    r"\d{1,3}(,\d{3})*(\.\d+)?", c), line


def test_bare_command_answers_with_a_node_count(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms")
    assert code == 0, err
    first = out.splitlines()[0]
    assert re.match(r"^\d+ X-Mem nodes? for \d+ GPUs", first), first
    assert "5 requests/s" in " ".join(out.split("Cheapest")[0].split())
    head = " ".join(out.split("Load:")[0].split())
    assert "Cheapest compliant option" in head
    assert head.count("inding") == 1, head  # the binding constraint, said once
    assert "GPUs by SLO (host DRAM/X-Mem, same load): 200 ms" in " ".join(out.split())
    assert "(s)" not in out + err, "plurals are spelled out"
    assert "assumptions behind this answer: -v lists them" in err and "Traceback" not in err
    assert "Assumption:" not in err  # behind -v
    _whole_at_80(out)
    # the answer is repeated last when the output runs long (it does here)
    answer = out.split("\nCheapest")[0]
    assert out.rstrip("\n").endswith(answer)
    code, out_v, err_v = _run(capsys, "-v", "size", "--ttft-slo", "500ms")
    assert code == 0
    assert "GPUs and X-Mem nodes by SLO" in out_v
    assert "Assumption:" in err_v and "[default" in err_v


def test_default_output_fits_a_50_row_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """COLUMNS=80, the bare command: the answer and the options table stay on a 50-row
    screen (stdout and stderr together), and the answer is the last thing said."""
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms")
    assert code == 0
    total = out.count("\n") + err.count("\n")
    assert total <= 40, f"{total} lines"
    assert "Fewest GPUs meeting the SLO" in out


def test_the_table_says_its_percentiles_are_not_line_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Line 1's p99 is the mean of the replications' p99 (the SLO statistic); the table's
    warm p99 pools their requests. With two replications the two differ, and the output
    says which is which (they read 227 and 224 ms, unexplained, before)."""
    code, out, _ = _run(capsys, "size", "--ttft-slo", "500ms", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    best = next(o for o in doc["options"] if o["option"] == doc["cheapest"])
    assert best["replications"] > 1
    code, text, _ = _run(capsys, "size", "--ttft-slo", "500ms")
    flat = " ".join(text.split())
    assert ("warm and cold percentiles: every replication's requests pooled; line 1's p99 "
            "is the mean of the replications' own") in flat
    assert f"p99 {best['slo_value_ms']:,.0f} ms" in flat.split("Cheapest")[0]


def test_json_carries_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "size", "--ttft-slo", "300ms", "--prompt-tokens", "128Ki",
                        "--hit-rate", "1.0", "--rate", "20", "--output-tokens", "1",
                        "--requests", "1500", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    for key in ("answer", "binding", "cheapest", "recommended_nodes", "gpus_per_option",
                "gpus_host_dram", "gpus_xmem", "gpus_saved_by_xmem", "table", "load_curve",
                "options", "assumptions", "schema", "prompt_tokens_p50", "hit_ratio"):
        assert key in doc, key
    assert doc["schema"] == "xmemplan.plan"
    assert doc["recommended_nodes"] >= 1
    assert doc["gpus_per_option"]["xmem"] == doc["gpus_xmem"]
    assert doc["answer"].startswith(f"{doc['recommended_nodes']} X-Mem node")
    xm = next(o for o in doc["options"] if o["option"] == "xmem")
    assert xm["ttft_ms"]["warm"]["p99"] <= 300
    assert all("source" in a for a in doc["assumptions"])


def test_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "size", "--ttft-slo", "1s", "--requests", "1000", "-f", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["option"] for r in rows] == ["hbm-only", "host-dram", "xmem"]


def _profile(tmp_path: Path, **extra: object) -> Path:
    p = tmp_path / "profile.json"
    doc: dict[str, object] = {
        "source": {"paths": ["x"], "formats": {"tokens": 1}, "scope": "global"},
        "requests": 8, "sessions": 2, "model": "qwen3-30b-a3b",
        "kv_bytes_per_token": 98_304,
        "prompt_tokens": {"mean": 30_000, "p50": 30_000, "p90": 50_000, "p99": 60_000,
                          "max": 60_000},
        "hit_ratio": {"token_hit_ratio": 0.95},
        "requests_sample": {"prompt_tokens": [10_000, 20_000, 30_000, 40_000] * 2,
                            "hit_tokens": [0, 19_000, 29_500, 39_800, 0, 19_500, 29_000,
                                           39_000]},
        "arrival": {"rate_rps": 0.05, "concurrency_mean": 2.0},
        "working_set": {"peak_tokens": 5e9, "p99_tokens": 4e9},
        "capacity_curve": [{"capacity_tokens": 1e5, "token_hit_ratio": 0.3},
                           {"capacity_tokens": 1e8, "token_hit_ratio": 0.95}],
    }
    doc.update(extra)
    save_profile(p, doc)
    return p


def test_workload_profile_warm_cold(capsys: pytest.CaptureFixture[str],
                                    tmp_path: Path) -> None:
    p = _profile(tmp_path)
    code, out, err = _run(capsys, "size", "--ttft-slo", "2s", "--workload", str(p),
                          "--rate", "0.1", "--requests", "1000", "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"].startswith(f"profile {p}")
    assert doc["model"] == "qwen3-30b-a3b"
    # 5e9 tokens in the trace x (0.1 / 0.05 load factor) x 98,304 B over 24 TB nodes
    assert doc["nodes_for_capacity"] == 41
    assert doc["xmem_option_nodes"] >= 41  # what the X-Mem option needs
    # recommended_nodes is the answer's own count (0 when host DRAM is the answer)
    assert doc["answer"].startswith(f"{doc['recommended_nodes']} X-Mem node")
    host = next(o for o in doc["options"] if o["option"] == "host-dram")
    assert host["ttft_ms"]["cold"] and host["ttft_ms"]["warm"]


def test_shared_claude_code_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path
                                    ) -> None:
    from tests.conftest import shared_trace

    traces = shared_trace("claude-code-weka")
    prof = tmp_path / "cc.json"
    code, _, err = _run(capsys, "hitrate", str(traces), "--scope", "global",
                        "--capacity-curve", "auto", "--model", "qwen3-30b-a3b-fp8",
                        "--workers", "1", "--profile-out", str(prof))
    assert code == 0, err
    for slo in ("200ms", "5s"):
        code, out, err = _run(capsys, "size", "--ttft-slo", slo, "--workload", str(prof),
                              "--rate", "2", "--requests", "1500")
        assert code == 0, err
        first = out.splitlines()[0]
        assert re.match(r"^(\d+ X-Mem nodes? for \d+ GPUs?|No option meets)", first), first
        assert "warm p99" in out and "cold p99" in out
        _whole_at_80(out)


def test_profile_of_another_schema_version(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"schema": "xmemplan.profile", "schema_version": 99,
                             "requests": 1, "prompt_tokens": {}, "hit_ratio": {}}))
    code, _, err = _run(capsys, "size", "--ttft-slo", "500ms", "--workload", str(p))
    assert code == 3
    assert "schema version 99" in err


@pytest.mark.parametrize("args, code, needle", [
    (["--ttft-slo", "500"], 2, "no time unit"),
    (["--ttft-slo", "500ms", "--hit-rate", "1.5"], 2, "Allowed: [0, 1]"),
    (["--ttft-slo", "500ms", "--prompt-tokens", "0"], 2, "--prompt-tokens"),
    (["--ttft-slo", "500ms", "--prompt-tokens", "300000"], 2, "262,144-token context"),
    (["--ttft-slo", "500ms", "--rate", "nan"], 2, "--rate"),
    (["--ttft-slo", "500ms", "--model", "llama-3.1-9b"], 2, "known models"),
    (["--ttft-slo", "500ms", "--format", "xml"], 2, "unknown output format"),
    (["--ttft-slo", "500ms", "--plot", "x.svg"], 2, "End --plot with .png"),
    (["--ttft-slo", "500ms", "--users", "0"], 2, "--users"),
])
def test_bad_input_exit_codes(capsys: pytest.CaptureFixture[str], args: list[str], code: int,
                              needle: str) -> None:
    got, _, err = _run(capsys, "size", *args)
    assert got == code
    assert needle in err and "Traceback" not in err


def test_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "load.png"
    code, _, err = _run(capsys, "size", "--ttft-slo", "500ms", "--requests", "1000",
                        "--plot", str(png))
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


def test_profile_with_per_request_times_replays_the_trace(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The per-request fields the simulator reads when a profile has them (proposed schema
    # addition): sessions and timestamps give the trace's own arrivals, compressed to --rate.
    n = 8
    p = _profile(tmp_path, requests_sample={
        "prompt_tokens": [10_000, 20_000, 30_000, 40_000] * 2,
        "hit_tokens": [0, 19_000, 29_500, 39_800, 0, 19_500, 29_000, 39_000],
        "session": [0, 0, 0, 0, 1, 1, 1, 1],
        "timestamp_s": [0.0, 20.0, 40.0, 60.0, 5.0, 25.0, 45.0, 65.0],
        "output_tokens": [50] * n,
    })
    code, out, err = _run(capsys, "size", "--ttft-slo", "5s", "--workload", str(p), "--rate",
                          "0.5", "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert "the trace's sessions compressed" in doc["load"]
    assert not any("Poisson" in a["assumption"] for a in doc["assumptions"])
    bad = _profile(tmp_path, requests_sample={
        "prompt_tokens": [10_000, 20_000], "hit_tokens": [0, 19_000], "session": [0]})
    code, _, err = _run(capsys, "size", "--ttft-slo", "5s", "--workload", str(bad))
    assert code == 3 and "requests_sample.session" in err


# --- deployment shape, dtypes, notes (issue 11 wired into size) ----------------------------

def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code, out, err = _run(capsys, "size", "--requests", "400", "-f", "json", *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("args, shape", [
    (["--tp", "2"], "tp2 ep2"),  # MoE: EP = TP by default
    (["--ep", "2"], "tp2 ep2"),  # --ep alone: TP = EP
    (["--tp", "4", "--ep", "2", "--dp-attention"], "tp4 ep2 dp-attention"),
    (["--model", "llama-3.1-8b", "--tp", "2"], "tp2"),  # dense: no EP
])
def test_shape_flags_build_the_replica(capsys: pytest.CaptureFixture[str], args: list[str],
                                       shape: str) -> None:
    doc = _json(capsys, "--ttft-slo", "2s", *args)
    assert doc["shape"] == shape
    said = [a for a in doc["assumptions"] if a["assumption"].startswith("replica shape")]
    assert said and said[0]["source"].startswith("flag (")


def test_shape_that_does_not_fit_is_refused_and_names_one_that_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing import model as M

    code, _, err = _run(capsys, "size", "--ttft-slo", "2s", "--model", "llama-3.1-70b",
                        "--tp", "1")
    assert code == 2, err
    assert "--tp 1" in err and "does not fit" in err and "Traceback" not in err
    named = re.search(r"Try tp(\d+)", err)
    assert named, err
    cat = load_catalog()
    m, g = cat.model("llama-3.1-70b"), cat.gpu("h100-sxm")
    smallest = M.smallest_shape(m, g, 65_536)
    assert smallest is not None and int(named.group(1)) == smallest.tp
    # the named shape is accepted, and it is the default when no shape flag is given
    assert _json(capsys, "--ttft-slo", "2s", "--model", "llama-3.1-70b", "--tp",
                 named.group(1))["shape"] == smallest.label
    # without a shape flag the search starts at the smallest shape (the answer may be wider)
    assert _json(capsys, "--ttft-slo", "2s", "--model", "llama-3.1-70b")["shapes"][0][
        "shape"] == smallest.label


def test_kv_dtype_fp8_halves_kv_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    base = _json(capsys, "--ttft-slo", "2s")
    fp8 = _json(capsys, "--ttft-slo", "2s", "--kv-dtype", "fp8")
    assert fp8["kv_bytes_per_token"] * 2 == base["kv_bytes_per_token"]
    assert fp8["kv_dtype_bytes"] == 1 and base["kv_dtype_bytes"] == 2
    assert any(a["source"] == "flag (--kv-dtype)" for a in fp8["assumptions"])


def test_fp8_attention_is_faster_and_said(capsys: pytest.CaptureFixture[str]) -> None:
    # Long full-hit-free prompts: attention dominates, so FP8 attention (2x the peak on an
    # H100) must lower the TTFT of the same GPU count.
    args = ["--ttft-slo", "5s", "--prompt-tokens", "128Ki", "--hit-rate", "0.9", "--rate",
            "0.2", "--output-tokens", "1"]
    bf16 = _json(capsys, *args)
    fp8 = _json(capsys, *args, "--attention-dtype", "fp8")
    assert fp8["attention_dtype"] == "fp8"
    b = next(o for o in bf16["options"] if o["option"] == "host-dram")
    f = next(o for o in fp8["options"] if o["option"] == "host-dram")
    assert f["gpus"] <= b["gpus"]
    if f["gpus"] == b["gpus"]:
        assert f["ttft_ms"]["all"]["p50"] < 0.9 * b["ttft_ms"]["all"]["p50"]
    assert any("attention in fp8" in a["assumption"] for a in fp8["assumptions"])


def test_unpublished_figures_are_assumptions_with_their_source(
        capsys: pytest.CaptureFixture[str]) -> None:
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing import model as M

    cat = load_catalog()
    notes = M.notes(cat.gpu("h100-sxm"), cat.tier("xmem"))
    assert notes  # the catalog says what is not published for X-Mem
    doc = _json(capsys, "--ttft-slo", "2s")
    said = {a["assumption"]: a["source"] for a in doc["assumptions"]}
    for n in notes:
        assert n in said and "catalog (tiers.toml" in said[n]


@pytest.mark.parametrize("model", ["qwen3-30b-a3b-fp8", "qwen3-30b-a3b"])
def test_linear_efficiency_is_the_weight_dtypes(capsys: pytest.CaptureFixture[str],
                                                model: str) -> None:
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing.model import DEFAULT_CALIBRATION

    dtype = load_catalog().model(model).weight_dtype
    eta = DEFAULT_CALIBRATION.for_engine("sglang").eta_lin(dtype)
    doc = _json(capsys, "--ttft-slo", "2s", "--model", model, "--prompt-tokens", "32k")
    line = next(a["assumption"] for a in doc["assumptions"]
                if a["assumption"].startswith("fixed overhead"))
    assert f"linear {eta:.3f} ({dtype} GEMMs)" in line, line


@pytest.mark.parametrize("args, needle", [
    (["--model", "llama-3.1-8b", "--ep", "2"], "no routed experts"),
    (["--tp", "4", "--ep", "3"], "--ep 3 must divide --tp 4"),
    (["--tp", "2", "--ep", "4"], "--ep 4 is larger than --tp 2"),
    (["--tp", "1", "--dp-attention"], "--dp-attention needs --tp 2"),
    (["--tp", "8", "--max-gpus", "4"], "--tp '8' is out of range"),
    (["--model", "deepseek-v3", "--max-gpus", "4"], "Raise --max-gpus to 16"),
    (["--kv-dtype", "int4"], "--kv-dtype 'int4'"),
    (["--attention-dtype", "fp4"], "--attention-dtype 'fp4'"),
    (["--ttft-slo", "0ms"], "Allowed: (0 s, 366 days]"),
    (["--ttft-slo", "1e400s"], "--ttft-slo '1e400s' is not a finite number"),
    (["--rate", "inf"], "--rate 'inf' is not a finite number"),
    (["--prompt-tokens", "262145"], "Allowed: 1 to 262,144 for this model"),
    (["--model", "qwen3-30b-a3b"], "--prompt-tokens 65,536 (the default) is longer"),
    (["--users", "100000000"], "Allowed: [1, 100,000]"),
    (["--max-gpus", "100000000"], "--max-gpus '100000000' is out of range"),
    (["--requests", "100000000"], "Allowed: [200, 200,000]"),
    (["--output-tokens", "300000"], "allowed: 1 to 196,608 with this prompt"),
    (["--output-tokens", "20000"], "--output-tokens up to 12,500 at --requests 4,000"),
    (["--requests", "200000", "--max-gpus", "100000"], "--max-gpus up to 10,000 at --requests"),
])
def test_flags_out_of_range_name_the_flag_and_range(capsys: pytest.CaptureFixture[str],
                                                    args: list[str], needle: str) -> None:
    base = [] if "--ttft-slo" in args else ["--ttft-slo", "500ms"]
    code, _, err = _run(capsys, "size", *base, *args)
    assert code == 2, err
    assert needle.lower() in err.lower(), err
    assert "Traceback" not in err


def _long_prompt_profile(tmp_path: Path) -> Path:
    # a quarter of the sample is longer than Qwen3-30B-A3B's 262,144-token context
    return _profile(tmp_path, requests_sample={
        "prompt_tokens": [10_000, 20_000, 30_000, 300_000] * 2,
        "hit_tokens": [0, 19_000, 29_500, 290_000, 0, 19_500, 29_000, 290_000]})


def test_answer_line_comes_before_any_warning(tmp_path: Path) -> None:
    # stdout and stderr into one pipe, as a terminal shows them: the answer is line 1
    p = _long_prompt_profile(tmp_path)
    env = {**__import__("os").environ, "COLUMNS": "80", "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, "-m", "xmemplan", "size", "--ttft-slo", "2s",
                        "--workload", str(p), "--rate", "0.1", "--requests", "400"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                       check=True)
    lines = r.stdout.splitlines()
    assert re.match(r"^(\d[\d,]* X-Mem nodes? for [\d,]+ GPUs?|No option meets)", lines[0]), \
        lines[:3]
    warn = next(i for i, ln in enumerate(lines) if ln.startswith("Warning:"))
    assert warn > 0 and "2 sampled requests are longer" in " ".join(lines[warn:warn + 2])
    # every line, stderr's too, fits 80 columns, and numbers are not cut
    assert all(len(ln) <= 80 for ln in lines), max(lines, key=len)


def test_json_carries_the_warnings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = _long_prompt_profile(tmp_path)
    doc = _json(capsys, "--ttft-slo", "2s", "--workload", str(p), "--rate", "0.1")
    assert doc["excluded_over_context"] == 2
    assert any("2 sampled requests are longer" in w for w in doc["warnings"])


def test_overloaded_rate_is_a_result(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms", "--rate", "1000000",
                          "--max-gpus", "64", "--requests", "400")
    assert code == 0, err
    assert "overloaded at this rate" in out.split("\n\n")[0].replace("\n", " ")
    assert "Binding constraint: overloaded" in out.replace("\n", " ")
    assert "1,000,000 requests/s" in out.replace("\n", " ")
    _whole_at_80(out)


def test_profile_with_sessions_replays_its_own_arrivals_by_default(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # no --rate/--users: the trace's own timestamps at its own rate, not Poisson
    p = _profile(tmp_path, requests_sample={
        "prompt_tokens": [10_000, 20_000, 30_000, 40_000] * 2,
        "hit_tokens": [0, 19_000, 29_500, 39_800, 0, 19_500, 29_000, 39_000],
        "session": [0, 0, 0, 0, 1, 1, 1, 1],
        "timestamp_s": [0.0, 20.0, 40.0, 60.0, 5.0, 25.0, 45.0, 65.0],
        "output_tokens": [50] * 8,
    })
    doc = _json(capsys, "--ttft-slo", "5s", "--workload", str(p))
    assert doc["load"] == "the trace's own timestamps (0.05 requests/s)"
    assert not any("Poisson" in a["assumption"] for a in doc["assumptions"])


def test_answer_line_says_one_gpu_not_one_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    """A load one GPU serves: the answer reads '... for 1 GPU:', not '1 GPUs'."""
    # 150 ms: with async scheduling (a new request waits one more decode step) one GPU's
    # p99 is over 100 ms here
    code, out, err = _run(capsys, "size", "--ttft-slo", "150ms", "--gpu", "h200",
                          "--model", "qwen3-30b-a3b", "--engine", "vllm", "--prompt-tokens",
                          "32k", "--hit-rate", "0.999", "--rate", "2")
    assert code == 0, err
    first = " ".join(out.split("Cheapest")[0].split())
    assert re.match(r"^\d+ X-Mem nodes? for 1 GPU:", first), first
    assert "1 GPUs" not in out


def test_instant_loads_never_need_more_gpus_than_a_real_tier(monkeypatch) -> None:
    """Instant loads are never slower than a tier, so 'with instant KV loads N GPUs would
    do' is at most the count any option complies with, even when the search for it is
    thrown off (a short run flagged as overloaded at one count and not at a smaller one)."""
    from xmemplan.sizing import planner
    from xmemplan.sizing.request import build_request

    real = planner.Planner.fewest_gpus

    def thrown_off(self, option, nodes=0, slo_s=None, instant_loads=False, upper=None):
        g = real(self, option, nodes, slo_s, instant_loads, upper)
        return g * 3 if instant_loads and g is not None else g

    monkeypatch.setattr(planner.Planner, "fewest_gpus", thrown_off)
    req, _ = build_request(ttft_slo="500ms", requests=1000)
    res = planner.plan(req, with_table=False, with_curve=False)
    said = [r for r in res.reasons if r.startswith("With instant KV loads")]
    assert said, res.reasons
    n = int(said[0].split()[4])
    assert n <= min(o.gpus for o in res.options if o.gpus is not None), said


def test_the_answer_is_the_cheapest_over_every_shape_searched(capsys) -> None:
    """The answer is the cheapest compliant (GPUs, nodes) over the shapes and tiers searched:
    no shape's compliant option needs fewer GPUs, or as many and fewer X-Mem nodes (the seed
    case had answered '1 X-Mem node for 4 GPUs' at tp1 and hinted that tp2 host DRAM did it
    with 4 GPUs and no node). Sizing the answer's shape with --tp gives the same counts."""
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms", "-f", "json")
    assert code == 0, err
    d = json.loads(out)
    best = (d["gpus_per_option"][d["cheapest"]], d["recommended_nodes"] or 0)
    assert len(d["shapes"]) >= 2 and d["shapes"][0]["shape"] == "tp1"
    for s in d["shapes"]:
        for o in s["options"]:
            if o["gpus"] is not None:
                c = (o["gpus"], o["nodes"] or 0 if o["option"] == "xmem" else 0)
                assert c >= best, (s["shape"], o, best)
    assert "wider_shape" not in d and "Wider replicas need less" not in out
    tp = int(d["shape"].split()[0][2:])
    code, out2, err = _run(capsys, "size", "--ttft-slo", "500ms", "--tp", str(tp), "-f",
                           "json")
    e = json.loads(out2)
    assert (e["gpus_per_option"][e["cheapest"]], e["recommended_nodes"] or 0) == best

def test_mem_fraction_sets_the_kv_room(capsys) -> None:
    """--mem-fraction is the engines' HBM share (SGLang --mem-fraction-static, vLLM
    --gpu-memory-utilization): the simulated KV capacity is that share minus the weights,
    it is stated as an assumption, and a value outside (0, 1] is refused, naming the flag."""
    from xmemplan.sizing import model as M
    from xmemplan.sizing.request import build_request
    from xmemplan.sizing.simmodel import engine_for

    caps = {}
    for f in (0.9, 0.75):
        req, _ = build_request(ttft_slo="500ms", mem_fraction=f, requests=500)
        e = engine_for(req.setup, replicas=1, nodes=1)
        room = req.gpu.hbm_capacity_bytes * f - M.weight_bytes_per_gpu(req.model, req.shape)
        assert e.kv_capacity_tokens == pytest.approx(
            room / M.kv_bytes_per_token_per_gpu(req.model, req.shape))
        caps[f] = e.kv_capacity_tokens
    assert caps[0.75] < caps[0.9]
    code, out, err = _run(capsys, "-v", "size", "--ttft-slo", "500ms", "--mem-fraction",
                          "0.75")
    assert code == 0 and "takes 75% of each GPU's HBM" in err and "--mem-fraction" in err
    for bad in ("0", "1.5", "x"):
        code, out, err = _run(capsys, "size", "--ttft-slo", "500ms", "--mem-fraction", bad)
        assert code == 2 and "--mem-fraction" in err and "Traceback" not in err, err


def test_a_nearly_full_kv_cache_is_called_optimistic(capsys) -> None:
    """Where the simulated KV cache is 80 % full or more on average, the answer says its
    figures are optimistic and cites the loaded check; the seed scenario (about a third
    full) does not. kv_full is a share of the KV room: between 0 and 1."""
    loaded = ["size", "--ttft-slo", "5s", "--prompt-tokens", "52636", "--hit-rate", "0.965",
              "--users", "12", "--think", "1s", "--output-tokens", "300", "--model",
              "qwen3-30b-a3b-fp8", "--engine", "vllm", "--kv-dtype", "fp8",
              "--mem-fraction", "0.75", "--tp", "1", "--requests", "1500"]
    code, out, err = _run(capsys, *loaded)
    assert code == 0, err
    text = " ".join(out.split())
    assert "full on average" in text and "read these figures as optimistic" in text, text
    code, out, err = _run(capsys, *loaded, "-f", "json")
    fulls = [o["kv_full"] for o in json.loads(out)["options"] if "kv_full" in o]
    assert fulls and all(0.0 <= f <= 1.0 for f in fulls) and max(fulls) >= 0.8
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms")
    assert "full on average" not in " ".join(out.split())
    # a fixed deployment says it too, and JSON carries it among the warnings
    code, out, err = _run(capsys, *loaded, "--gpus", "1")
    text = " ".join(out.split())
    from xmemplan.sizing.planner import KV_FULL_EVIDENCE

    assert code == 0 and "full on average" in text, text
    assert f"median {KV_FULL_EVIDENCE[2]:+.0%}" in text, text
    code, out, err = _run(capsys, *loaded, "--gpus", "1", "-f", "json")
    assert any("read these figures as optimistic" in w for w in json.loads(out)["warnings"])
    light = [("2" if a == "12" else a) for a in loaded]  # 2 users: the KV far from full
    code, out, err = _run(capsys, *light, "--gpus", "1")
    assert code == 0 and "full on average" not in " ".join(out.split()), err


def test_more_than_one_replica_is_called_optimistic(capsys) -> None:
    """An answer with an option on more than one replica cites how the model's TTFT did
    on the published multi-replica runs (planner.MULTI_REPLICA_EVIDENCE), in search mode
    and on a fixed deployment, text and JSON; one replica does not."""
    from xmemplan.sizing.planner import MULTI_REPLICA_EVIDENCE

    base = ["size", "--prompt-tokens", "8000", "--hit-rate", "0.9", "--rate", "2",
            "--tp", "1", "--requests", "400"]
    said = f"under the measured at {MULTI_REPLICA_EVIDENCE[1]}"
    code, out, err = _run(capsys, *base, "--gpus", "4")
    assert code == 0 and said in " ".join(out.split()), err
    code, out, err = _run(capsys, *base, "--gpus", "4", "-f", "json")
    assert any(said in w for w in json.loads(out)["warnings"])
    code, out, err = _run(capsys, *base, "--gpus", "1", "-f", "json")
    assert not any(said in w for w in json.loads(out)["warnings"])
    for rate, many in (("2", False), ("30", True)):  # 1 GPU each; 4-7 GPUs at tp1
        args = list(base)
        args[args.index("--rate") + 1] = rate
        code, out, err = _run(capsys, *args, "--ttft-slo", "500ms", "--max-gpus", "16",
                              "-f", "json")
        doc = json.loads(out)
        assert any((o.get("gpus") or 0) > 1 for o in doc["options"]) == many, doc["options"]
        assert any(said in r for r in doc["reasons"]) == many, doc["reasons"]


def test_lengths_p50_p90_and_engine_fields(capsys: pytest.CaptureFixture[str]) -> None:
    """--prompt-tokens and --output-tokens take P50:P90; JSON carries the engine's
    outcome per option (KV use, HBM share of hits, preemptions, throughput)."""
    code, out, _ = _run(capsys, "size", "--ttft-slo", "2s", "--prompt-tokens", "20k:60k",
                        "--output-tokens", "100:400", "--format", "json")
    assert code == 0
    d = json.loads(out)
    said = " ".join(a["assumption"] if isinstance(a, dict) else str(a)
                    for a in d.get("assumptions", []))
    assert "lognormal" in said
    opts = [o for o in d["options"] if o.get("gpus")]
    assert opts
    for o in opts:
        for k in ("kv_full", "hbm_share_of_hits", "preemptions_per_request",
                  "throughput_rps", "throughput_tok_s"):
            assert k in o and o[k] >= 0, k
        assert o["throughput_tok_s"] > o["throughput_rps"] * 20_000
    code, _, err = _run(capsys, "size", "--ttft-slo", "2s", "--prompt-tokens", "60k:20k")
    assert code != 0 and "p90 is below the p50" in err


@pytest.mark.parametrize(("args", "flag", "says"), [
    # the SLO search reads none of the sweep's synthetic workload
    (["--ttft-slo", "500ms", "--osl", "5"], "--osl", "applies only to the --gpus load sweep"),
    (["--ttft-slo", "500ms", "--num-users", "3"], "--num-users", "applies only"),
    (["--gpus", "4", "--prompt-tokens", "20k", "--tier-capacity", "1GB"], "--tier-capacity",
     "applies only"),
    # the sweep reads none of the deployment's own flags
    (["--gpus", "1", "--tp", "2"], "--tp", "does not apply to the --gpus load sweep"),
    (["--gpus", "1", "--router", "round-robin"], "--router", "does not apply"),
    (["--gpus", "1", "--cost", "gpu=2"], "--cost", "does not apply"),
    (["--gpus", "1", "--mem-fraction", "0.5"], "--mem-fraction", "does not apply"),
])
def test_a_flag_the_mode_does_not_read_is_refused(capsys, args, flag, says):
    """A flag given to the mode that does not read it is a usage error naming it, not a
    run that ignores it (before: exit 0 and the same answer as without it)."""
    code, out, err = _run(capsys, "size", *args)
    assert code == 2, (code, out, err)
    assert out == ""
    assert f"Error: {flag} {says}" in err


def test_the_modes_still_take_their_own_flags(capsys):
    code, out, err = _run(capsys, "size", "--gpus", "4", "--prompt-tokens", "20k", "--tp", "2",
                          "--requests", "200")
    assert code == 0, err
    assert out.startswith("On 4 GPUs")
    code, out, err = _run(capsys, "size", "--gpus", "1", "--osl", "50", "--num-users", "4",
                          "--requests", "200")
    assert code == 0, err
    assert out.startswith("X-Mem:")


def test_think_without_users_is_refused(capsys):
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms", "--think", "10s")
    assert code == 2 and out == ""
    assert "Error: --think is the think time of --users" in err
    code, out, err = _run(capsys, "size", "--ttft-slo", "500ms", "--users", "20", "--think",
                          "10s", "--requests", "200")
    assert code == 0, err
    assert "10 s mean think time" in out


def test_max_gpus_with_a_fixed_deployment_is_refused(capsys):
    """--gpus N with a workload evaluates N GPUs: --max-gpus (the SLO search's bound) was
    raised to N and changed nothing (exit 0, the same answer)."""
    code, out, err = _run(capsys, "size", "--gpus", "4", "--prompt-tokens", "8k",
                          "--hit-rate", "0.8", "--rate", "2", "--requests", "200",
                          "--max-gpus", "2")
    assert code == 2 and out == ""
    assert "Error: --max-gpus bounds the SLO search, and --gpus 4 evaluates that many" in err
