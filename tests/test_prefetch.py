"""SGLang HiCache's L3 prefetch (xmemplan/sizing/engine/prefetch.py): the kernel against
its plain-Python reference (reference.PrefetchRef, Hypothesis), and the engine's
admission per --hicache-storage-prefetch-policy on a generated workload."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmemplan.sizing.engine.prefetch import (
    N_PF,
    N_PP,
    PF_DONE,
    PF_LANDED,
    PF_ONGOING,
    PF_STATE,
    PF_TOKENS,
    POLICY_NAMES,
    PP_BASE,
    PP_PAGE,
    PP_PERKI,
    PP_POLICY,
    PP_THRESH,
    pf_plan,
    pf_poll,
    pf_progress,
    pf_start,
)
from xmemplan.sizing.engine.reference import PrefetchRef


@st.composite
def prefetch_cases(draw: Any) -> dict[str, Any]:
    page = draw(st.sampled_from([1, 16, 64]))
    top = draw(st.integers(0, 60_000))
    return {
        "policy": draw(st.sampled_from(POLICY_NAMES)),
        "page": page,
        "threshold": draw(st.sampled_from([0, 1, 256, 1024, 5000])),
        "matched": draw(st.integers(0, top)),
        "top": top,
        "kvb": draw(st.sampled_from([0.0, 1.0, 4096.0, 1e5])),
        "base": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "perki": draw(st.sampled_from([0.0, 0.25, 1.0])),
        # (kind, amount): 0 the reads advance by a share of the span, 1 the span lands,
        # 2 the scheduler polls after a pause (seconds)
        "ops": draw(st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 3.0)),
                             min_size=1, max_size=25)),
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefetch_cases())
def test_prefetch_kernel_matches_reference(c: dict[str, Any]) -> None:
    ref = PrefetchRef(c["policy"], c["page"], c["threshold"], c["base"], c["perki"])
    pf = np.zeros((1, N_PF))
    pfe = np.zeros((8, 2), np.int64)
    pfp = np.zeros(N_PP)
    pfp[PP_POLICY] = POLICY_NAMES.index(c["policy"])
    pfp[PP_THRESH] = c["threshold"]
    pfp[PP_PAGE] = c["page"]
    pfp[PP_BASE] = c["base"]
    pfp[PP_PERKI] = c["perki"]
    tokens = pf_plan(c["matched"], c["top"], c["page"], c["threshold"])
    assert tokens == ref.begin(c["matched"], c["top"])
    if tokens > 0:
        pf_start(pf, 0, c["matched"], tokens)
    now, moved, kvb = 0.0, 0.0, c["kvb"]
    for kind, x in c["ops"]:
        if kind == 0:
            moved = min(moved + x / 3.0 * tokens * kvb, tokens * kvb)
            ref.read(moved, kvb)
            if pf[0, PF_STATE] == PF_ONGOING:
                pf[0, PF_DONE] = pf_progress(int(pf[0, PF_TOKENS]), moved, kvb, c["page"])
        elif kind == 1:
            ref.land()
            if pf[0, PF_STATE] == PF_ONGOING:
                pf[0, PF_STATE] = PF_LANDED
        else:
            now += x
            pfe[0, 0] = 0
            assert tuple(pf_poll(pf, pfe, pfp, 0, now)) == ref.poll(now), (kind, now)


@pytest.mark.parametrize("page", [1, 16, 64])
def test_progress_counts_whole_storage_batches(page: int) -> None:
    """Acknowledged tokens move by 128 pages (STORAGE_BATCH_SIZE), all at the end."""
    batch = 128 * page
    tokens = 4 * batch + page
    kvb = 10.0
    assert pf_progress(tokens, batch * kvb - 1, kvb, page) == 0
    assert pf_progress(tokens, batch * kvb, kvb, page) == batch
    assert pf_progress(tokens, 3.5 * batch * kvb, kvb, page) == 3 * batch
    assert pf_progress(tokens, tokens * kvb, kvb, page) == tokens


def test_plan_keeps_the_threshold_and_pages() -> None:
    assert pf_plan(0, 255, 1, 256) == 0  # under prefetch_threshold: not fetched
    assert pf_plan(0, 256, 1, 256) == 256
    assert pf_plan(100, 1000, 64, 256) == 896  # page-aligned span past the match
    assert pf_plan(0, 40, 64, 0) == 0  # less than a page


def _l3_run(policy: str, l3_bandwidth: float, n: int = 120, seed: int = 0) -> Any:
    """Open Poisson arrivals at 1 request/s of 16K-32K-token prompts, 90 % of each in L3
    (X-Mem through the HiCache storage backend) at `l3_bandwidth`, loaded back from the
    host at 50 GB/s, storage backups on the L3 link; one SGLang replica."""
    from xmemplan.sizing.engine import Config, Requests, run
    from xmemplan.sizing.engine.pool import synth_keys

    rng = np.random.default_rng(seed)
    prompt = rng.integers(16000, 32000, n)
    out = rng.integers(50, 150, n)
    keys, koff, kn = synth_keys(prompt, out, np.full(n, -1), np.zeros(n, np.int64), 16)
    req = Requests(arrival=np.cumsum(rng.exponential(1.0, n)), prompt=prompt, output=out,
                   keys=keys, koff=koff, kn=kn, tier_tokens=(prompt * 0.9).astype(np.int64),
                   tier=np.ones(n, np.int64))
    cfg = Config(policy="sglang", blocks=40000, block_tokens=16, engine_block_tokens=16,
                 lin_s_per_token=2e-5, attn_s_per_unit=1e-10, kv_bytes_per_token=1e5,
                 hbm_bandwidth=3e12, dense_weight_bytes=1e9, decode_fixed_s=0.004,
                 fixed_s=0.02, pass_fixed_s=0.005, dram_bandwidth=5e10,
                 xmem_bandwidth=l3_bandwidth, node_bandwidth=l3_bandwidth, tier_write=True,
                 l3_tier=1, prefetch_policy=policy)
    r = run(req, cfg)[0]
    tt = r.ttft[n // 10:]
    recomputed = 1.0 - r.prefetched.sum() / max(1, r.prefetch_tokens.sum())
    return float(np.median(tt)), float(np.quantile(tt, 0.9)), float(recomputed), r


def test_prefetch_policies_differ_as_sglang_admits() -> None:
    """The three --hicache-storage-prefetch-policy rules on one workload (docs/size.md
    'HiCache L3 prefetch'). A fast L3 (10 GB/s): a prefetch lands well inside the
    timeout, so timeout is wait_complete; best_effort admits each request at its first
    poll, when little has arrived, and recomputes most of its prefix. A slow, loaded L3
    (2 GB/s for ~2.2 GB a second): wait_complete's queue grows; timeout caps each wait at
    1 s + 0.25 s per 1,024 tokens and recomputes the rest; best_effort waits for nothing."""
    fast = {p: _l3_run(p, 1e10) for p in POLICY_NAMES}
    assert fast["timeout"][:3] == fast["wait_complete"][:3]
    assert fast["wait_complete"][2] == 0.0 and fast["best_effort"][2] > 0.5
    assert fast["best_effort"][0] > 1.5 * fast["wait_complete"][0]
    slow = {p: _l3_run(p, 2e9) for p in POLICY_NAMES}
    be, wc, to = slow["best_effort"], slow["wait_complete"], slow["timeout"]
    assert be[0] < to[0] < wc[0] and be[1] < to[1] < wc[1]
    assert be[2] > to[2] > wc[2] == 0.0
    # no request waits much past its timeout: the longest span is 0.9 x 32K tokens
    assert to[1] < 1.0 + 0.25 * 0.9 * 32000 / 1024 + 1.0 < wc[0]


def _sessions(policy: str, asyn: bool, blocks: int = 3000, n: int = 160, seed: int = 3
              ) -> tuple[Any, Any]:
    """Sessions of 10 users (each turn's prefix the user's previous turn, in HBM while it
    survives), X-Mem at L3 holding every prefix, a slow L3 (timeouts fire), KV pressure."""
    from xmemplan.sizing.engine import Config, Requests
    from xmemplan.sizing.engine.pool import synth_keys

    rng = np.random.default_rng(seed)
    prompt = rng.integers(1000, 9000, n)
    out = rng.integers(1, 120, n)
    prev = np.arange(n) - 10
    prev[prev < 0] = -1
    shared = np.where(prev >= 0, prompt * 3 // 4, 0)
    keys, koff, kn = synth_keys(prompt, out, prev, shared, 16)
    req = Requests(arrival=np.cumsum(rng.exponential(0.08, n)), prompt=prompt, output=out,
                   keys=keys, koff=koff, kn=kn, prev=prev, think=rng.exponential(0.5, n),
                   route=np.where(prev >= 0, -2, -1),
                   tier_tokens=np.where(prev >= 0, shared, prompt * 3 // 4),
                   tier=np.ones(n, np.int64))
    cfg = Config(policy="sglang", replicas=2, blocks=blocks, block_tokens=16,
                 engine_block_tokens=16, lin_s_per_token=2e-5, attn_s_per_unit=1e-10,
                 kv_bytes_per_token=1e5, hbm_bandwidth=3e12, dense_weight_bytes=1e9,
                 decode_fixed_s=0.004, fixed_s=0.02, pass_fixed_s=0.005,
                 dram_bandwidth=2e10, xmem_bandwidth=4e8, node_bandwidth=6e8,
                 tier_write=True, async_schedule=asyn, l3_tier=1, prefetch_policy=policy,
                 prefetch_timeout_base_s=0.2)
    return req, cfg


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("asyn", [False, True])
def test_l3_runs_of_decode_steps_equal_one_step_per_event(policy: str, asyn: bool) -> None:
    """With prefetches in flight the engine prices decode steps one by one (a landing or
    a deadline may admit a request at any step); the run is the same as stepping one by
    one (trace mode) under KV pressure, with and without SGLang's overlap loop; and the
    admissions keep the policy: wait_complete admits only what fully arrived, timeout
    admits a cut prefetch only at its deadline or later."""
    from xmemplan.sizing.engine import run

    req, cfg = _sessions(policy, asyn)
    a, *_ = run(req, cfg)
    b, *_ = run(req, cfg, trace_rows=2, step_rows=2)
    assert a.steps == b.steps
    np.testing.assert_allclose(a.first, b.first, atol=1e-9)
    np.testing.assert_allclose(a.done, b.done, atol=1e-9)
    np.testing.assert_array_equal(a.prefetched, b.prefetched)
    asked = a.prefetch_tokens > 0
    assert asked.sum() > 20 and np.isfinite(a.first).all()
    cut = asked & (a.prefetched < a.prefetch_tokens)
    if policy == "wait_complete":
        assert not cut.any()
    elif policy == "timeout":
        assert cut.sum() > 0 and np.all(a.start[cut] >= a.prefetch_deadline[cut])
    else:
        assert cut.sum() > asked.sum() // 2


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_one_request_alone_waits_for_its_prefetch(policy: str) -> None:
    """One request on an idle replica: wait_complete (and timeout, whose 1 s + 7.5 s
    outlasts the read) admit it when the span has landed (its bytes at the X-Mem rate
    plus the link latency), then load it from the host as the host-DRAM tier would: TTFT
    = the read + the host tier's TTFT. best_effort polls it at once: nothing has
    arrived, it computes the whole prompt."""
    from xmemplan.sizing.engine import Config, Requests, chain_keys, run

    keys, koff, kn = chain_keys([list(range(32000))], 16)
    base: dict[str, Any] = dict(arrival=np.zeros(1), prompt=np.array([32000]), output=np.array([2]),
                keys=keys, koff=koff, kn=kn, tier_tokens=np.array([30000]))
    cfg = Config(policy="sglang", lin_s_per_token=2e-5, kv_bytes_per_token=1e5,
                 fixed_s=0.02, pass_fixed_s=0.005, layers=48, dram_bandwidth=5e10,
                 dram_latency_s=3e-6, xmem_bandwidth=2e10, node_bandwidth=4e10,
                 xmem_latency_s=5e-6, prefetch_policy=policy, max_batched_tokens=1 << 16,
                 chunked_prefill_size=1 << 16, max_prefill_tokens=1 << 16)
    host, *_ = run(Requests(**base, tier=np.zeros(1, np.int64)), cfg)
    none, *_ = run(Requests(**base, tier=np.full(1, -1, np.int64)), cfg)
    l3, *_ = run(Requests(**base, tier=np.ones(1, np.int64)), cfg.replace(l3_tier=1))
    assert l3.prefetch_tokens[0] == 30000
    if policy == "best_effort":
        assert l3.prefetched[0] == 0
        assert l3.ttft[0] == pytest.approx(none.ttft[0], rel=1e-12)
    else:
        assert l3.prefetched[0] == 30000
        read = 30000 * 1e5 / 2e10 + 5e-6
        assert l3.ttft[0] == pytest.approx(read + host.ttft[0], rel=1e-12)
