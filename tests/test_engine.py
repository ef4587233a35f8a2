"""The simulated engine (xmemplan.sizing.engine): kernels against their plain-Python
references (Hypothesis), and the behaviours the engines show under KV pressure."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from numba import njit

from xmemplan.sizing.engine import Config, Requests, chain_keys, replay_scenario, run
from xmemplan.sizing.engine.pool import (
    pool_alloc,
    pool_cache,
    pool_free,
    pool_match,
    pool_new,
    pool_touch,
)
from xmemplan.sizing.engine.reference import PoolRef, replay_reference
from xmemplan.sizing.engine.steptime import (
    N_T,
    T_DEC,
    T_FLOOR_MAX,
    compute_time,
    overhead_time,
    pass_time,
    steptime_reference,
)

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# --- the block pool ------------------------------------------------------------------------
@njit(cache=True)
def _pool_ops(nb, ops, keys):  # noqa: ANN001, ANN202
    """Apply ops to one pool: (0, key0, n) match+touch n keys from key0 then alloc 1 and
    cache it under key0+n; (1, slot) free the slot's blocks. Returns per op (matched, free)."""
    P = pool_new(1, nb, 4096, 4096)
    rb = np.zeros(64 * 64, np.int64)
    held = np.zeros(64, np.int64)
    out = np.zeros((ops.shape[0], 2), np.int64)
    for k in range(ops.shape[0]):
        if ops[k, 0] == 0:
            s = ops[k, 3]
            m = pool_match(P, 0, keys, ops[k, 1], ops[k, 2])
            out[k, 0] = m
            if held[s] == 0 and P[1][0, 2] >= m + 1:
                h = pool_touch(P, 0, keys, ops[k, 1], m, rb, 64 * s, 0)
                h = pool_alloc(P, 0, 1, rb, 64 * s, h)
                pool_cache(P, 0, rb[64 * s + h - 1], keys[ops[k, 1] + m])
                held[s] = h
        else:
            s = ops[k, 3]
            pool_free(P, 0, rb, 64 * s, held[s])
            held[s] = 0
        out[k, 1] = P[1][0, 2]
    return out


def _pool_ops_ref(nb: int, ops: np.ndarray, keys: np.ndarray) -> np.ndarray:
    p = PoolRef(nb)
    held: dict[int, list[int]] = {}
    out = np.zeros((len(ops), 2), np.int64)
    for k, (op, k0, n, s) in enumerate(ops):
        if op == 0:
            kk = [int(x) for x in keys[k0:k0 + n]]
            m = p.match(kk)
            out[k, 0] = m
            if not held.get(s) and p.nfree >= m + 1:
                # touched cached blocks are in the free queue when no one holds them
                bl = p.touch(kk[:m]) + p.alloc(1)
                p.cache(bl[-1], int(keys[k0 + m]))
                held[s] = bl
        else:
            p.release(held.pop(s, []))
        out[k, 1] = p.nfree
    return out


@given(nb=st.integers(1, 12), data=st.data())
@SETTINGS
def test_pool_kernel_matches_reference(nb: int, data: Any) -> None:
    # keys: 6 chains of 8 blocks; some chains share their first blocks
    keys = np.array([c * 100 + j if j >= (c % 3) * 2 else j for c in range(6)
                     for j in range(9)], np.int64)
    ops = data.draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5),
                                       st.integers(0, 8), st.integers(0, 7)),
                             min_size=1, max_size=40))
    a = np.array([(o, c * 9, min(n, 8), s) for o, c, n, s in ops], np.int64)
    assert np.array_equal(_pool_ops(nb, a, keys), _pool_ops_ref(nb, a, keys))


def test_pool_evicts_least_recently_freed_tail_first() -> None:
    p = PoolRef(4)
    a = p.alloc(2)
    p.cache(a[0], 10)
    p.cache(a[1], 11)
    p.release(a)  # frees 11's block, then 10's: the tail goes first
    b = p.alloc(3)  # the two never-used blocks, then 11's block
    assert 11 not in p.cached and 10 in p.cached
    assert len(b) == 3


def test_a_duplicate_block_is_found_once_the_first_is_evicted() -> None:
    """vLLM's BlockHashToBlockMap keeps every block cached under a hash and finds the
    first that is left: the same prefix computed twice at once, the first copy evicted,
    still hits the second (round 7: seed 46 of the async tier oracle parted without it)."""
    P = pool_new(1, 4, 16, 16)
    rb = np.zeros(16, np.int64)
    keys = np.array([7], np.int64)
    pool_alloc(P, 0, 1, rb, 0, 0)  # two requests' blocks, never used, one key
    pool_alloc(P, 0, 1, rb, 1, 0)
    first, second = rb[0], rb[1]
    pool_cache(P, 0, first, 7)
    pool_cache(P, 0, second, 7)  # the duplicate
    pool_free(P, 0, rb, 0, 1)  # the first's request ends first: it heads the free queue
    pool_free(P, 0, rb, 1, 1)
    pool_alloc(P, 0, 3, rb, 4, 0)  # the two never-used blocks, then the first: evicted
    assert first in rb[4:7] and second not in rb[4:7]
    assert pool_match(P, 0, keys, 0, 1) == 1  # the copy left is found
    assert pool_touch(P, 0, keys, 0, 1, rb, 8, 0) == 1 and rb[8] == second
    p = PoolRef(4)
    a, b = p.alloc(1), p.alloc(1)
    p.cache(a[0], 7)
    p.cache(b[0], 7)
    p.release(a)
    p.release(b)
    assert a[0] in p.alloc(3) and p.match([7]) == 1 and p.touch([7]) == b


