"""size's decision (issue 20): replications and intervals, seeds, the search that cannot
miss, prices, the trace's load, and the profile case that crashed the planner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shared_trace
from xmemplan.cli.main import run
from xmemplan.errors import UsageError
from xmemplan.profile import save_profile
from xmemplan.sizing import planner as P
from xmemplan.sizing.request import build_request, parse_cost


def _plan(slo: str = "500ms", **kw: object) -> P.SizeResult:
    req, _ = build_request(ttft_slo=slo, **kw)  # type: ignore[arg-type]
    return P.plan(req, with_table=False, with_curve=False)


def _decision(r: P.SizeResult) -> str:
    """The answer's counts and shape (before the first ':'), and whether it is marginal."""
    return r.answer.split(":")[0] + (" (marginal)" if r.marginal else "")


def test_the_bare_answer_does_not_depend_on_the_seed() -> None:
    """`size --ttft-slo 500ms` at --seed 0..9: the same counts and shape (it had flipped
    between '1 X-Mem node for 4 GPUs' and '0 X-Mem nodes for 4-5 GPUs')."""
    seen = {s: _decision(_plan(seed=s)) for s in range(10)}
    assert len(set(seen.values())) == 1, seen


def test_each_option_carries_its_interval_and_replications() -> None:
    r = _plan()
    d = r.to_dict()
    # screened probes (first replication over 2x the SLO) run once; nothing past the cap
    assert d["replications"]["min"] >= 1 and d["replications"]["max"] <= P.REPS_MAX
    for o in d["options"]:
        if o["gpus"] is not None:
            lo, hi = o["ci_ms"]
            assert lo <= o["slo_value_ms"] <= hi and o["replications"] >= P.REPS_MIN
            assert hi <= d["ttft_slo_ms"]  # a count complies when its interval does
    assert "95 % CI" in r.answer and "replications" in r.answer
    assert "of all)" in r.answer  # the share of requests the SLO holds


def test_common_random_numbers_across_options() -> None:
    """Replication k draws the same arrivals and keep draws for every option and count."""
    req, _ = build_request(ttft_slo="500ms", requests=500)
    p = P.Planner(req)
    a = p.traffic("host-dram", 4, 0, 1.0, k=1)
    b = p.traffic("xmem", 8, 1, 1.0, k=1)
    c = p.traffic("xmem", 8, 1, 1.0, k=2)
    assert np.array_equal(a.arrival, b.arrival) and not np.array_equal(a.arrival, c.arrival)
    other = P.Planner(req)
    assert np.array_equal(other.traffic("hbm-only", 2, 0, 1.0, k=1).arrival, a.arrival)


def test_marginal_when_the_interval_straddles_the_slo() -> None:
    pt = P.Point("xmem", 4, 1, 0.9, 0.5, {}, 500.0, 0.5, 0.0, False, ci_ms=(480.0, 520.0))
    assert pt.verdict(500.0) == "marginal"
    assert pt.verdict(530.0) == "meets" and pt.verdict(470.0) == "fails"
    pt.overloaded = True
    assert pt.verdict(530.0) == "fails"


def test_the_gpu_search_finds_a_non_monotone_smallest_count(monkeypatch) -> None:
    """Compliance that is not monotone in the GPU count (3 complies, 4-7 do not, 8 and up
    do): doubling + bisection would answer 8 or 5; the search answers 3."""
    req, _ = build_request(ttft_slo="500ms", requests=500, users=2)  # bound = 1 GPU
    p = P.Planner(req)
    ok = {3} | set(range(8, 2000))
    tried: list[int] = []

    def fake_run(option, gpus, nodes=0, scale=1.0, instant_loads=False, slo_ms=None,
                 extend=True, reps_min=None):
        tried.append(gpus)
        v = 400.0 if gpus in ok else 600.0
        return P.Point(option, gpus, nodes, 1.0, 0.0, {}, v, 0.5, 0.0, v < 500,
                       ci_ms=(v - 10, v + 10))

    monkeypatch.setattr(p, "run", fake_run)
    assert p.gpu_lower_bound() == 1
    assert p.fewest_gpus("host-dram") == 3
    assert "exhaustive" in p.search_of("host-dram")[0]
    assert sorted(set(tried)) == [1, 2, 3, 4, 8]  # probes 1, 2, 4, 8; then 1, 2, 3 in turn


