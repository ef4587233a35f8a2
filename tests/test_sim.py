"""The prefill-serving simulator: exact single-request reduction, queueing closed forms,
Little's law, numba kernel vs the Python reference, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmemplan.catalog import load_catalog
from xmemplan.errors import UsageError
from xmemplan.sizing.sim import (
    LAYER,
    MAX,
    S_DECODE_STEPS,
    SUM,
    Engine,
    SimResult,
    Traffic,
    simulate,
)
from xmemplan.sizing.sim_reference import simulate_reference
from xmemplan.sizing.simmodel import Setup, engine_for, single_request_ttft

CAT = load_catalog()


def _little_ok(r: SimResult) -> None:
    """Little's law on every run: time-average number waiting for a first token equals
    the arrival rate times the mean TTFT (both over the run's span)."""
    L, lw = r.little()
    assert pytest.approx(lw, rel=1e-9, abs=1e-12) == L
    assert np.all(np.isfinite(r.ttft)) and np.all(r.ttft >= 0)
    assert np.all(r.done >= r.first) and np.all(r.first >= r.start)
    assert np.all(r.start >= r.ready) and np.all(r.ready >= r.arrival)


def _setup(overlap: str = "layer", **kw: object) -> Setup:
    return Setup(model=CAT.model("qwen3-30b-a3b-fp8"), gpu=CAT.gpu("h100-sxm"),
                 host=CAT.tier("host-dram-pcie5"), xmem=CAT.tier("xmem"), overlap=overlap,
                 **kw)  # type: ignore[arg-type]


# --- reduces to the single-request model ---------------------------------------------

@pytest.mark.parametrize("overlap", ["sum", "layer", "max"])
@pytest.mark.parametrize("tier", ["host", "xmem"])
def test_one_request_alone_is_the_model(overlap: str, tier: str) -> None:
    s = _setup(overlap)
    e = engine_for(s, replicas=1, nodes=1, load_tier=tier)
    rng = np.random.default_rng(7)
    for n in range(22):
        prompt = float(rng.integers(1, 200_000))
        new = float(rng.integers(0, int(min(prompt, 8192)) + 1))  # one forward pass
        if n < 2:  # a prompt cached whole (one pass of one token) and one new token
            new = float(n)
        hit = prompt - new
        tr = Traffic(np.array([0.0]), np.array([prompt]),
                     hit_dram=np.array([hit if tier == "host" else 0.0]),
                     hit_xmem=np.array([hit if tier == "xmem" else 0.0]))
        r = simulate(tr, e)
        want = single_request_ttft(s, prompt, hit, tier)
        assert r.ttft[0] == pytest.approx(want, rel=1e-12), (prompt, hit)
        _little_ok(r)


def test_hbm_hits_load_nothing_and_compute_nothing() -> None:
    e = engine_for(_setup(), replicas=1, nodes=1)
    tr = Traffic(np.array([0.0]), np.array([50_000.0]), hit_hbm=np.array([50_000.0]))
    full = Traffic(np.array([0.0]), np.array([50_000.0]), hit_xmem=np.array([50_000.0]))
    a, b = simulate(tr, e).ttft[0], simulate(full, e).ttft[0]
    assert a < b  # the X-Mem load costs time the HBM hit does not
    assert a >= e.fixed_s


# --- queueing closed forms -------------------------------------------------------------

def _poisson(rate: float, n: int, seed: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))