# --- step time -----------------------------------------------------------------------------
@given(pieces=st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 50000), st.booleans(),
                                 st.booleans(), st.integers(1, 60000)), min_size=1,
                       max_size=8),
       tv=st.lists(st.floats(0, 1e-3), min_size=N_T, max_size=N_T),
       floor_max=st.booleans(), decode_run=st.booleans())
@SETTINGS
def test_steptime_kernel_matches_reference(pieces: list[tuple[Any, ...]],
                                           tv: list[float], floor_max: bool,
                                           decode_run: bool) -> None:
    tp = np.array(tv)
    tp[5] = 3e12  # HBM bytes/s
    tp[4] = 0.9  # expert miss
    tp[2], tp[3] = 1e9, 3e10
    tp[T_FLOOR_MAX] = 1.0 if floor_max else 0.0  # the floor as a minimum, or an overhead
    tp[T_DEC] *= 30.0  # a floor that can exceed the roofline of the drawn step
    if decode_run:  # a decode step: one token per request, no prefill piece
        pieces = [(1, s0, False, False, pr) for _, s0, _, _, pr in pieces]
    tok = sum(k for k, *_ in pieces)
    lin = sum(tp[0] * k for k, *_ in pieces)
    attn = sum(tp[1] * ((s0 + k) ** 2 - s0 ** 2) for k, s0, *_ in pieces)
    kv = sum((s0 + k) * tp[6] for k, s0, *_ in pieces)
    pre = any(p for _, _, p, _, _ in pieces)
    starts = [pr for _, _, _, s, pr in pieces if s]
    c = pass_time(compute_time(float(tok), lin, attn, kv, tp), pre, tp)
    f = overhead_time(float(tok), float(len(pieces)), pre, len(starts), float(sum(starts)), tp)
    rc, rf = steptime_reference([tuple(map(float, p[:2])) + p[2:4] + (float(p[4]),)
                                 for p in pieces], list(tp))
    assert c == pytest.approx(rc, rel=1e-9)
    assert f == pytest.approx(rf, rel=1e-9)


# --- the policies, step for step -------------------------------------------------------------
@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    eng = draw(st.sampled_from(["vllm", "sglang"]))
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    n = draw(st.integers(1, 12))
    prefixes = [list(range(1000 * p, 1000 * p + draw(st.integers(0, 40)))) for p in range(3)]
    t = 0.0
    reqs = []
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 0.003, 0.02]))
        pre = prefixes[draw(st.integers(0, 2))]
        own = [50_000 + 100 * i + k for k in range(draw(st.integers(1, 40)))]
        reqs.append({"id": f"r{i}", "arrival_s": t, "tokens": pre + own,
                     "max_tokens": draw(st.integers(1, 30))})
    longest = max(len(r["tokens"]) + r["max_tokens"] for r in reqs)
    blocks = draw(st.integers(math.ceil(longest / bs) + 2, math.ceil(longest / bs) * 4 + 8))
    return {"engine": eng, "block_size": bs, "num_gpu_blocks": blocks,
            "max_num_seqs": draw(st.integers(1, 8)),
            "max_num_batched_tokens": draw(st.sampled_from([8, 32, 64, 2048])),
            "enable_prefix_caching": draw(st.booleans()),
            "scheduler_reserve_full_isl": draw(st.sampled_from([True, True, False])),
            "long_prefill_token_threshold": draw(st.sampled_from([0, 0, 16])),
            "chunked_prefill_size": draw(st.sampled_from([16, 32, 8192])),
            "schedule_conservativeness": draw(st.sampled_from([0.3, 1.0])),
            "async_scheduling": draw(st.booleans()),
            # vLLM 0.33's deferred block frees (with async scheduling only)
            "defer_block_free": draw(st.booleans()),
            "step_time": {"base_s": 0.01, "per_token_s": 1e-4, "per_seq_s": 1e-3},
            "requests": reqs}


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x["t_s"] == pytest.approx(y["t_s"], rel=1e-9, abs=1e-12), x["step"]
        for k in ("scheduled", "preempted", "new_hits", "finished", "aborted",
                  "kv_blocks_used"):
            assert x[k] == y[k], (x["step"], k, x[k], y[k])


# Hypothesis found it (SGLang, one-token blocks): a chunk computed beside a request that
# finishes in the same step shares that request's prefix once both enter the tree (the
# chunked request first); the reference held both copies (18 blocks against 11).
_SHARED_CHUNK = {
    "engine": "sglang", "block_size": 1, "num_gpu_blocks": 23, "max_num_seqs": 2,
    "max_num_batched_tokens": 8, "enable_prefix_caching": True,
    "long_prefill_token_threshold": 0, "chunked_prefill_size": 16,
    "schedule_conservativeness": 0.3,
    "step_time": {"base_s": 0.01, "per_token_s": 0.0001, "per_seq_s": 0.001},
    "requests": [{"id": f"r{i}", "arrival_s": 0.0,
                  "tokens": [0, 1, 2, 3, 4, 5, 6, 7, 50000 + 100 * i], "max_tokens": 1}
                 for i in range(11)]}


@given(sc=scenarios())
@example(sc=_SHARED_CHUNK)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_engine_matches_reference_step_for_step(sc: dict[str, Any]) -> None:
    _same(replay_scenario(sc), replay_reference(sc))


