"""The event loop of the simulated engine (numba): arrivals, tier loads, engine steps.

Per replica, one step at a time: the policy (policy.py) builds the batch over the
replica's block pool (pool.py), the step lasts its step time (steptime.py), then every
request that computed its last uncomputed token samples one output token; a request with
all its output is done and frees its blocks (they stay cached). A replica with nothing to
run idles until an arrival or a finished load.

Tier loads (host DRAM or X-Mem) move over links shared as in sim.py (fluid sharing of a
GPU's link per tier, the PCIe switch, the X-Mem nodes). vLLM: a request's load runs on its
own and the request joins the waiting queue's schedulable set when it is done
(OffloadingConnector). SGLang: the loads of a prefill batch start with it and run under
its compute (HiCache layer overlap; end = fixed + max(compute, load) + min / layers).
Writes: each prefill's newly computed tokens are written to the tier (write-through,
both engines' default) over the same links, so stores and loads share them.

Async scheduling (ep[E_ASYNC] = 1; vLLM's AsyncScheduler with the engine core's batch
queue, SGLang's overlap event loop): the batch of a step is built when the step before it
starts, so a request that arrives (or, vLLM, finishes its tier load) while a step runs is
first seen at the end of the step after it; an engine with nothing else to run sees it at
once. vLLM processes a step's tokens when it ends (but see the deferred frees below).

SGLang's overlap loop (async scheduling, SGLang; `event_loop_overlap`) processes step k's
results only after it has built step k+1 (process_batch_result after run_batch): while
k+1 is built, a request that step k finished keeps its pages and running seat (ST_DONE,
skipped by the decode: `_reqs_finishing_inflight`), the output k made is not yet counted
in the decode reserve, the retraction order or the ratio after a retraction (R_PEND), and
a prefill k completed has not checkpointed its pages into the tree. `_sg_process` does
all that after the build, in the running order: a finished request's release clears
batch_is_full. A decode whose new pages do not fit beside finishing requests runs no step
(nothing is retracted): the results are processed and the batch built again, as for an
empty build. A request retracted at the build of k+1 loses the output k made (SGLang
skips a retracted request's result), and its first token counts only once processed.

vLLM's async frees (every vLLM run with async scheduling): step k+1 is built while step
k is in flight and step k is processed after it (`update_from_output`). So a request that
finishes at step k keeps its blocks and seat while step k+1 is built (it stays in the
running list, ST_DONE, skipped) and frees them once it is (`_free_finished`, in the
running order); as the victim of a preemption meanwhile it frees them at once
(policy.vllm_schedule). With vLLM 0.33's `defer_block_free` (pp[P_HOLD_VICTIMS] = 1: more
than one batch in flight and a KV connector that loads, as the OffloadingConnector does)
a request step k scheduled (R_SEQ == Q_INFL) is no preemption victim either while step
k+1 is built: the running loop stops instead (vLLM `_request_blocks_can_be_freed`). A
build that schedules nothing lets step k be processed and builds again (vLLM's empty
batch). Until round 14 the hold came only with the deferred frees. vLLM caches a block
only once the request's tokens hold all of it, and while step k+1 is built the output step
k made is not among them (an output placeholder): the build caches no block that output
completes (policy.allocate, R_OSEQ), and processing step k caches, for each running
request it gave an output, the full blocks of what it has computed (vLLM's
update_from_output: cache_blocks), before the finished ones are freed.

Routing: route[i] >= 0 pins a replica; -1 joins the replica with the fewest unfinished
requests (sim.py's min tree); -2 follows prev's replica.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import no_runtime, with_runtime
from xmemplan.sizing.engine.policy import (
    CLIP_MAX_NEW_TOKENS,
    N_Q,
    N_R,
    P_BS,
    P_CACHING,
    P_EBS,
    P_POLICY,
    Q_ABORT,
    Q_CHUNKED,
    Q_FIN,
    Q_FLOWS,
    Q_FULL,
    Q_INFL,
    Q_LOOKED,
    Q_LOOKED_HIT,
    Q_NRUN,
    Q_PREEMPTED,
    Q_RHEAD,
    Q_STATE,
    Q_WHEAD,
    R_CACHEABLE,
    R_COMP,
    R_EXT,
    R_FIXHIT,
    R_FLOWS,
    R_GEN,
    R_HELD,
    R_HIT,
    R_KN,
    R_KOFF,
    R_LOADED,
    R_LOADED_TOTAL,
    R_LOOKUP_HIT,
    R_LOOKUPS,
    R_NEWHIT,
    R_NODE,
    R_OSEQ,
    R_OUT,
    R_PEND,
    R_PREEMPT,
    R_PROMPT,
    R_RBOFF,
    R_REP,
    R_RNEXT,
    R_S0,
    R_SEQ,
    R_STARTED,
    R_STATUS,
    R_STOK,
    R_TIER_TOK,
    SGLANG,
    ST_DONE,
    ST_LOADING,
    ST_NEW,
    ST_WAIT,
    _fixed_hit,
    cache_full,
    release,
    run_remove,
    sg_checkpoint,
    sg_lookup,
    sg_release,
    sglang_head_need,
    sglang_ratio_after_retract,
    sglang_schedule,
    vllm_schedule,
    w_append,
)
from xmemplan.sizing.engine.pool import pool_new
from xmemplan.sizing.engine.prefetch import (
    EV_CUT,
    EV_TIMER,
    N_PF,
    N_PP,
    PF_DEADLINE,
    PF_DONE,
    PF_FLOW,
    PF_LANDED,
    PF_ONGOING,
    PF_STATE,
    PF_TOKENS,
    PP_BASE,
    PP_PAGE,
    PP_PERKI,
    PP_POLICY,
    PP_THRESH,
    pf_cut,
    pf_plan,
    pf_push,
    pf_start,
    pf_update,
)
from xmemplan.sizing.engine.radix import G_OVER, radix_new, radix_walk
from xmemplan.sizing.engine.steptime import (
    T_COMM0,
    T_COMM1,
    T_HBM,
    T_KVB,
    T_MISS,
    T_MOE,
    T_WDENSE,
    T_WEXP,
    compute_time,
    overhead_time,
    pass_time,
)
from xmemplan.sizing.sim import (
    _add_flow,
    _advance,
    _heap_pop,
    _heap_push,
    _rerate,
    _seg_init,
    _unfinished_add,
    _wake_next,
)

INF = np.inf
# link parameters (lp)
(L_DRAM_CAP, L_SWITCH_BW, L_DRAM_LAT, L_XMEM_CAP, L_NODE_BW, L_XMEM_LAT, L_INTERF,
 L_WRITE, L_PF_POLICY, L_PF_THRESH, L_PF_BASE, L_PF_PERKI) = range(12)
N_L = 12
# engine int parameters beyond the policy's (ep); E_L3: the tier at SGLang HiCache's L3
# (its prefixes prefetched L3 -> host, then loaded host -> GPU: prefetch.py), -1 none
E_REPLICAS, E_PER_SWITCH, E_LAYERS, E_NB, E_ASYNC, E_L3 = range(6)
N_E = 6
# per-request float outputs
(O_ARR, O_READY, O_START, O_FIRST, O_DONE, O_ITL_MAX, O_LAST) = range(7)
N_O = 7
# stats
(S_STEPS, S_SPAN_START, S_SPAN_END, S_KV_AREA, S_PREEMPT, S_HBM_HIT, S_TIER_HIT,
 S_DECODE_STEPS, S_WRITE_BYTES) = range(9)
N_S = 9
# sglang new_token_ratio (schedule_conservativeness 1): init 0.7, floor 0.7 x 0.14, over
# 600 decode steps (SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS)
INIT_RATIO, MIN_FACTOR, DECAY_STEPS = 0.7, 0.14, 600.0


@no_runtime
def _lin_w(tok, lin_t, tp):  # noqa: ANN001, ANN202
    """The linear part of compute_time: max(linear FLOP time, weight byte time), and the
    MoE kernels' fixed time."""
    wb = tp[T_WDENSE] + tp[T_WEXP] * (1.0 - tp[T_MISS] ** tok) if tok > 0 else 0.0
    w_t = wb / tp[T_HBM]
    moe = tp[T_MOE] + tp[T_COMM0] + tp[T_COMM1] * tok if tok > 0 else 0.0
    return (lin_t if lin_t >= w_t else w_t) + moe


