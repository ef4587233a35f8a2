"""benchmarks/loaded_check.py: how the Netpreme coding-agent workload is read and built."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest


def _module() -> ModuleType:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import loaded_check

    return loaded_check


def _runs(lc: ModuleType) -> list:  # noqa: ANN401
    return [*lc.RUNS, *(r for _, r in lc.LEVELS_0418)]


def test_prompt_buckets_are_vllms_1_2_5_series_up_to_the_model_length() -> None:
    lc = _module()
    assert lc.PROMPT_BUCKETS[:4] == (1.0, 2.0, 5.0, 10.0)
    assert lc.PROMPT_BUCKETS[-2:] == (100_000.0, 200_000.0)


@pytest.mark.parametrize("i", range(25))
def test_drawn_prompts_give_back_every_published_percentile(i: int) -> None:
    """The lengths drawn from a run's four published prompt_tok_len percentiles, read as
    Prometheus reads vLLM's histogram, give those four percentiles back (the lognormal
    through p50 and p90 alone does not: its p99 is off by up to a third)."""
    lc = _module()
    run = _runs(lc)[i]
    x = lc.prompt_lengths(run, np.random.default_rng(i).normal(size=40_000))
    for q, want in ((0.5, run.isl_p50), (0.9, run.isl_p90), (0.95, run.isl_p95),
                    (0.99, run.isl_p99)):
        got = lc.histogram_quantile(x, lc.PROMPT_BUCKETS, q)
        assert got == pytest.approx(want, rel=0.03), (run.name, q)
    assert x.max() <= 200_000  # every published p99 leaves the 200K-and-over bucket empty


def test_the_two_sweeps_pair_level_for_level_with_their_own_tier() -> None:
    """The DRAM / X-Mem ratio is taken level by level: both 04-18 sweeps have the same six
    levels, each run is of its own option, and a level's name carries its agents."""
    lc = _module()
    assert [n for n, _ in lc.SWEEP] == [n for n, _ in lc.SWEEP_XMEM] == [4, 8, 12, 16, 20, 24]
    for (n, d), (_, x) in zip(lc.SWEEP, lc.SWEEP_XMEM, strict=True):
        assert (d.option, x.option) == ("host-dram", "xmem")
        assert f"{n:2} agents" in d.name and f"{n:2} agents" in x.name
        assert "hybrid-mtier_p8000_20260418_040848" in x.source
        assert 0 < x.gpu_share <= 1 and x.kv_usage is not None and 0 < x.kv_usage < 1


def test_a_levels_spread_spans_its_repeats_and_the_bound_takes_either() -> None:
    """Each 04-18 repeat re-runs a sweep level of its own option; the level's spread is the
    range of every run there, and issue 19's bound passes a prediction inside it even when
    it is over 30 % off the run it is compared with."""
    lc = _module()
    levels = {(r.option, n) for sw in (lc.SWEEP, lc.SWEEP_XMEM) for n, r in sw}
    assert all((r.option, n) in levels for n, r in lc.SWEEP_REPEATS)
    assert lc.level_spread("host-dram", 16, "ttft_p50_ms") == (1_822.3, 10_373.0)
    assert lc.level_spread("host-dram", 4, "ttft_p50_ms") is None  # ran once
    assert lc._within(5_000.0, 10_373.0, (1_822.3, 10_373.0))  # -52 %, inside the spread
    assert not lc._within(5_000.0, 10_373.0, None)
    assert lc._within(8_000.0, 10_373.0, None)  # -23 %


def test_the_lognormal_tail_contradicts_the_published_p99() -> None:
    lc = _module()
    run = next(r for n, r in lc.SWEEP if n == 4)
    ln = dataclasses.replace(run, isl_p95=None, isl_p99=None)
    x = lc.prompt_lengths(ln, np.random.default_rng(0).normal(size=40_000))
    assert (x > 200_000).mean() > 0.02  # where the published histogram holds none
    sp = np.log(run.isl_p90 / run.isl_p50) / lc.Z90
    z = np.linspace(-2, 2, 5)
    assert lc.prompt_lengths(ln, z) == pytest.approx(np.exp(np.log(run.isl_p50) + sp * z))


def test_bucket_cdf_solves_two_quantiles_in_one_bucket_and_chains_the_rest() -> None:
    lc = _module()
    # uniform shares: 0.2 below 20K, 0.3 in 20-50K, 0.4 in 50-100K, 0.1 in 100-200K
    cdf = {20e3: 0.2, 50e3: 0.5, 100e3: 0.9, 200e3: 1.0}
    edges = sorted(cdf)

    def value(q: float) -> float:
        k = next(j for j, e in enumerate(edges) if cdf[e] >= q)
        lo, clo = (0.0, 0.0) if k == 0 else (edges[k - 1], cdf[edges[k - 1]])
        return lo + (edges[k] - lo) * (q - clo) / (cdf[edges[k]] - clo)

    got = lc.bucket_cdf({q: value(q) for q in (0.45, 0.6, 0.95, 0.99)})
    assert got == pytest.approx({20e3: 0.2, 50e3: 0.5, 100e3: 0.9, 200e3: 1.0})