def _mg1(prompts: np.ndarray, rate: float, seed: int) -> SimResult:
    """One server, one request per batch, service = prompt tokens x 1 ms, no overhead."""
    e = Engine(lin_s_per_token=1e-3, max_batch=1, chunk_tokens=10**12)
    return simulate(Traffic(_poisson(rate, len(prompts), seed), prompts), e)


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.8])
def test_md1_mean_sojourn(rho: float) -> None:
    n = 400_000
    r = _mg1(np.full(n, 1000.0), rho, seed=1)  # D = 1 s
    _little_ok(r)
    w = r.ttft[n // 10:]  # drop the warm-up tenth
    want = 1.0 + rho / (2 * (1 - rho))  # W = D + rho D / (2 (1 - rho))
    assert w.mean() == pytest.approx(want, rel=0.03)
    assert r.queue_delay[n // 10:].mean() == pytest.approx(want - 1.0, rel=0.05)
    assert r.utilisation() == pytest.approx(rho, rel=0.02)


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.8])
def test_mm1_mean_and_percentiles(rho: float) -> None:
    n = 400_000
    prompts = np.random.default_rng(2).exponential(1000.0, n)  # E[S] = 1 s
    r = _mg1(prompts, rho, seed=3)
    _little_ok(r)
    w = r.ttft[n // 10:]
    mu_minus_lam = 1.0 - rho
    assert w.mean() == pytest.approx(1 / mu_minus_lam, rel=0.03)
    # Sojourn ~ Exp(mu - lambda): p-quantile = -ln(1 - p) / (mu - lambda).
    for p in (50, 90, 99):
        want = -math.log(1 - p / 100) / mu_minus_lam
        assert np.percentile(w, p) == pytest.approx(want, rel=0.03), p


def test_queueing_check_can_fail() -> None:
    # The same comparison against a wrong closed form (M/M/1 for deterministic jobs) fails.
    n = 200_000
    r = _mg1(np.full(n, 1000.0), 0.8, seed=1)
    assert abs(r.ttft[n // 10:].mean() - 1 / (1 - 0.8)) / (1 / 0.2) > 0.3


# --- kernel == reference ---------------------------------------------------------------

@st.composite
def _case(draw: st.DrawFn) -> tuple[Traffic, Engine]:
    n = draw(st.integers(1, 24))
    # 17 and 20: the kernel's routing tree with unused leaves (its width is a power of two)
    R = draw(st.sampled_from([1, 2, 3, 4, 17, 20]))
    gaps = draw(st.lists(st.floats(0, 0.05), min_size=n, max_size=n))
    prompt = np.array(draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n)), float)
    split = [draw(st.lists(st.integers(0, 100), min_size=3, max_size=3)) for _ in range(n)]
    hb, hd, hx = [], [], []
    for s, (a, b, c) in zip(prompt, split):
        tot = a + b + c
        scale = draw(st.floats(0, 1)) / tot if tot > 0 else 0.0
        x = [math.floor(s * a * scale), math.floor(s * b * scale), math.floor(s * c * scale)]
        hb.append(x[0])
        hd.append(x[1])
        hx.append(x[2])
    output = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    # sessions: each request follows the previous one of its session (or none)
    n_sess = draw(st.integers(1, n))
    sess = draw(st.lists(st.integers(0, n_sess - 1), min_size=n, max_size=n))
    last: dict[int, int] = {}
    prev = []
    for i, s_ in enumerate(sess):
        prev.append(last.get(s_, -1))
        last[s_] = i
    prev_a = np.array(prev)
    route = np.array([draw(st.sampled_from([-1, -2, 0, R - 1])) if p >= 0
                      else draw(st.sampled_from([-1, 0, R - 1])) for p in prev])
    think = np.array(draw(st.lists(st.floats(0, 0.02), min_size=n, max_size=n)))
    tr = Traffic(np.cumsum(gaps), prompt, hit_hbm=np.array(hb, float),
                 hit_dram=np.array(hd, float), hit_xmem=np.array(hx, float),
                 output=np.array(output), prev=prev_a, think=think, route=route)
    e = Engine(
        replicas=R, chunk_tokens=draw(st.integers(1, 4000)), max_batch=draw(st.integers(1, 8)),
        overlap=draw(st.sampled_from([SUM, LAYER, MAX])), layers=draw(st.integers(1, 64)),
        mixed=draw(st.integers(0, 1)), gpus_per_switch=draw(st.integers(1, 4)),
        lin_s_per_token=draw(st.floats(1e-7, 1e-4)), attn_s_per_unit=draw(st.floats(0, 1e-9)),
        dense_weight_bytes=draw(st.floats(0, 1e9)), expert_weight_bytes=draw(st.floats(0, 1e10)),
        expert_miss=draw(st.floats(0, 1)), sm_interference=draw(st.floats(0, 0.3)),
        hbm_bandwidth=draw(st.floats(1e11, 4e12)), kv_bytes_per_token=draw(st.floats(1, 2e5)),
        fixed_s=draw(st.floats(0, 0.03)), per_token_s=draw(st.floats(0, 1e-7)),
        decode_fixed_s=draw(st.floats(0, 0.005)), dram_bandwidth=draw(st.floats(1e9, 1e11)),
        switch_bandwidth=draw(st.sampled_from([math.inf, 3e10, 6e10])),
        dram_latency_s=draw(st.floats(0, 1e-4)), xmem_bandwidth=draw(st.floats(1e10, 5e11)),
        node_bandwidth=draw(st.sampled_from([math.inf, 1e11, 4e12])),
        xmem_latency_s=draw(st.floats(0, 1e-4)),
        kv_capacity_tokens=draw(st.sampled_from([math.inf, 2000.0, 5000.0])),
        comm_pass_s=draw(st.sampled_from([0.0, 8e-4])),
        comm_s_per_token=draw(st.sampled_from([0.0, 1e-5])),
    )
    return tr, e


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_kernel_matches_reference(case: tuple[Traffic, Engine]) -> None:
    tr, e = case
    a = simulate(tr, e)
    b = simulate_reference(tr, e)
    for name in ("arrival", "ready", "start", "first", "done", "busy", "stats"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-9, atol=1e-12,
                                   err_msg=name)
    np.testing.assert_array_equal(a.replica, b.replica)
    _little_ok(a)
    # runs of decode steps (one event per run) give the times of one event per step
    c = simulate_reference(tr, e, one_step_per_event=True)
    for name in ("arrival", "ready", "start", "first", "done", "busy"):
        np.testing.assert_allclose(getattr(a, name), getattr(c, name), rtol=1e-9, atol=1e-9,
                                   err_msg=name)
    assert a.stats[S_DECODE_STEPS] == c.stats[S_DECODE_STEPS]


def test_many_replicas_route_as_the_reference() -> None:
    """Join-shortest-queue over 64 replicas (the kernel's tree, the reference's scan): the
    same replica for every request, and the same times, under load with ties."""
    R = 64
    rng = np.random.default_rng(11)
    n = 1500
    tr = Traffic(np.cumsum(rng.exponential(0.001, n)), rng.integers(100, 4000, n).astype(float),
                 hit_dram=rng.integers(0, 90, n).astype(float),
                 output=rng.integers(1, 40, n))
    e = Engine(replicas=R, chunk_tokens=2048, max_batch=8, lin_s_per_token=2e-5,
               decode_fixed_s=0.004, dram_bandwidth=2e10, kv_bytes_per_token=1e5,
               fixed_s=0.002)
    a, b = simulate(tr, e), simulate_reference(tr, e)
    np.testing.assert_array_equal(a.replica, b.replica)
    assert len(set(a.replica.tolist())) == R  # every replica used
    for name in ("start", "first", "done"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-9, atol=1e-12)


# --- determinism and inputs ------------------------------------------------------------

def test_deterministic_under_a_seed() -> None:
    e = engine_for(_setup(), replicas=4, nodes=1)
    def run(seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        n = 2000
        p = rng.integers(1000, 60_000, n).astype(float)
        tr = Traffic(_poisson(20.0, n, seed), p, hit_xmem=np.floor(p * 0.95),
                     output=rng.integers(1, 50, n))
        return simulate(tr, e).ttft
    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_contention_slows_loads() -> None:
    # Eight GPUs loading 64K-token prefixes at once from one X-Mem node whose bandwidth
    # is far below 8 x the per-GPU link: each load takes longer than alone.
    s = _setup("max")
    n = 8
    p = np.full(n, 65_536.0)
    tr = Traffic(np.zeros(n), p, hit_xmem=p - 1, route=np.arange(n))
    alone = simulate(tr, engine_for(s, replicas=n, nodes=100)).ttft
    shared = simulate(tr, engine_for(s, replicas=n, nodes=0.25)).ttft
    assert np.all(shared > alone * 1.2)
    np.testing.assert_allclose(alone, alone[0])


@pytest.mark.parametrize("bad", [
    dict(prompt=np.array([10.0]), hit_xmem=np.array([11.0])),
    dict(prompt=np.array([10.0]), output=np.array([0])),
    dict(prompt=np.array([10.0, 5.0]), prev=np.array([1, -1])),
])
def test_bad_traffic(bad: dict[str, np.ndarray]) -> None:
    n = len(bad["prompt"])
    with pytest.raises(UsageError):
        Traffic(np.zeros(n), **bad)


def test_kv_capacity_holds_back_new_prefills_while_decoding() -> None:
    # Two requests of 1,000 tokens with long decodes on one replica: with room for one,
    # the second starts only after the first has finished decoding.
    e = Engine(lin_s_per_token=1e-5, attn_s_per_unit=0.0, hbm_bandwidth=1e12,
               dense_weight_bytes=1e9, decode_fixed_s=1e-3)
    tr = Traffic(np.array([0.0, 0.001]), np.array([1000.0, 1000.0]),
                 output=np.array([50, 50]))
    free = simulate(tr, e)
    tight = simulate(tr, e.replace(kv_capacity_tokens=1500.0))
    assert free.start[1] < free.done[0]
    assert tight.start[1] >= tight.done[0]
    _little_ok(tight)


@pytest.mark.parametrize("tier", ["host", "xmem"])
def test_a_chunked_prefill_alone_is_the_model(tier: str) -> None:
    """Several forward passes of whole chunks: each pass reads the KV of its own context
    (prefix + chunks up to its end), in the model as in the simulator. The model charged
    every pass the whole prompt's KV before (40K with 4 passes: ms apart)."""
    for chunk in (8192, 64):  # 64-token chunks: attention reads more KV than it computes
        _chunked_case(tier, chunk)


def _chunked_case(tier: str, chunk: int) -> None:
    s = _setup("layer", chunk_tokens=chunk)
    e = engine_for(s, replicas=1, nodes=1, load_tier=tier)
    assert e.chunk_tokens == chunk
    for prompt, passes in ((40_960.0, 4), (100_000.0, 3), (200_000.0, 8), (65_536.0, 2)):
        hit = prompt - passes * chunk
        tr = Traffic(np.array([0.0]), np.array([prompt]),
                     hit_dram=np.array([hit if tier == "host" else 0.0]),
                     hit_xmem=np.array([hit if tier == "xmem" else 0.0]))
        r = simulate(tr, e)
        assert r.ttft[0] == pytest.approx(single_request_ttft(s, prompt, hit, tier),
                                          rel=1e-9), (prompt, passes)