def test_the_lower_bound_is_below_every_complying_count() -> None:
    """The capacity bound: at 5 requests/s of the seed scenario the replicas' compute alone
    needs more than LOWER_MARGIN x the bound's count; the answer is at or above it."""
    req, _ = build_request(ttft_slo="500ms", requests=1000)
    p = P.Planner(req)
    lo = p.gpu_lower_bound()
    g = p.fewest_gpus("host-dram")
    assert g is not None and 1 <= lo <= g
    assert not p.run("host-dram", max(1, lo - 1)).meets_slo or lo == 1


def test_cost_changes_the_answer() -> None:
    """Long full hits at 300 ms: X-Mem needs fewer GPUs than host DRAM. Priced so that a
    node costs more than the GPUs it saves, host DRAM is the answer; cheap nodes, X-Mem.
    Line 1 states the money."""
    kw = dict(prompt_tokens="128Ki", hit_rate=1.0, rate=20.0, output_tokens=1,
              requests=1500)
    counts = _plan("300ms", **kw)
    assert counts.cheapest == "xmem" and counts.gpus_host_dram is not None
    assert counts.gpus_host_dram > (counts.gpus_xmem or 0)
    cheap = _plan("300ms", cost="gpu=2/h,xmem-node=0.5/h", **kw)
    dear = _plan("300ms", cost="gpu=2/h,xmem-node=1000/h", **kw)
    assert cheap.cheapest == "xmem" and "$" in cheap.answer and "saves $" in cheap.answer
    assert dear.cheapest in ("host-dram", "hbm-only"), dear.answer
    assert dear.answer.startswith("0 X-Mem nodes") and "less than X-Mem's $" in dear.answer
    assert dear.cost is not None and cheap.cost is not None and dear.cost_basis == "hour"


def test_cost_parsing() -> None:
    p = parse_cost("gpu=2.5/h,xmem-node=40/h,h200=3.5/h")
    assert p.basis == "hour" and p.gpu_price("h100-sxm") == 2.5 and p.gpu_price("h200") == 3.5
    assert parse_cost("gpu=30000,xmem-node=60000").basis == "unit"
    for bad, needle in (("gpu=2/h,xmem-node=4", "mixes"), ("gpu=2", "xmem-node"),
                        ("gpu", "KEY=PRICE"), ("gpu=-1,xmem-node=1", "--cost gpu")):
        with pytest.raises(UsageError) as e:
            parse_cost(bad)
        assert needle in e.value.render()


def test_cost_from_a_catalog_overlay(tmp_path: Path) -> None:
    f = tmp_path / "prices.toml"
    f.write_text('[cost]\nbasis = "unit"\ngpu = 30000\n"xmem-node" = 50000\n')
    p = parse_cost(str(f))
    assert p.basis == "unit" and p.xmem_node == 50000 and "prices.toml" in p.source


def _trace_profile(tmp_path: Path, sessions: int = 12, per: int = 30) -> Path:
    rng = np.random.default_rng(5)
    n = sessions * per
    prompt = rng.integers(8_000, 40_000, n)
    ts = np.concatenate([s * 600.0 + np.cumsum(rng.exponential(60.0, per))
                         for s in range(sessions)])
    doc = {
        "source": {"paths": ["x"], "formats": {"tokens": 1}, "scope": "global"},
        "requests": n, "sessions": sessions, "model": "qwen3-30b-a3b",
        "kv_bytes_per_token": 98_304,
        "prompt_tokens": {"mean": 24_000, "p50": 24_000, "p90": 36_000, "p99": 40_000,
                          "max": 40_000},
        "hit_ratio": {"token_hit_ratio": 0.9},
        "requests_sample": {"prompt_tokens": prompt.tolist(),
                            "hit_tokens": (prompt * 0.9).astype(int).tolist(),
                            "session": np.repeat(np.arange(sessions), per).tolist(),
                            "timestamp_s": ts.tolist(), "output_tokens": [50] * n},
        "arrival": {"rate_rps": n / float(ts.max()), "concurrency_mean": 3.0},
    }
    p = tmp_path / "trace.json"
    save_profile(p, doc)
    return p


