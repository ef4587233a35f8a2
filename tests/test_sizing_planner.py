"""The planner over simulated traffic: GPU and node searches, the answer, capacities."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xmemplan.errors import UsageError
from xmemplan.sizing.planner import Planner, plan
from xmemplan.sizing.request import build_request
from xmemplan.sizing.workload import Arrivals, Workload, arrivals, from_flags, session_prev


def _req(slo: str = "500ms", **kw: object):
    kw.setdefault("requests", 1500)
    req, _ = build_request(ttft_slo=slo, **kw)  # type: ignore[arg-type]
    return req


def test_fewest_gpus_is_the_smallest_count_that_meets_the_slo() -> None:
    req = _req("500ms")
    p = Planner(req)
    g = p.fewest_gpus("host-dram")
    assert g is not None and g >= 2
    assert p.run("host-dram", g).meets_slo
    assert not p.run("host-dram", g - 1).meets_slo
    # more load needs at least as many GPUs
    busier = Planner(replace(req, load=Arrivals("poisson", rate_rps=10.0)))
    g2 = busier.fewest_gpus("host-dram")
    assert g2 is not None and g2 > g


def test_never_recommends_xmem_when_host_dram_complies() -> None:
    r = plan(_req("2s"), with_table=False, with_curve=False)
    assert r.gpus_host_dram is not None and r.gpus_xmem is not None
    assert r.gpus_host_dram <= r.gpus_xmem
    assert r.answer.startswith("0 X-Mem nodes for ")
    assert "X-Mem adds" in r.answer and "headroom" in r.answer
    assert r.cheapest in ("host-dram", "hbm-only")


def test_xmem_answer_when_it_saves_gpus() -> None:
    # Full hits of 128Ki tokens: a load from host DRAM takes ~260 ms, from X-Mem ~40 ms;
    # at a 300 ms SLO host DRAM needs more GPUs (or none complies).
    r = plan(_req("300ms", prompt_tokens="128Ki", hit_rate=1.0, rate=20.0,
                  output_tokens=1), with_table=False, with_curve=False)
    assert r.gpus_xmem is not None
    assert r.gpus_host_dram is None or r.gpus_host_dram > r.gpus_xmem
    n = r.recommended_nodes
    assert n is not None and r.answer.startswith(f"{n} X-Mem node")
    assert f"for {r.gpus_xmem} GPUs" in r.answer.splitlines()[0]
    assert r.cheapest == "xmem"


def test_node_bandwidth_search_finds_the_least_nodes() -> None:
    # 16 GPUs pulling full 64Ki-token hits from nodes of 200 GB/s each (a what-if tier):
    # the nodes' bandwidth, shared by every GPU loading at once, sets the count.
    req = _req("200ms", prompt_tokens="64Ki", hit_rate=1.0, rate=120.0, output_tokens=1)
    req = replace(req, xmem=replace(req.xmem, node_bandwidth_bytes_per_s=200e9))
    p = Planner(req)
    g = 16
    n = p.fewest_nodes(g, slo_s=0.2)
    assert n is not None and n > 1
    assert p.run("xmem", g, n).slo_value_ms <= 200
    assert p.run("xmem", g, n - 1).slo_value_ms > 200


def test_capacity_nodes_from_the_working_set() -> None:
    r = plan(_req("5s", working_set="100TB", rate=1.0), with_table=False, with_curve=False)
    assert r.nodes_for_capacity == 5  # 100 TB over 24 TB nodes


def test_lru_curve_sets_hits_per_option_not_a_proportional_rule() -> None:
    w = replace(from_flags(65_536, 0.98, "t"),
                capacity_curve=((1e5, 0.2), (1e6, 0.6), (1e7, 0.98)))
    assert w.hit_at_capacity(1e6, None) == pytest.approx(0.6)
    assert w.hit_at_capacity(1e8, None) == pytest.approx(0.98)
    # without a curve: all when the working set fits, none when it does not (LRU cliff)
    flat = from_flags(65_536, 0.98, "t")
    assert flat.hit_at_capacity(2e9, 1e9) == pytest.approx(0.98)
    assert flat.hit_at_capacity(5e8, 1e9) == 0.0
    p = Planner(replace(_req("1s"), workload=w))
    h_hbm, share_hbm = p.hit_split("hbm-only", 1, 0)
    h_x, share_x = p.hit_split("xmem", 1, 1)
    assert h_hbm < h_x == pytest.approx(0.98)
    assert share_hbm == pytest.approx(1.0) and 0 < share_x < 1


def test_compute_bound_tries_wider_replicas() -> None:
    # 128Ki-token prompts at a 60 % hit: one H100 per replica cannot meet 2 s; TP can.
    r = plan(_req("2s", prompt_tokens="128Ki", hit_rate=0.6, rate=0.5, output_tokens=1),
             with_table=False, with_curve=False)
    # The comment above is the claim: tp1 cannot comply, so the planner must move to TP.
    assert r.shape != "tp1", r.answer
    assert "as tp" in r.answer and r.reasons[0].startswith("At tp1")


def test_warm_and_cold_split() -> None:
    w = Workload("mix", np.array([32_768.0, 32_768.0]), np.array([32_000.0, 0.0]), 0.49)
    r = plan(replace(_req("60s", rate=0.5), workload=w), with_table=False, with_curve=False)
    pt = r.option("host-dram").point
    assert pt is not None
    assert pt.ttft_ms["cold"]["p50"] > 5 * pt.ttft_ms["warm"]["p50"]


def test_arrivals_generators() -> None:
    a, prev, think, route = arrivals(Arrivals("poisson", rate_rps=10.0), 20_000, 1)
    assert np.all(prev == -1) and (20_000 / a[-1]) == pytest.approx(10.0, rel=0.03)
    a, prev, think, route = arrivals(Arrivals("users", users=4, think_s=2.0), 12, 1)
    assert list(prev[:4]) == [-1] * 4 and list(prev[4:8]) == [0, 1, 2, 3]
    assert np.all(route[4:] == -2) and np.all(think >= 0)
    # a trace: two sessions, the clock compressed 10x (starts and gaps inside a session)
    sess = np.array([0, 0, 1, 1])
    ts = np.array([0.0, 30.0, 100.0, 130.0])
    order = np.arange(4)
    a, prev, _, _ = arrivals(Arrivals("trace", rate_rps=1.0, trace_rate_rps=0.1), 4, 0,
                             session=sess, timestamp_s=ts, order=order)
    assert list(a) == [0.0, 3.0, 10.0, 13.0]
    assert list(order) == [0, 1, 2, 3] and list(prev) == [-1, 0, -1, 2]
    # stretched 2x (a rate below the trace's own)
    a, _, _, _ = arrivals(Arrivals("trace", rate_rps=0.05, trace_rate_rps=0.1), 4, 0,
                          session=sess, timestamp_s=ts, order=np.arange(4))
    assert list(a) == [0.0, 60.0, 200.0, 260.0]


@pytest.mark.parametrize("seed", range(4))
def test_session_prev_is_each_sessions_previous_request(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sess = rng.integers(-3, 40, int(rng.integers(0, 600)))
    want: list[int] = []
    last: dict[int, int] = {}
    for i, s_ in enumerate(sess.tolist()):
        want.append(last.get(s_, -1))
        last[s_] = i
    assert session_prev(sess).tolist() == want


@pytest.mark.parametrize("kwargs, needle", [
    ({"ttft_slo": "500"}, "no time unit"),
    ({"ttft_slo": "500ms", "hit_rate": 1.2}, "--hit-rate '1.2' is out of range"),
    ({"ttft_slo": "500ms", "prompt_tokens": "0"}, "--prompt-tokens '0' is out of range"),
    ({"ttft_slo": "500ms", "model": "qwen3-30b-a4b"}, "Closest: qwen3-30b-a3b"),
    ({"ttft_slo": "500ms", "engine": "trt"}, "unknown engine"),
    ({"ttft_slo": "500ms", "rate": 1.0, "users": 3}, "not both"),
    ({"ttft_slo": "500ms", "rate": -1.0}, "--rate"),
    ({"ttft_slo": "500ms", "slo_on": "hot"}, "warm or all"),
    ({"ttft_slo": "500ms", "working_set": "20 furlongs"}, "working-set"),
])
def test_bad_requests(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError) as info:
        build_request(**kwargs)  # type: ignore[arg-type]
    assert needle in info.value.render()


def test_blog_direction_xmem_sustains_more_load_per_gpu() -> None:
    # The seed blog: at the same SLO and a > 95 % hit, X-Mem carries more load per GPU.
    from xmemplan.sizing.planner import blog_ratio

    req = _req("500ms", prompt_tokens="64Ki", hit_rate=0.99, rate=5.0, output_tokens=1,
               requests=1500)
    r = blog_ratio(req, gpus=4)
    assert r["ratio"] is not None and r["ratio"] > 1.5
    assert not r["host_dram_capped"] and not r["xmem_capped"]  # both limits were found
    low = blog_ratio(_req("500ms", prompt_tokens="64Ki", hit_rate=0.95, rate=1.0,
                          output_tokens=1, requests=1500), gpus=4)
    # at 95 % the residual prefill hides the load: the tier barely matters
    assert low["ratio"] is not None and low["ratio"] < r["ratio"]


# --- issue 11 options through the planner and the simulator ---------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("shape", [(1, 1, False), (4, 4, False), (4, 2, True)])
def test_simulator_prices_attention_dtype_and_shape_as_the_model(
        dtype: str, shape: tuple[int, int, bool]) -> None:
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing import model as M
    from xmemplan.sizing.sim import Traffic, simulate
    from xmemplan.sizing.simmodel import Setup, engine_for

    cat = load_catalog()
    s = Setup(model=cat.model("qwen3-30b-a3b-fp8"), gpu=cat.gpu("h100-sxm"),
              host=cat.tier("host-dram-pcie5"), xmem=cat.tier("xmem"),
              shape=M.Shape(tp=shape[0], ep=shape[1], dp_attention=shape[2]),
              attention_dtype=dtype)
    e = engine_for(s, replicas=1, nodes=1e9)
    prompt, hit = 120_000.0, 116_000.0  # 4,000 new tokens attending to 120K: attention-heavy
    r = simulate(Traffic(np.array([0.0]), np.array([prompt]), hit_xmem=np.array([hit])), e)
    want = M.ttft(s.model, s.gpu, s.xmem, prompt, hit, shape=s.shape, attention_dtype=dtype,
                  nodes=1e9, loaders=1, transfer=s.transfer).single_s
    assert r.ttft[0] == pytest.approx(float(want), rel=1e-12)


@pytest.mark.parametrize("tp", [1, 4])
def test_simulator_prices_the_tensor_parallel_allreduces_as_the_model(tp: int) -> None:
    """With the all-reduces priced (docs/model.md section 6; shipped off), one request in
    the old simulator costs model.ttft: their latency once a pass and the activations per
    computed token, inside the compute that overlaps the load; nothing at TP 1."""
    from dataclasses import replace

    from xmemplan.catalog import load_catalog
    from xmemplan.sizing import model as M
    from xmemplan.sizing.sim import Traffic, simulate
    from xmemplan.sizing.simmodel import Setup, engine_for

    cat = load_catalog()
    cal = replace(M.DEFAULT_CALIBRATION.for_engine("sglang"), allreduce_latency_s=5e-6,
                  allreduce_bus_share=370 / 450)
    s = Setup(model=cat.model("llama-3.1-70b"), gpu=cat.gpu("h100-sxm"),
              host=cat.tier("host-dram-pcie5"), xmem=cat.tier("xmem"),
              shape=M.Shape(tp=tp), calibration=cal)
    e = engine_for(s, replicas=1, nodes=1e9)
    assert (e.comm_pass_s > 0) == (tp > 1)
    for prompt, hit in ((9_000.0, 0.0), (9_000.0, 8_000.0), (20_000.0, 2_000.0)):
        r = simulate(Traffic(np.array([0.0]), np.array([prompt]), hit_xmem=np.array([hit])), e)
        want = M.ttft(s.model, s.gpu, s.xmem, prompt, hit, calibration=cal, shape=s.shape,
                      nodes=1e9, loaders=1, transfer=s.transfer).single_s
        assert r.ttft[0] == pytest.approx(float(want), rel=1e-12), (prompt, hit)


def test_fp8_attention_request_reaches_the_planner() -> None:
    bf = _req("5s", prompt_tokens="128Ki", hit_rate=0.9, rate=0.2, output_tokens=1)
    f8 = _req("5s", prompt_tokens="128Ki", hit_rate=0.9, rate=0.2, output_tokens=1,
              attention_dtype="fp8")
    assert f8.setup.attention_dtype == "fp8"
    a = Planner(bf).run("host-dram", 4).ttft_ms["all"]["p50"]
    b = Planner(f8).run("host-dram", 4).ttft_ms["all"]["p50"]
    assert b < 0.9 * a  # attention dominates these prefills; FP8 doubles its peak


def test_wider_shapes_keep_dp_attention() -> None:
    import xmemplan.sizing.planner as P

    req = _req("1s", dp_attention=True, max_gpus=4)
    assert req.auto_shape and req.shape.label == "tp1"  # DP attention needs 2+ ranks
    # tp1 first, then the wider shapes up to --max-gpus, each with DP attention
    shapes = P._shapes(req)
    assert [s.tp for s in shapes] == [1, 2, 4]
    assert all(s.dp_attention for s in shapes[1:])
    r = P.plan(req, with_table=False, with_curve=False)
    assert [s["shape"] for s in r.shapes][:1] == ["tp1"]


def test_kv_dtype_fp8_model_in_the_request() -> None:
    base, fp8 = _req("1s"), _req("1s", kv_dtype="fp8")
    assert fp8.model.kv_bytes_per_token * 2 == base.model.kv_bytes_per_token
    assert Planner(fp8).kvb * 2 == Planner(base).kvb


def test_overload_is_detected_and_never_meets_the_slo() -> None:
    # 50 requests/s of 64Ki-token prompts on one H100: far above what it serves
    p = Planner(_req("60s", rate=50.0, requests=1000))
    over = p.run("host-dram", 1)
    assert over.overloaded and not over.meets_slo
    assert over.capacity_rps is not None and over.capacity_rps < 50.0
    # the same load on enough GPUs is a stable queue
    ok = p.run("host-dram", 64)
    assert not ok.overloaded and ok.meets_slo
    # a stable seed run is never flagged (its figures do not change)
    r = plan(_req("500ms"), with_table=False, with_curve=False)
    assert all(o.point is None or not o.point.overloaded for o in r.options)


def test_overloaded_everywhere_says_so() -> None:
    r = plan(_req("500ms", rate=1e6, max_gpus=32, requests=400), with_table=False,
             with_curve=False)
    assert r.cheapest == "none" and r.binding.startswith("overloaded")
    assert "overloaded at this rate" in r.answer and "1,000,000 requests/s" in r.answer
    assert all("overloaded at this rate" in o.note for o in r.options)


def test_goodput_at_the_search_ceiling_is_a_lower_bound(monkeypatch) -> None:
    """A load that still complies where the search stops is reported as capped (a lower
    bound), not as the ceiling's figure passed off as a measured limit; a load that stops
    complying between 4x and 8x is found by bisection and is not capped."""
    from types import SimpleNamespace

    from xmemplan.sizing import planner

    p = Planner(_req("500ms", rate=2.0))
    limit = [float("inf")]

    def fake_run(option, gpus, nodes=0, scale=1.0, instant_loads=False, slo_ms=None,
                 extend=True, reps_min=None):
        return SimpleNamespace(overloaded=False, slo_value_ms=400 if scale <= limit[0] else 600)

    monkeypatch.setattr(p, "run", fake_run)
    v, capped = p.goodput_bound("xmem", 4, 1)
    assert capped and v == planner.GOODPUT_CEILING * 2.0
    limit[0] = 6.0
    v, capped = p.goodput_bound("xmem", 4, 1)
    assert v is not None and not capped and 2.0 * 5.75 <= v <= 2.0 * 6.0


def test_overload_is_judged_on_the_load_the_run_was_offered() -> None:
    """A trace's sessions wait for their replies, so they arrive slower than the rate named:
    a run 3 % busy is not overloaded whatever the nominal rate (the nominal figure flagged
    such a run, and broke the GPU-count search). Arrivals faster than the replicas serve
    (with a growing queue) still are."""
    from types import SimpleNamespace

    p = Planner(_req("500ms", rate=2.0))
    n = 300
    ttft = np.linspace(1.0, 3.0, n)  # later requests wait longer (a trace's busy hour)
    # 300 requests over 6,000 s (0.05/s) on 8 replicas busy 3 % of the time
    slow = SimpleNamespace(arrival=np.linspace(0.0, 6000.0, n), busy=np.full(8, 180.0))
    # stand-ins for the engine's Result: _overload reads its arrival and busy only
    over, cap, achieved = p._overload(slow, ttft, 1.0)  # type: ignore[arg-type]
    assert achieved == pytest.approx((n - 1) / 6000.0)
    assert not over and cap is not None and cap > 0.05
    # 300 requests in 10 s (30/s) on 2 replicas busy 60 s each: 5/s served, queue growing
    fast = SimpleNamespace(arrival=np.linspace(0.0, 10.0, n), busy=np.full(2, 60.0))
    over, cap, _ = p._overload(fast, np.linspace(1.0, 50.0, n), 1.0)  # type: ignore[arg-type]
    assert over and cap == pytest.approx(5.0)
