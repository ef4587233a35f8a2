"""`validate --aiperf`: AIPerf's per-request records judged against the planner, and the
test server whose delays follow the model (the real AIPerf runs in .ci/steps/aiperf.sh)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import unwrap

from xmemplan.cli.main import run
from xmemplan.errors import ExitCode
from xmemplan.export.aiperf import export_aiperf
from xmemplan.validate.aiperf import AiperfOptions, judge, read_trace, trace_hits

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"
SERVER = Path(__file__).resolve().parent / "live_server.py"


@pytest.fixture
def trace(tmp_path) -> Path:
    out = tmp_path / "trace.jsonl"
    export_aiperf([EXAMPLES], out, block_tokens=64, limit=40)
    return out


def predicted_ms(trace: Path) -> dict[str, float]:
    """The planner's TTFT per row for the default model, GPU and tier."""
    from xmemplan.catalog import load_catalog
    from xmemplan.defaults import SEED_GPU, SEED_MODEL
    from xmemplan.sizing.model import calibration_for, ttft

    cat = load_catalog([])
    rows = read_trace(trace)
    hits = trace_hits(rows)
    m, g, t = cat.model(SEED_MODEL), cat.gpu(SEED_GPU), cat.tier("host-dram-pcie5")
    cal = calibration_for(cat, "sglang")
    return {r.session_id: float(ttft(m, g, t, r.prompt_tokens, int(h),
                                     calibration=cal).single_s) * 1e3
            for r, h in zip(rows, hits)}