def test_rate_on_a_trace_profile_moves_the_simulated_load(tmp_path: Path) -> None:
    """--rate compresses (or stretches) the trace's clock; sessions wait for their replies.
    The achieved load rises with the rate and is on the answer line and in the JSON."""
    prof = _trace_profile(tmp_path)
    got = []
    for rate in (0.05, 0.5, 5.0):
        r = _plan("5s", workload=prof, rate=rate, requests=500)
        assert r.achieved_rps is not None and r.offered_rps == pytest.approx(rate)
        assert "achieved" in r.answer and "requests/s offered" in r.answer
        got.append(r.achieved_rps)
    assert got[0] < got[1] < got[2], got
    assert got[0] == pytest.approx(0.05, rel=0.2)  # a slow rate is carried whole


def test_hbm_alone_complying_where_tiers_do_not_is_answered(monkeypatch) -> None:
    """The planner.py:655 crash: HBM alone met the SLO (its warm set was small) while host
    DRAM and X-Mem did not; the answer's branches assumed otherwise and asserted."""
    real = P.Planner.fewest_gpus

    def tiers_fail(self, option, nodes=0, slo_s=None, instant_loads=False, upper=None):
        if option != "hbm-only" and not instant_loads:
            return None
        return real(self, "host-dram" if option == "hbm-only" else option, nodes, slo_s,
                    instant_loads, upper)

    monkeypatch.setattr(P.Planner, "fewest_gpus", tiers_fail)
    r = _plan(requests=500)
    assert r.cheapest == "hbm-only" and r.answer.startswith("0 X-Mem nodes for ")
    assert "HBM alone meets" in r.answer


def test_warm_requests_are_the_same_for_every_option() -> None:
    """Requests held to the SLO are those that hit in the workload, whatever an option's
    cache keeps: HBM only cannot pass by turning its requests cold."""
    req, _ = build_request(ttft_slo="500ms", requests=500)
    p = P.Planner(req)
    _, warm_hbm = p._traffic("hbm-only", 4, 0, 1.0)
    _, warm_x = p._traffic("xmem", 4, 1, 1.0)
    assert warm_hbm.all() and np.array_equal(warm_hbm, warm_x)