@no_runtime
def _record_step(steps_out, sn, now, t_step0, tn, held):  # noqa: ANN001, ANN202
    """Replay: row sn of the step records (its clock, its trace rows t_step0..tn, the
    blocks held), kept while the table has room (the caller reruns with a larger one);
    the next row's index."""
    if sn < steps_out.shape[0]:
        steps_out[sn, 0] = now
        steps_out[sn, 1] = t_step0
        steps_out[sn, 2] = tn
        steps_out[sn, 3] = held
    return sn + 1


@njit(cache=True, inline="always")
def _attn_j(attn0, kv0, j, da, dk):  # noqa: ANN001, ANN202
    """The attention part of the j-th decode step of a run (scalars only: cheap)."""
    a = attn0 + da * j
    k = kv0 + dk * j
    return a if a >= k else k


@with_runtime  # allocates (a replay's trace only)
def _trace_landed(trace, tn, i, now):  # noqa: ANN001, ANN202
    """Replay trace row kind 5: request i's tier load landed at `now` (the float's bits in
    the int row: replay_scenario's `landed`)."""
    tb = np.empty(1)
    tb[0] = now
    if tn < trace.shape[0]:
        trace[tn, 0] = 5
        trace[tn, 1] = i
        trace[tn, 2] = tb.view(np.int64)[0]
    return tn + 1


@no_runtime
def _hide(RI, pnext, ptag, pkind, ph, pt, kc, r, i, kind):  # noqa: ANN001, ANN202
    """Async scheduling: request i arrived (kind 0) or finished its load (kind 1) while
    replica r's step runs; the batch after that step is already built, so the scheduler
    sees i from the kick after next (its tag is the kicks so far)."""
    pnext[i] = -1
    ptag[i] = kc[r]
    pkind[i] = kind
    if pt[r] >= 0:
        pnext[pt[r]] = i
    else:
        ph[r] = i
    pt[r] = i


@no_runtime
def _unhide(RI, QI, pnext, ptag, pkind, ph, pt, kc, r, every):  # noqa: ANN001, ANN202
    """The hidden requests of replica r the scheduler sees now (all of them when
    `every`, else those hidden before the last kick), in the order they came."""
    while ph[r] >= 0 and (every or ptag[ph[r]] < kc[r]):
        x = ph[r]
        ph[r] = pnext[x]
        RI[x, R_STATUS] = ST_WAIT
        if pkind[x] == 0:
            w_append(RI, QI, r, x)
    if ph[r] < 0:
        pt[r] = -1


@no_runtime
def _free_finished(P, RI, QI, keys, rb, r, bs, caching, every):  # noqa: ANN001, ANN202
    """Deferred frees: the step in flight is processed (vLLM's update_from_output), in its
    order. A running request it gave an output token caches its full blocks up to the
    tokens it has computed, now that the token is among its tokens (cache_blocks(request,
    num_computed_tokens - num_in_flight_tokens)); the requests it finished then leave the
    running list and free their blocks; no victim is held back any more. The build before
    cached the same blocks of the requests it scheduled (policy.allocate), so only those
    it left out need the walk: `every` (some running request not scheduled)."""
    infl = QI[r, Q_INFL]
    QI[r, Q_INFL] = -1
    if QI[r, Q_FIN] == 0 and not every:
        return
    x = QI[r, Q_RHEAD]
    while x >= 0:
        nx = RI[x, R_RNEXT]
        if caching and RI[x, R_OSEQ] == infl and RI[x, R_CACHEABLE] == 1:
            cache_full(P, RI, keys, rb, r, x, RI[x, R_COMP], bs, 0)
        if RI[x, R_STATUS] == ST_DONE:
            run_remove(RI, QI, r, x)
            release(P, RI, rb, r, x)
        x = nx
    QI[r, Q_FIN] = 0


@no_runtime
def _sg_process(S, P, RI, QI, RO, keys, r, bs, caching, now, stats):  # noqa: ANN001, ANN202
    """SGLang's overlap loop: the step in flight is processed, now that the next batch is
    built (process_batch_result, in the batch's order): a request it finished releases its
    KV into the tree and leaves the running batch (no longer full); one whose prefill it
    completed checkpoints its pages; an output token it made is counted (the first one is
    the request's first token). Requests retracted meanwhile were dropped (R_PEND 0)."""
    QI[r, Q_INFL] = -1
    x = QI[r, Q_RHEAD]
    while x >= 0:
        nx = RI[x, R_RNEXT]
        p = RI[x, R_PEND]
        if p != 0:
            RI[x, R_PEND] = 0
            if RI[x, R_STATUS] == ST_DONE:
                run_remove(RI, QI, r, x)
                sg_release(S, P, RI, keys, r, x, bs, caching)  # release_kv_cache
                QI[r, Q_FULL] = 0
            else:
                if (p & 1) == 1 and RI[x, R_GEN] == 1:
                    RO[x, O_FIRST] = now
                    stats[S_HBM_HIT] += RI[x, R_HIT]
                    stats[S_TIER_HIT] += RI[x, R_EXT]
                if (p & 2) == 2:
                    sg_checkpoint(S, P, RI, keys, r, x, bs)  # checkpoint_kv_cache
        x = nx
    QI[r, Q_FIN] = 0