def write_records(directory: Path, ttft_ms: dict[str, float], factor: float,
                  extra: list[dict] | None = None) -> Path:
    """profile_export.jsonl as AIPerf 0.13 writes it (research/serving-sim.md 4.4)."""
    directory.mkdir()
    lines = [{"metadata": {"conversation_id": sid, "turn_index": 0,
                           "benchmark_phase": "profiling", "was_cancelled": False},
              "metrics": {"time_to_first_token": {"value": v * factor, "unit": "ms"},
                          "input_sequence_length": {"value": 100, "unit": "tokens"}}}
             for sid, v in ttft_ms.items()]
    lines += extra or []
    (directory / "profile_export.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines))
    return directory


def cli(args, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code = run(["validate", *args])
    out = capsys.readouterr()
    return code, out.out, unwrap(out.err)


def test_records_that_follow_the_model_pass(tmp_path, trace, capsys, monkeypatch):
    pred = predicted_ms(trace)
    art = write_records(tmp_path / "art", pred, 1.03, extra=[
        {"metadata": {"conversation_id": "xm000001", "benchmark_phase": "warmup"},
         "metrics": {}},
        {"metadata": {"conversation_id": "xm000002"}, "metrics": {},
         "error": {"code": 502, "message": "boom"}}])
    code, out, err = cli(["--aiperf", str(art), "--traces", str(trace)], capsys, monkeypatch)
    assert code == ExitCode.OK, err
    # the verdict is the first line; what ran follows
    assert out.startswith("PASS: largest p50 TTFT error 3.00%")
    assert out.splitlines()[1].startswith(
        "validate --aiperf: 40 of 40 trace rows measured by AIPerf")
    assert "verdict covers: TTFT as AIPerf measured it on a live server" in out
    assert "1 records were failed or cancelled requests" in out
    assert "1 warm-up records skipped" in out


def test_records_slower_than_the_model_fail(tmp_path, trace, capsys, monkeypatch):
    art = write_records(tmp_path / "art", predicted_ms(trace), 1.5)
    code, out, err = cli(["--aiperf", str(art), "--traces", str(trace)], capsys, monkeypatch)
    assert code == ExitCode.CHECK_FAILED
    assert out.startswith("FAIL: largest p50 TTFT error 50.00%")
    # every table row closes at 80 columns and its figures are whole ms at 0.1
    rows = [ln for ln in out.splitlines() if ln[:1] in "┏┃┡│└"]
    assert rows and all(len(ln) <= 80 and ln.rstrip()[-1] in "┓┃┩│┘" for ln in rows)
    assert not any(re.search(r"\d\.\d{2,}\b", ln) for ln in rows if ln.startswith("│"))
    assert err.startswith("Error: AIPerf's measured TTFT differs from the prediction by 50.0%")


def test_warm_and_cold_are_judged_apart(tmp_path, trace):
    pred = predicted_ms(trace)
    rows = read_trace(trace)
    hits = trace_hits(rows)
    cold = {r.session_id for r, h in zip(rows, hits) if h < r.prompt_tokens / 2}
    assert cold and len(cold) < len(rows)
    # Only the cold requests are slow: the verdict must see it although the overall p50
    # (mostly warm requests) is right.
    slow = {sid: v * (2.0 if sid in cold else 1.0) for sid, v in pred.items()}
    res = judge(AiperfOptions(directory=write_records(tmp_path / "a", slow, 1.0), trace=trace,
                              model="qwen3-30b-a3b-fp8", gpu="h100-sxm"))
    by = {c.name: c for c in res.classes}
    assert by["warm"].error_p50 == pytest.approx(0.0, abs=1e-9)
    assert by["cold"].error_p50 == pytest.approx(1.0)
    assert not res.passed and res.error == pytest.approx(1.0)


def test_bad_inputs(tmp_path, trace, capsys, monkeypatch):
    code, _, err = cli(["--aiperf", str(tmp_path)], capsys, monkeypatch)
    assert code == ExitCode.USAGE and "--aiperf needs --traces" in err
    art = write_records(tmp_path / "art", {"nobody": 50.0}, 1.0)
    code, _, err = cli(["--aiperf", str(art), "--traces", str(trace)], capsys, monkeypatch)
    assert code == ExitCode.INPUT and "no AIPerf record matches a row" in err
    (art / "profile_export.jsonl").write_text(json.dumps(
        {"metadata": {"conversation_id": "xm000000"}, "metrics": {}}) + "\n")
    code, _, err = cli(["--aiperf", str(art), "--traces", str(trace)], capsys, monkeypatch)
    assert code == ExitCode.INPUT
    assert "profile_export.jsonl:1, field 'metrics.time_to_first_token'" in err


def _stream(port: int, row: int, n: int = 2) -> tuple[float, list[dict]]:
    body = json.dumps({"model": "sim", "prompt": "x", "stream": True, "max_tokens": n,
                       "xmemplan_row": row}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    events = []
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                events.append({"done": True})
                break
            ev = json.loads(line[6:])
            if first is None and ev.get("choices"):
                first = time.perf_counter() - t0
            events.append(ev)
    assert first is not None
    return first, events


def test_live_server_streams_with_the_models_delays(tmp_path, trace):
    pred = predicted_ms(trace)
    rows = read_trace(trace)
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, str(SERVER), "--trace", str(trace),
                             "--port-file", str(port_file), "--max-seconds", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.05)
        port = int(port_file.read_text())
        for i in range(6):  # the first rows: cold, then warm rounds of a session
            got_s, events = _stream(port, i)
            want_ms = pred[rows[i].session_id]
            assert got_s * 1e3 == pytest.approx(want_ms, abs=25), i
            assert events[0]["object"] == "text_completion"
            assert events[0]["choices"][0]["text"] == "t0 "
            assert events[-1] == {"done": True}
            usage = events[-2]["usage"]
            assert usage["prompt_tokens"] == rows[i].prompt_tokens
            assert usage["prompt_tokens_details"]["cached_tokens"] == int(
                trace_hits(rows[:i + 1])[i])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("flag", [["--backend", "dram"], ["--sessions", "4"], ["--repeats", "3"],
                                  ["--emulate"], ["--page-tokens", "16"]])
def test_a_replay_flag_with_aiperf_is_refused(tmp_path, trace, capsys, monkeypatch, flag):
    """--aiperf judges AIPerf's records and replays nothing: a replay flag given with it is
    an error naming it (it used to be ignored, exit 0)."""
    art = write_records(tmp_path / "art", predicted_ms(trace), 1.03)
    code, out, err = cli(["--aiperf", str(art), "--traces", str(trace), *flag], capsys,
                         monkeypatch)
    assert code == ExitCode.USAGE, (code, out, err)
    assert f"Error: {flag[0]} does not apply with --aiperf" in err
    assert out == ""
