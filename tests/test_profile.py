"""The workload profile (`--profile-out`) and the charts (`--plot`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from xmemplan.errors import InputError, NotAvailableError
from xmemplan.hitrate import HitrateOptions, analyze
from xmemplan.profile import SCHEMA_VERSION, load_profile
from xmemplan.traces import synth


@pytest.fixture(scope="module")
def sessions():
    return synth.agent_sessions(n_sessions=5, turns=8, seed=11, compact_every=3)


DOCUMENTED = (
    "schema",
    "schema_version",
    "source",
    "requests",
    "sessions",
    "model",
    "kv_bytes_per_token",
    "prompt_tokens",
    "hit_ratio",
    "requests_sample",
    "arrival",
    "working_set",
    "capacity_curve",
    "tiers",
)


def test_profile_written_and_read_back(cli, tmp_path: Path, sessions):
    synth.write_claude_blocks(tmp_path / "cb", sessions)
    out = tmp_path / "profile.json"
    r = cli(
        "hitrate",
        tmp_path / "cb",
        "--profile-out",
        out,
        "--tiers",
        "HBM=2k,DRAM=8k",
        "--idle",
        "1m",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    doc = load_profile(out).doc
    summary = json.loads(r.out)
    for key in DOCUMENTED:
        assert key in doc, key
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["requests"] == summary["requests"] == 40 and doc["sessions"] == 5
    assert doc["source"]["scope"] == "session" and doc["source"]["formats"] == {"claude-blocks": 5}
    h = doc["hit_ratio"]
    assert h["token_hit_ratio"] == pytest.approx(summary["token_hit_ratio"])
    assert sum(h["histogram"]["counts"]) == summary["rounds_ge1_requests"]
    assert sum(h["histogram_all"]["counts"]) == 40
    assert h["rounds_ge1_p10"] <= h["rounds_ge1_median"]
    p = doc["prompt_tokens"]
    assert sum(p["histogram"]["counts"]) == 40 and p["max"] >= p["p99"] >= p["p50"]
    sample = doc["requests_sample"]
    assert len(sample["prompt_tokens"]) == len(sample["hit_tokens"]) == 40
    assert sum(sample["hit_tokens"]) == summary["hit_tokens"]  # all requests fit the sample
    # No --capacity-curve: a profile gets the auto curve; it ends at the infinite cache.
    curve = doc["capacity_curve"]
    assert curve and curve[-1]["token_hit_ratio"] == pytest.approx(h["token_hit_ratio"])
    assert [t["name"] for t in doc["tiers"]] == ["HBM", "DRAM", "miss (prefill)"]
    ws = doc["working_set"]
    assert ws["idle_s"] == 60.0 and ws["peak_tokens"] >= ws["p99_tokens"] > 0
    assert doc["arrival"]["rate_rps"] > 0 and doc["arrival"]["concurrency_peak"] >= 1


def test_profile_sample_is_capped(tmp_path: Path, monkeypatch):
    from xmemplan import profile
    from xmemplan.hitrate.capacity import build_spec

    many = synth.agent_sessions(n_sessions=3, turns=4, seed=1)
    synth.write_mooncake(tmp_path / "m.jsonl", many)
    result = analyze([tmp_path / "m.jsonl"], HitrateOptions(capacity=build_spec(curve="auto")))
    prompts = result.requests_frame()["prompt_tokens"].to_list()
    assert len(profile.build_profile(result, [])["requests_sample"]["prompt_tokens"]) == 12
    monkeypatch.setattr(profile, "SAMPLE_MAX", 4)
    sample = profile.build_profile(result, [])["requests_sample"]
    assert len(sample["prompt_tokens"]) == 4 == len(sample["session"])
    assert set(sample["prompt_tokens"]) <= set(prompts)


def test_size_reads_the_profile(tmp_path: Path, sessions):
    pytest.importorskip("xmemplan.sizing.workload")
    from xmemplan.sizing.workload import from_profile

    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    out = tmp_path / "p.json"
    from xmemplan.cli.main import run

    assert run(["-q", "hitrate", str(tmp_path / "m.jsonl"), "--profile-out", str(out)]) == 0
    prof = load_profile(out)
    doc = prof.doc
    w = from_profile(prof)
    assert w.token_hit_ratio == pytest.approx(doc["hit_ratio"]["token_hit_ratio"])
    assert len(w.capacity_curve) == len(doc["capacity_curve"])  # global scope: curve used


def test_load_profile_rejects_other_versions(tmp_path: Path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"schema": "xmemplan.profile", "schema_version": 99}))
    with pytest.raises(InputError, match="schema_version"):
        load_profile(p)


def test_profile_to_unwritable_path(cli, tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli("hitrate", tmp_path / "m.jsonl", "--profile-out", tmp_path / "no" / "dir" / "p.json")
    assert r.code == 2 and "cannot write --profile-out" in r.err and "folder does not exist" in r.err
    assert "Reading" not in r.err  # refused before the replay


def test_profile_out_refuses_to_overwrite_the_trace(cli, tmp_path: Path, sessions):
    trace = tmp_path / "m.jsonl"
    synth.write_mooncake(trace, sessions)
    before = trace.read_bytes()
    r = cli("hitrate", trace, "--profile-out", trace)
    assert r.code == 2 and "is one of the inputs" in r.err
    assert trace.read_bytes() == before
    # A new file in the input folder would be read as a trace by the next run: refused too.
    r = cli("hitrate", tmp_path, "--out", trace.with_suffix(".csv"))
    assert r.code == 2 and "inside the input folder" in r.err
    assert not trace.with_suffix(".csv").exists()


def test_plots_render(cli, tmp_path: Path, sessions):
    pytest.importorskip("matplotlib")
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli(
        "hitrate",
        tmp_path / "m.jsonl",
        "--plot",
        tmp_path / "charts",
        "--capacity",
        "5k",
        "--model",
        "qwen3-30b-a3b",
        "--idle",
        "1m",
    )
    assert r.code == 0, r.err
    names = sorted(p.name for p in (tmp_path / "charts").iterdir())
    assert names == ["hit_ratio_by_round.png", "hit_ratio_vs_capacity.png", "working_set.png"]
    for name in names:
        data = (tmp_path / "charts" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000


def test_plots_without_matplotlib(monkeypatch, tmp_path: Path, sessions):
    from xmemplan.cli.views.plots import write_plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(NotAvailableError) as exc:
        write_plots(object(), tmp_path)  # type: ignore[arg-type]  # refused before it is read
    assert "pip install 'xmemplan[plot]'" in exc.value.render()
    assert exc.value.exit_code == 4


def test_missing_matplotlib_fails_before_reading(cli, monkeypatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = cli("hitrate", tmp_path / "does-not-exist.jsonl", "--plot", tmp_path / "charts")
    assert r.code == 4 and "matplotlib" in r.err
    assert not (tmp_path / "charts").exists()


def test_v2_sample_keeps_whole_sessions_and_their_arrivals(tmp_path: Path):
    from xmemplan import profile as P

    codes = np.repeat(np.arange(50), 7)  # 50 sessions of 7 requests
    take = P._whole_sessions(codes, 100)
    picked = codes[take]
    assert len(take) <= 100 and len(take) == 98  # 14 whole sessions of 7
    for c in np.unique(picked):
        assert (picked == c).sum() == 7
    assert picked.min() < 10 and picked.max() > 40  # spread over the trace
    assert P._whole_sessions(codes[:20], 100).tolist() == list(range(20))


def test_profile_v2_fields_and_v1_still_read(tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    out = tmp_path / "p.json"
    from xmemplan.cli.main import run

    assert run(["-q", "hitrate", str(tmp_path / "m.jsonl"), "--profile-out", str(out)]) == 0
    prof = load_profile(out)
    assert prof.doc["schema_version"] == 2
    n = prof.sample_prompt.size
    assert prof.sample_session is not None and prof.sample_session.size == n
    assert prof.sample_timestamp is not None and prof.sample_timestamp.min() == 0
    doc = json.loads(out.read_text())
    doc["schema_version"] = 1
    for k in ("session", "timestamp_s", "output_tokens"):
        doc["requests_sample"].pop(k, None)
    out.write_text(json.dumps(doc))
    old = load_profile(out)
    assert old.sample_session is None and old.sample_prompt.size == n
    doc["requests_sample"]["session"] = [0]  # wrong length
    doc["schema_version"] = 2
    out.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="requests_sample.session"):
        load_profile(out)


def test_profile_negative_rate_is_refused(tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    out = tmp_path / "p.json"
    from xmemplan.cli.main import run

    assert run(["-q", "hitrate", str(tmp_path / "m.jsonl"), "--profile-out", str(out)]) == 0
    doc = json.loads(out.read_text())
    doc["arrival"] = {"rate_rps": -3}
    out.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"arrival.rate_rps.*outside the allowed range"):
        load_profile(out)