@njit(cache=True, nogil=True)  # threads.py: sweep points in parallel
def run_kernel(arrival, prev, think, prompt, output, tier_tok, tier, route, koff, kn, keys,  # noqa: ANN001, ANN201, C901
               fixhit, cacheable, pp, tp, lp, ep, cons, trace, steps_out, sgp):
    """The loop (module doc). tier[i]: 0 host DRAM, 1 X-Mem, -1 none. Returns per-request
    floats (n x N_O), replica of each, HBM hit tokens (first admission), tier tokens
    (and vLLM's prefix-cache lookups and their hit tokens, policy._count_lookup),
    loaded, preemptions, busy seconds per replica, stats, trace rows used, steps used.
    sgp: SGLang's table sizes (nodes, heap entries per replica); sgp[2] is set to 1 when
    they were too small (the run stopped: run it again with larger ones)."""
    n = arrival.shape[0]
    R = ep[E_REPLICAS]
    per_switch = ep[E_PER_SWITCH]
    layers = ep[E_LAYERS]
    nb = ep[E_NB]
    asyn = ep[E_ASYNC] == 1
    bs = pp[P_BS]
    policy = pp[P_POLICY]
    # vLLM's async scheduling (module doc): a step's finished requests are freed once the
    # next batch is built; with vLLM 0.33's deferred block frees (a KV connector) the
    # requests in flight are no preemption victims too (pp[P_HOLD_VICTIMS], policy.py)
    defer = asyn and policy != SGLANG
    l3 = ep[E_L3] if policy == SGLANG else -1  # SGLang HiCache's L3 tier (prefetch.py)
    kvb = tp[T_KVB]
    cap = np.empty(2)
    cap[0] = lp[L_DRAM_CAP]
    cap[1] = lp[L_XMEM_CAP]
    lat = np.empty(2)
    lat[0] = lp[L_DRAM_LAT]
    lat[1] = lp[L_XMEM_LAT]
    switch_bw = lp[L_SWITCH_BW]
    node_bw = lp[L_NODE_BW]
    interf = lp[L_INTERF]
    write = lp[L_WRITE] > 0
    n_switch = (R + per_switch - 1) // per_switch

    RI = np.zeros((n, N_R), np.int64)
    QI = np.full((R, N_Q), -1, np.int64)
    for r in range(R):
        QI[r, Q_NRUN] = 0
        QI[r, Q_STATE] = 0
        QI[r, Q_FLOWS] = 0
        QI[r, 7] = 0
        QI[r, 9] = 0
        QI[r, Q_FIN] = 0
    rbcap = 0
    for i in range(n):
        RI[i, R_PROMPT] = prompt[i]
        RI[i, R_OUT] = output[i]
        RI[i, R_KOFF] = koff[i]
        RI[i, R_KN] = kn[i]
        RI[i, R_RBOFF] = rbcap
        RI[i, R_TIER_TOK] = tier_tok[i]
        RI[i, R_FIXHIT] = fixhit[i]
        RI[i, R_CACHEABLE] = cacheable[i]
        RI[i, R_NEWHIT] = 1
        RI[i, R_REP] = -1
        RI[i, R_NODE] = -1
        rbcap += (prompt[i] + output[i] + bs - 1) // bs + 1
    rb = np.zeros(rbcap, np.int64)
    mapped = 0
    for i in range(n):
        if cacheable[i] == 1:
            mapped += kn[i]
    longest = 1
    for i in range(n):
        if kn[i] > longest:
            longest = kn[i]
    if policy == SGLANG:
        # SGLang: a radix tree per replica (radix.py); the block pool keeps only counts
        P = pool_new(R, nb, 1, 0)
        S = radix_new(R, nb, sgp[0], sgp[1], longest)
    else:
        P = pool_new(R, nb, min(rbcap, R * nb) + 1, min(mapped, R * nb) + 1)
        S = radix_new(1, 1, 0, 0, 0)
    RO = np.full((n, N_O), INF)
    for i in range(n):
        RO[i, O_ITL_MAX] = 0.0
    busy = np.zeros(R)
    stats = np.zeros(N_S)
    rbstart = np.zeros(R)
    rcomp = np.zeros(R)
    rfixed = np.zeros(R)
    rload_end = np.zeros(R)
    rend = np.full(R, INF)
    rprefill = np.zeros(R, np.int64)
    # a run of decode-only steps (macro): steps in it, and what prices its j-th step
    rK = np.ones(R, np.int64)
    rA0 = np.zeros(R)
    rLW = np.zeros(R)
    rDA = np.zeros(R)
    rDK = np.zeros(R)
    rKV0 = np.zeros(R)
    rtok = np.zeros(R)
    rlast = np.zeros(R)
    macro_ok = trace.shape[0] <= 1
    # at most 1 (NewTokenRatioTracker.from_config); ratio[R]: the initial one (on_idle)
    init_ratio = min(INIT_RATIO * cons, 1.0)
    ratio = np.full(R + 1, init_ratio)
    ratio_min = init_ratio * MIN_FACTOR
    ratio_decay = (init_ratio - ratio_min) / DECAY_STEPS
    load_end = np.zeros(n)
    loads = np.zeros(n + 1, np.int64)
    dep = np.full(n, -1, np.int64)
    for i in range(n):
        if prev[i] >= 0:
            dep[prev[i]] = i
    outstanding = np.zeros(R, np.int64)
    seg, PP = _seg_init(R)

    # heap entries: i an arrival or a load done (stage[i]), n + i request i's prefetch
    # landed, 2n + i its timeout's deadline
    ht = np.empty((4 if l3 >= 0 else 2) * n + 1)
    hi = np.empty((4 if l3 >= 0 else 2) * n + 1, np.int64)
    hn = int(np.int64(0))  # not a literal: _run_loop is compiled for one type of it
    for i in range(n):
        if prev[i] < 0:
            hn = _heap_push(ht, hi, hn, arrival[i], i)
    stage = np.zeros(n, np.int64)  # heap entry: 0 arrival, 1 load done
    rh_t = np.empty(8 * R + 8 * n + 1)
    rh_i = np.empty(8 * R + 8 * n + 1, np.int64)

    # SGLang HiCache with a tier at L3 (prefetch.py): per request its prefetch, the
    # requests queued since the scheduler's last pass (their prefetch starts at the next),
    # per replica its prefetches not yet polled to an end, a poll's events
    npf = n if l3 >= 0 else 1
    pf = np.zeros((npf, N_PF))
    pfe = np.zeros((npf + 1, 2), np.int64)
    pfp = np.zeros(N_PP)
    pfp[PP_POLICY] = lp[L_PF_POLICY] if l3 >= 0 else -1.0
    pfp[PP_THRESH] = lp[L_PF_THRESH]
    pfp[PP_PAGE] = pp[P_EBS]
    pfp[PP_BASE] = lp[L_PF_BASE]
    pfp[PP_PERKI] = lp[L_PF_PERKI]
    pfn = np.full(npf, -1, np.int64)
    pfh = np.full(R, -1, np.int64)
    pft = np.full(R, -1, np.int64)
    pfc = np.zeros(R, np.int64)
    PF = (pf, pfe, pfp, pfn, pfh, pft, pfc)
    fmax = 3 * n + 3 * R + 4 + (n if l3 >= 0 else 0)
    f_rem = np.zeros(fmax)
    f_rate = np.zeros(fmax)
    f_tier = np.zeros(fmax, np.int64)
    f_rep = np.zeros(fmax, np.int64)
    f_owner = np.zeros(fmax, np.int64)  # request, -1 - replica (batch load), -1-R-r write
    active = np.empty(fmax, np.int64)
    free = np.empty(fmax, np.int64)
    nfree_f = fmax
    for k in range(fmax):
        free[k] = fmax - 1 - k
    cnt_gpu = np.zeros((R, 2), np.int64)
    cnt_sw = np.zeros(n_switch, np.int64)
    wflow = np.full((R, 2), -1, np.int64)  # the write stream of each replica and tier
    wbytes = np.zeros(2)

    kick = np.zeros(R, np.int64)
    kicked = np.zeros(R, np.int64)
    # async scheduling: the requests each replica does not see yet (a FIFO list), the
    # replica's kicks that built a batch
    pnext = np.full(n, -1, np.int64)
    ptag = np.zeros(n, np.int64)
    pkind = np.zeros(n, np.int64)
    ph = np.full(R, -1, np.int64)
    pt = np.full(R, -1, np.int64)
    kc = np.zeros(R, np.int64)

    # the loop allocates nothing: it runs without numba's runtime (no_runtime), so an
    # array bound by one of its inlined helpers costs no atomic reference count
    # (docs/performance.md, round 6)
    now, tn, sn = _run_loop(
        P, PF, PP, QI, R, RI, RO, S, active, arrival, asyn, bs, busy, cap, cnt_gpu, cnt_sw,
        defer, dep, f_owner, f_rate, f_rem, f_rep, f_tier, free, hi, hn, ht, interf, kc, keys, kick,
        kicked, kvb, lat, layers, load_end, loads, macro_ok, nb, nfree_f, node_bw,
        outstanding, per_switch, ph, pkind, pnext, policy, pp, prev, pt, ptag, rA0, rDA,
        rDK, rK, rKV0, rLW, ratio, ratio_decay, ratio_min, rb, rbstart, rcomp, rend, rfixed,
        rh_i, rh_t, rlast, rload_end, route, rprefill, rtok, seg, sgp, stage, stats,
        steps_out, switch_bw, think, tier, tp, trace, wbytes, wflow, write, l3)

    stats[S_SPAN_END] = now
    hbm = np.zeros((n, 4), np.int64)
    loaded = np.zeros(n, np.int64)
    npre = np.zeros(n, np.int64)
    rep = np.zeros(n, np.int64)
    for i in range(n):
        hbm[i, 0] = RI[i, R_HIT]
        hbm[i, 1] = RI[i, R_EXT]
        hbm[i, 2] = RI[i, R_LOOKUPS]
        hbm[i, 3] = RI[i, R_LOOKUP_HIT]
        loaded[i] = RI[i, R_LOADED_TOTAL]
        npre[i] = RI[i, R_PREEMPT]
        rep[i] = RI[i, R_REP]
        stats[S_PREEMPT] += RI[i, R_PREEMPT]
    return RO, rep, hbm, loaded, npre, busy, stats, tn, sn, pf


