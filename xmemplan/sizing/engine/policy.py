"""The engines' scheduling policies over the block pool (numba): one step's batch.

State is flat arrays: `RI[i, field]` per request (ints), `QI[r, field]` per replica.
Waiting and running sets are doubly linked lists per replica (FCFS order kept; vLLM
prepends a preempted request to the waiting queue and pops the newest running one).

vLLM V1 (`vllm_schedule`, v1/core/sched/scheduler.py `schedule()`):
1. running requests in order: each asks min(its uncomputed tokens, long-prefill
   threshold, the step's token budget); blocks for them are allocated, and while that
   fails the newest running request is preempted (its blocks freed, its computed tokens
   set to 0, back to the head of the waiting queue: recompute);
2. if nothing was preempted, waiting requests FCFS while the budget lasts and fewer than
   max_num_seqs run: its cached prefix (full blocks, at most all tokens but one) is a hit;
   a prefix the tier holds beyond that, up to the whole prompt, is loaded first
   (OffloadingConnector: the request waits, WAITING_FOR_REMOTE_KVS, and others run; its
   blocks are findable once the load has landed and the loop reaches it; a whole
   prompt loaded has its last token computed again); the rest is cut to the budget; the
   first request whose blocks do not fit stops the loop. Waiting requests that hold
   blocks (a load under way or landed) head the waiting list in the order their loads
   started, a preempted request goes after them (vLLM 0.33's kv_holding_waiting
   queue, drained before the waiting queue).
Under async scheduling (loop.py) a request that finished in the step in flight is
skipped and keeps its blocks (as the victim of a preemption it frees them at once); with
deferred block frees (a KV connector, P_HOLD_VICTIMS) a victim that step scheduled is not
preempted: the running loop stops. A block is cached only once the scheduler holds all
its tokens, and under async scheduling the output of the step in flight is not among
them yet (allocate's `unseen`). The long-prefill cap applies only with more than one
request running or waiting (vLLM 0.33).

SGLang (`sglang_schedule`, managers/scheduler.py `get_next_batch_to_run`,
schedule_policy.py `PrefillAdder`):
1. prefill first: the request being chunked, then waiting requests FCFS; each takes its
   cached prefix (and the tier's, loaded with the batch), and is admitted while its new
   tokens plus min(its remaining output, 4096) x new_token_ratio fit the free and
   evictable KV less the same reserve for the running requests; the batch's new tokens
   stop at chunked_prefill_size (the request cut there is the one chunked request); a
   request refused for memory, or the running cap reached, while requests run sets
   batch_is_full (Q_FULL): no new request is tried until one leaves the running batch;
   every 32nd pass the first 128 waiting requests touch their prefixes' LRU time;
2. else a decode step of every running request; when the decode's new blocks do not
   fit, requests are retracted (fewest output tokens first, then the longest prompt, of
   equal keys the last), their KV freed, back to the waiting queue, and new_token_ratio
   becomes the kept requests' estimate; each decode step without a retraction lowers it
   towards its floor (loop.py; it starts again when the engine is idle). When even the
   last decode's next page does not fit it is aborted (no batch that step: Q_ABORT);
   under the overlap loop a request whose output in flight is its last sits out the
   decode, and a decode that does not fit beside it waits a step (loop.py).
SGLang 0.5.23's own Scheduler step loop gives the same steps (docs/oracles.md).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import no_runtime
from xmemplan.sizing.engine.pool import (
    dl_append,
    dl_insert_after,
    dl_prepend,
    dl_remove,
    pool_alloc,
    pool_cache,
    pool_evictable,
    pool_free,
    pool_match,
    pool_touch,
)
from xmemplan.sizing.engine.prefetch import PP_POLICY, pf_poll
from xmemplan.sizing.engine.radix import (
    RQ_AVAIL,
    radix_cached,
    radix_checkpoint,
    radix_evict,
    radix_lock,
    radix_path_evictable,
    radix_release,
    radix_short,
    radix_take,
    radix_walk,
)

# request int fields
(R_PROMPT, R_OUT, R_GEN, R_COMP, R_STATUS, R_REP, R_KOFF, R_KN, R_RBOFF, R_HELD, R_NCACHED,
 R_WPREV, R_WNEXT, R_RPREV, R_RNEXT, R_STOK, R_HIT, R_TIER_TOK, R_EXT, R_PREEMPT, R_LOADED,
 R_STARTED, R_NEWHIT, R_FLOWS, R_S0, R_LOADED_TOTAL, R_HIT_TOTAL, R_FIXHIT, R_CACHEABLE,
 R_LOOKUPS, R_LOOKUP_HIT, R_NODE, R_PEND) = range(33)
N_R = 33
R_SEQ = R_NODE  # (vLLM only: R_NODE is SGLang's)
R_OSEQ = R_PEND  # (vLLM only: R_PEND is SGLang's)
# (SGLang's overlap loop, loop.py: R_PEND what the step in flight left to process for
# request i: bit 1 its output token (not counted yet: its len(output_ids) is R_GEN - 1),
# bit 2 its computed pages to checkpoint into the tree (its prefill done); 0 nothing)
# (SGLang: R_NODE the radix node request i holds locked, -1 none; R_NCACHED the pages of
# its row the tree owns, cache_protected_len; vLLM with deferred frees: R_SEQ the step
# that last scheduled it, the replica's steps counted from 1; vLLM's async scheduling:
# R_OSEQ the step that made its last output token, 0 none)
# status
ST_NEW, ST_WAIT, ST_LOADING, ST_RUN, ST_DONE = range(5)
# replica int fields
(Q_WHEAD, Q_WTAIL, Q_RHEAD, Q_RTAIL, Q_NRUN, Q_STATE, Q_FLOWS, Q_OUTST, Q_CHUNKED,
 Q_PREEMPTED, Q_LOOKED, Q_LOOKED_HIT, Q_HTAIL, Q_INFL, Q_FIN) = range(15)
N_Q = 15
# (vLLM: Q_HTAIL the last waiting request that holds blocks, -1 none: they head the
# waiting list, in the order their loads started; vllm_schedule. With deferred frees
# (loop.py): Q_INFL the step still in flight while the next batch is built, -1 none;
# Q_FIN the requests that finished in it, still in the running list holding their blocks)
# scheduler parameters (ints)
(P_POLICY, P_BS, P_MAXSEQ, P_BUDGET, P_THRESH, P_CHUNK, P_CACHING, P_MAXPREFILL,
 P_EBS, P_FULLISL, P_HOLD_VICTIMS) = range(11)
N_P = 11
# SGLang: Q_FULL its running batch's batch_is_full (1 set; sglang_schedule, loop.py);
# Q_CALLS its calc_priority calls with requests waiting (-1: none yet)
Q_FULL = N_Q
Q_CALLS = N_Q + 1
# Q_ABORT: the request retract_decode aborted at this build (-1: none; loop.py finishes it)
Q_ABORT = Q_CALLS + 1
N_Q = Q_ABORT + 1
WAITING_PREFIX_REFRESH_INTERVAL = 32  # SGLang 0.5.23 schedule_policy.py
WAITING_QUEUE_PREFIX_MATCH_MAX = 128
VLLM, SGLANG = 0, 1
CLIP_MAX_NEW_TOKENS = 4096  # SGLang SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION default
RETRACT_DECODE_STEPS = 20  # SGLang SGLANG_RETRACT_DECODE_STEPS default
NONE = -1


@njit(cache=True, inline="always")
def _cdiv(a, b):  # noqa: ANN001, ANN202
    return (a + b - 1) // b


# --- linked lists (pool.dl_*: the waiting and the running list of each replica) ----------
@njit(cache=True, inline="always")
def w_append(RI, QI, r, i):  # noqa: ANN001, ANN201
    dl_append(RI, QI, r, i, R_WPREV, R_WNEXT, Q_WHEAD, Q_WTAIL)


@njit(cache=True, inline="always")
def w_prepend(RI, QI, r, i):  # noqa: ANN001, ANN201
    dl_prepend(RI, QI, r, i, R_WPREV, R_WNEXT, Q_WHEAD, Q_WTAIL)


@njit(cache=True, inline="always")
def w_remove(RI, QI, r, i):  # noqa: ANN001, ANN201
    dl_remove(RI, QI, r, i, R_WPREV, R_WNEXT, Q_WHEAD, Q_WTAIL)


@njit(cache=True, inline="always")
def w_insert_after(RI, QI, r, x, i):  # noqa: ANN001, ANN201
    """Request i into the waiting list after request x (at its head when x is -1)."""
    dl_insert_after(RI, QI, r, x, i, R_WPREV, R_WNEXT, Q_WHEAD, Q_WTAIL)


@njit(cache=True, inline="always")
def run_append(RI, QI, r, i):  # noqa: ANN001, ANN201
    dl_append(RI, QI, r, i, R_RPREV, R_RNEXT, Q_RHEAD, Q_RTAIL)
    QI[r, Q_NRUN] += 1


@njit(cache=True, inline="always")
def run_remove(RI, QI, r, i):  # noqa: ANN001, ANN201
    dl_remove(RI, QI, r, i, R_RPREV, R_RNEXT, Q_RHEAD, Q_RTAIL)
    QI[r, Q_NRUN] -= 1


# --- blocks of one request ----------------------------------------------------------------
@njit(cache=True, inline="always")
def ntokens(RI, i):  # noqa: ANN001, ANN201
    return RI[i, R_PROMPT] + RI[i, R_GEN]


@njit(cache=True, inline="always")
def allocate(P, RI, keys, rb, r, i, new_tokens, nhit, bs, caching, reserved, unseen):  # noqa: ANN001, ANN201
    """vLLM `allocate_slots`: blocks for `nhit` cached blocks (taken as hits) and
    `new_tokens` more tokens; False (nothing changed) when the free queue less `reserved`
    blocks (`reserved_blocks`: what other in-flight prefills still need) is short. The
    full blocks the step will compute are cached at once (findable by later requests),
    up to the tokens the scheduler has seen: all but the last `unseen` (_full_blocks)."""
    comp = RI[i, R_COMP] + nhit * bs
    need = _cdiv(comp + new_tokens, bs) - RI[i, R_HELD] - nhit
    if need < 0:
        need = 0
    ev = pool_evictable(P, r, keys, RI[i, R_KOFF], nhit) if nhit > 0 else 0
    if need + ev + reserved > P[1][r, 2]:
        return False
    held = RI[i, R_HELD]
    if nhit > 0:
        held = pool_touch(P, r, keys, RI[i, R_KOFF], nhit, rb, RI[i, R_RBOFF], held)
        RI[i, R_NCACHED] = held
    if need > 0:
        held = pool_alloc(P, r, need, rb, RI[i, R_RBOFF], held)
    RI[i, R_HELD] = held
    if caching and RI[i, R_CACHEABLE] == 1:
        cache_full(P, RI, keys, rb, r, i, comp + new_tokens, bs, unseen)
    return True


@njit(cache=True, inline="always")
def _full_blocks(RI, i, computed, bs, unseen):  # noqa: ANN001, ANN202
    """Request i's blocks that are full at `computed` tokens and have a key (cacheable),
    of its tokens less the last `unseen`: vLLM caches a block only once the scheduler
    holds all its tokens (`allocate_slots` caches up to min(computed + new,
    request.num_tokens)), and under async scheduling the output of the step in flight is
    not among them yet (`unseen` 1: vllm_schedule)."""
    full = computed // bs
    nt = (ntokens(RI, i) - unseen) // bs
    if full > nt:
        full = nt
    if full > RI[i, R_KN]:
        full = RI[i, R_KN]
    return full


@njit(cache=True, inline="always")
def cache_full(P, RI, keys, rb, r, i, computed, bs, unseen):  # noqa: ANN001, ANN201
    """Make request i's full blocks up to `computed` tokens findable (_full_blocks)."""
    full = _full_blocks(RI, i, computed, bs, unseen)
    for j in range(RI[i, R_NCACHED], full):
        pool_cache(P, r, rb[RI[i, R_RBOFF] + j], keys[RI[i, R_KOFF] + j])
    if full > RI[i, R_NCACHED]:
        RI[i, R_NCACHED] = full