def test_turn_records_are_the_new_tokens_of_every_later_turn() -> None:
    lc = _module()
    new, start = lc.turn_records()
    assert len(new) == 984 - 50  # every turn but each task's first
    assert new.min() >= 0 and 100 <= np.median(new) <= 200
    assert start == 27_773  # the shortest first turn of the 50 tasks


@pytest.mark.parametrize("shared_start", [False, True])
def test_each_turn_extends_the_agents_last_by_its_new_tokens(shared_start: bool) -> None:
    lc = _module()
    run, agents, n = lc.RUNS[2], 12, 600
    rng = np.random.default_rng(3)
    output = np.round(rng.lognormal(np.log(90), 1.0, n))
    prompt, shared, src = lc.turn_prompts(run, output, agents, 20, rng, shared_start)
    new, start = lc.turn_records()
    assert np.all(shared <= prompt) and np.all(prompt >= start)
    later = np.arange(agents, n)
    prev = later - agents
    assert np.array_equal(src[later], prev)  # later requests share with the agent's last
    same_task = shared[later] != start
    # within a task: the whole previous turn (prompt and output) is the prefix
    assert shared[later][same_task] == pytest.approx(prompt[prev][same_task]
                                                     + output[prev][same_task])
    # ... and the rest is one of the recorded turns' new tokens
    assert np.isin(np.round(prompt[later] - shared[later])[same_task],
                   np.round(new)).all()
    starts = later[~same_task]
    assert 0.03 < len(starts) / len(later) < 0.07  # a task of 20 turns: 5 % start one
    first = np.arange(1, agents)
    assert (src[first] == 0).all() == shared_start and (src[0] == -1)


def test_the_answers_kv_full_caveat_is_what_the_loaded_check_measures() -> None:
    """`size` says, where its engine runs the KV cache 80 % full or more, how its TTFT p50
    did on the published agent runs it ran that full (planner.KV_FULL_EVIDENCE). Those
    figures are recomputed here from the loaded check's own runs, settings and seeds, so a
    change to the engine that moves them fails until the caveat says what it now does."""
    lc = _module()
    from xmemplan.sizing.planner import KV_FULL_EVIDENCE, KV_FULL_WARN

    errs = []
    for runs, mf in ((lc.LEVELS_0418, lc.SWEEP_MEM_FRACTION),
                     ([(lc.AGENTS, r) for r in lc.RUNS], 0.75)):
        for n, r in runs:
            p = lc.predict_seeds(r, 5, think_s=lc.THINK_S, mem_fraction=mf, requests=2000,
                                 agents=n, flags=(lc.MAX_BATCHED, n))[0]
            if p.kv_usage >= KV_FULL_WARN:
                errs.append(p.ttft_p50_ms / r.ttft_p50_ms - 1)
    n, under, med, lo, hi = KV_FULL_EVIDENCE
    assert len(errs) == n and sum(e < 0 for e in errs) == under
    assert (float(np.median(errs)), min(errs), max(errs)) == pytest.approx((med, lo, hi),
                                                                          abs=0.005)


def test_the_window_ends_where_the_first_agent_runs_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The published figures cover a span in which every agent is busy (run_concurrent.py
    stops the level at its cap); a simulated run of a fixed number of requests drains
    instead. steady_window keeps the requests sent after the warm-up and before the first
    agent sent its last, averages the blocks held over that span only, and counts the
    requests that finished in it."""
    from types import SimpleNamespace

    lc = _module()
    # two agents (request i is agent i % 2's): agent 0 sends at 0, 2, 4; agent 1 at 1, 3, 9
    arrival = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 9.0])
    done = np.array([0.5, 1.5, 2.5, 3.5, 10.0, 11.0])
    r = SimpleNamespace(arrival=arrival, done=done, config=SimpleNamespace(blocks=10),
                        kv_usage=lambda: 0.123)
    # step records (clock, -, -, blocks held): 2 held from 0, 8 from 2, 1 from 5 on
    steps = np.array([[0.0, 0, 0, 2.0], [2.0, 0, 0, 8.0], [5.0, 0, 0, 1.0]])
    keep, w = lc.steady_window(r, steps, agents=2, warm=1)
    assert (w.t0, w.t1) == (1.0, 4.0)  # after the first request; agent 0's last send
    assert sorted(keep.tolist()) == [1, 2, 3, 4]  # the drain's send at 9 is not kept
    assert w.kv_usage == pytest.approx((2 * 1 + 8 * 2) / (3 * 10))  # over [1, 4] only
    assert sorted(w.done.tolist()) == [1, 2, 3]
    # the window before round 12: whole-run KV use, the drain kept
    monkeypatch.setattr(lc, "STEADY", False)
    keep, w = lc.steady_window(r, steps, agents=2, warm=1)
    assert sorted(keep.tolist()) == [1, 2, 3, 4, 5] and w.kv_usage == 0.123


def test_every_run_has_its_published_end_to_end_latency() -> None:
    """Every run the check compares carries its e2e_ms p50 / p90 (Run.e2e_p50_ms /
    e2e_p90_ms), each p90 above its p50 and both above the run's TTFT p50."""
    lc = _module()
    runs = [r for _, r in lc.LEVELS_0418] + list(lc.RUNS)
    assert all(r.e2e_p50_ms is not None and r.e2e_p90_ms is not None for r in runs)
    for r in runs:
        assert r.ttft_p50_ms < r.e2e_p50_ms < r.e2e_p90_ms, r.name