@no_runtime
def _run_loop(P, PF, PP, QI, R, RI, RO, S, active, arrival, asyn, bs, busy, cap, cnt_gpu,
              cnt_sw, defer, dep, f_owner, f_rate, f_rem, f_rep, f_tier, free, hi, hn, ht,
              interf, kc, keys, kick, kicked, kvb, lat, layers, load_end, loads, macro_ok, nb,
              nfree_f, node_bw, outstanding, per_switch, ph, pkind, pnext, policy, pp, prev,
              pt, ptag, rA0, rDA, rDK, rK, rKV0, rLW, ratio, ratio_decay, ratio_min, rb,
              rbstart, rcomp, rend, rfixed, rh_i, rh_t, rlast, rload_end, route, rprefill,
              rtok, seg, sgp, stage, stats, steps_out, switch_bw, think, tier, tp, trace,
              wbytes, wflow, write, l3):  # noqa: ANN001, ANN202, C901
    """run_kernel's event loop over the tables it made (module doc). Returns (now, trace
    rows used, steps used)."""
    # _pf_pass's counters start from a zero that is not a literal: numba types a call with
    # the argument types it sees first and again once the loop widens them, so given a
    # literal 0 it compiled twice (docs/performance.md round 8)
    cnt_x = int(np.int64(0))
    f_last = 0.0
    nact = int(np.int64(0))
    nkick = 0
    now = 0.0
    rhn = 0
    sn = 0
    started = False
    tn = 0
    sg_g = S[5]
    pf, pfe, pfp, pfn, pfh, pft, pfc = PF
    pf_base = -1 - 2 * R  # a prefetch's flow owner: pf_base - request
    n = arrival.shape[0]
    # SGLang's overlap loop (module doc): step k is processed after step k+1 is built
    lag = asyn and policy == SGLANG
    caching = pp[P_CACHING] == 1
    while True:
        if sg_g[G_OVER] != 0:
            sgp[2] = 1
            break
        # --- next event ----------------------------------------------------------------
        t_h = ht[0] if hn > 0 else INF
        while rhn > 0 and (QI[rh_i[0], Q_STATE] != 1 or rend[rh_i[0]] != rh_t[0]):
            rhn = _heap_pop(rh_t, rh_i, rhn)
        t_r = rh_t[0] if rhn > 0 else INF
        t_f = INF
        f_min = -1
        for a in range(nact):
            f = active[a]
            tf = f_last + f_rem[f] / f_rate[f]
            if tf < t_f:
                t_f = tf
                f_min = a
        t = min(t_f, min(t_r, t_h))
        # every event at `now` is in (arrivals first): start a step on each replica the
        # events made runnable; the steps' ends are new events
        do_kick = nkick > 0 and t > now
        if not do_kick:
            if t == INF:
                break
            now = t
        for q in range(nkick if do_kick else 0):
            r = kick[q]
            kicked[r] = 0
            if QI[r, Q_STATE] != 0:
                continue
            if asyn:
                _unhide(RI, QI, pnext, ptag, pkind, ph, pt, kc, r, False)
            if QI[r, Q_WHEAD] < 0 and QI[r, Q_RHEAD] < 0 and ph[r] < 0:
                QI[r, Q_INFL] = -1  # (deferred frees) the step in flight is processed
                continue
            t_step0 = tn
            npre0 = QI[r, Q_PREEMPTED]
            tok = 0
            ns = 0
            nl = 0
            pre = False
            nl_any = 0
            for _attempt in range(4):
                aborted = False
                if QI[r, Q_WHEAD] >= 0 or QI[r, Q_RHEAD] >= 0:
                    if policy == SGLANG:
                        if l3 >= 0:
                            nact, nfree_f, cnt_x, f_last = _pf_pass(
                                P, PF, QI, RI, S, active, cap, cnt_gpu, cnt_sw, f_owner,
                                f_rate, f_rem, f_rep, f_tier, free, keys, kvb, nact,
                                nfree_f, node_bw, now, f_last, per_switch, pf_base, pp, r,
                                switch_bw, tier, cnt_x)
                        tok, ns, tn, nl, pre = sglang_schedule(S, P, RI, QI, keys, r, pp,
                                                               trace, tn, ratio[r], loads,
                                                               pf, pfe, pfp, now)
                        if l3 >= 0 and pfe[0, 0] > 0:
                            hn, f_last = _pf_events(PF, active, f_last, f_rate, f_rem, hi,
                                                    hn, ht, kvb, n, nact, now, pp, r)
                        if QI[r, Q_ABORT] >= 0:
                            # retract_decode aborted the last decode (policy.py): it ends
                            # here, no batch runs, and the engine builds again
                            a = QI[r, Q_ABORT]
                            QI[r, Q_ABORT] = -1
                            aborted = True
                            RI[a, R_STATUS] = ST_DONE
                            RO[a, O_DONE] = now
                            _unfinished_add(outstanding, seg, PP, r, -1)
                            hn = _wake_next(ht, hi, hn, dep, think, arrival, a, now)
                            ratio[r] = sglang_ratio_after_retract(RI, QI, r)
                            if steps_out.shape[0] > 1:
                                # replay: the abort is a record of its own (nothing ran)
                                sn = _record_step(steps_out, sn, now, t_step0, tn,
                                                  nb - P[1][r, 2])
                                t_step0 = tn
                    else:
                        tok, ns, tn, nl = vllm_schedule(P, RI, QI, keys, rb, r, pp, trace, tn,
                                                        loads)
                        pre = False
                # vLLM: requests whose tier load starts now
                if policy != SGLANG:
                    for a in range(nl):
                        i = loads[a]
                        b = RI[i, R_EXT] * kvb
                        tr = tier[i]
                        if tr < 0 or b <= 0:
                            continue
                        _advance(active, nact, f_rem, f_rate, now - f_last)
                        f_last = now
                        nact, nfree_f, cnt_x = _add_flow(
                            active, nact, free, nfree_f, f_rem, f_rate, f_tier, f_rep,
                            f_owner, cnt_gpu, cnt_sw, per_switch, cnt_x, cap, switch_bw,
                            node_bw, b, tr, r, i)
                        RI[i, R_FLOWS] = 1
                        load_end[i] = now
                    nl_any += nl
                if ns > 0 or (ph[r] < 0 and QI[r, Q_INFL] < 0 and not aborted):
                    break
                if QI[r, Q_INFL] >= 0:
                    # deferred frees: vLLM's empty batch lets the engine core process the
                    # one in flight (its finished requests free their blocks, no victim
                    # is held back any more), and it schedules again
                    if steps_out.shape[0] > 1 and nl_any > 0:
                        # replay: that empty schedule started tier loads (its own record)
                        sn = _record_step(steps_out, sn, now, t_step0, tn, nb - P[1][r, 2])
                        t_step0 = tn
                        nl_any = 0
                    if lag:
                        _sg_process(S, P, RI, QI, RO, keys, r, bs, caching, now, stats)
                    else:
                        _free_finished(P, RI, QI, keys, rb, r, bs, caching,
                                       QI[r, Q_NRUN] > 0)
                # nothing to run without them: an idle engine sees the hidden requests now
                _unhide(RI, QI, pnext, ptag, pkind, ph, pt, kc, r, True)
                if steps_out.shape[0] > 1:
                    tn = t_step0
            if ns == 0:
                if policy == SGLANG and QI[r, Q_WHEAD] < 0 and QI[r, Q_RHEAD] < 0:
                    ratio[r] = ratio[R]  # on_idle: fully idle, the ratio resets
                if steps_out.shape[0] > 1 and nl_any > 0:
                    # replay: a schedule that only started tier loads is recorded (no
                    # step runs: the replica waits for the next event)
                    sn = _record_step(steps_out, sn, now, t_step0, tn, nb - P[1][r, 2])
                elif steps_out.shape[0] > 1 and tn > t_step0:
                    tn = t_step0  # nothing ran: no step to record
                continue
            # price the step
            lin_t = 0.0
            attn_t = 0.0
            kv_read = 0.0
            starts = 0
            start_tok = 0.0
            prefill = False
            nseq = 0
            lin, attn = tp[0], tp[1]
            i = QI[r, Q_RHEAD]
            j = QI[r, Q_WHEAD]
            # scheduled requests are in the running list, or (SGLang's chunked one) first
            # in the waiting queue
            while i >= 0 or j >= 0:
                if i >= 0:
                    x = i
                    i = RI[i, R_RNEXT]
                else:
                    x = j
                    j = -1
                    if QI[r, Q_CHUNKED] != x:
                        continue
                k = RI[x, R_STOK]
                if k <= 0:
                    continue
                if defer:
                    RI[x, R_SEQ] = kc[r] + 1  # the step that schedules it
                nseq += 1
                s0 = float(RI[x, R_S0])
                lin_t += lin * k
                attn_t += attn * ((s0 + k) * (s0 + k) - s0 * s0)
                kv_read += (s0 + k) * kvb
                if k > 1 or RI[x, R_GEN] == 0:
                    prefill = True
                if RI[x, R_STARTED] == 0:
                    RI[x, R_STARTED] = 1
                    RO[x, O_START] = now
                    starts += 1
                    start_tok += RI[x, R_PROMPT]
            comp = pass_time(compute_time(float(tok), lin_t, attn_t, kv_read, tp), prefill, tp)
            fixed = overhead_time(float(tok), float(nseq), prefill, starts, start_tok, tp)
            rcomp[r] = comp
            rfixed[r] = fixed
            kc[r] += 1
            rbstart[r] = now
            rprefill[r] = 1 if pre else 0
            if policy == SGLANG and not pre and QI[r, Q_PREEMPTED] > npre0:
                # update_running_batch after retract_decode: new_token_ratio is set to
                # the kept requests' estimate and does not decay this step
                # (NewTokenRatioTracker.estimate_new_token_ratio_after_retract)
                ratio[r] = sglang_ratio_after_retract(RI, QI, r)
                rprefill[r] = 2
            stats[S_STEPS] += 1
            stats[S_DECODE_STEPS] += 1  # priced steps (a run of decode steps is one)
            if steps_out.shape[0] > 1:
                sn = _record_step(steps_out, sn, now, t_step0, tn, nb - P[1][r, 2])
            freed = QI[r, Q_FIN] > 0
            if defer:
                # the step before is processed now that this one is built
                _free_finished(P, RI, QI, keys, rb, r, bs, caching, ns < QI[r, Q_NRUN])
            elif lag:
                _sg_process(S, P, RI, QI, RO, keys, r, bs, caching, now, stats)
            nbl = 0
            if policy == SGLANG and nl > 0:
                for tr in range(2):
                    b = 0.0
                    for a in range(nl):
                        lt = tier[loads[a]]
                        if lt == l3 and l3 >= 0:
                            lt = 0  # L3: loaded back from the host, where it was fetched
                        if lt == tr:
                            b += RI[loads[a], R_EXT] * kvb
                    if b > 0:
                        nbl += 1
                        _advance(active, nact, f_rem, f_rate, now - f_last)
                        f_last = now
                        nact, nfree_f, cnt_x = _add_flow(
                            active, nact, free, nfree_f, f_rem, f_rate, f_tier, f_rep,
                            f_owner, cnt_gpu, cnt_sw, per_switch, cnt_x, cap, switch_bw,
                            node_bw, b, tr, r, -1 - r)
            if nbl > 0:
                QI[r, Q_FLOWS] = nbl
                rload_end[r] = now
                QI[r, Q_STATE] = 2
            else:
                QI[r, Q_STATE] = 1
                e = now + fixed + comp
                rK[r] = 1
                # decode only, no preemption now: steps run back to back until the first
                # request finishes or needs a new block, until an arrival or a finished
                # load (the step in progress ends the run), or (SGLang) until the waiting
                # head fits as new_token_ratio decays: the times of one step per event,
                # without the events. Waiting requests that did not fit now do not fit
                # during the run (free blocks and hits stay as they are).
                allow = macro_ok and not prefill and nl == 0 and nl_any == 0 \
                    and QI[r, Q_PREEMPTED] == npre0 and ph[r] < 0 and pfc[r] == 0
                if defer and ((freed and QI[r, Q_WHEAD] >= 0) or ns < QI[r, Q_NRUN]):
                    # deferred frees: blocks freed after this build may admit a waiting
                    # request at the next, and a running loop stopped at a victim in
                    # flight preempts it at the next: this batch does not repeat
                    allow = False
                if lag and freed:
                    # overlap: the step before freed pages or changed the tree after this
                    # build: the next build sees them
                    allow = False
                ext_h = -1
                left_h = 0
                if allow and policy == SGLANG and QI[r, Q_WHEAD] >= 0:
                    ext_h, left_h, fits_h = sglang_head_need(S, P, RI, QI, keys, r, pp)
                    if ext_h < 0:
                        allow = False
                    elif not fits_h or QI[r, Q_FULL] == 1:
                        ext_h = -1  # not admitted until a request finishes
                if allow:
                    K = 1 << 40
                    sumleft = 0
                    x = QI[r, Q_RHEAD]
                    while x >= 0:
                        left = RI[x, R_OUT] - RI[x, R_GEN]
                        sumleft += left
                        if left > CLIP_MAX_NEW_TOKENS:
                            allow = False  # the reserve's clip would move: step by step
                        room = RI[x, R_HELD] * bs - (RI[x, R_PROMPT] + RI[x, R_GEN]) + 1
                        if room < left:
                            left = room
                        if left < K:
                            K = left
                        x = RI[x, R_RNEXT]
                    if not allow:
                        K = 1
                    if ext_h >= 0 and K > 1:
                        free_tok = P[1][r, 2] * bs
                        nrun = QI[r, Q_NRUN]
                        # the outputs counted at the build of step jj: all but the one
                        # in flight under overlap
                        lagj = 1 if lag else 0
                        for jj in range(1, K):
                            rj = ratio[r] - ratio_decay * jj
                            if rj < ratio_min:
                                rj = ratio_min
                            if ext_h < free_tok - (sumleft - (jj - lagj) * nrun) * rj:
                                K = jj  # the head is admitted at step jj
                                break
                    if K > 1:
                        # step jj of the run: linear and weight time as step 0, attention
                        # and KV read grow by one token per request and step
                        lw = _lin_w(float(tok), lin_t, tp)
                        da = 2.0 * tp[1] * tok
                        dk = tok * kvb / tp[T_HBM]
                        rLW[r] = lw
                        rDA[r] = da
                        rDK[r] = dk
                        rA0[r] = attn_t
                        rKV0[r] = kv_read / tp[T_HBM]
                        rtok[r] = tok
                        d = 0.0
                        for jj in range(1, K):
                            d = fixed + pass_time(
                                lw + _attn_j(attn_t, kv_read / tp[T_HBM], jj, da, dk), False, tp)
                            e += d
                        rK[r] = K
                        rlast[r] = d
                rend[r] = e
                rhn = _heap_push(rh_t, rh_i, rhn, e, r)
        if do_kick:
            nkick = 0
            continue

        if t_f <= t_r and t_f <= t_h:
            # --- a load or write ends ------------------------------------------------------
            _advance(active, nact, f_rem, f_rate, now - f_last)
            f_last = now
            f = active[f_min]
            nact -= 1
            active[f_min] = active[nact]
            free[nfree_f] = f
            nfree_f += 1
            tr = f_tier[f]
            r = f_rep[f]
            cnt_gpu[r, tr] -= 1
            if tr == 0:
                cnt_sw[r // per_switch] -= 1
            else:
                cnt_x -= 1
            ow = f_owner[f]
            end = now + lat[tr]
            if ow >= 0:
                if end > load_end[ow]:
                    load_end[ow] = end
                RI[ow, R_FLOWS] -= 1
                if RI[ow, R_FLOWS] == 0:
                    stage[ow] = 1
                    hn = _heap_push(ht, hi, hn, load_end[ow], ow)
            elif ow <= pf_base:
                x = pf_base - ow
                pf[x, PF_FLOW] = -1
                if pf[x, PF_STATE] == PF_ONGOING:  # landed (not cut): seen at the next poll
                    pf[x, PF_DONE] = pf[x, PF_TOKENS]
                    hn = _heap_push(ht, hi, hn, end, n + x)
            elif ow < -R:
                wflow[-1 - R - ow, tr] = -1
            else:
                rr = -1 - ow
                if end > rload_end[rr]:
                    rload_end[rr] = end
                QI[rr, Q_FLOWS] -= 1
                if QI[rr, Q_FLOWS] == 0:
                    ld = rload_end[rr] - rbstart[rr]
                    c = rcomp[rr]
                    c += interf * (c if c < ld else ld)
                    hi_ = c if c > ld else ld
                    lo_ = ld if c > ld else c
                    e = rbstart[rr] + rfixed[rr] + hi_ + lo_ / layers
                    rend[rr] = e
                    QI[rr, Q_STATE] = 1
                    rhn = _heap_push(rh_t, rh_i, rhn, e, rr)
            _rerate(active, nact, f_tier, f_rep, f_rate, cap, cnt_gpu, cnt_sw, per_switch,
                    switch_bw, node_bw, cnt_x)
            continue

        if t_h <= t_r:
            # --- an arrival, or a request's tier load done ---------------------------------
            i = hi[0]
            hn = _heap_pop(ht, hi, hn)
            if i >= n:
                # an L3 prefetch landed (n + x), or its timeout's deadline passed (2n + x):
                # the replica polls again (no run of decode steps is in progress: pfc)
                x = i - n if i < 2 * n else i - 2 * n
                if i < 2 * n and pf[x, PF_STATE] == PF_ONGOING:
                    pf[x, PF_STATE] = PF_LANDED
                r = RI[x, R_REP]
                if kicked[r] == 0:
                    kicked[r] = 1
                    kick[nkick] = r
                    nkick += 1
                continue
            if stage[i] == 0:
                if not started:
                    started = True
                    stats[S_SPAN_START] = now
                RO[i, O_ARR] = now
                r = route[i]
                if r == -2:
                    r = RI[prev[i], R_REP] if prev[i] >= 0 else -1
                if r < 0:
                    r = seg[1] % PP
                RI[i, R_REP] = r
                _unfinished_add(outstanding, seg, PP, r, 1)
                if asyn and QI[r, Q_STATE] != 0:
                    _hide(RI, pnext, ptag, pkind, ph, pt, kc, r, i, 0)
                else:
                    RI[i, R_STATUS] = ST_WAIT
                    w_append(RI, QI, r, i)
                if l3 >= 0 and tier[i] == l3 and RI[i, R_TIER_TOK] > 0:
                    pf_push(pfn, pfh, pft, r, i)  # its prefetch starts when it is seen
            else:
                r = RI[i, R_REP]
                stage[i] = 0
                RI[i, R_COMP] += RI[i, R_EXT]
                RI[i, R_LOADED_TOTAL] += RI[i, R_EXT]
                RI[i, R_LOADED] = 1
                if trace.shape[0] > 1:
                    tn = _trace_landed(trace, tn, i, now)
                if asyn and QI[r, Q_STATE] != 0:
                    _hide(RI, pnext, ptag, pkind, ph, pt, kc, r, i, 1)  # still ST_LOADING
                else:
                    RI[i, R_STATUS] = ST_WAIT
            RO[i, O_READY] = now
            if QI[r, Q_STATE] == 1 and rK[r] > 1:
                # the replica is in a run of decode steps: it ends with the step in progress
                e = rbstart[r] + rfixed[r] + rcomp[r]
                jj = 1
                d = 0.0
                while jj < rK[r] and e <= now:
                    d = rfixed[r] + pass_time(
                        rLW[r] + _attn_j(rA0[r], rKV0[r], jj, rDA[r], rDK[r]), False, tp)
                    e += d
                    jj += 1
                if asyn and pt[r] == i and jj < rK[r]:
                    # async: the run's next step was built without i, so the run ends a
                    # step later and i is seen when it does
                    d = rfixed[r] + pass_time(
                        rLW[r] + _attn_j(rA0[r], rKV0[r], jj, rDA[r], rDK[r]), False, tp)
                    e += d
                    jj += 1
                    ptag[i] = kc[r] - 1
                if jj < rK[r]:
                    rK[r] = jj
                    rlast[r] = d
                    rend[r] = e
                    rhn = _heap_push(rh_t, rh_i, rhn, e, r)
            if kicked[r] == 0:
                kicked[r] = 1
                kick[nkick] = r
                nkick += 1
            continue

        # --- a replica's step ends -------------------------------------------------------
        r = rh_i[0]
        rhn = _heap_pop(rh_t, rh_i, rhn)
        busy[r] += now - rbstart[r]
        QI[r, Q_STATE] = 0
        rend[r] = INF
        # KV held over the step (blocks of running requests), for the time average
        stats[S_KV_AREA] += (nb - P[1][r, 2]) * (now - rbstart[r])
        wbytes[0] = 0.0
        wbytes[1] = 0.0
        K = rK[r]
        rK[r] = 1
        stats[S_STEPS] += K - 1
        if K > 1 and QI[r, Q_LOOKED] >= 0:
            # vLLM looks the waiting request that did not fit up again at each step
            x = QI[r, Q_LOOKED]
            RI[x, R_LOOKUPS] += K - 1
            RI[x, R_LOOKUP_HIT] += (K - 1) * QI[r, Q_LOOKED_HIT]
        if policy == SGLANG and rprefill[r] == 0:
            # decode steps: the ratio decays
            ratio[r] = ratio[r] - ratio_decay * K
            if ratio[r] < ratio_min:
                ratio[r] = ratio_min
        if policy == SGLANG and QI[r, Q_CHUNKED] >= 0:
            x = QI[r, Q_CHUNKED]
            QI[r, Q_CHUNKED] = -1
            QI[r, Q_FULL] = 0  # left out of the merge: the running batch is not full
            RI[x, R_COMP] += RI[x, R_STOK]
            if pp[P_CACHING] == 1:
                sg_checkpoint(S, P, RI, keys, r, x, bs)  # stash_chunked_request
            if write and tier[x] >= 0:
                wbytes[tier[x]] += RI[x, R_STOK] * kvb
                if tier[x] == l3:  # L3: written through to the host, backed up to L3
                    wbytes[0] += RI[x, R_STOK] * kvb
            RI[x, R_STOK] = 0
        i = QI[r, Q_RHEAD]
        while i >= 0:
            nx = RI[i, R_RNEXT]
            k = RI[i, R_STOK]
            if k > 0:
                RI[i, R_STOK] = 0
                was_prefill = k > 1 or RI[i, R_GEN] == 0
                if K > 1:
                    # a run of K decode steps: K tokens, the last K-1 at step gaps
                    RI[i, R_COMP] += K - 1
                    RI[i, R_GEN] += K - 1
                    g = rbstart[r] + rfixed[r] + rcomp[r] - RO[i, O_LAST]
                    if rlast[r] > g:
                        g = rlast[r]
                    if g > RO[i, O_ITL_MAX]:
                        RO[i, O_ITL_MAX] = g
                    RO[i, O_LAST] = now - rlast[r]
                RI[i, R_COMP] += k
                if policy != SGLANG and K > 1 and pp[P_CACHING] == 1 \
                        and RI[i, R_CACHEABLE] == 1:
                    # the run's full blocks, cached as its steps would have (async: its
                    # last step was built with the output of the one before in flight)
                    cache_full(P, RI, keys, rb, r, i, RI[i, R_COMP] + 1, bs,
                               1 if defer else 0)
                if write and tier[i] >= 0 and was_prefill:
                    wbytes[tier[i]] += k * kvb
                    if tier[i] == l3:
                        wbytes[0] += k * kvb
                if RI[i, R_COMP] >= RI[i, R_PROMPT] + RI[i, R_GEN]:
                    # the step computed its last token: one output token
                    RI[i, R_GEN] += 1
                    if defer:
                        RI[i, R_OSEQ] = kc[r]  # not seen by the next build (vllm_schedule)
                    fin = RI[i, R_GEN] >= RI[i, R_OUT]
                    if lag and not fin:
                        # overlap: processed after the next build (_sg_process), which
                        # may retract it and drop the token
                        RI[i, R_PEND] = 3 if was_prefill and caching else 1
                        if was_prefill and caching:
                            QI[r, Q_FIN] += 1
                    if RI[i, R_GEN] == 1:
                        if not lag or fin:
                            RO[i, O_FIRST] = now
                            stats[S_HBM_HIT] += RI[i, R_HIT]
                            stats[S_TIER_HIT] += RI[i, R_EXT]
                    else:
                        g = now - RO[i, O_LAST]
                        if g > RO[i, O_ITL_MAX]:
                            RO[i, O_ITL_MAX] = g
                    RO[i, O_LAST] = now
                    if fin:
                        if defer or lag:
                            # it keeps its seat and blocks while the next batch is built
                            # (_free_finished, _sg_process after it)
                            QI[r, Q_FIN] += 1
                            if lag:
                                RI[i, R_PEND] = 1
                        else:
                            run_remove(RI, QI, r, i)
                            if policy == SGLANG:  # release_kv_cache(checkpoint=True)
                                sg_release(S, P, RI, keys, r, i, bs, pp[P_CACHING] == 1)
                                QI[r, Q_FULL] = 0  # it leaves the batch (filter_batch)
                            else:
                                release(P, RI, rb, r, i)
                        RI[i, R_STATUS] = ST_DONE
                        RO[i, O_DONE] = now
                        _unfinished_add(outstanding, seg, PP, r, -1)
                        if trace.shape[0] > 1:
                            if tn < trace.shape[0]:
                                trace[tn, 0] = 3
                                trace[tn, 1] = i
                                trace[tn, 2] = 0
                            tn += 1
                            if sn <= steps_out.shape[0] and sn > 0:
                                steps_out[sn - 1, 2] = tn
                        hn = _wake_next(ht, hi, hn, dep, think, arrival, i, now)
                    elif policy == SGLANG and was_prefill and caching and not lag:
                        # unfinished after its prefill: checkpoint_kv_cache
                        sg_checkpoint(S, P, RI, keys, r, i, bs)
            i = nx
        if defer or lag:
            QI[r, Q_INFL] = kc[r]  # in flight until the next batch is built
        # write-through of the step's new prompt KV to the tier (same links as loads):
        # one write stream per replica and tier, later writes queue behind earlier ones
        for tr in range(2):
            if wbytes[tr] > 0:
                stats[S_WRITE_BYTES] += wbytes[tr]
                _advance(active, nact, f_rem, f_rate, now - f_last)
                f_last = now
                if wflow[r, tr] >= 0:
                    f_rem[wflow[r, tr]] += wbytes[tr]
                    continue
                wflow[r, tr] = free[nfree_f - 1]
                nact, nfree_f, cnt_x = _add_flow(
                    active, nact, free, nfree_f, f_rem, f_rate, f_tier, f_rep, f_owner,
                    cnt_gpu, cnt_sw, per_switch, cnt_x, cap, switch_bw, node_bw, wbytes[tr],
                    tr, r, -1 - R - r)
        if kicked[r] == 0:
            kicked[r] = 1
            kick[nkick] = r
            nkick += 1
    return now, tn, sn


@no_runtime
def _pf_pass(P, PF, QI, RI, S, active, cap, cnt_gpu, cnt_sw, f_owner, f_rate, f_rem,  # noqa: ANN001, ANN202
             f_rep, f_tier, free, keys, kvb, nact, nfree_f, node_bw, now, f_last,
             per_switch, pf_base, pp, r, switch_bw, tier, cnt_x):
    """Before SGLang's scheduling pass on replica r with a tier at L3 (prefetch.py): the
    requests queued since its last pass start their prefetch (_add_request_to_queue ->
    _prefetch_kvcache: the prefix matched as it stands, the rest L3 holds fetched when
    over the threshold; a request async scheduling still hides waits), and the reading
    prefetches' acknowledged tokens are brought to now. Returns (nact, nfree_f, cnt_x,
    f_last)."""
    pf, pfe, pfp, pfn, pfh, pft, pfc = PF
    bs = pp[P_BS]
    caching = pp[P_CACHING] == 1
    page = pp[P_EBS]
    rq = S[4]
    pfe[0, 0] = 0
    while pfh[r] >= 0 and RI[pfh[r], R_STATUS] != ST_NEW:
        x = pfh[r]
        pfh[r] = pfn[x]
        if pfh[r] < 0:
            pft[r] = -1
        nk, ok, nhit, node = sg_lookup(rq, RI, r, x, bs, caching)
        if not ok:
            nhit, node = radix_walk(S, RI, R_NODE, keys, r, RI[x, R_KOFF], nk)
        matched = nhit * bs + _fixed_hit(RI, x, nhit * bs)
        top = RI[x, R_TIER_TOK]
        if top > RI[x, R_PROMPT] + RI[x, R_GEN] - 1:
            top = RI[x, R_PROMPT] + RI[x, R_GEN] - 1
        tokens = pf_plan(matched, top, page, int(pfp[PP_THRESH]))
        # the tier's prefix is what the engine holds now (HBM, or the host's write-through
        # copy of it) until the prefetch ends and adds what arrived
        RI[x, R_TIER_TOK] = matched
        if tokens > 0 and kvb > 0:
            _advance(active, nact, f_rem, f_rate, now - f_last)
            f_last = now
            pf_start(pf, x, matched, tokens)
            pf[x, PF_FLOW] = free[nfree_f - 1]
            pfc[r] += 1
            nact, nfree_f, cnt_x = _add_flow(
                active, nact, free, nfree_f, f_rem, f_rate, f_tier, f_rep, f_owner,
                cnt_gpu, cnt_sw, per_switch, cnt_x, cap, switch_bw, node_bw,
                tokens * kvb, tier[x], r, pf_base - x)
    if pfc[r] > 0:
        pf_update(pf, active, nact, f_rem, f_rate, f_owner, f_rep, r, pf_base,
                  now - f_last, kvb, page)
    return nact, nfree_f, cnt_x, f_last


@no_runtime
def _pf_events(PF, active, f_last, f_rate, f_rem, hi, hn, ht, kvb, n, nact, now, pp, r):  # noqa: ANN001, ANN202
    """After SGLang's pass on replica r: a timeout's timer started (its deadline wakes the
    replica), a prefetch ended while reading (its reads stop after the batch in flight),
    one ended after landing. Returns (heap entries, f_last)."""
    pf, pfe, pfp, pfn, pfh, pft, pfc = PF
    for e in range(1, pfe[0, 0] + 1):
        x = pfe[e, 0]
        kind = pfe[e, 1]
        if kind == EV_TIMER:
            hn = _heap_push(ht, hi, hn, pf[x, PF_DEADLINE], 2 * n + x)
            continue
        pfc[r] -= 1
        if kind == EV_CUT and pf[x, PF_TOKENS] > 0:
            _advance(active, nact, f_rem, f_rate, now - f_last)
            f_last = now
            pf_cut(pf, x, f_rem, kvb, pp[P_EBS])
    pfe[0, 0] = 0
    return hn, f_last


def _unused() -> tuple[int, ...]:
    return (R_GEN, R_HELD, R_KN, R_KOFF, R_OUT, ST_LOADING, R_NEWHIT, P_BS, R_HIT, R_EXT,
            R_LOADED, Q_CHUNKED)