@njit(cache=True, inline="always")
def _no_alloc(RI, i, new, bs, caching, unseen):  # noqa: ANN001, ANN202
    """True when allocate() would change nothing: the request's blocks hold `new` more
    tokens and no block of it becomes full and findable (a cheap test before the call)."""
    c = RI[i, R_COMP] + new
    if _cdiv(c, bs) > RI[i, R_HELD]:
        return False
    if not caching or RI[i, R_CACHEABLE] == 0:
        return True
    return _full_blocks(RI, i, c, bs, unseen) <= RI[i, R_NCACHED]


@njit(cache=True, inline="always")
def release(P, RI, rb, r, i):  # noqa: ANN001, ANN201
    pool_free(P, r, rb, RI[i, R_RBOFF], RI[i, R_HELD])
    RI[i, R_HELD] = 0
    RI[i, R_NCACHED] = 0


@njit(cache=True, inline="always")
def lookup(P, RI, keys, r, i, bs, caching):  # noqa: ANN001, ANN201
    """Cached full blocks of request i's tokens, all but its last token at most."""
    if not caching:
        return 0
    nmax = (ntokens(RI, i) - 1) // bs
    if nmax > RI[i, R_KN]:
        nmax = RI[i, R_KN]
    if nmax <= 0:
        return 0
    return pool_match(P, r, keys, RI[i, R_KOFF], nmax)