def _pressure(engine: str, blocks: int) -> dict[str, Any]:
    reqs = [{"id": f"r{i}", "arrival_s": 0.0, "tokens": list(range(i * 100, i * 100 + 20)),
             "max_tokens": 40} for i in range(8)]
    return {"engine": engine, "block_size": 4, "num_gpu_blocks": blocks, "max_num_seqs": 8,
            "max_num_batched_tokens": 256, "enable_prefix_caching": True,
            "chunked_prefill_size": 256,
            # SGLang reserves each new request's whole output: a low conservativeness
            # admits more than the pool holds once they decode
            "schedule_conservativeness": 0.3,
            "step_time": {"base_s": 0.01, "per_token_s": 0.0, "per_seq_s": 0.0},
            "requests": reqs}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_kv_grows_with_decode_and_pressure_preempts(engine: str) -> None:
    big = replay_scenario(_pressure(engine, 200))
    small = replay_scenario(_pressure(engine, 48))
    used = [s["kv_blocks_used"] for s in big]
    assert max(used) > used[0]  # decode adds blocks
    assert not any(s["preempted"] for s in big)
    assert sum(len(s["preempted"]) for s in small) > 0
    # every request still finishes, later
    assert {f for s in small for f in s["finished"]} == {f"r{i}" for i in range(8)}
    assert small[-1]["t_s"] > big[-1]["t_s"]


