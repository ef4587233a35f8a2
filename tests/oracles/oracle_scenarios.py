"""Scenario dicts of the oracle contract (docs/oracles.md): small seeded generators that reach
eviction, KV pressure and preemption, and slices of the shared traces.

Token ids: generated prompts use ids below 1,000,000 (outputs start there); trace prompts use
ids from 2**40 up, one id per (cache key, position in its block), so two prompts share a
token prefix exactly where their chained block keys agree; a prompt's tail past its last key
(Claude Code block traces key full 64-token blocks only) gets fresh ids of its own.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRACE_TOKEN_BASE = 1 << 40


# -- generated -------------------------------------------------------------------------------
def agentic_requests(
    seed: int, n_requests: int, *, sessions: int = 4, system_tokens: int = 40,
    turn_tokens: tuple[int, int] = (5, 60), output_tokens: tuple[int, int] = (1, 24),
    max_prompt: int = 400, shared_system: bool = True,
) -> list[dict[str, Any]]:
    """Interleaved agent sessions: each turn's prompt is the previous prompt + its output
    stand-in + new text, sessions share (or not) a system prompt, some sessions restart."""
    rng = random.Random(seed)
    next_tok = iter(range(1, 999_999))
    system = [next(next_tok) for _ in range(system_tokens)]
    history: list[list[int]] = []
    for _ in range(sessions):
        base = list(system) if shared_system else [next(next_tok) for _ in range(system_tokens)]
        history.append(base)
    reqs = []
    for i in range(n_requests):
        s = rng.randrange(sessions)
        if len(history[s]) > max_prompt - turn_tokens[1] or rng.random() < 0.05:
            history[s] = list(system) if shared_system else []
        turn = [next(next_tok) for _ in range(rng.randint(*turn_tokens))]
        prompt = history[s] + turn
        out = rng.randint(*output_tokens)
        reqs.append({"id": f"g{seed}-{i}", "tokens": prompt, "output_tokens": out})
        # the next turn re-sends this prompt plus the answer (as text: new ids, not outputs)
        history[s] = prompt + [next(next_tok) for _ in range(out)]
    return reqs


def cache_scenario(
    engine: str, requests: list[dict[str, Any]], *, page_size: int, capacity_tokens: int,
    with_outputs: bool = False, inflight: int = 1,
) -> dict[str, Any]:
    return {
        "engine": engine, "page_size": page_size, "capacity_tokens": capacity_tokens,
        "with_outputs": with_outputs, "inflight": inflight, "requests": requests,
    }


def sched_scenario(
    engine: str, seed: int, n_requests: int, *, block_size: int = 4, num_gpu_blocks: int = 64,
    max_num_seqs: int = 8, max_num_batched_tokens: int = 64, rate: float = 50.0,
    max_tokens: tuple[int, int] = (2, 30), **agent: Any,
) -> dict[str, Any]:
    """Poisson arrivals of agentic prompts into a small KV pool: reaches KV pressure and
    preemption (the pool holds a few running requests only)."""
    rng = random.Random(seed + 7919)
    # each request alone fits the pool (prompt + outputs); together they do not
    pool = (num_gpu_blocks - 1) * block_size
    agent.setdefault("max_prompt", max(8, pool // 2 - max_tokens[1]))
    agent.setdefault("system_tokens", min(40, agent["max_prompt"] // 4))
    agent.setdefault("turn_tokens", (3, max(4, agent["max_prompt"] // 6)))
    reqs = agentic_requests(seed, n_requests, **agent)
    t = 0.0
    out = []
    for r in reqs:
        t += rng.expovariate(rate)
        out.append({"id": r["id"], "arrival_s": round(t, 6), "tokens": r["tokens"],
                    "max_tokens": rng.randint(*max_tokens)})
    return {
        "engine": engine, "block_size": block_size, "num_gpu_blocks": num_gpu_blocks,
        "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
        "enable_prefix_caching": True, "long_prefill_token_threshold": 0,
        "chunked_prefill_size": max_num_batched_tokens, "schedule_conservativeness": 1.0,
        "step_time": {"base_s": 0.005, "per_token_s": 2e-5, "per_seq_s": 1e-4},
        "requests": out,
    }


def tier_scenario(
    seed: int, n_requests: int, *, share: float = 0.7, bandwidth: float = 20_000.0,
    latency_s: float = 0.001, **kw: Any,
) -> dict[str, Any]:
    """`sched_scenario` (vLLM) with a host-DRAM tier behind vLLM's connector: a share of the
    requests find part of their prompt in the tier (`tier_tokens`: from half to all of
    it, as an earlier turn offloaded it), loaded over one link at `bandwidth` bytes/s
    (1 byte a token: shared by the loads in flight) after `latency_s`."""
    sc = sched_scenario("vllm", seed, n_requests, **kw)
    rng = random.Random(seed + 104_729)
    for r in sc["requests"]:
        n = len(r["tokens"])
        r["tier_tokens"] = int(n * rng.uniform(0.5, 1.0)) if rng.random() < share else 0
    sc["tier_link"] = {"kv_bytes_per_token": 1.0, "bandwidth": bandwidth,
                       "latency_s": latency_s}
    return sc


# -- shared traces ---------------------------------------------------------------------------
def trace_requests(
    paths: list[Path], *, limit: int | None = None, files: int | None = None
) -> list[dict[str, Any]]:
    """`iter_trace_requests` as a list."""
    return list(iter_trace_requests(paths, limit=limit, files=files))


def iter_trace_requests(
    paths: list[Path], *, limit: int | None = None, files: int | None = None
) -> Iterator[dict[str, Any]]:
    """Requests of trace files in xmemplan's global-scope replay order (by timestamp, stable;
    `hitrate.pipeline.replay`), as token lists. `files` keeps the first N files (sorted),
    `limit` the first N requests after ordering."""
    import numpy as np

    from xmemplan.hitrate.pipeline import _order_in_sessions
    from xmemplan.traces.base import ReadOptions, SkipLog
    from xmemplan.traces.registry import discover
    from xmemplan.traces.schema import concat_batches

    found = discover(list(paths))
    chosen = sorted(found.files, key=lambda fr: str(fr[0]))
    if files is not None:
        chosen = chosen[:files]
    batches = []
    for path, reader in chosen:
        batches.extend(reader.read(path, ReadOptions(), SkipLog()))
    batch = concat_batches(batches)
    order, _, _ = _order_in_sessions(batch)
    ts = np.nan_to_num(batch.timestamp_s[order], nan=np.inf)
    n = len(batch)
    g = np.lexsort((np.arange(n), ts)) if not np.all(np.isinf(ts)) else np.arange(n)
    order = order[g]
    if limit is not None:
        order = order[:limit]
    key_index: dict[object, int] = {}
    fresh = 0  # tail blocks of their own, counted down from -1
    for row in order.tolist():
        keys = batch.keys[batch.key_offsets[row] : batch.key_offsets[row + 1]].tolist()
        block = int(batch.block_tokens[row])
        prompt = int(batch.prompt_tokens[row])
        tokens: list[int] = []
        for k in keys:
            base = TRACE_TOKEN_BASE + key_index.setdefault(k, len(key_index)) * block
            take = min(block, prompt - len(tokens))
            tokens.extend(range(base, base + take))
        while len(tokens) < prompt:  # unkeyed tail: never shared
            fresh -= 1
            base = TRACE_TOKEN_BASE + key_index.setdefault(("tail", fresh), len(key_index)) * block
            take = min(block, prompt - len(tokens))
            tokens.extend(range(base, base + take))
        outputs = int(batch.output_tokens[row])
        yield {"id": f"{batch.session_id[row]}#{row}", "tokens": tokens,
               "output_tokens": max(outputs, 0)}


def abort_case(asyn: bool) -> dict[str, Any]:
    """One request whose outputs (4,300) outgrow the pool (1,100 pages of 4): admitted, as
    SGLang reserves at most 4,096 outputs (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION), it fills
    the pool alone; d arrives just before it does (test_oracle_sched_sglang.py and tests/test_engine.py)."""
    reqs = [{"id": "a", "arrival_s": 0.0, "tokens": list(range(1, 201)), "max_tokens": 4300},
            {"id": "b", "arrival_s": 0.001, "tokens": list(range(1000, 1040)), "max_tokens": 30},
            {"id": "c", "arrival_s": 5.0, "tokens": list(range(2000, 2040)), "max_tokens": 20},
            {"id": "d", "arrival_s": 21.5, "tokens": list(range(3000, 3040)), "max_tokens": 10}]
    return {"engine": "sglang", "block_size": 4, "num_gpu_blocks": 1100, "max_num_seqs": 8,
            "max_num_batched_tokens": 64, "enable_prefix_caching": True,
            "long_prefill_token_threshold": 0, "chunked_prefill_size": 64,
            "schedule_conservativeness": 1.0, "async_scheduling": asyn,
            "step_time": {"base_s": 0.005, "per_token_s": 2e-5, "per_seq_s": 1e-4},
            "requests": reqs}




def finishing_reserve_case() -> dict[str, Any]:
    """Hypothesis found it (round 14, under pytest-xdist's seeds): SGLang, two-token pages,
    the overlap loop. When step 7 is built, r2's last output is still in flight, and
    SGLang's decode reserve counts that token (its output_ids do not hold it yet). With it,
    r8's 37 new tokens, 27 outputs and a page come 0.2 tokens short of the budget, so SGLang
    decodes and admits r8 a step later, beside r9. The plain-Python reference had dropped
    the token and admitted r8 at once; the engine and SGLang's own loop agree
    (test_oracle_sched_sglang.py and tests/test_engine.py)."""
    rows = [("r0", 0.0, 0, 12, 1, 3), ("r1", 0.0, 0, 12, 31, 12), ("r2", 0.0, 0, 12, 29, 5),
            ("r3", 0.0, 0, 12, 7, 16), ("r4", 0.003, 0, 12, 1, 2), ("r5", 0.003, 0, 12, 36, 7),
            ("r6", 0.003, 0, 12, 1, 1), ("r7", 0.003, 0, 12, 16, 24),
            ("r8", 0.003, 1000, 24, 13, 27), ("r9", 0.003, 0, 12, 1, 1)]
    reqs = [{"id": rid, "arrival_s": t,
             "tokens": [*range(p0, p0 + npre), *range(50_000 + 100 * i, 50_000 + 100 * i + own)],
             "max_tokens": out}
            for i, (rid, t, p0, npre, own, out) in enumerate(rows)]
    return {"engine": "sglang", "block_size": 2, "num_gpu_blocks": 114, "max_num_seqs": 6,
            "max_num_batched_tokens": 8, "enable_prefix_caching": True,
            "scheduler_reserve_full_isl": True, "long_prefill_token_threshold": 0,
            "chunked_prefill_size": 8192, "schedule_conservativeness": 0.3,
            "async_scheduling": True, "defer_block_free": False,
            "step_time": {"base_s": 0.01, "per_token_s": 1e-4, "per_seq_s": 1e-3},
            "requests": reqs}


STEP_TIME = {"base_s": 0.01, "per_token_s": 1e-4, "per_seq_s": 1e-3}  # the cases' clock


def vllm_case(reqs: list[dict[str, Any]], *, block_size: int, num_gpu_blocks: int,
              budget: int, asyn: bool, cap: int = 0, **extra: Any) -> dict[str, Any]:
    """A hand-made vLLM scenario: 8 seats, prefix caching on, the whole prompt reserved
    at admission (vLLM 0.33's default), `cap` the long-prefill cap (0: none)."""
    return {"engine": "vllm", "block_size": block_size, "num_gpu_blocks": num_gpu_blocks,
            "max_num_seqs": 8, "max_num_batched_tokens": budget,
            "enable_prefix_caching": True, "scheduler_reserve_full_isl": True,
            "long_prefill_token_threshold": cap, "async_scheduling": asyn,
            "step_time": dict(STEP_TIME), **extra, "requests": reqs}


def long_prefill_case() -> dict[str, Any]:
    """vLLM's long-prefill cap (16 tokens here) where it binds and where it does not:
    vLLM 0.33 applies it only with more than one request running or waiting, so a, alone
    at t = 0, prefills its 40 tokens at once, and b, arriving while a decodes, is cut to
    16 a step. The random sweep of round 14 found the engine capping a lone request."""
    reqs = [{"id": "a", "arrival_s": 0.0, "tokens": list(range(1, 41)), "max_tokens": 12},
            {"id": "b", "arrival_s": 0.05, "tokens": list(range(100, 140)), "max_tokens": 4}]
    return vllm_case(reqs, block_size=4, num_gpu_blocks=64, budget=64, asyn=False, cap=16)


def unseen_output_case() -> dict[str, Any]:
    """vLLM's async scheduling caches a block only once the scheduler holds all its tokens
    (round 15). Blocks of 4, 5 usable. b's 7-token prompt plus its first output fills its
    second block; the step that computes that output's KV (step 1) is built while the
    output itself is still in flight, so vLLM does not cache the block then
    (`allocate_slots` caches up to `request.num_tokens`, which lacks the output), nor
    when step 0 is processed (its computed tokens less those in flight end a token
    short). At step 2 b needs a third block, finds none and is preempted before that
    allocation would have cached it. Re-admitted at step 4 (once a has finished and
    freed its blocks), b hits its first block only and recomputes 5 tokens. Until round
    15 the engine cached the block at step 1 and b hit 8 tokens and computed 1."""
    reqs = [{"id": "a", "arrival_s": 0.0, "tokens": list(range(1, 9)), "max_tokens": 4},
            {"id": "b", "arrival_s": 0.0, "tokens": list(range(101, 108)), "max_tokens": 4}]
    return vllm_case(reqs, block_size=4, num_gpu_blocks=6, budget=2048, asyn=True)


def empty_schedule_lookup_case() -> dict[str, Any]:
    """Under async scheduling a schedule can build nothing and still look a request up
    (round 15). Blocks of 4, 4 usable, a budget of 8. Step 0 prefills a (8 tokens, 2
    blocks), leaving no budget for b. Step 1, built while step 0 runs, decodes a (a third
    block) and looks b up: b hits a's first block (4 tokens) but needs 2 more, and 1 is
    free. a's last output is then in flight, so the build of step 2 skips a (vLLM's
    AsyncScheduler does not schedule a request that step 1 brings to max_tokens) and b
    still does not fit: nothing is scheduled, and no step runs. Step 1 is processed (a
    finishes and frees its blocks) and the build again admits b. b is looked up 3 times
    (12 hit tokens), the records show 2."""
    reqs = [{"id": "a", "arrival_s": 0.0, "tokens": list(range(1, 9)), "max_tokens": 2},
            {"id": "b", "arrival_s": 0.0, "tokens": list(range(1, 5)) + list(range(101, 109)),
             "max_tokens": 1}]
    return vllm_case(reqs, block_size=4, num_gpu_blocks=5, budget=8, asyn=True)


def finished_output_block_case() -> dict[str, Any]:
    """The other half of unseen_output_case's rule: processing a step (vLLM's
    update_from_output, after the next step is built) caches the blocks a running
    request has computed, its new output now among its tokens. One-token blocks, 21
    usable; a, b and c arrive at once and take 19. At step 1 a and b take the last two
    and c, needing one for its first output, is preempted (its prompt blocks freed,
    cached). Step 2 takes c's second block. a finished at step 1; when step 1 is
    processed its block of its first output (computed at step 1) is cached, so a's
    blocks go to the tail of the free queue, behind c's first block, which step 3 then
    takes: c, re-admitted at step 4, hits nothing and computes 3 tokens. Caching only at
    the build (where that output was not yet seen) leaves a's block uncached, at the
    front, for step 3 to take: c would hit 1 and compute 2. (Round 15's sweep of the
    reference with the allocation half alone: this is seed 1078, shrunk and rewritten.)"""
    reqs = [{"id": "a", "arrival_s": 0.0, "tokens": [1], "max_tokens": 2},
            {"id": "b", "arrival_s": 0.0, "tokens": list(range(100, 116)), "max_tokens": 4},
            {"id": "c", "arrival_s": 0.0, "tokens": [200, 201], "max_tokens": 2}]
    return vllm_case(reqs, block_size=1, num_gpu_blocks=22, budget=2048, asyn=True)


def random_small_pool(engine: str, rng: random.Random, *, asyn: bool,
                      cap: bool = False) -> dict[str, Any]:
    """A small-pool scenario drawn as tests/test_engine.py's Hypothesis strategy draws
    them (round 14's random sweeps, docs/oracles.md): 1-12 requests over three shared
    prefixes, pages of 1/2/4/16, a pool from just fitting the longest request to four
    times that, budgets 8-2,048, 1-8 seats, caching on or off; `cap`: vLLM's long-prefill
    cap (16) in a third of them."""
    bs = rng.choice([1, 2, 4, 16])
    n = rng.randint(1, 12)
    prefixes = [list(range(1000 * p, 1000 * p + rng.randint(0, 40))) for p in range(3)]
    t = 0.0
    reqs: list[dict[str, Any]] = []
    for i in range(n):
        t += rng.choice([0.0, 0.0, 0.003, 0.02])
        pre = prefixes[rng.randint(0, 2)]
        own = [50_000 + 100 * i + k for k in range(rng.randint(1, 40))]
        reqs.append({"id": f"r{i}", "arrival_s": t, "tokens": pre + own,
                     "max_tokens": rng.randint(1, 30)})
    longest = max(len(r["tokens"]) + r["max_tokens"] for r in reqs)
    fit = -(-longest // bs)
    sc: dict[str, Any] = {
        "engine": engine, "block_size": bs, "num_gpu_blocks": rng.randint(fit + 2, fit * 4 + 8),
        "max_num_seqs": rng.randint(1, 8),
        "max_num_batched_tokens": rng.choice([8, 32, 64, 2048]),
        "enable_prefix_caching": rng.random() < 0.5,
        "long_prefill_token_threshold": rng.choice([0, 0, 16]) if cap else 0,
        "async_scheduling": asyn,
        "step_time": {"base_s": 0.01, "per_token_s": 1e-4, "per_seq_s": 1e-3},
        "requests": reqs}
    if engine == "vllm":
        sc["scheduler_reserve_full_isl"] = rng.choice([True, True, False])
    else:
        sc["chunked_prefill_size"] = rng.choice([16, 32, 8192])
        sc["schedule_conservativeness"] = rng.choice([0.3, 1.0])
    return sc


def random_tier_pool(engine: str, rng: random.Random, *, asyn: bool,
                     large: bool | None = None) -> dict[str, Any]:
    """A scenario with a host-DRAM tier behind vLLM's KV connector (docs/oracles.md,
    "vLLM with a tier"), drawn at random for round 15's tier sweeps. Small (3 in 4 when
    `large` is None): `random_small_pool`, and each request's `tier_tokens` either none,
    its shared prefix (an earlier turn offloaded it), or a random share of its prompt up
    to all of it. Large: `tier_scenario` (20-60 agentic requests, pages of 4 or 16, a
    pool a few requests fill: KV pressure and preemption; or, 3 in 10, prompts up to 400
    tokens into 384 to 16,384 tokens of pool, as TIER_LONG). Either way `tier_link` moves
    1 byte a token at 1,000 to 1,000,000 B/s after 0-100 ms, so a load lands in the step
    it starts or many steps later, and loads in flight share the link.

    vLLM only: SGLang's scheduler driver (sched_sglang.py) builds the plain `RadixCache`
    and has no tier input (docs/oracles.md says why)."""
    if engine != "vllm":
        raise ValueError("tier scenarios are vLLM's only: the SGLang scheduler driver "
                         "has no HiCache tier (docs/oracles.md)")
    if large is None:
        large = rng.random() < 0.25
    bandwidth = 10 ** rng.uniform(3.0, 6.0)
    latency = rng.choice([0.0, 0.0, 0.001, 0.005, 0.03, 0.1])
    if large:
        bs = rng.choice([4, 4, 16])
        agent: dict[str, Any] = {}
        if rng.random() < 0.3:  # long prompts into a larger pool: shared loads at once
            agent["max_prompt"] = 400
            blocks = rng.choice([96, 160, 4096]) * 4 // bs
        else:  # a pool a few requests fill
            blocks = rng.randint(16, 64) if bs == 4 else rng.randint(8, 24)
        seats, budget = rng.choice([4, 8, 16, 32]), rng.choice([16, 32, 64, 256])
        sc = tier_scenario(  # vLLM wants a budget of at least one token a seat
            rng.randrange(1 << 30), rng.randint(20, 60), share=rng.uniform(0.3, 1.0),
            bandwidth=bandwidth, latency_s=latency, block_size=bs, num_gpu_blocks=blocks,
            max_num_seqs=seats, max_num_batched_tokens=max(seats, budget),
            rate=rng.choice([100.0, 300.0, 800.0]), max_tokens=(2, rng.choice([16, 40])),
            **agent)
        sc["enable_prefix_caching"] = rng.random() < 0.8
        sc["scheduler_reserve_full_isl"] = rng.choice([True, True, False])
        sc["async_scheduling"] = asyn
        return sc
    sc = random_small_pool(engine, rng, asyn=asyn, cap=True)
    share = rng.uniform(0.3, 1.0)
    for r in sc["requests"]:
        n = len(r["tokens"])
        own = sum(1 for x in r["tokens"] if x >= 50_000)
        how = rng.random()
        if how >= share:
            r["tier_tokens"] = 0
        elif how < share / 3:
            r["tier_tokens"] = n - own  # the shared prefix
        else:
            r["tier_tokens"] = rng.randint(1, n)
    sc["tier_link"] = {"kv_bytes_per_token": 1.0, "bandwidth": bandwidth,
                       "latency_s": latency}
    return sc


def whole_prompt_load_case() -> dict[str, Any]:
    """Two requests whose whole prompts the tier holds, blocks of 4: a's 16 tokens fill
    4 blocks, b's 21 do not fill 6. vLLM 0.33's OffloadingConnector finds hits up to the
    whole prompt for full attention, in whole blocks (offloading/scheduler.py
    `_lookup_complete_chunks`), and once a whole prompt has landed vLLM computes its last
    token again (`_update_waiting_for_remote_kv`): a loads 16 tokens and computes 1, b
    loads 20 and computes 1. Round 15 found the engine (and our connector) stopping the
    load one token short of the prompt, so a loaded 12 and computed 4."""
    reqs = [{"id": "a", "arrival_s": 0.0, "tokens": list(range(1, 17)), "max_tokens": 3,
             "tier_tokens": 16},
            {"id": "b", "arrival_s": 0.05, "tokens": list(range(100, 121)), "max_tokens": 2,
             "tier_tokens": 21}]
    return {"engine": "vllm", "block_size": 4, "num_gpu_blocks": 64, "max_num_seqs": 8,
            "max_num_batched_tokens": 64, "enable_prefix_caching": True,
            "long_prefill_token_threshold": 0, "async_scheduling": False,
            "step_time": {"base_s": 0.01, "per_token_s": 1e-4, "per_seq_s": 1e-3},
            "tier_link": {"kv_bytes_per_token": 1.0, "bandwidth": 4000.0, "latency_s": 0.0},
            "requests": reqs}