@no_runtime
def preempt(P, RI, QI, rb, r, p, trace, tn):  # noqa: ANN001, ANN201
    """Request p loses its blocks and goes back to the head of the waiting queue. (A
    kernel of its own, not inlined: a preemption is rare, and inlined into the step loop
    it cost the first run's compile more than its call costs the runs: docs/performance.md
    round 9.) A victim that finished in the step in flight (async scheduling, ST_DONE)
    only frees its blocks: vLLM preempts it all the same and it finishes when that step
    is processed (Scheduler._preempt_request: its output is stale, still delivered)."""
    run_remove(RI, QI, r, p)
    release(P, RI, rb, r, p)
    RI[p, R_PREEMPT] += 1
    QI[r, Q_PREEMPTED] += 1
    if RI[p, R_STATUS] == ST_DONE:
        return _trace(trace, tn, 1, p, 0)
    RI[p, R_COMP] = 0
    RI[p, R_STATUS] = ST_WAIT
    RI[p, R_NEWHIT] = 1
    RI[p, R_STOK] = 0
    # vLLM `waiting.prepend_request`: the head of the waiting queue, which comes after the
    # requests that hold blocks (their own queue, kv_holding_waiting, drained first)
    w_insert_after(RI, QI, r, QI[r, Q_HTAIL], p)
    return _trace(trace, tn, 1, p, 0)


@njit(cache=True, inline="always")
def _trace(trace, tn, kind, i, v):  # noqa: ANN001, ANN202
    if trace.shape[0] > 1:
        if tn < trace.shape[0]:
            trace[tn, 0] = kind
            trace[tn, 1] = i
            trace[tn, 2] = v
        return tn + 1
    return tn


@njit(cache=True, inline="always")
def _fixed_hit(RI, i, hbm):  # noqa: ANN001, ANN202
    """Tokens past the pool's hit that count as in HBM without a known source (a request
    whose prefix owner is not in the run: the planner's prior HBM share), all but one."""
    fx = RI[i, R_FIXHIT]
    top = RI[i, R_PROMPT] + RI[i, R_GEN] - 1
    if fx > top:
        fx = top
    fx -= hbm
    return fx if fx > 0 else 0


@njit(cache=True, inline="always")
def _count_lookup(RI, QI, r, i, hit, caching, trace, tn):  # noqa: ANN001, ANN202
    """vLLM's prefix-cache stats as the Netpreme fork's version keeps them
    (KVCacheManager.get_computed_blocks records every lookup: a waiting request that does
    not fit is counted again at each step that reaches it; vLLM PR 48860 moved the record
    to admission). Only requests never preempted count (vLLM puts the others in
    preempted_queries, outside vllm:prefix_cache_queries). The request looked up last
    stays in Q_LOOKED until it is admitted: a run of decode steps repeats its lookup.
    Trace row kind 4 (replay_scenario's `lookups`)."""
    if caching and RI[i, R_PREEMPT] == 0:
        RI[i, R_LOOKUPS] += 1
        RI[i, R_LOOKUP_HIT] += hit
        QI[r, Q_LOOKED] = i
        QI[r, Q_LOOKED_HIT] = hit
        return _trace(trace, tn, 4, i, hit)
    return tn


@njit(cache=True, inline="always")
def _full_fits(P, RI, keys, r, i, nhit, bs):  # noqa: ANN001, ANN202
    """vLLM 0.33 `scheduler_reserve_full_isl` (default True): a waiting request is
    admitted only if blocks for its whole sequence so far fit, not only its first chunk
    (KVCacheManager.allocate_slots, full_sequence_must_fit). A request whose tier load
    landed is checked again: the blocks its load holds count, the rest must fit now
    (vLLM's waiting loop passes full_sequence_must_fit for it too)."""
    need = _cdiv(ntokens(RI, i), bs) - RI[i, R_HELD] - nhit
    ev = pool_evictable(P, r, keys, RI[i, R_KOFF], nhit) if nhit > 0 else 0
    return need + ev <= P[1][r, 2]


@njit(cache=True, inline="always")
def _remaining(RI, i, bs):  # noqa: ANN001, ANN202
    """Blocks request i still needs to hold its whole sequence (vLLM 0.33
    `_request_remaining_blocks`)."""
    k = _cdiv(ntokens(RI, i), bs) - RI[i, R_HELD]
    return k if k > 0 else 0


@njit(cache=True, inline="always")
def _inflight_reserved(RI, QI, r, bs):  # noqa: ANN001, ANN202
    """vLLM 0.33 `Scheduler._inflight_prefill_reserved_blocks`: the blocks replica r's
    in-flight prefills still need: tier loads under way or landed and not yet run
    (waiting, holding their loaded blocks) and running requests still prefilling."""
    s = 0
    j = QI[r, Q_RHEAD]
    while j >= 0:
        if RI[j, R_COMP] < ntokens(RI, j) - 1:
            s += _remaining(RI, j, bs)
        j = RI[j, R_RNEXT]
    j = QI[r, Q_WHEAD]
    while j >= 0:
        if RI[j, R_STATUS] == ST_LOADING or RI[j, R_LOADED] == 1:
            s += _remaining(RI, j, bs)
        j = RI[j, R_WNEXT]
    return s