def _knee(users: int, **rule: Any) -> tuple[float, float]:
    """Closed-loop users (no think time) sending 32K-token prompts for 512 output tokens to
    Qwen3-30B-A3B FP8 on one H100 (benchmarks/bench_knee.py): (requests/s, preemptions
    per request)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_knee import closed_loop

    rps, pre, _ = closed_loop(32768, 512, users, per_user=8, **rule)
    return rps, pre


def test_throughput_falls_past_the_knee_when_preemption_recomputes() -> None:
    """vLLM without the full-sequence reserve and without prefix caching admits first
    chunks it cannot finish: past the knee (16 users fill the 844K-token pool) preemption
    recomputes whole prompts and requests/s falls (bench_knee: -45 % at 128 users). With
    the reserve (vLLM 0.33's default) the same load levels off."""
    knee, _ = _knee(16, full_isl=False, caching=False)
    past, pre = _knee(64, full_isl=False, caching=False)
    assert past < 0.75 * knee and pre > 1.0
    held, held_pre = _knee(64)  # vLLM as shipped
    assert held > 0.9 * _knee(16)[0] and held > 1.4 * past and held_pre < 0.2


def _async_case(engine: str, b_arrival: float, a_out: int, asyn: bool) -> list[dict[str, Any]]:
    """A decodes alone (10 ms steps); B arrives at b_arrival."""
    reqs = [{"id": "a", "arrival_s": 0.0, "tokens": list(range(8)), "max_tokens": a_out},
            {"id": "b", "arrival_s": b_arrival, "tokens": list(range(100, 108)),
             "max_tokens": 2}]
    sc = {"engine": engine, "block_size": 4, "num_gpu_blocks": 64, "max_num_seqs": 8,
          "max_num_batched_tokens": 64, "chunked_prefill_size": 64,
          "enable_prefix_caching": True, "async_scheduling": asyn,
          "step_time": {"base_s": 0.01}, "requests": reqs}
    ours = replay_scenario(sc)
    _same(ours, replay_reference(sc))
    return ours


def _first_step(steps: list[dict[str, Any]], rid: str) -> int:
    return next(s["step"] for s in steps if rid in s["scheduled"])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_async_scheduling_sees_an_arrival_one_step_later(engine: str) -> None:
    """vLLM's AsyncScheduler / SGLang's overlap loop build step k+1's batch while step k
    runs: B, arriving during A's second step, is first scheduled a step later than without
    it. Alone on an idle engine, or when the engine would have nothing else to run, it is
    scheduled at once (the same step as without)."""
    sync, asyn = (_async_case(engine, 0.015, 10, a) for a in (False, True))
    assert _first_step(sync, "b") == 2 and _first_step(asyn, "b") == 3
    # A finishes at the step B arrives in: nothing else to run, B goes next in both
    sync, asyn = (_async_case(engine, 0.015, 2, a) for a in (False, True))
    assert _first_step(sync, "b") == _first_step(asyn, "b") == 2
    # B arrives on an idle engine (A done at 20 ms)
    sync, asyn = (_async_case(engine, 0.5, 2, a) for a in (False, True))
    assert sync == asyn


def test_deferred_frees_hold_finished_blocks_and_spare_a_victim_in_flight() -> None:
    """vLLM with async scheduling (loop.py): step k+1 is built while step k is in flight,
    so a request finishing at step k still holds its blocks then (with or without a KV
    connector: vLLM frees them in update_from_output of step k; synchronous vLLM frees
    them first). With vLLM 0.33's deferred block frees (defer_block_free: a KV connector)
    a request step k scheduled is no preemption victim either (the running loop stops).
    Each check fails without its rule."""
    two = {"engine": "vllm", "block_size": 4, "num_gpu_blocks": 64, "max_num_seqs": 8,
           "max_num_batched_tokens": 64, "enable_prefix_caching": True,
           "async_scheduling": True, "step_time": {"base_s": 0.01},
           "requests": [{"id": "a", "arrival_s": 0.0, "tokens": list(range(8)),
                         "max_tokens": 1},
                        {"id": "b", "arrival_s": 0.0, "tokens": list(range(100, 108)),
                         "max_tokens": 3}]}
    on, off = (replay_scenario(dict(two, defer_block_free=d)) for d in (True, False))
    sync = replay_scenario(dict(two, async_scheduling=False))
    for d in (True, False):
        _same(replay_scenario(dict(two, defer_block_free=d)),
              replay_reference(dict(two, defer_block_free=d)))
    # a (2 blocks) finishes at step 0; step 1 gives b its third block beside a's two
    assert on[0]["finished"] == ["a"] and on[1]["scheduled"] == {"b": 1}
    assert on[1]["kv_blocks_used"] == off[1]["kv_blocks_used"] == 5
    assert sync[1]["kv_blocks_used"] == 3
    sc = dict(_pressure("vllm", 32), async_scheduling=True)
    on, off = (replay_scenario(dict(sc, defer_block_free=d)) for d in (True, False))
    _same(on, replay_reference(dict(sc, defer_block_free=True)))
    _same(off, replay_reference(dict(sc, defer_block_free=False)))
    # step 0 prefills six requests into 30 of the 31 blocks; at step 1 r1 needs a block
    # and the victim, r5, was scheduled at step 0: nothing is preempted, the loop stops
    assert len(on[0]["scheduled"]) == 6 and on[0]["kv_blocks_used"] == 30
    assert on[1]["scheduled"] == {"r0": 1} and on[1]["preempted"] == []
    assert off[1]["preempted"] == ["r5"]  # without the rule r5 goes at once
    assert on[2]["preempted"] == ["r5"]  # a step later it is no longer in flight


def test_freed_prefix_hits_until_evicted() -> None:
    base = list(range(64))
    sc = {"engine": "vllm", "block_size": 16, "num_gpu_blocks": 9, "max_num_seqs": 4,
          "max_num_batched_tokens": 2048, "enable_prefix_caching": True,
          "step_time": {"base_s": 0.01},
          "requests": [{"id": "a", "arrival_s": 0.0, "tokens": base, "max_tokens": 1},
                       {"id": "b", "arrival_s": 1.0, "tokens": base + [7] * 20,
                        "max_tokens": 1},
                       {"id": "c", "arrival_s": 2.0, "tokens": list(range(500, 628)),
                        "max_tokens": 1},
                       {"id": "d", "arrival_s": 3.0, "tokens": base + [9] * 20,
                        "max_tokens": 1}]}
    hits = {k: v for s in replay_scenario(sc) for k, v in s["new_hits"].items()}
    assert hits["b"] == 64  # a's blocks, freed, still cached
    assert hits["d"] < 64  # c's 8 blocks took the free queue's head: a's tail evicted


def test_run_one_request_alone_prices_its_prefill() -> None:
    cfg = Config(lin_s_per_token=1e-5, fixed_s=0.02, pass_fixed_s=0.005,
                 max_batched_tokens=4096)
    keys, koff, kn = chain_keys([list(range(10000))], 16)
    r, *_ = run(Requests(arrival=np.zeros(1), prompt=np.array([10000]), output=np.array([1]),
                         keys=keys, koff=koff, kn=kn), cfg)
    # three passes of 4096, 4096, 1808 tokens; t0 once
    assert r.ttft[0] == pytest.approx(10000 * 1e-5 + 0.02 + 3 * 0.005)


def _loaded(policy: str, blocks: int, seed: int) -> tuple[Requests, Config]:
    from xmemplan.sizing.engine.pool import synth_keys

    rng = np.random.default_rng(seed)
    n = 240
    prompt = rng.integers(100, 3000, n)
    out = rng.integers(1, 150, n)
    prev = np.arange(n) - 10
    prev[prev < 0] = -1
    shared = np.where(prev >= 0, prompt // 2, 0)
    keys, koff, kn = synth_keys(prompt, out, prev, shared, 16)
    req = Requests(arrival=np.cumsum(rng.exponential(0.05, n)), prompt=prompt, output=out,
                   keys=keys, koff=koff, kn=kn, prev=prev, think=rng.exponential(0.5, n),
                   route=np.where(prev >= 0, -2, -1), tier_tokens=shared,
                   tier=np.zeros(n, np.int64))
    cfg = Config(policy=policy, replicas=3, blocks=blocks, lin_s_per_token=2e-5,
                 attn_s_per_unit=1e-10, kv_bytes_per_token=1e5, hbm_bandwidth=3e12,
                 dense_weight_bytes=1e9, decode_fixed_s=0.004, fixed_s=0.02,
                 pass_fixed_s=0.005, dram_bandwidth=2e10, tier_write=True)
    return req, cfg


@pytest.mark.parametrize("policy", ["vllm", "sglang"])
@pytest.mark.parametrize("blocks", [150, 2000])
@pytest.mark.parametrize("floor", ["add", "max"])
@pytest.mark.parametrize("asyn", ["off", "on", "defer"])
def test_decode_runs_equal_one_step_per_event(policy: str, blocks: int, floor: str,
                                              asyn: str) -> None:
    """Runs of decode steps priced in one event give the times of stepping one by one
    (the trace mode steps one by one), with and without KV pressure, with the layer floor
    as an overhead or as the pass's minimum (a floor above some steps' roofline, and an
    MoE fixed time), with and without async scheduling (an arrival ends a run a step
    later: the step after the one in progress was built without it), and with vLLM 0.33's
    deferred block frees (test_decode_runs_with_deferred_frees_under_pressure)."""
    req, cfg = _loaded(policy, blocks, blocks)
    cfg = cfg.replace(async_schedule=asyn != "off", defer_block_free=asyn == "defer")
    if floor == "max":
        cfg = cfg.replace(floor_rule="max", decode_fixed_s=0.0006, moe_fixed_s=1e-4)
    a, *_ = run(req, cfg)
    b, *_ = run(req, cfg, trace_rows=2, step_rows=2)
    assert a.steps == b.steps
    np.testing.assert_allclose(a.first, b.first, atol=1e-9)
    np.testing.assert_allclose(a.done, b.done, atol=1e-9)
    np.testing.assert_array_equal(a.preemptions, b.preemptions)
    np.testing.assert_array_equal(a.hbm_hit, b.hbm_hit)
    # vLLM's prefix-cache lookups: a waiting request is looked up at every step, those a
    # run of decode steps stands for included
    np.testing.assert_array_equal(a.lookups, b.lookups)
    np.testing.assert_array_equal(a.lookup_hit, b.lookup_hit)
    if policy == "vllm" and blocks == 150:
        assert a.lookups.max() > 1 and a.lookup_hit.sum() > 0  # retried under pressure


def test_replay_lookup_totals_count_schedules_without_a_record() -> None:
    """replay_scenario's `lookup_totals` are Result.lookups / lookup_hit: the lookups of
    each record and those of a schedule that built nothing (empty_schedule_lookup_case:
    b is looked up at steps 1 and 2 and at the empty build between them)."""
    from oracles.oracle_scenarios import empty_schedule_lookup_case

    totals: dict[str, tuple[int, int]] = {}
    recs = replay_scenario(empty_schedule_lookup_case(), totals)
    assert [s["lookups"] for s in recs] == [{"a": 0}, {"b": 4}, {"b": 4}]
    assert totals == {"a": (1, 0), "b": (3, 12)}


@pytest.mark.parametrize("asyn", ["off", "on", "defer"])
def test_decode_runs_with_deferred_frees_under_pressure(asyn: str) -> None:
    """vLLM at 250 blocks (preemptions, waiting requests that do not fit): with the
    deferred frees a build that frees a finished request's blocks starts no run of decode
    steps, as a waiting request may fit at the next step (a run there parted by up to 4 s
    of TTFT from one step per event)."""
    req, cfg = _loaded("vllm", 250, 250)
    cfg = cfg.replace(async_schedule=asyn != "off", defer_block_free=asyn == "defer")
    a, *_ = run(req, cfg)
    b, *_ = run(req, cfg, trace_rows=2, step_rows=2)
    assert a.steps == b.steps and b.preemptions.sum() > 0
    np.testing.assert_allclose(a.first, b.first, atol=1e-9)
    np.testing.assert_allclose(a.done, b.done, atol=1e-9)
    np.testing.assert_array_equal(a.lookups, b.lookups)


def test_hbm_hits_are_an_outcome_of_pool_pressure() -> None:
    """The same sessions on a small pool lose prefixes to other requests: fewer HBM hits,
    more loaded from the tier, more KV in use."""
    big, cfg = _loaded("vllm", 5000, 1)
    rb, *_ = run(big, cfg)
    rs, *_ = run(big, cfg.replace(blocks=150))
    assert rb.hbm_share_of_hits() > rs.hbm_share_of_hits()
    assert rs.kv_usage() > rb.kv_usage()


@pytest.mark.parametrize("policy", ["sglang", "vllm"])
@pytest.mark.parametrize("tier", ["host", "xmem"])
@pytest.mark.parametrize(("prompt", "hit"), [(2000, 0), (16000, 0), (64000, 62000),
                                             (100000, 99000), (40000, 20000),
                                             (30000, 29984)])
@pytest.mark.parametrize("floor", ["add", "max"])
def test_one_request_alone_is_the_model(policy: str, tier: str, prompt: int,
                                        hit: int, floor: str) -> None:
    """The engine prices one request alone as model.ttft does (the calibrated
    single-request model): SGLang's layer overlap, vLLM's load-then-compute; with the
    layer floor as an overhead or as the pass's minimum and an MoE fixed time ("max":
    the opt-in calibration keys floor_rule and moe_layer_latency)."""

    from xmemplan.catalog import load_catalog
    from xmemplan.sizing import model as M
    from xmemplan.sizing.sim import Traffic
    from xmemplan.sizing.simmodel import Setup, config_for, requests_for, single_request_ttft

    cat = load_catalog()
    s = Setup(model=cat.model("qwen3-30b-a3b-fp8"), gpu=cat.gpu("h100-sxm"),
              host=cat.tier("host-dram-pcie5"), xmem=cat.tier("xmem"),
              overlap="layer" if policy == "sglang" else "sum",
              transfer=M.SGLANG_HICACHE if policy == "sglang" else M.VLLM_OFFLOAD,
              calibration=M.calibration_for(cat, policy))
    if floor == "max":
        s = replace(s, calibration=replace(s.calibration, floor_rule="max",
                                           layer_latency_s=2e-4, moe_layer_latency_s=3e-5))
    cfg = config_for(s, replicas=1, nodes=1, load_tier=tier, policy=policy,
                     prompt_p50=prompt, tier_write=False)
    tr = Traffic(np.zeros(1), np.array([float(prompt)]))
    er = requests_for(tr, shared=np.zeros(1), tier_tokens=np.array([hit]),
                      tier=0 if tier == "host" else 1, block_tokens=cfg.block_tokens)
    r, *_ = run(er, cfg)
    # vLLM loads whole 16-token blocks: up to 15 more tokens computed than the model's
    assert r.ttft[0] == pytest.approx(single_request_ttft(s, prompt, hit, tier), rel=0.01)


def test_floor_rule_and_moe_latency_overlay(tmp_path: Any) -> None:
    """The step-pricing keys reach the calibration through a catalog overlay
    ([calibration.ENGINE] floor_rule, moe_layer_latency); a bad rule names its field."""
    from xmemplan.catalog import load_catalog
    from xmemplan.errors import InputError
    from xmemplan.sizing import model as M

    p = tmp_path / "o.toml"
    p.write_text('[calibration.vllm]\nsource = "test"\nfloor_rule = "max"\n'
                 'moe_layer_latency = "29us"\nallreduce_latency = "5us"\n'
                 'allreduce_bus_share = 0.82\n')
    cal = M.calibration_for(load_catalog([p]), "vllm")
    assert (cal.allreduce_latency_s, cal.allreduce_bus_share) == pytest.approx((5e-6, 0.82))
    assert cal.floor_rule == "max"
    assert cal.moe_layer_latency_s == pytest.approx(29e-6)
    assert M.calibration_for(load_catalog([p]), "sglang").floor_rule == "add"
    cat = load_catalog()
    m, g = cat.model("qwen3-30b-a3b"), cat.gpu("a100-sxm")
    roof = M.compute_seconds(m, g, 129, 128, replace(cal, layer_latency_s=0.0))
    assert float(M.compute_seconds(m, g, 129, 128, cal)) == pytest.approx(
        max(float(roof), m.layers * cal.layer_latency_s))
    dense = cat.model("llama-3.1-8b")
    assert M.moe_pass_seconds(dense, cal) == 0.0
    assert M.moe_pass_seconds(m, cal) == pytest.approx(m.layers * 29e-6)
    bad = tmp_path / "bad.toml"
    bad.write_text('[calibration.vllm]\nsource = "test"\nfloor_rule = "min"\n')
    with pytest.raises(InputError) as info:
        load_catalog([bad])
    assert info.value.field == "floor_rule"


def test_moe_kernel_intercept_from_the_published_table() -> None:
    """benchmarks/step_pricing.py's MoE fixed time: fused-MoE kernel time = a fixed part +
    the expert bytes a pass touches at a rate near the HBM roofline (vLLM PR #24700, H100),
    within 6 % at every listed batch, where a pure roofline misses 1 token by 3x."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import step_pricing as SP

    from xmemplan.catalog import load_catalog

    a, bw = SP.moe_intercept()
    assert 25e-6 < a < 35e-6
    assert 0.75 < bw / load_catalog().gpu("h100-sxm").hbm_bandwidth_bytes_per_s < 0.95
    m = load_catalog().model("qwen3-30b-a3b-fp8")
    for t, us in SP.MOE_KERNEL_US:
        touched = m.expert_params / m.layers * (1 - (1 - m.experts_per_token / m.experts) ** t)
        assert (a + touched / bw) * 1e6 == pytest.approx(us, rel=0.06)
    assert touched / bw * 1e6 < 1.5 * SP.MOE_KERNEL_US[-1][1]
    one = m.expert_params / m.layers * m.experts_per_token / m.experts / bw * 1e6
    assert one < SP.MOE_KERNEL_US[0][1] / 2.5


@pytest.mark.parametrize("floor", ["add", "max"])
@pytest.mark.parametrize(("prompt", "hit"), [(9000, 0), (9000, 8000), (20000, 19984)])
def test_tensor_parallel_allreduce_alone_is_the_model(floor: str, prompt: int,
                                                      hit: int) -> None:
    """Llama-3.1-70B at TP 4 with the all-reduces priced (2 a layer: latency + the
    activations over NVLink): the engine's one request alone is model.ttft, and the
    all-reduces add what the formula says to a cold prefill."""
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing import model as M
    from xmemplan.sizing.sim import Traffic
    from xmemplan.sizing.simmodel import Setup, config_for, requests_for, single_request_ttft

    cat = load_catalog()
    cal = replace(M.calibration_for(cat, "vllm"), allreduce_latency_s=5e-6,
                  allreduce_bus_share=0.82, floor_rule=floor)
    s = Setup(model=cat.model("llama-3.1-70b"), gpu=cat.gpu("h100-sxm"),
              host=cat.tier("host-dram-pcie5"), xmem=cat.tier("xmem"), overlap="sum",
              transfer=M.VLLM_OFFLOAD, calibration=cal, shape=M.Shape(tp=4))
    cfg = config_for(s, replicas=1, nodes=1, load_tier="host", policy="vllm",
                     prompt_p50=prompt, tier_write=False)
    tr = Traffic(np.zeros(1), np.array([float(prompt)]))
    er = requests_for(tr, shared=np.zeros(1), tier_tokens=np.array([hit]), tier=0,
                      block_tokens=cfg.block_tokens)
    r, *_ = run(er, cfg)
    want = single_request_ttft(s, prompt, hit, "host")
    assert r.ttft[0] == pytest.approx(want, rel=0.01)
    m, g = s.model, s.gpu
    c0, c1 = M.allreduce_seconds(m, g, s.shape, cal)
    assert c0 == pytest.approx(2 * m.layers * 5e-6)
    assert c1 == pytest.approx(2 * m.layers * 1.5 * m.hidden_size * 2 / (0.82 * 450e9))
    off = single_request_ttft(replace(s, calibration=replace(
        cal, allreduce_latency_s=0.0, allreduce_bus_share=0.0)), prompt, hit, "host")
    if hit == 0:
        assert want - off == pytest.approx(c0 + prompt * c1, rel=0.02)
    assert M.allreduce_seconds(m, g, M.Shape(tp=1), cal) == (0.0, 0.0)


def test_sglang_pool_tables_grow_and_compact_without_changing_the_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's radix tables start small here (17 node rows, 16 heap entries): the run
    renumbers live nodes (GC), compacts heaps and, when still short, stops and runs again
    with larger tables (radix.py G_OVER, engine.run), and every step is as with room."""
    import xmemplan.sizing.engine as E

    prefixes = [list(range(1000 * p, 1000 * p + 24)) for p in range(3)]
    reqs = [{"id": f"r{i}", "arrival_s": 0.002 * i,
             "tokens": prefixes[i % 3] + [50_000 + 100 * i + k for k in range(8 + i % 5)],
             "max_tokens": 3 + i % 4} for i in range(40)]
    sc = {"engine": "sglang", "block_size": 4, "num_gpu_blocks": 40, "max_num_seqs": 4,
          "max_num_batched_tokens": 64, "chunked_prefill_size": 16,
          "enable_prefix_caching": True, "schedule_conservativeness": 0.3,
          "step_time": {"base_s": 0.01, "per_token_s": 1e-4, "per_seq_s": 1e-3},
          "requests": reqs}
    want = replay_scenario(sc)
    calls = []
    real = E._run_once

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(E, "radix_sizes", lambda cfg, n, nkeys: (cfg.replicas + 16, 16))
    monkeypatch.setattr(E, "_run_once", counted)
    got = replay_scenario(sc)
    _same(got, want)
    assert len(calls) > 1  # the first tables were too small: the run went again
    assert sum(len(r["new_hits"]) for r in got) == 40 and any(
        v > 0 for r in got for v in r["new_hits"].values())


@pytest.mark.parametrize("asyn", [False, True])
def test_parked_tier_loads_do_not_deadlock_the_pool(asyn: bool) -> None:
    """Twelve long prompts arrive at once, all but 0.5-3 % of each in the tier, together
    more than the pool (1.27x; coding agents on one GPU, benchmarks/loaded_check.py). In
    round 6 these parked loads took every block and the engine stopped with nothing
    finished (vLLM issue #45388's deadlock). Two of vLLM 0.33's rules now keep a landed
    load's room: the in-flight reservation (`_inflight_prefill_reserved_blocks`, PR
    #44560; checked alone by `test_a_tier_load_waits_for_the_blocks_in_flight_prefills_
    still_need`) and the blocks-holding waiting requests tried first (`kv_holding_waiting`);
    with either one the run finishes. A regression guard of the whole."""

    prompt = np.array([52821, 29504, 51625, 106053, 49590, 71243, 46176, 88069, 65979,
                       51182, 77019, 75286])
    out = np.array([67, 281, 46, 18, 358, 34, 142, 39, 198, 58, 290, 229])
    # the tier holds each prompt's first 97.1 % (loaded_check's published hit share)
    tier_tok = np.floor(prompt * 0.9712).astype(np.int64)
    # each agent's next turn extends its first one (so the first turns' blocks are
    # cacheable, as in the closed loop)
    prompt = np.concatenate([prompt, prompt + 1500])
    out = np.concatenate([out, out])
    prev = np.concatenate([np.full(12, -1), np.arange(12)])
    shared = np.concatenate([np.zeros(12), np.floor(prompt[12:] * 0.9712)])
    tier_tok = np.concatenate([tier_tok, shared[12:].astype(np.int64)])
    import dataclasses

    from xmemplan.sizing.request import build_request
    from xmemplan.sizing.sim import Traffic
    from xmemplan.sizing.simmodel import config_for, requests_for

    rq, _ = build_request(ttft_slo="10s", prompt_tokens="50000", hit_rate=0.97, users=12,
                          model="qwen3-30b-a3b-fp8", gpu="h100-sxm", engine="vllm",
                          kv_dtype="fp8", mem_fraction=0.75, tp=1)
    setup = dataclasses.replace(rq.setup, chunk_tokens=65536, max_num_seqs=256,
                                async_schedule=asyn)
    cfg = config_for(setup, replicas=1, nodes=1, load_tier="host", policy="vllm",
                     prompt_p50=50000.0)
    n = len(prompt)
    tr = Traffic(np.zeros(n), prompt.astype(float), output=out, prev=prev,
                 think=np.full(n, 0.224))
    req = requests_for(tr, shared=shared, tier_tokens=tier_tok, tier=0,
                       block_tokens=cfg.block_tokens)
    assert prompt[:12].sum() > 1.25 * cfg.blocks * cfg.block_tokens
    r, *_ = run(req, cfg)
    assert np.isfinite(r.done).all()
    assert (r.tier_hit > 0).all()  # every request did load from the tier


def _load_gate_scenario() -> dict[str, Any]:
    """One 40-token prefill in 8-token chunks (long_prefill_token_threshold; blocks of 4: 10
    blocks in all), the step's budget left for more, and beside
    it a 24-token request whose first 20 tokens the tier holds (a 5-block load), in a pool
    of 13 blocks."""
    return {"engine": "vllm", "block_size": 4, "num_gpu_blocks": 14, "max_num_seqs": 8,
            "max_num_batched_tokens": 64, "long_prefill_token_threshold": 8,
            "enable_prefix_caching": True,
            "step_time": {"base_s": 0.01, "per_token_s": 0.0, "per_seq_s": 0.0},
            "tier_link": {"kv_bytes_per_token": 1.0, "bandwidth": 1000.0, "latency_s": 0.0},
            "requests": [
                {"id": "a", "arrival_s": 0.0, "tokens": list(range(1000, 1040)),
                 "max_tokens": 2},
                {"id": "b", "arrival_s": 0.0, "tokens": list(range(2000, 2024)),
                 "max_tokens": 2, "tier_tokens": 20}]}


def test_a_tier_load_waits_for_the_blocks_in_flight_prefills_still_need() -> None:
    """vLLM 0.33 admits an async tier load only into the free blocks less what the
    in-flight prefills still need (`_inflight_prefill_reserved_blocks`, PR #44560). After
    a's first chunk 11 blocks are free, enough for b's 5-block load, but a still needs 8:
    b's load waits until a no longer needs them (vLLM 0.33's own Scheduler gives the same
    records: tests/oracles, `test_tier_load_gate_matches_vllm`)."""
    steps = replay_scenario(_load_gate_scenario())
    first_load = next(k for k, s in enumerate(steps) if s["loads"])
    last_a = max(k for k, s in enumerate(steps) if "a" in s["scheduled"])
    assert steps[first_load]["loads"] == {"b": [0, 20]}
    assert first_load > last_a  # without the gate b loads at step 0 and a must wait
    assert sum(s["scheduled"].get("a", 0) for s in steps) == 41  # 40 prompt + 1 decode
    assert [f for s in steps for f in s["finished"]] == ["a", "b"]


def test_a_whole_prompt_in_the_tier_is_loaded_and_its_last_token_recomputed() -> None:
    """vLLM 0.33's OffloadingConnector loads up to the whole prompt (full attention,
    whole blocks: `_lookup_complete_chunks`), and vLLM computes a whole prompt's last
    token again once it has landed (`_update_waiting_for_remote_kv`). a's 16 tokens fill
    4 blocks: it loads all 16, then runs 1 token with 15 computed; b's 21 tokens load 20
    and run 1 (vLLM 0.33's own Scheduler gives the same records: tests/oracles,
    `test_a_whole_prompt_load_matches_vllm`). Before round 15 the engine stopped the
    load a token short of the prompt: a loaded 12 and ran 4."""
    from oracles.oracle_scenarios import whole_prompt_load_case

    steps = replay_scenario(whole_prompt_load_case())
    loads = {rid: v for s in steps for rid, v in s["loads"].items()}
    assert loads == {"a": [0, 16], "b": [0, 20]}
    first = {rid: (s["scheduled"][rid], s["new_hits"][rid]) for s in reversed(steps)
             for rid in s["new_hits"]}
    assert first == {"a": (1, 15), "b": (1, 20)}
    assert {rid: sum(s["scheduled"].get(rid, 0) for s in steps) for rid in "ab"} == \
        {"a": 3, "b": 2}  # the recomputed token, then the decodes



@pytest.mark.parametrize("asyn", [False, True])
def test_sglang_aborts_the_last_decode_that_cannot_fit(asyn: bool) -> None:
    """SGLang's retract_decode keeps one request; when even its next page does not fit it
    aborts it (no batch that step) and builds again at once: d, refused while a filled the
    pool, is admitted at the same time (SGLang 0.5.23's own loop gives the same steps,
    tests/oracles/test_oracle_sched_sglang.py). Before, the engine's run ended at step
    4,205 with a running without a page and d waiting: neither finished."""
    from oracles.oracle_scenarios import abort_case

    sc = abort_case(asyn)
    steps = replay_scenario(sc)
    _same(steps, replay_reference(sc))
    k = next(s["step"] for s in steps if s["aborted"])
    assert steps[k]["aborted"] == ["a"] and steps[k]["scheduled"] == {}
    assert steps[k + 1]["scheduled"] == {"d": 40} and steps[k + 1]["t_s"] == steps[k]["t_s"]
    assert sorted(r for s in steps for r in s["finished"]) == ["b", "c", "d"]


def test_sglang_overlap_reserves_the_output_a_finishing_request_has_in_flight() -> None:
    """Under SGLang's overlap loop a request whose last output is still in flight (r2
    at step 7) keeps that token in the decode reserve. So r8 is refused by a fraction of a
    token and admitted a step later, beside r9: the engine, the reference and SGLang
    0.5.23's own overlap loop agree (tests/oracles/test_oracle_sched_sglang.py).
    Hypothesis found it: the reference had admitted r8 at step 7."""
    from oracles.oracle_scenarios import finishing_reserve_case

    sc = finishing_reserve_case()
    steps = replay_scenario(sc)
    _same(steps, replay_reference(sc))
    assert "r2" in steps[6]["finished"]
    assert steps[7]["scheduled"] == {"r1": 1, "r3": 1, "r5": 1, "r7": 1}
    assert steps[8]["scheduled"] == {"r8": 37, "r9": 1}


def test_vllm_caps_a_long_prefill_only_beside_another_request() -> None:
    """vLLM 0.33's long_prefill_token_threshold is not applied when the request is the
    only one running or waiting: a prefills its 40 tokens in one step, b (arriving while
    a decodes) 16 a step (vLLM's own scheduler gives the same steps:
    tests/oracles/test_oracle_sched_vllm.py)."""
    from oracles.oracle_scenarios import long_prefill_case

    sc = long_prefill_case()
    steps = replay_scenario(sc)
    _same(steps, replay_reference(sc))
    assert steps[0]["scheduled"] == {"a": 40}
    b = [s["scheduled"]["b"] for s in steps if "b" in s["scheduled"]]
    assert b[:3] == [16, 16, 8]


def test_vllm_async_caches_a_block_once_its_tokens_are_seen() -> None:
    """vLLM's async scheduling: a block is cached only once the scheduler holds all its
    tokens, and the output of the step in flight is not among them yet (policy.allocate,
    loop._free_finished). b's second block is filled by its first output; b is preempted
    at step 2 before that block was cached, so at its re-admission (step 4) it hits its
    first block and recomputes 5 tokens, as vLLM's own AsyncScheduler does
    (tests/oracles/test_oracle_sched_vllm.py). Before round 15 the engine hit 8 and
    computed 1. Without async scheduling the block is cached at step 1 and b hits 8."""
    from oracles.oracle_scenarios import unseen_output_case

    sc = unseen_output_case()
    steps = replay_scenario(sc)
    _same(steps, replay_reference(sc))
    assert steps[2]["preempted"] == ["b"]
    assert steps[4]["new_hits"] == {"b": 4} and steps[4]["scheduled"] == {"b": 5}
    sync = dict(sc, async_scheduling=False)
    steps = replay_scenario(sync)
    _same(steps, replay_reference(sync))
    readmit = next(s for s in steps if "b" in s["new_hits"] and s["step"] > 0)
    assert readmit["new_hits"] == {"b": 8}


def test_vllm_async_caches_a_finished_requests_output_block_when_processed() -> None:
    """vLLM's async scheduling: processing a step (update_from_output, after the next
    step is built) caches a running request's computed blocks, its output now seen
    (loop._free_finished). a's block of its first output is cached when step 1, which
    finished a, is processed, so a's blocks go to the tail of the free queue and step 3
    evicts c's first block: c hits nothing at step 4 and computes 3, as vLLM's own
    AsyncScheduler does (tests/oracles/test_oracle_sched_vllm.py). Caching at the build
    alone leaves a's block at the front for step 3: c hits 1 and computes 2."""
    from oracles.oracle_scenarios import finished_output_block_case

    sc = finished_output_block_case()
    steps = replay_scenario(sc)
    _same(steps, replay_reference(sc))
    assert steps[1]["preempted"] == ["c"] and steps[1]["finished"] == ["a"]
    assert steps[4]["new_hits"] == {"c": 0} and steps[4]["scheduled"] == {"c": 3}