def test_the_client_turn_records_are_read_per_run_and_set_the_think_time() -> None:
    """turn_latency reads every one of the six 04-19 runs' turns under its folder name
    (run_key); the 03:07 run's mean is the one THINK_S is derived from (its 109 turns),
    and each run's median sits between its p90 and zero."""
    lc = _module()
    lat = lc.turn_latency()
    assert {lc.run_key(r) for r in lc.RUNS} == set(lat)
    n, p50, p90, mean = lat[lc.run_key(lc.RUNS[0])]
    assert n == 109
    assert mean / 1e3 == pytest.approx(lc.OK_TURNS_E2E_MEAN_S, abs=1e-3)
    assert all(0 < t[1] < t[2] for t in lat.values())


def test_the_turns_report_flags_a_rate_its_agents_cannot_send(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Little's law on the client's turn times: a run is flagged only where its published
    requests/s x its turns' mean stay is well over one request per agent."""
    lc = _module()
    run = lc.RUNS[0]
    n, p50, p90, mean = lc.turn_latency()[lc.run_key(run)]
    pred = lc.Prediction(*([1.0] * 12), e2e_exact_p50_ms=p50, e2e_exact_p90_ms=p90,
                         e2e_mean_ms=mean)
    for rps, flagged in ((12 / (mean / 1e3), False), (1.5 * 12 / (mean / 1e3), True)):
        lc.turns_report([(12, dataclasses.replace(run, rps=rps), pred)], "x")
        out = capsys.readouterr().out
        assert ("cannot\n  come from its agents" in out) is flagged
        assert "at 1 of 1 runs" in out
        assert max(len(line) for line in out.splitlines()) <= 80


def test_a_04_18_runs_turn_mean_is_the_lognormals_through_its_two_percentiles() -> None:
    """Where only the turn p50 and p90 are published (the 04-18 levels), client_turns
    takes the mean of the lognormal through both; on the 04-19 records that reading is
    within 8 % of the exact mean, which is what makes it usable for Little's law."""
    lc = _module()
    for _, r in lc.LEVELS_0418:
        n, p50, p90, mean = lc.client_turns(r)
        assert n is None and p50 == r.turn_e2e_p50_ms
        assert p50 < mean < p90
    for r in lc.RUNS:
        n, p50, p90, mean = lc.turn_latency()[lc.run_key(r)]
        ln = lc.client_turns(dataclasses.replace(r, source="x/bench_none/x.json",
                                                 turn_e2e_p50_ms=p50, turn_e2e_p90_ms=p90))
        assert abs(ln[3] / mean - 1) < 0.08, r.name


def test_the_counters_reading_of_reuse_is_the_admission_one_at_the_published_gpu_hit() -> None:
    """R = g + (1 - g) e rises with the GPU hit g; at the published g the admission
    reading is the counters' one, and it never goes under it or over 1."""
    lc = _module()
    for r in _runs(lc):
        lo = lc.counters_reuse(r)
        assert lc.admission_reuse(r, r.gpu_hit) == pytest.approx(lo)
        assert lc.admission_reuse(r, 0.0) == pytest.approx(lo)  # clamped up to the counters
        assert lc.admission_reuse(r, 1.0) == pytest.approx(1.0)
        mid = lc.admission_reuse(r, (1.0 + r.gpu_hit) / 2)
        assert lo <= mid <= 1.0


def test_the_admission_reading_makes_the_simulated_connector_count_the_published_hit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On X-Mem's 12-agent level of 04-18 (published GPU hit 49 %, counted at every
    waiting step, external 80 %) the counters' reading leaves the simulated connector
    counting far under the published external hit; the admission reading brings it to
    it (one seed, 600 requests)."""
    lc = _module()
    run = next(r for n, r in lc.SWEEP_XMEM if n == 12)
    kw = dict(think_s=lc.THINK_S, mem_fraction=lc.SWEEP_MEM_FRACTION, requests=600,
              agents=12, flags=(lc.MAX_BATCHED, 12))
    ext = {}
    for mode in ("counters", "admission"):
        monkeypatch.setattr(lc, "REUSE", mode)
        ext[mode] = lc.predict(run, seed=0, **kw).ext_hit
    assert ext["counters"] < run.ext_hit - 0.10
    assert abs(ext["admission"] - run.ext_hit) < 0.05