@no_runtime
def _load_admit(P, RI, QI, keys, rb, r, i, nhit, fx, ext, bs, trace, tn):  # noqa: ANN001, ANN202
    """vllm_schedule: waiting request i, with `nhit` blocks hit and `ext` tokens for the
    tier to load, takes its blocks and starts its load, or does not fit (False, nothing
    changed). Returns (admitted, trace rows). (A kernel of its own, not inlined: it runs
    once a load, or once a step while such a request waits at the head, and inlined it
    cost the first run's compile more than its call costs the runs: docs/performance.md
    round 9.)"""
    if not allocate(P, RI, keys, rb, r, i, fx + ext, nhit, bs, False,
                    _inflight_reserved(RI, QI, r, bs), 0):
        return False, tn
    RI[i, R_HIT] = nhit * bs + fx
    RI[i, R_HIT_TOTAL] += nhit * bs + fx
    RI[i, R_COMP] += nhit * bs + fx
    RI[i, R_STATUS] = ST_LOADING
    QI[r, Q_LOOKED] = NONE
    # vLLM 0.33 puts it in kv_holding_waiting, drained before the waiting queue
    # at every step (Scheduler.schedule: skip_request, _holds_kv_blocks)
    w_remove(RI, QI, r, i)
    w_insert_after(RI, QI, r, QI[r, Q_HTAIL], i)
    QI[r, Q_HTAIL] = i
    tn = _trace(trace, tn, 6, i, ext)  # replay: a load starts (and its HBM hit)
    tn = _trace(trace, tn, 7, i, nhit * bs + fx)
    return True, tn


@njit(cache=True, inline="always")
def vllm_schedule(P, RI, QI, keys, rb, r, pp, trace, tn, loads):  # noqa: ANN001, ANN201, C901
    """One vLLM step on replica r (module doc). Sets R_STOK of the scheduled requests;
    requests that start a tier load are listed in loads[0:nl]. Returns (tokens,
    scheduled requests, trace rows, loads)."""
    bs, caching = pp[P_BS], pp[P_CACHING] == 1
    budget = pp[P_BUDGET]
    thr = pp[P_THRESH]
    # vLLM 0.33: the long-prefill cap "is not applied when the request is the only one in
    # the batch" (num_running + num_waiting, its kv_holding_waiting included, at most 1)
    if thr > 0:
        nw = 0
        w = QI[r, Q_WHEAD]
        while w >= 0 and nw < 2:
            nw += 1
            w = RI[w, R_WNEXT]
        if QI[r, Q_NRUN] + nw <= 1:
            thr = 0
    tokens = 0
    nsched = 0
    nl = 0
    preempted = False
    QI[r, Q_LOOKED] = NONE
    i = QI[r, Q_RHEAD]
    while i >= 0 and budget > 0:
        if RI[i, R_STATUS] == ST_DONE:
            # finished in the step in flight (async scheduling): vLLM's async scheduler
            # schedules no step past max_tokens
            i = RI[i, R_RNEXT]
            continue
        new = ntokens(RI, i) - RI[i, R_COMP]
        if 0 < thr < new:
            new = thr
        if new > budget:
            new = budget
        if new <= 0:
            i = RI[i, R_RNEXT]
            continue
        # async scheduling: the output the step in flight made is not among the request's
        # tokens until that step is processed (an output placeholder), so the block it
        # completes is not cached now (vLLM allocate_slots: min(..., request.num_tokens))
        unseen = 1 if QI[r, Q_INFL] >= 0 and RI[i, R_OSEQ] == QI[r, Q_INFL] else 0
        ok = False
        while True:
            if _no_alloc(RI, i, new, bs, caching, unseen):
                ok = True
                break
            if allocate(P, RI, keys, rb, r, i, new, 0, bs, caching, 0, unseen):
                ok = True
                break
            p = QI[r, Q_RTAIL]
            if pp[P_HOLD_VICTIMS] == 1 and QI[r, Q_INFL] >= 0 \
                    and RI[p, R_SEQ] == QI[r, Q_INFL]:
                # vLLM 0.33 defer_block_free: the victim's blocks may still be written by
                # the step in flight, so they cannot be freed at once, and "a deferred
                # free will not help with immediate allocation": stop, preempting nothing
                # (Scheduler.schedule, _request_blocks_can_be_freed)
                break
            preempted = True
            # (np.int64: one compilation, whether the loop's count is a literal yet)
            tn = preempt(P, RI, QI, rb, r, p, trace, np.int64(tn))
            if p == i:
                break
        if not ok:
            break
        RI[i, R_STOK] = new
        RI[i, R_S0] = RI[i, R_COMP]
        tokens += new
        nsched += 1
        budget -= new
        tn = _trace(trace, tn, 0, i, new)
        i = RI[i, R_RNEXT]
    if preempted:
        return tokens, nsched, tn, nl
    i = QI[r, Q_WHEAD]
    while i >= 0 and budget > 0:
        if QI[r, Q_NRUN] >= pp[P_MAXSEQ]:
            break
        nx = RI[i, R_WNEXT]
        if RI[i, R_STATUS] == ST_LOADING:
            i = nx
            continue
        nhit = 0
        ext = 0
        fx = 0
        if RI[i, R_LOADED] == 1 and caching and RI[i, R_CACHEABLE] == 1:
            # its load landed: the loop reaching it promotes it, and only now are the
            # loaded blocks findable (vLLM 0.33 _handle_blocked_waiting_request ->
            # _update_waiting_for_remote_kv: cache_blocks), so a block another request
            # computed meanwhile keeps the hash's map and the loaded one is the duplicate
            cache_full(P, RI, keys, rb, r, i, RI[i, R_COMP], bs, 0)
        if RI[i, R_LOADED] == 1 and RI[i, R_COMP] >= ntokens(RI, i):
            # a load of the whole prompt: its last token is computed again so the next
            # can be sampled (_update_waiting_for_remote_kv: num_computed_tokens ==
            # num_tokens -> num_tokens - 1), in blocks the load already holds
            RI[i, R_COMP] = ntokens(RI, i) - 1
        if RI[i, R_COMP] == 0 and RI[i, R_LOADED] == 0:
            nhit = lookup(P, RI, keys, r, i, bs, caching)
            fx = _fixed_hit(RI, i, nhit * bs)
            tn = _count_lookup(RI, QI, r, i, nhit * bs + fx, caching, trace, tn)
            # a tier load: the prefix the tier holds past the HBM hit, up to the whole
            # prompt (the OffloadingConnector's lookup stops at num_tokens for
            # full-attention groups: offloading/scheduler.py _lookup_complete_chunks)
            top = RI[i, R_TIER_TOK]
            if top > ntokens(RI, i):
                top = ntokens(RI, i)
            ext = top - nhit * bs - fx
            ebs = pp[P_EBS]  # the connector loads whole (engine) blocks, at least one
            if ext < ebs:
                ext = 0
            ext = ext // ebs * ebs
            RI[i, R_EXT] = ext
        if pp[P_FULLISL] == 1 and not _full_fits(P, RI, keys, r, i, nhit, bs):
            break
        if ext > 0:
            # an async load holds its blocks with no progress until it lands: it is
            # admitted only into the free blocks less what the in-flight prefills still
            # need (vLLM 0.33 `_inflight_prefill_reserved_blocks`, PR #44560), and its
            # blocks are not findable until the load lands and the loop reaches it
            # (allocate_slots(..., delay_cache_blocks=load_kv_async); cache_blocks in
            # _update_waiting_for_remote_kv: above)
            ok, tn = _load_admit(P, RI, QI, keys, rb, r, i, nhit, fx, ext, bs, trace, tn)
            if not ok:
                break
            loads[nl] = i
            nl += 1
            i = nx
            continue
        new = ntokens(RI, i) - RI[i, R_COMP] - nhit * bs - fx
        if 0 < thr < new:
            new = thr
        if new > budget:
            new = budget
        if not allocate(P, RI, keys, rb, r, i, new + fx, nhit, bs, caching, 0, 0):
            break
        if QI[r, Q_HTAIL] == i:
            QI[r, Q_HTAIL] = RI[i, R_WPREV]
        w_remove(RI, QI, r, i)
        run_append(RI, QI, r, i)
        RI[i, R_STATUS] = ST_RUN
        QI[r, Q_LOOKED] = NONE
        if RI[i, R_LOADED] == 0:
            RI[i, R_HIT] = nhit * bs + fx
            RI[i, R_HIT_TOTAL] += nhit * bs + fx
        RI[i, R_LOADED] = 0
        RI[i, R_COMP] += nhit * bs + fx
        RI[i, R_STOK] = new
        RI[i, R_S0] = RI[i, R_COMP]
        if RI[i, R_NEWHIT] == 1:  # vLLM's num_computed_tokens as it schedules it
            tn = _trace(trace, tn, 2, i, RI[i, R_COMP])
            RI[i, R_NEWHIT] = 0
        tokens += new
        nsched += 1
        budget -= new
        tn = _trace(trace, tn, 0, i, new)
        i = nx
    return tokens, nsched, tn, nl


