"""`size --gpus N`: the synthetic multi-turn workload, the load sweep, Pareto points, the
plot and the AIPerf export of the same workload (issue 24)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from conftest import unwrap

from xmemplan.cli.main import run
from xmemplan.errors import ExitCode
from xmemplan.sizing.pareto import SweepPoint, mark_pareto, replan
from xmemplan.sizing.synthetic import SyntheticWorkload, schedule, tier_hits

POST = SyntheticWorkload()  # the post's shape: 1,000 / 20,000 / 26 / 100 / 20 turns / 15
POST_ARGS = ["size", "--gpus", "1", "--tier-capacity", "64GB"]


def cli(args, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code = run(args)
    out = capsys.readouterr()
    return code, out.out, unwrap(out.err)


def test_virtual_history_matches_aiperfs_published_example():
    # aiperf timing/strategies/user_centric_rate.py docstring: 15 users, 20 turns, 1 QPS:
    # (start s, turns) of the sessions running at t = 0
    want = {0: 20, 1: 6, 2: 11, 3: 16, 4: 2, 5: 7, 6: 12, 7: 17, 8: 3, 9: 8, 10: 13,
            11: 18, 12: 4, 13: 9, 14: 14}
    s = schedule(POST, rate_rps=1.0, requests=10_000)
    first: dict[float, list[int]] = {}
    for sess in np.unique(s.session):
        rows = np.flatnonzero(s.session == sess)
        first.setdefault(float(s.start_s[rows[0]]), []).append(len(rows))
    got = {int(t): min(n) for t, n in first.items() if t < 15}
    assert got == want
    # the turn gap is num_users / QPS; the schedule sends about QPS requests per second
    assert s.gap_s == pytest.approx(15.0)
    horizon = s.ideal_send().max()
    assert len(s) / horizon == pytest.approx(1.0, rel=0.02)


def test_prompts_grow_by_the_history_and_hits_are_whole_pages():
    s = schedule(POST, rate_rps=3.0, requests=600)
    k = s.turn
    assert np.all(s.prompt == 1000 + 20000 + k * 126 + 26)
    hits = tier_hits(POST, s, math.inf, page_tokens=64)
    later = k > 0
    prev = s.prev[later]
    want = np.floor((s.prompt[prev] + 100) / 64) * 64
    assert np.array_equal(hits[later], want)
    first = np.flatnonzero(k == 0)
    order = np.argsort(s.ideal_send()[first], kind="stable")
    # the very first request finds nothing; every later first turn finds the shared
    # system prompt's whole pages (960 of 1,000 tokens)
    assert hits[first[order[0]]] == 0
    assert np.all(hits[first[order[1:]]] == 960)


def test_a_small_tier_loses_the_contexts():
    s = schedule(POST, rate_rps=3.0, requests=600)
    full = tier_hits(POST, s, math.inf).sum()
    # room for about 5 of the 15 live contexts: LRU evicts each before its next turn
    small = tier_hits(POST, s, 5 * 22_000).sum()
    assert small < 0.1 * full


def test_replan_follows_aiperfs_rule():
    s = schedule(SyntheticWorkload(num_users=1, session_turns_mean=3), rate_rps=1.0,
                 requests=3)
    assert list(s.turn) == [0, 1, 2] and s.gap_s == 1.0
    send = s.ideal_send()  # 0, 1, 2
    done = np.array([2.5, 3.0, 9.0])  # the first reply outlasts the gap
    new = replan(s, send, done)
    # turn 1 goes when the reply is done (2.5, the simulator's max); turn 2 a gap later
    assert new[1] == pytest.approx(1.0) and new[2] == pytest.approx(3.5)


def _pt(opt, i, t):
    return SweepPoint(option=opt, load_kind="qps", load=1.0, run=0, gpus=1, interactivity=i,
                      interactivity_p50=i, throughput=t, throughput_per_gpu=t, ttft_ms={},
                      itl_ms={}, hit_ratio=0, offered_rps=0, served_rps=0, late_share=0,
                      requests=0, iterations=1, residual_ms=0)


def test_pareto_marks_only_undominated_points_per_option():
    pts = [_pt("a", 50, 300), _pt("a", 30, 400), _pt("a", 25, 390), _pt("a", 50, 300),
           _pt("b", 10, 100)]
    mark_pareto(pts)
    assert [p.pareto for p in pts] == [True, True, False, True, True]


def test_post_setup_answer_first_and_table(capsys, monkeypatch):
    # its speed is benchmarks/bench_size.py's (`size --gpus 1`), not a test's
    code, out, err = cli(POST_ARGS, capsys, monkeypatch)
    assert code == ExitCode.OK, err
    lines = out.splitlines()
    assert lines[0].startswith("X-Mem: ")
    assert "interactivity at QPS 4 (medium load)" in out.split("\n\n")[0].replace("\n", " ")
    rows = [ln for ln in lines if ln.startswith("│")]
    host = [ln for ln in rows if ln.startswith("│ host DRAM")]
    xmem = [ln for ln in rows if ln.startswith("│ X-Mem")]
    # the six listed loads, QPS 3 twice (the post's list): one row per load and option
    assert len(host) == 5 and len(xmem) == 5
    assert [ln.split("│")[2].strip() for ln in host] == ["3", "3.5", "4", "4.5", "5.5"]
    assert "(QPS 3 listed more than once: the same simulation, one row here;" in out
    assert all(len(ln) <= 80 for ln in lines if ln[:1] in "┏┃┡│└")
    assert "assumptions behind this answer: -v lists them" in err
    assert out.count(lines[0]) == 2  # the answer again, last: the table has scrolled it


def test_verbose_lists_the_assumptions(capsys, monkeypatch):
    code, _, err = cli(["-v", *POST_ARGS, "--user-centric-rate", "3"], capsys, monkeypatch)
    assert code == ExitCode.OK
    assert "Assumption: GPU prefix caching off" in err
    assert "Assumption: KV tier of 64GB for host DRAM and for X-Mem [flag]" in err


def test_json_and_csv_carry_the_same_points(capsys, monkeypatch):
    code, out, _ = cli(POST_ARGS + ["--format", "json"], capsys, monkeypatch)
    assert code == ExitCode.OK
    doc = json.loads(out)
    pts = doc["points"]
    assert len(pts) == 12 and {p["option"] for p in pts} == {"host-dram", "xmem"}
    assert all(set(p["itl_ms"]) == {"p50", "p90", "p99"} for p in pts)
    assert any(p["pareto"] for p in pts) and doc["answer"].startswith("X-Mem: ")
    keeps = doc["keeps_schedule_up_to"]
    assert keeps["host-dram"] < keeps["xmem"]  # faster loads keep the schedule longer
    # interactivity is 1 / ITL: at the lightest load it is near 1,000 / ITL p50
    light = [p for p in pts if p["load"] == 3.0 and p["option"] == "xmem"][0]
    assert light["interactivity"] == pytest.approx(1e3 / light["itl_ms"]["p50"], rel=0.2)
    # below saturation everything offered is served
    assert light["served_rps"] == pytest.approx(3.0, rel=0.02)
    code, out, _ = cli(POST_ARGS + ["--format", "csv"], capsys, monkeypatch)
    lines = out.strip().splitlines()
    assert lines[0].startswith("option,load_kind,load,interactivity") and len(lines) == 13


def test_x_mem_is_at_least_as_good_at_every_load(capsys, monkeypatch):
    # A check that can fail: faster loads never make interactivity or throughput worse by
    # more than noise, and they shorten the warm TTFT at every load
    code, out, _ = cli(POST_ARGS + ["--format", "json"], capsys, monkeypatch)
    doc = json.loads(out)
    for g in doc["gains"]:
        assert g["ttft_p50"] < 0
        assert g["throughput"] > -0.02


def test_plot(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    png = tmp_path / "pareto.png"
    code, _, err = cli(POST_ARGS + ["--user-centric-rate", "3,5", "--plot", str(png)],
                       capsys, monkeypatch)
    assert code == ExitCode.OK, err
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, msg", [
    (["--gpus", "1", "--ttft-slo", "1s"], "--ttft-slo does not apply"),
    (["--gpus", "1", "--user-centric-rate", "3,x"], "--user-centric-rate"),
    (["--gpus", "1", "--user-centric-rate", "3", "--concurrency", "4"], "not both"),
    (["--gpus", "1", "--osl", "0"], "--osl 0 is out of range"),
    (["--gpus", "0"], "--gpus"),
    (["--gpus", "1", "--gpu", "h100-sxm,h200-sxm"], "names several"),
    ([], "--ttft-slo is needed"),
])
def test_bad_sweep_flags(args, msg, capsys, monkeypatch):
    code, _, err = cli(["size", *args], capsys, monkeypatch)
    assert code == ExitCode.USAGE
    assert msg in err


def test_concurrency_loads(capsys, monkeypatch):
    code, out, err = cli(["size", "--gpus", "1", "--concurrency", "2,8", "--format", "json",
                          "--requests", "400"], capsys, monkeypatch)
    assert code == ExitCode.OK, err
    pts = json.loads(out)["points"]
    by = {(p["option"], p["load"]): p for p in pts}
    # more users in flight: more throughput, less interactivity
    assert by[("xmem", 8.0)]["throughput"] > by[("xmem", 2.0)]["throughput"]
    assert by[("xmem", 8.0)]["interactivity"] < by[("xmem", 2.0)]["interactivity"]


def test_export_writes_the_same_workload(tmp_path, capsys, monkeypatch):
    from xmemplan.validate.aiperf import read_trace, trace_hits

    out = tmp_path / "syn.jsonl"
    code, text, err = cli(["export", "--to", "aiperf", "-o", str(out), "--user-centric-rate",
                           "5.5", "--block-tokens", "64", "--limit", "60"], capsys,
                          monkeypatch)
    assert code == ExitCode.OK, err
    assert text.startswith("wrote 60 requests")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    s = schedule(POST, rate_rps=5.5, requests=60)
    order = np.argsort(s.ideal_send(), kind="stable")[:60]
    assert [r["input_length"] for r in rows] == [int(s.prompt[i]) for i in order]
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    # hits on replay: the previous prompt's whole blocks (its reply is new text), the
    # shared system prompt's for a user's first turn after the first request
    tr = read_trace(out)
    hits = trace_hits(tr)
    turns = [int(s.turn[i]) for i in order]
    prev_len: dict[int, int] = {}
    for row, i in enumerate(order):
        sess = int(s.session[i])
        want = (0 if row == 0 else 960) if turns[row] == 0 else prev_len[sess] // 64 * 64
        assert hits[row] == want, row
        prev_len[sess] = int(s.prompt[i])


def test_docs_quote_the_answer_the_command_gives(capsys, monkeypatch):
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "size.md").read_text()
    block = doc.split("**The answer** (`size --gpus 1 --tier-capacity 64GB`")[1]
    quoted = " ".join(block.split("```")[1].split())
    code, out, _ = cli(POST_ARGS, capsys, monkeypatch)
    live = " ".join(out.split("\n\n")[0].split("Workload:")[0].split())
    assert quoted == live, ("docs/size.md quotes another answer than "
                            "`xmemplan size --gpus 1 --tier-capacity 64GB` gives: rerun it "
                            "and update the section's answer and table")


def test_synthetic_export_replays_against_the_live_server(tmp_path):
    """The exported workload, streamed to tests/live_server.py row by row, then judged with
    validate --aiperf's judge on records written as AIPerf writes them (the real AIPerf
    does the same in .ci/steps/aiperf.sh, step 3)."""
    import subprocess
    import sys

    from test_aiperf import SERVER, _stream, write_records

    from xmemplan.export.synthetic import export_synthetic
    from xmemplan.validate.aiperf import AiperfOptions, judge

    # the post's lengths (TTFT 75-455 ms, well above HTTP and a loaded machine's jitter),
    # two users of three turns
    small = SyntheticWorkload(num_users=2, session_turns_mean=3)
    trace = tmp_path / "syn.jsonl"
    export_synthetic(small, trace, rate_rps=2.0, requests=6, block_tokens=64)
    rows = [json.loads(x) for x in trace.read_text().splitlines()]
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, str(SERVER), "--trace", str(trace),
                             "--port-file", str(port_file), "--max-seconds", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    measured = {}
    try:
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.05)
        port = int(port_file.read_text())
        for i, r in enumerate(rows):
            got_s, events = _stream(port, i)
            measured[r["session_id"]] = got_s * 1e3
            assert events[-2]["usage"]["prompt_tokens"] == r["input_length"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    res = judge(AiperfOptions(directory=write_records(tmp_path / "art", measured, 1.0),
                              trace=trace, model="qwen3-30b-a3b-fp8", gpu="h100-sxm"))
    assert res.passed, [(c.name, c.error_p50) for c in res.classes]
    assert {c.name for c in res.classes} >= {"cold", "warm"}


def _schedules(kind: str, requests: int):
    """Three workloads (the post's, no system prompt, a short one) at three loads."""
    for w in (POST, SyntheticWorkload(shared_system_prompt_length=0, num_users=4),
              SyntheticWorkload(shared_system_prompt_length=63, osl=1, num_users=7,
                                session_turns_mean=3)):
        for load in (0.5, 3.0, 40.0):
            yield w, load, (schedule(w, rate_rps=load, requests=requests) if kind == "qps"
                            else schedule(w, concurrency=max(1, int(load)),
                                          requests=requests))


@pytest.mark.parametrize("kind", ["qps", "concurrency"])
def test_unevicted_tier_hits_equal_the_lru_loop(kind: str) -> None:
    """tier_hits' array path (a tier that evicts nothing) gives the LRU loop's hits."""
    from xmemplan.sizing import synthetic as SY

    for w, load, s in _schedules(kind, 600):
        for page in (1, 16, 64):
            order = np.argsort(s.ideal_send(), kind="stable")
            sys_pages = (w.shared_system_prompt_length // page) * page
            loop = SY._tier_hits_lru(s, order, sys_pages, math.inf, page)
            fast = tier_hits(w, s, math.inf, page)
            assert np.array_equal(loop, fast), (w, load, page)
            # just below what the run writes, the loop (which may evict) answers
            held = sys_pages + float((s.prompt + s.output).sum())
            assert np.array_equal(tier_hits(w, s, held - 1, page),
                                  SY._tier_hits_lru(s, order, sys_pages, held - 1, page))


@pytest.mark.parametrize("kind", ["qps", "concurrency"])
def test_lru_kernel_equals_the_plain_python_lru(kind: str) -> None:
    """tier_hits' numba LRU gives the plain-Python loop's hits at capacities that evict
    from a little to nearly everything (sessions, the system prompt, both)."""
    from xmemplan.sizing import synthetic as SY

    for w, load, s in _schedules(kind, 400):
        for page in (1, 64):
            order = np.argsort(s.ideal_send(), kind="stable")
            sys_pages = (w.shared_system_prompt_length // page) * page
            one = float((s.prompt + s.output).max())
            evicted = 0
            for cap in (0.0, 0.5 * one, one, 3 * one, 20 * one):
                loop = SY._tier_hits_lru(s, order, sys_pages, cap, page)
                fast = tier_hits(w, s, cap, page)
                assert np.array_equal(loop, fast), (w, load, page, cap)
                evicted += int(cap < sys_pages + float((s.prompt + s.output).sum()))
            assert evicted >= 3  # the cases really evict