def test_the_claude_code_profile_sizes_at_every_rate(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    """The issue's case: the profile from the shared Claude Code sessions (at --rate 50 it
    exited 1 with an AssertionError at planner.py:655; 50 now plans ~43,000 requests with
    session copies, minutes, so the test sizes at 2 and 20)."""
    traces = shared_trace("claude-code-weka")
    prof = tmp_path / "cc.json"
    assert run(["hitrate", str(traces), "--scope", "global", "--capacity-curve", "auto",
                "--model", "qwen3-30b-a3b-fp8", "--profile-out", str(prof)]) == 0
    capsys.readouterr()
    got = {}
    for rate in ("2", "20"):
        assert run(["size", "--ttft-slo", "500ms", "--workload", str(prof), "--rate", rate,
                    "--requests", "1000", "-f", "json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["offered_rps"] == pytest.approx(float(rate)) and d["achieved_rps"] > 0
        assert "internal error" not in d["answer"]
        got[rate] = d
    # at 2 r/s the trace's own sessions offer the rate (1.82 of 2): no copy; at 20 they
    # offer about 3, so whole sessions are copied and the load achieved rises past 1.91
    assert "session_copies" not in got["2"]
    assert got["20"]["session_copies"]["copies"] > 0
    assert got["20"]["achieved_rps"] > 2 * got["2"]["achieved_rps"]


def test_search_notes_say_how_each_count_was_found() -> None:
    r = _plan()
    for o in r.options:
        assert o.search, o
    assert all("shape" in s and "options" in s for s in r.shapes)


def test_plan_profile_and_hitrate_carry_provenance(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    """The tool's version, the exact command and a hash of every input file, so that a
    plan can be traced back to its traffic: hitrate JSON, the profile, the size plan."""
    import hashlib

    from xmemplan import __version__

    traces = Path(__file__).resolve().parent.parent / "examples" / "traces"
    files = sorted(q for q in traces.rglob("*") if q.is_file())
    want = {str(q): hashlib.sha256(q.read_bytes()).hexdigest() for q in files}
    prof = tmp_path / "p.json"
    capsys.readouterr()
    assert run(["hitrate", str(traces), "--format", "json", "--profile-out", str(prof)]) == 0
    hit = json.loads(capsys.readouterr().out)["provenance"]
    assert hit["version"] == __version__ and hit["command"].startswith("xmemplan hitrate ")
    assert {f["path"]: f["sha256"] for f in hit["inputs"]} == want
    pp = json.loads(prof.read_text())["provenance"]
    assert {f["path"]: f["sha256"] for f in pp["inputs"]} == want
    assert str(prof) in pp["command"]
    assert run(["size", "--ttft-slo", "2s", "--workload", str(prof), "--requests", "500",
                "-f", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)["provenance"]
    assert plan["command"] == (f"xmemplan size --ttft-slo 2s --workload {prof} --requests 500 "
                               "-f json")
    assert plan["inputs"] == [{"path": str(prof), "bytes": prof.stat().st_size,
                               "sha256": hashlib.sha256(prof.read_bytes()).hexdigest()}]


def test_gpus_and_engines_compared_in_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu a,b --engine sglang,vllm: every combination at its cheapest configuration,
    the cheapest first (by price with --cost; a GPU's price by its catalog name or alias)."""
    capsys.readouterr()
    assert run(["size", "--ttft-slo", "500ms", "--gpu", "h100-sxm,h200", "--engine",
                "sglang,vllm", "--requests", "1000", "--cost",
                "h100-sxm=2.5/h,h200=3.6/h,xmem-node=4/h", "-f", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = d["comparison"]
    assert {(r["gpu"], r["engine"]) for r in rows} == {
        (g, e) for g in ("h100-sxm", "h200-sxm") for e in ("sglang", "vllm")}
    costs = [r["cost"] for r in rows if r["cost"] is not None]
    assert costs == sorted(costs) and rows[0]["compared"] == "price"
    assert d["answer"].startswith(f"Cheapest of 4 GPU x engine combinations: {rows[0]['gpu']} "
                                  f"with {rows[0]['engine']}: ")
    assert run(["size", "--ttft-slo", "500ms", "--gpu", "h100-sxm,h100-sxm"]) == 2


def test_requests_alone_bound_the_percentile_from_below() -> None:
    """The floor that lets a search stop without simulating (requests alone, loads free,
    the most hits) is at or under the simulated percentile (instant loads, many GPUs: no
    queue), and an option it rules out is not simulated at all (HBM only in the seed
    scenario: no hit is credited to HBM, every 64Ki-token prompt computed whole)."""
    from dataclasses import replace

    from xmemplan.sizing import model as M

    req, _ = build_request(ttft_slo="500ms", requests=500)
    for tp in (1, 4):
        p = P.Planner(replace(req, shape=M.Shape(tp=tp, ep=tp)))
        b = p.alone_bound_ms("host-dram", 64)
        sim = p.run("host-dram", 64, 0, instant_loads=True, extend=False).slo_value_ms
        assert b <= sim * 1.001, (tp, b, sim)
    p = P.Planner(req)
    assert p.fewest_gpus("hbm-only") is None and p.sims == 0
    assert p.search_of("hbm-only")[0].startswith("none: even alone")


# --- session copies: --rate past what the trace's own sessions offer (issue 20) ---------

def test_session_copies_only_past_what_the_sessions_offer(tmp_path: Path) -> None:
    """At a rate the trace's sessions offer, no copy and the same workload object; past
    it, whole sessions are copied (own ids, shifted in time) and the load rises."""
    from xmemplan.sizing import workload as wl

    prof = _trace_profile(tmp_path)
    low, _ = build_request(ttft_slo="5s", workload=prof, rate=0.05, requests=500)
    same, info = P._session_copies(low)
    assert same is low and info is not None and info.copies == 0
    got = []
    for rate in (20.0, 50.0, 100.0):
        req, _ = build_request(ttft_slo="5s", workload=prof, rate=rate, requests=500)
        r2, info = P._session_copies(req)
        assert info is not None and info.copies > 0 and info.offered_rps < wl.REACHED * rate
        w0, w = req.workload, r2.workload
        n0 = len(w0.prompt_tokens)
        assert w.session is not None and w0.session is not None
        assert not set(w.session[n0:].tolist()) & set(w0.session.tolist())
        assert w.session_copies == info.copies
        assert len(w.prompt_tokens) - n0 == info.requests
        r = P.plan(req, with_table=False, with_curve=False)
        assert r.achieved_rps is not None and r.offered_rps == pytest.approx(rate)
        assert any(f"{info.copies:,} session copies added" in x for x in r.reasons)
        d = r.to_dict()
        d.update(r.extra.get("json", {}))
        assert d["session_copies"]["copies"] == info.copies
        got.append(r.achieved_rps)
    assert got[0] < got[1] < got[2], got


def _one_session_profile(tmp_path: Path, per: int = 20) -> Path:
    rng = np.random.default_rng(7)
    prompt = 8_000 + 1_000 * np.arange(per)  # each turn the previous context and more
    ts = np.cumsum(rng.exponential(60.0, per))
    doc = {
        "source": {"paths": ["x"], "formats": {"tokens": 1}, "scope": "global"},
        "requests": per, "sessions": 1, "model": "qwen3-30b-a3b",
        "kv_bytes_per_token": 98_304,
        "prompt_tokens": {"mean": 17_000, "p50": 17_000, "p90": 25_000, "p99": 27_000,
                          "max": 27_000},
        "hit_ratio": {"token_hit_ratio": 0.9},
        "requests_sample": {"prompt_tokens": prompt.tolist(),
                            "hit_tokens": [0] + (prompt[:-1] + 40).tolist(),
                            "session": [0] * per, "timestamp_s": ts.tolist(),
                            "output_tokens": [40] * per},
        "arrival": {"rate_rps": per / float(ts.max()), "concurrency_mean": 1.0},
    }
    p = tmp_path / "one.json"
    save_profile(p, doc)
    return p


def test_copies_never_hit_each_others_or_the_originals_cache(tmp_path: Path) -> None:
    """One session at a rate far above it: every copy's first turn is as cold as the
    original's first turn (no hit from the original's or another copy's cache), and no
    copy's blocks are keyed like another session's."""
    prof = _one_session_profile(tmp_path)
    req, _ = build_request(ttft_slo="5s", workload=prof, rate=20.0, requests=500)
    r2, info = P._session_copies(req)
    assert info is not None and info.copies >= 3
    p = P.Planner(r2)
    w = r2.workload
    assert w.session is not None
    for option in ("host-dram", "xmem"):
        t = p.traffic(option, 8, 1, 1.0)
        idx = p._order_idx  # the samples in arrival order
        sess = w.session[idx]
        hits = t.hit_hbm + t.hit_dram + t.hit_xmem
        first = np.array([i == int(np.flatnonzero(sess == s)[0])
                          for i, s in enumerate(sess.tolist())])
        assert first.sum() == 1 + info.copies
        assert np.all(hits[first] == 0), hits[first]  # the original's first turn is cold
        assert hits[~first].sum() > 0  # later turns hit their own session's prefix
    st = p.stream(1.0)
    keys, koff, kn = P.RT.block_keys(st, 16)
    owner: dict[int, int] = {}
    for i in range(len(kn)):
        for k in keys[koff[i]:koff[i] + kn[i]].tolist():
            assert owner.setdefault(k, int(st.session[i])) == int(st.session[i])


def test_a_rate_the_sessions_offer_plans_as_without_copies(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Where the trace's sessions offer the rate, the plan is the one without copies,
    answer and JSON alike (the planner with session copies switched off)."""
    prof = _trace_profile(tmp_path)
    req, _ = build_request(ttft_slo="5s", workload=prof, rate=0.5, requests=500)
    with_copies = P.plan(req, with_table=False, with_curve=False)
    monkeypatch.setattr(P, "_session_copies", lambda r: (r, None))
    without = P.plan(req, with_table=False, with_curve=False)
    assert with_copies.answer == without.answer
    a, b = with_copies.to_dict(), without.to_dict()
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                     default=str)
    assert "session_copies" not in with_copies.extra.get("json", {})