@njit(cache=True, inline="always")
def _reserve(RI, QI, r, ratio):  # noqa: ANN001, ANN202
    """SGLang's decode reserve of the running requests, in tokens."""
    s = 0.0
    i = QI[r, Q_RHEAD]
    while i >= 0:
        # (overlap: an output token in flight is not counted yet, R_PEND)
        left = RI[i, R_OUT] - RI[i, R_GEN] + (RI[i, R_PEND] & 1)
        if left > CLIP_MAX_NEW_TOKENS:
            left = CLIP_MAX_NEW_TOKENS
        s += left * ratio
        i = RI[i, R_RNEXT]
    return s


@njit(cache=True, inline="always")
def _sg_refresh_waiting(S, RI, QI, keys, r, bs):  # noqa: ANN001, ANN202
    """SchedulePolicy.calc_priority's waiting-prefix refresh (SGLang 0.5.23, FCFS, LRU):
    at every 32nd call with requests waiting, the first 128 waiting requests (the chunked
    one is not in SGLang's queue) touch their cached prefixes (all their tokens, page
    aligned: touch_waiting_prefix -> RadixCache.touch_prefix), the head last."""
    i = QI[r, Q_WHEAD]
    if i >= 0 and RI[i, R_COMP] > 0:
        i = RI[i, R_WNEXT]
    if i < 0:
        return
    calls = QI[r, Q_CALLS] if QI[r, Q_CALLS] > 0 else 0
    QI[r, Q_CALLS] = calls + 1
    if calls % WAITING_PREFIX_REFRESH_INTERVAL != 0:
        return
    m = 1
    j = i
    while m < WAITING_QUEUE_PREFIX_MATCH_MAX and RI[j, R_WNEXT] >= 0:
        j = RI[j, R_WNEXT]
        m += 1
    for _ in range(m):  # from the last of them back to the first
        n = ntokens(RI, j) // bs
        if n > RI[j, R_KN]:
            n = RI[j, R_KN]
        if n > 0:
            radix_walk(S, RI, R_NODE, keys, r, RI[j, R_KOFF], n)
        j = RI[j, R_WPREV]


@no_runtime  # after a retraction only (not inlined: docs/performance.md round 9)
def sglang_ratio_after_retract(RI, QI, r):  # noqa: ANN001, ANN201
    """new_token_ratio after a retraction: (outputs so far + 20 per request) / (max
    outputs + 1) over the requests kept running, at most 1 (SGLang 0.5.23
    NewTokenRatioTracker.estimate_new_token_ratio_after_retract)."""
    gen = 0
    out = 0
    n = 0
    i = QI[r, Q_RHEAD]
    while i >= 0:
        gen += RI[i, R_GEN] - (RI[i, R_PEND] & 1)
        out += RI[i, R_OUT]
        n += 1
        i = RI[i, R_RNEXT]
    est = (gen + RETRACT_DECODE_STEPS * n) / (out + 1.0)
    return est if est < 1.0 else 1.0


# --- SGLang's pool (radix.py): one radix tree per replica ---------------------------------
@njit(cache=True, inline="always")
def sg_lookup(rq, RI, r, i, bs, caching):  # noqa: ANN001, ANN201
    """SGLang match_prefix of request i's tokens but the last, page-aligned, when it is
    known without a walk: (keys to match (0: none), known?, pages, node). When not known
    the caller walks: radix_walk(S, RI, R_NODE, keys, r, RI[i, R_KOFF], n) (it stamps the
    path and may split an edge; radix.py)."""
    if not caching:
        return 0, True, 0, r
    nmax = (ntokens(RI, i) - 1) // bs
    if nmax > RI[i, R_KN]:
        nmax = RI[i, R_KN]
    if nmax <= 0:
        return 0, True, 0, r
    ok, pos, node = radix_cached(rq, r, RI[i, R_KOFF], nmax)
    return nmax, ok, pos, node


@njit(cache=True, inline="always")
def sg_admit(nd, rq, Q, RI, r, i, node, nhit, new_tokens, bs, pending):  # noqa: ANN001, ANN201
    """Request i takes its `nhit` matched pages (locks `node`) and pages for `new_tokens`
    more; -1 (nothing changed) when they do not fit beside the batch's `pending` pages.
    Returns the pages it needs allocated (the batch allocates them at once)."""
    comp = RI[i, R_COMP] + nhit * bs
    need = _cdiv(comp + new_tokens, bs) - RI[i, R_HELD] - nhit
    if need < 0:
        need = 0
    ev = radix_path_evictable(nd, node, r) if nhit > 0 else 0
    if need + ev + pending > Q[r, 2]:
        return -1
    if nhit > 0:
        radix_lock(nd, rq, Q, r, node)
        RI[i, R_NODE] = node
        RI[i, R_NCACHED] = nhit
        RI[i, R_HELD] += nhit
    elif RI[i, R_NODE] < 0:
        RI[i, R_NODE] = r  # the root: locks nothing
        RI[i, R_NCACHED] = 0
    RI[i, R_HELD] += need
    return need


@njit(cache=True, inline="always")
def sg_checkpoint(S, P, RI, keys, r, i, bs):  # noqa: ANN001, ANN201
    """checkpoint_kv_cache: request i's computed full pages enter the tree. A request no
    later one can hit (R_CACHEABLE 0: its keys past its hit are its own) keeps them in
    its row, and frees them at release: as if its pages were evicted first (SGLang would
    keep them as unlocked leaves; the same run when no request is cacheable)."""
    if RI[i, R_CACHEABLE] == 0:
        return
    key_n = RI[i, R_COMP] // bs
    if key_n > RI[i, R_KN]:
        key_n = RI[i, R_KN]
    radix_checkpoint(S, P[1], RI, R_NODE, R_NCACHED, keys, r, i, RI[i, R_KOFF], key_n,
                     RI[i, R_PROMPT] // bs)


@njit(cache=True, inline="always")
def sg_release(S, P, RI, keys, r, i, bs, insert):  # noqa: ANN001, ANN201
    """release_kv_cache(checkpoint=insert): insert its KV's full pages (finished), or not
    (retracted); free the rest of its row; drop its lock."""
    key_n = RI[i, R_COMP] // bs
    if key_n > RI[i, R_KN]:
        key_n = RI[i, R_KN]
    if RI[i, R_NODE] < 0:
        RI[i, R_NODE] = r
    # (sg_checkpoint); np.bool_: not a literal where a caller passes False, so that
    # radix_release compiles for one type of its arguments
    insert = np.bool_(insert and RI[i, R_CACHEABLE] == 1)
    radix_release(S, P[1], RI, R_NODE, R_NCACHED, keys, r, i, RI[i, R_KOFF],
                  key_n if insert else 0, RI[i, R_PROMPT] // bs, RI[i, R_HELD], insert)
    RI[i, R_HELD] = 0


@njit(cache=True, inline="always")
def _sg_tier(RI, i, nhit, bs):  # noqa: ANN001, ANN202
    """(fixed hit, tier load) of a waiting request with `nhit` pages matched."""
    fx = _fixed_hit(RI, i, nhit * bs)
    top = RI[i, R_TIER_TOK]
    if top > ntokens(RI, i) - 1:
        top = ntokens(RI, i) - 1
    ext = top - nhit * bs - fx
    if ext < 10:  # HiCache load_back_threshold
        ext = 0
    return fx, ext


@njit(cache=True, inline="always")
def sglang_head_need(S, P, RI, QI, keys, r, pp):  # noqa: ANN001, ANN201
    """(tokens it needs room for: new and loaded, clipped remaining output, whether its
    blocks fit now) of the waiting queue's head as the prefill admission prices it;
    (-1, 0, False) when the head is the chunked request or none."""
    bs, caching = pp[P_BS], pp[P_CACHING] == 1
    i = QI[r, Q_WHEAD]
    if i < 0 or RI[i, R_COMP] > 0:
        return -1, 0, False
    nd, rq = S[0], S[4]
    n, ok, nhit, node = sg_lookup(rq, RI, r, i, bs, caching)
    if not ok:
        nhit, node = radix_walk(S, RI, R_NODE, keys, r, RI[i, R_KOFF], n)
    fx, ext = _sg_tier(RI, i, nhit, bs)
    left = RI[i, R_OUT] - RI[i, R_GEN]
    if left > CLIP_MAX_NEW_TOKENS:
        left = CLIP_MAX_NEW_TOKENS
    extend = ntokens(RI, i) - nhit * bs - fx - ext
    ev = radix_path_evictable(nd, node, r) if nhit > 0 else 0
    need_tok = extend + ext + left + bs + ev * bs  # its prefix pinned (sglang_schedule)
    take = extend
    chunk = pp[P_CHUNK] if pp[P_CHUNK] > 0 else 1 << 40
    if take > chunk:
        take = chunk // bs * bs
        if take <= 0:
            take = chunk
    # its pages: as sg_admit counts them (matched pages it locks leave the evictable set)
    need = _cdiv(nhit * bs + take + ext + fx, bs) - nhit
    fits = need + ev <= P[1][r, 2]
    return need_tok, left, fits


@no_runtime
def sg_retract(S, P, RI, QI, keys, r, bs, trace, tn):  # noqa: ANN001, ANN201
    """retract_decode on replica r, whose decode's new pages do not fit (sglang_schedule):
    one request leaves the running batch. Returns (trace rows, go on): False when the
    last decode was aborted (no batch this step: Q_ABORT). (A kernel of its own, not
    inlined into the step loop: it runs rarely, and inlined it cost the first run's
    compile more than its call costs the runs: docs/performance.md round 9.)"""
    rq, Q = S[4], P[1]
    if QI[r, Q_NRUN] <= 1:
        x = QI[r, Q_WHEAD]
        if x < 0 or RI[x, R_COMP] == 0:
            # retract_decode keeps one request; when even that one's next page does
            # not fit SGLang aborts it (FINISH_ABORT, release_req: its KV freed, not
            # inserted) and runs no batch this step; new_token_ratio becomes the
            # estimate over no request, 0 (loop.py finishes it: Q_ABORT)
            a = QI[r, Q_RHEAD]
            run_remove(RI, QI, r, a)
            sg_release(S, P, RI, keys, r, a, bs, False)
            RI[a, R_COMP] = 0
            RI[a, R_PEND] = 0
            QI[r, Q_ABORT] = a
            QI[r, Q_FULL] = 0
            return _trace(trace, tn, 8, a, 0), False
        # the one decode has no page: the chunked request holds them (it could not
        # take its next chunk either). SGLang would fail the allocation; here the
        # chunked request is retracted (its chunks stay in the tree: it matches them
        # when admitted again) and the decode goes on
        sg_release(S, P, RI, keys, r, x, bs, False)
        RI[x, R_COMP] = 0
        RI[x, R_PREEMPT] += 1
        RI[x, R_NEWHIT] = 1
        QI[r, Q_PREEMPTED] += 1
        QI[r, Q_FULL] = 0
        return _trace(trace, tn, 1, x, 0), True
    # retract: sorted by (output tokens, -prompt) descending, the last one goes; the
    # sort is stable, so of equal keys the last in the batch goes
    # (ScheduleBatch._get_decode_retraction_order, retract_decode's pop())
    # (overlap: by the outputs processed, R_PEND)
    best = -1
    gb = 0
    i = QI[r, Q_RHEAD]
    while i >= 0:
        g = RI[i, R_GEN] - (RI[i, R_PEND] & 1)
        if best < 0 or g < gb or (g == gb and RI[i, R_PROMPT] >= RI[best, R_PROMPT]):
            best = i
            gb = g
        i = RI[i, R_RNEXT]
    run_remove(RI, QI, r, best)
    sg_release(S, P, RI, keys, r, best, bs, False)  # release_req: no insert
    # overlap: its output in flight is dropped (is_retracted), and with it its
    # prompt's checkpoint
    RI[best, R_GEN] -= RI[best, R_PEND] & 1
    RI[best, R_PEND] = 0
    RI[best, R_COMP] = 0
    RI[best, R_STATUS] = ST_WAIT
    RI[best, R_PREEMPT] += 1
    RI[best, R_NEWHIT] = 1
    w_append(RI, QI, r, best)
    QI[r, Q_PREEMPTED] += 1
    QI[r, Q_FULL] = 0  # the batch shrank
    tn = _trace(trace, tn, 1, best, 0)
    # release_req then frees 20 tokens per request still running
    sh = radix_short(rq, r, QI[r, Q_NRUN] * RETRACT_DECODE_STEPS, bs)
    if sh > 0:  # evict_from_tree_cache
        radix_evict(S, Q, keys, r, sh, bs)
    return tn, True


@njit(cache=True, inline="always")
def sglang_schedule(S, P, RI, QI, keys, r, pp, trace, tn, ratio, loads, pf, pfe, pfp, now):  # noqa: ANN001, ANN201, C901
    """One SGLang step on replica r (module doc). Returns (tokens, scheduled, trace rows,
    loads (requests whose tier prefix rides this batch), prefill?). pf, pfe, pfp, now:
    the L3 prefetches (prefetch.py; pfp[PP_POLICY] < 0: no tier at L3)."""
    bs, caching = pp[P_BS], pp[P_CACHING] == 1
    nd, rq, Q = S[0], S[4], P[1]  # (the arrays once: see radix.radix_cached)
    # the engine's page (tokens): the spare room a prefill and a decode ask for
    page = pp[P_EBS] if pp[P_EBS] > 1 else 0
    nl = 0
    tokens = 0
    nsched = 0
    # 1. prefill: the chunked request first, then the waiting queue. SGLang 0.5.23 keeps
    # its running batch's batch_is_full from the step that set it (an admission refused
    # for memory, or the running cap reached, while requests ran) until a request leaves
    # it (finished or retracted, or the chunked request left out of the merge) or it is
    # empty, and forms no prefill batch meanwhile but the chunked request's next chunk
    # (scheduler.py _get_new_batch_prefill_raw, get_next_batch_to_run,
    # update_running_batch)
    nrun0 = QI[r, Q_NRUN]
    if nrun0 == 0:
        QI[r, Q_FULL] = 0
    h = QI[r, Q_WHEAD]
    if h >= 0 and QI[r, Q_NRUN] < pp[P_MAXSEQ] and (QI[r, Q_FULL] != 1 or RI[h, R_COMP] > 0):
        if caching:
            _sg_refresh_waiting(S, RI, QI, keys, r, bs)
        # rem_total_tokens: free and evictable tokens (as they stand: a request admitted
        # locks its prefix) less the running requests' reserve and the batch's own
        rem_off = _reserve(RI, QI, r, ratio)
        rem_chunk = pp[P_CHUNK] if pp[P_CHUNK] > 0 else 1 << 40
        rem_input = pp[P_MAXPREFILL]
        pending = 0  # pages the batch allocates when it is formed
        demand = 0  # tokens it asks room for (alloc_paged_token_slots_extend)
        i = QI[r, Q_WHEAD]
        while i >= 0:
            nx = RI[i, R_WNEXT]
            if QI[r, Q_NRUN] >= pp[P_MAXSEQ]:
                if nrun0 > 0:
                    QI[r, Q_FULL] = 1
                break
            cont = RI[i, R_COMP] > 0  # the chunked request (holds its pages)
            if not cont and QI[r, Q_FULL] == 1:
                break
            if not cont and pfp[PP_POLICY] >= 0:
                # HiCache L3: check_prefetch_progress; a request still prefetching is
                # skipped (_get_new_batch_prefill_raw's `continue`)
                ready, top = pf_poll(pf, pfe, pfp, i, now)
                if top >= 0:
                    RI[i, R_TIER_TOK] = top
                if not ready:
                    i = nx
                    continue
            nhit = 0
            node = r
            ext = 0
            fx = 0
            if not cont:
                n, ok, nhit, node = sg_lookup(rq, RI, r, i, bs, caching)
                if not ok:
                    nhit, node = radix_walk(S, RI, R_NODE, keys, r, RI[i, R_KOFF], n)
                fx, ext = _sg_tier(RI, i, nhit, bs)
            extend = ntokens(RI, i) - RI[i, R_COMP] - nhit * bs - fx - ext
            left = RI[i, R_OUT] - RI[i, R_GEN]
            if left > CLIP_MAX_NEW_TOKENS:
                left = CLIP_MAX_NEW_TOKENS
            # SGLang 0.5.23 PrefillAdder.add_one_req: its new and loaded tokens, its whole
            # remaining output (clipped) and one page must fit (the running requests'
            # outputs are reserved x new_token_ratio), its matched prefix pinned (the pin
            # takes its pages out of the evictable budget)
            total = extend + ext + left + bs
            pin = radix_path_evictable(nd, node, r) * bs if nhit > 0 else 0
            if not cont and total >= Q[r, 2] * bs - rem_off - pin:
                if nrun0 > 0:  # NO_TOKEN (an empty running batch is replaced by the new)
                    QI[r, Q_FULL] = 1
                break
            if nsched > 0 and extend > rem_input:
                break
            lim = rem_chunk
            if cont:  # add_chunked_req: the chunk is cut to the memory budget too
                room = Q[r, 2] * bs - rem_off
                if 0 < room < lim:
                    lim = int(room)
            take = extend
            if take > lim:
                take = lim // bs * bs
                if take <= 0:
                    if nsched > 0:
                        break
                    take = lim  # a chunk below one (simulator) block: no progress else
            # (SGLang matches the radix tree as it stands: a batch's own prefixes enter
            # it when the batch is done)
            need = sg_admit(nd, rq, Q, RI, r, i, node, nhit, take + ext + fx, bs, pending)
            if need < 0:
                break
            pending += need
            demand += take + ext + fx + page
            if not cont:
                RI[i, R_HIT] = nhit * bs + fx
                RI[i, R_HIT_TOTAL] += nhit * bs + fx
                RI[i, R_COMP] = nhit * bs + fx
                RI[i, R_EXT] = ext
                RI[i, R_LOADED_TOTAL] += ext
                if ext > 0:
                    loads[nl] = i
                    nl += 1
            if RI[i, R_NEWHIT] == 1:
                tn = _trace(trace, tn, 2, i, nhit * bs + fx + ext)
                RI[i, R_NEWHIT] = 0
            RI[i, R_COMP] += ext
            RI[i, R_S0] = RI[i, R_COMP]
            RI[i, R_STOK] = take
            tokens += take
            nsched += 1
            tn = _trace(trace, tn, 0, i, take)
            full_out = RI[i, R_OUT]
            if full_out > CLIP_MAX_NEW_TOKENS:
                full_out = CLIP_MAX_NEW_TOKENS
            if take < extend:
                full_out = 0  # a chunk reserves no output (is_chunked: max_new_tokens 0)
            rem_off += _cdiv(take + ext, bs) * bs + bs + full_out  # PrefillBudget.reserve
            # the compute budgets are charged the page-ceiled extend (_update_prefill_budget)
            rem_chunk -= _cdiv(take, bs) * bs
            rem_input -= _cdiv(take, bs) * bs
            # the budget after it: no free and evictable tokens left is NO_TOKEN, which
            # budget_state() puts before the compute budgets' OTHER. After a request it
            # admits, add_one_req returns it: batch_is_full (kept while requests run: an
            # empty running batch is replaced by the new one at the next build, flag and
            # all), and the pass ends. After the chunked request's next chunk SGLang goes
            # on to the next waiting request (matched, so its prefix is touched), which
            # NO_TOKEN refuses (the refusal above sets batch_is_full)
            spent = Q[r, 2] * bs - rem_off <= 0
            if spent and not cont and nrun0 > 0:
                QI[r, Q_FULL] = 1
            if take < extend:
                # the one chunked request: it stays first in the waiting queue, holding
                # its pages, and goes on in the next prefill batch
                QI[r, Q_CHUNKED] = i
                if not (cont and spent):
                    break
                i = nx
                continue
            w_remove(RI, QI, r, i)
            run_append(RI, QI, r, i)
            RI[i, R_STATUS] = ST_RUN
            if spent and not cont:
                break
            if (rem_chunk <= 0 or rem_input <= 0) and not spent:
                break
            i = nx
        if nsched > 0:
            # the batch's pages (alloc_for_extend): room for its tokens and a page each
            sh = radix_short(rq, r, demand, bs)
            if sh > 0:  # evict_from_tree_cache
                radix_evict(S, Q, keys, r, sh, bs)
            sh = radix_short(rq, r, pending * bs, bs)
            if sh > 0:  # evict_from_tree_cache
                radix_evict(S, Q, keys, r, sh, bs)
            radix_take(rq, Q, r, pending)
            return tokens, nsched, tn, nl, True
    # 2. decode every running request; retract while its new pages do not fit
    # (update_running_batch: check_decode_mem, retract_decode). Overlap loop: a request
    # whose output in flight is its last (ST_DONE, holding its pages and seat until that
    # output is processed, after this build) sits out (_reqs_finishing_inflight: the
    # batch is filtered, so it is not full any more); when the others' new pages do not
    # fit, no decode runs this step and nothing is retracted (the result frees its pages)
    nfin = 0
    while True:
        need = 0
        nfin = 0
        i = QI[r, Q_RHEAD]
        while i >= 0:
            if RI[i, R_STATUS] == ST_DONE:
                nfin += 1
            elif _cdiv(ntokens(RI, i), bs) > RI[i, R_HELD]:
                need += 1
            i = RI[i, R_RNEXT]
        if nfin > 0:
            QI[r, Q_FULL] = 0
            if nfin == QI[r, Q_NRUN]:
                return tokens, nsched, tn, nl, False  # an empty batch
        sh = radix_short(rq, r, need * bs, bs)
        if sh > 0:  # evict_from_tree_cache
            radix_evict(S, Q, keys, r, sh, bs)
        if need <= rq[r, RQ_AVAIL]:
            break
        if nfin > 0:
            return tokens, nsched, tn, nl, False
        if QI[r, Q_NRUN] <= 1 and need == 0:
            break
        tn, go = sg_retract(S, P, RI, QI, keys, r, bs, trace, tn)
        if not go:  # the last decode aborted: no batch this step
            return tokens, nsched, tn, nl, False
    # alloc_for_decode: room for a page per running request (a token at page size 1)
    sh = radix_short(rq, r, (QI[r, Q_NRUN] - nfin) * (page if page > 0 else 1), bs)
    if sh > 0:  # evict_from_tree_cache
        radix_evict(S, Q, keys, r, sh, bs)
    i = QI[r, Q_RHEAD]
    while i >= 0:
        if RI[i, R_STATUS] == ST_DONE:
            i = RI[i, R_RNEXT]
            continue
        ok = True
        if _cdiv(RI[i, R_COMP] + 1, bs) > RI[i, R_HELD]:
            ok = rq[r, RQ_AVAIL] >= 1
            if ok:
                radix_take(rq, Q, r, 1)
                RI[i, R_HELD] += 1
        if ok:
            RI[i, R_STOK] = 1
            RI[i, R_S0] = RI[i, R_COMP]
            tokens += 1
            nsched += 1
            tn = _trace(trace, tn, 0, i, 1)
        i = RI[i, R_RNEXT]
    return tokens, nsched, tn, nl, False


def _unused() -> np.ndarray:  # keeps numpy imported for type checkers of the njit module
    return np.zeros(0)
