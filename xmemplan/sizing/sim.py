"""A discrete-event simulation of prefill serving with KV loads from memory tiers (numba).

`simulate(traffic, engine)` replays requests through R replicas (one GPU each) and returns
every request's times. `xmemplan.sizing.sim_reference` is the same model written as plain
Python; tests check that both agree on generated inputs. docs/size.md states the model;
in short:

Requests. Request i has a prompt of S tokens, hit tokens per tier (HBM, host DRAM, X-Mem;
the rest is computed) and O output tokens. It arrives at max(arrival[i], done[prev[i]] +
think[i]) (prev = -1: open loop; else the request it follows in its session, so closed-loop
users and a trace's think times are the same mechanism).

Routing. route[i] >= 0 pins a replica; -1 joins the replica with the fewest unfinished
requests (prefilling or decoding; lowest index on ties; kept in a min tree, O(log R) per
change); -2 follows prev's replica (session affinity).

Scheduling (per replica, one iteration at a time, SGLang's prefill-first FCFS):
- if prefills wait: a batch takes the queue in order, up to `chunk` new tokens and
  `max_batch` requests; the last one taken may be cut (chunked prefill) and stays first in
  the queue. With `mixed` (vLLM: running requests first), every decoding request adds one
  token to the batch and uses one token of the budget.
- else if requests decode: decode steps, every running request gains one token per step;
  the replica runs steps back to back until the first running request finishes, or until
  a prefill arrives (the step in progress then ends the run): the same times as one step
  per event, computed without an event per step;
- else idle.
- batch time = max(linear FLOP time, weight byte time) + max(attention FLOP time, KV
  byte time) + fixed overhead (a roofline per operator class, as model.compute_parts);
  linear = lin x tokens, attention = attn x sum((s0 + k)^2 - s0^2) over the batch's pieces
  (s0 = tokens already in KV, k = tokens computed now; a decode is k = 1);
  weight bytes = D + E x (1 - m^T), KV bytes = every piece's context x KV bytes/token,
  both over the HBM bandwidth
  (D dense weights, E routed-expert weights, m = 1 - k/E_n the chance a token misses an
  expert, T tokens in the batch: a MoE reads more experts as the batch grows; the same
  rule as model.active_weight_bytes); fixed overhead = t0 per prefill batch + per-token
  overhead x prompt of requests starting, t_dec per decode step. t0 is paid by a prefill
  batch in which at least one request starts (a continuation chunk pays none), so one
  chunked request pays it once, as in the single-request model.
- HBM KV capacity: a request starts its prefill only if its prompt fits in
  `kv_capacity_tokens` next to the prompts being prefilled and the contexts decoding
  (always when the replica holds nothing else); otherwise the replica decodes, which
  frees capacity as requests finish (SGLang's admission by free KV memory, simplified).
- KV loads: `overlap` 0 = sum (vLLM: a request's load starts on arrival and it joins the
  queue when loaded), 1 = layer (SGLang HiCache: the batch's loads start with the batch and
  run under its compute, end = t0 + max(compute, load) + min(compute, load) / layers),
  2 = max (the same without the one-layer fill). SGLang's copy kernels take SMs: with
  layer/max the batch's compute grows by `sm_interference` x min(compute, load).
- Bandwidth sharing (fluid): a load on tier k of replica r moves at
  min(cap_k / loads of tier k on r, shared_k / loads sharing it), where shared is the PCIe
  switch's bandwidth over the host-DRAM loads of GPUs behind it, and the X-Mem nodes'
  bandwidth over every X-Mem load in flight. Rates are recomputed whenever a load starts or
  ends. A tier's per-operation latency is added once per load.
- A request's first token comes at the end of the batch that computes its last prompt
  token (TTFT = that - arrival); it then decodes O - 1 tokens and is done.

Outputs per request: arrival (effective), ready (in the queue: = arrival, or load end in
sum mode), start (first batch), first token, done, replica. Per replica: busy seconds.
Stats: area = integral of the number of requests between arrival and first token over
time (Little's law: area / span = rate x mean TTFT), iterations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import no_runtime

INF = np.inf

# fpar indices
F_LIN, F_ATTN, F_WFULL, F_WTOK, F_HBM, F_KVB, F_T0, F_TOK_OVH, F_DEC_OVH = range(9)
F_DRAM_CAP, F_SWITCH_BW, F_DRAM_LAT, F_XMEM_CAP, F_NODE_BW, F_XMEM_LAT = range(9, 15)
F_MISS, F_INTERF, F_KVCAP, F_PASS, F_COMM0, F_COMM1 = 15, 16, 17, 18, 19, 20
N_FPAR = 21
# ipar indices
I_REPLICAS, I_CHUNK, I_MAXB, I_OVERLAP, I_LAYERS, I_MIXED, I_PER_SWITCH = range(7)
N_IPAR = 7
# stats indices
S_AREA, S_SPAN_START, S_SPAN_END, S_BATCHES, S_DECODE_STEPS = range(5)
N_STATS = 5

SUM, LAYER, MAX = 0, 1, 2


# Join-shortest-queue: a min tree over the replicas of (unfinished requests) x P + index,
# so the fewest unfinished, lowest index on ties, is its root; O(log R) per change instead
# of a scan of every replica per arrival.
_SEG_NONE = np.int64(1) << 62


@njit(cache=True)
def _seg_init(R: int) -> tuple[np.ndarray, int]:
    P = 1
    while P < R:
        P *= 2
    seg = np.full(2 * P, _SEG_NONE, np.int64)
    for q in range(R):
        seg[P + q] = q  # 0 outstanding
    for k in range(P - 1, 0, -1):
        a, b = seg[2 * k], seg[2 * k + 1]
        seg[k] = a if a < b else b
    return seg, P


@njit(cache=True, inline="always")
def _unfinished_add(outstanding: np.ndarray, seg: np.ndarray, P: int, q: int,
                    d: int) -> None:
    """Replica `q` gains `d` unfinished requests; its leaf and the path to the root follow."""
    outstanding[q] += d
    k = P + q
    seg[k] = outstanding[q] * P + q
    k //= 2
    while k >= 1:
        a, b = seg[2 * k], seg[2 * k + 1]
        seg[k] = a if a < b else b
        k //= 2


@no_runtime
def _heap_push(ht: np.ndarray, hi: np.ndarray, n: int, t: float, i: int) -> int:
    k = n
    ht[k] = t
    hi[k] = i
    while k > 0:
        p = (k - 1) >> 1
        if ht[p] < ht[k] or (ht[p] == ht[k] and hi[p] < hi[k]):
            break
        ht[p], ht[k] = ht[k], ht[p]
        hi[p], hi[k] = hi[k], hi[p]
        k = p
    return n + 1


@no_runtime
def _wake_next(ht: np.ndarray, hi: np.ndarray, n: int, dep: np.ndarray, think: np.ndarray,
               arrival: np.ndarray, i: int, now: float) -> int:
    """Request i is done: its session's next request (dep[i], -1 none) is due one think
    time later, not before its own arrival; returns the heap's new size."""
    j = dep[i]
    if j >= 0:
        ta = now + think[j]
        if arrival[j] > ta:
            ta = arrival[j]
        n = _heap_push(ht, hi, n, ta, j)
    return n


@no_runtime
def _heap_pop(ht: np.ndarray, hi: np.ndarray, n: int) -> int:
    n -= 1
    ht[0] = ht[n]
    hi[0] = hi[n]
    k = 0
    while True:
        a = 2 * k + 1
        if a >= n:
            break
        b = a + 1
        c = a
        if b < n and (ht[b] < ht[a] or (ht[b] == ht[a] and hi[b] < hi[a])):
            c = b
        if ht[k] < ht[c] or (ht[k] == ht[c] and hi[k] < hi[c]):
            break
        ht[k], ht[c] = ht[c], ht[k]
        hi[k], hi[c] = hi[c], hi[k]
        k = c
    return n


@njit(cache=True, inline="always")
def _pass_time(wtok, lin_t, attn_t, kv_read, wdense, wexp, miss, hbm):  # noqa: ANN001, ANN202
    """One pass: per operator class the larger of FLOP time and HBM byte time (weights of
    the experts `wtok` tokens route to; the KV read), as model.compute_parts."""
    wb = wdense + wexp * (1.0 - miss ** wtok) if wtok > 0 else 0.0
    w_t = wb / hbm
    kv_t = kv_read / hbm
    return (lin_t if lin_t >= w_t else w_t) + (attn_t if attn_t >= kv_t else kv_t)


@njit(cache=True)
def _decode_step(nd, ctx, lin, attn, kvb, wdense, wexp, miss, hbm, comm0, comm1):  # noqa: ANN001, ANN202
    """Compute time of one decode step of `nd` requests holding `ctx` tokens in all (with
    the pass's tensor-parallel all-reduces: comm0 + comm1 x its tokens)."""
    c = _pass_time(0.0 + nd, lin * nd, attn * (2.0 * ctx + nd), ctx * kvb, wdense, wexp,
                   miss, hbm)
    return c + comm0 + comm1 * nd if nd > 0 else c


@njit(cache=True, inline="always")
def _advance(active, nact, f_rem, f_rate, dt):  # noqa: ANN001, ANN202
    """Every active load moves on by `dt` seconds at its current rate."""
    for a in range(nact):
        g = active[a]
        f_rem[g] -= f_rate[g] * dt


@njit(cache=True, inline="always")
def _add_flow(active, nact, free, nfree, f_rem, f_rate, f_tier, f_rep, f_owner,  # noqa: ANN001, ANN202
              cnt_gpu, cnt_sw, per_switch, cnt_x, cap, switch_bw, node_bw,
              nbytes, tier, r, owner):
    """Start a load of `nbytes` from `tier` to replica `r` (the active loads must have been
    advanced to now) and re-rate every load. Returns (nact, nfree, cnt_x)."""
    nfree -= 1
    f = free[nfree]
    f_rem[f] = nbytes
    f_tier[f] = tier
    f_rep[f] = r
    f_owner[f] = owner
    active[nact] = f
    nact += 1
    cnt_gpu[r, tier] += 1
    if tier == 0:
        cnt_sw[r // per_switch] += 1
    else:
        cnt_x += 1
    _rerate(active, nact, f_tier, f_rep, f_rate, cap, cnt_gpu, cnt_sw, per_switch,
            switch_bw, node_bw, cnt_x)
    return nact, nfree, cnt_x


@njit(cache=True, inline="always")
def _rerate(active, nact, f_tier, f_rep, f_rate, cap, cnt_gpu, cnt_sw, per_switch,  # noqa: ANN001, ANN202
            switch_bw, node_bw, cnt_x):
    """Rates after the set of loads changed: a GPU's link shared by its loads of that tier,
    capped by the share of the PCIe switch (host DRAM) or of the X-Mem nodes."""
    for a in range(nact):
        g = active[a]
        tr = f_tier[g]
        rg = f_rep[g]
        rate = cap[tr] / cnt_gpu[rg, tr]
        sh = switch_bw / cnt_sw[rg // per_switch] if tr == 0 else node_bw / cnt_x
        f_rate[g] = rate if rate < sh else sh


@njit(cache=True)
def simulate_kernel(arrival, prev, think, prompt, hit_hbm, hit_dram, hit_xmem, output,
                    route, fpar, ipar):  # noqa: C901 (one event loop, kept in one place)
    n = arrival.shape[0]
    R = ipar[I_REPLICAS]
    chunk = ipar[I_CHUNK]
    maxb = ipar[I_MAXB]
    overlap = ipar[I_OVERLAP]
    layers = ipar[I_LAYERS]
    mixed = ipar[I_MIXED]
    per_switch = ipar[I_PER_SWITCH]
    lin = fpar[F_LIN]
    attn = fpar[F_ATTN]
    wdense = fpar[F_WFULL]
    wexp = fpar[F_WTOK]
    miss = fpar[F_MISS]
    interf = fpar[F_INTERF]
    kvcap = fpar[F_KVCAP]
    hbm = fpar[F_HBM]
    kvb = fpar[F_KVB]
    t0 = fpar[F_T0]
    tok_ovh = fpar[F_TOK_OVH]
    dec_ovh = fpar[F_DEC_OVH]
    pass_ovh = fpar[F_PASS]
    comm0 = fpar[F_COMM0]
    comm1 = fpar[F_COMM1]
    cap = np.empty(2)
    cap[0] = fpar[F_DRAM_CAP]
    cap[1] = fpar[F_XMEM_CAP]
    lat = np.empty(2)
    lat[0] = fpar[F_DRAM_LAT]
    lat[1] = fpar[F_XMEM_LAT]
    switch_bw = fpar[F_SWITCH_BW]
    node_bw = fpar[F_NODE_BW]
    n_switch = (R + per_switch - 1) // per_switch

    t_arr = np.full(n, INF)
    t_ready = np.full(n, INF)
    t_start = np.full(n, INF)
    t_first = np.full(n, INF)
    t_done = np.full(n, INF)
    rep = np.full(n, -1, np.int64)
    busy = np.zeros(R)
    stats = np.zeros(N_STATS)

    # request state
    new_total = prompt - hit_hbm - hit_dram - hit_xmem
    done_tok = np.zeros(n)
    loaded = np.zeros(n, np.int64)
    pending_flows = np.zeros(n, np.int64)
    load_end = np.zeros(n)
    remaining = np.zeros(n, np.int64)
    dep = np.full(n, -1, np.int64)
    for i in range(n):
        if prev[i] >= 0:
            dep[prev[i]] = i

    # arrival heap
    ht = np.empty(2 * n + 1)
    hi = np.empty(2 * n + 1, np.int64)
    hn = 0
    for i in range(n):
        if prev[i] < 0:
            hn = _heap_push(ht, hi, hn, arrival[i], i)
    # stage of a heap entry: 0 = arrival, 1 = load done (sum mode)
    stage = np.zeros(n, np.int64)

    # per-replica FCFS queue (linked list) and decode set (doubly linked)
    qhead = np.full(R, -1, np.int64)
    qtail = np.full(R, -1, np.int64)
    qnext = np.full(n, -1, np.int64)
    dhead = np.full(R, -1, np.int64)
    dnext = np.full(n, -1, np.int64)
    dprev = np.full(n, -1, np.int64)
    dcount = np.zeros(R, np.int64)
    dctx = np.zeros(R)
    outstanding = np.zeros(R, np.int64)
    seg, P = _seg_init(R)
    held = np.zeros(R)  # prompt tokens of started, unfinished prefills (KV in HBM)

    # replica state: 0 idle, 1 running (ends at rend), 2 waiting for its batch's loads
    rstate = np.zeros(R, np.int64)
    rend = np.full(R, INF)
    rbstart = np.zeros(R)
    rcomp = np.zeros(R)
    rfixed = np.zeros(R)
    rflows = np.zeros(R, np.int64)
    rload_end = np.zeros(R)
    rdecode = np.zeros(R, np.int64)  # 1 if the current iteration includes decodes
    bmax = maxb if maxb > 0 else 1
    bm = np.full((R, bmax), -1, np.int64)
    btk = np.zeros((R, bmax))
    bcount = np.zeros(R, np.int64)
    rsteps = np.ones(R, np.int64)  # decode steps in the current iteration
    rmacro = np.zeros(R, np.int64)  # 1: a run of decode-only steps (see the module doc)
    rh_t = np.empty(R + n + 1)  # replicas running, by end time (stale entries skipped)
    rh_i = np.empty(R + n + 1, np.int64)
    rhn = 0

    # flows
    fmax = 2 * n + 2 * R + 2
    f_rem = np.zeros(fmax)
    f_rate = np.zeros(fmax)
    f_tier = np.zeros(fmax, np.int64)
    f_rep = np.zeros(fmax, np.int64)
    f_owner = np.zeros(fmax, np.int64)  # request (sum mode) or -1 - replica (batch loads)
    active = np.empty(fmax, np.int64)
    nact = 0
    free = np.empty(fmax, np.int64)
    nfree = fmax
    for k in range(fmax):
        free[k] = fmax - 1 - k
    f_last = 0.0
    cnt_gpu = np.zeros((R, 2), np.int64)
    cnt_sw = np.zeros(n_switch, np.int64)
    cnt_x = 0

    now = 0.0
    started = False
    n_sys = 0
    area = 0.0
    finished = 0

    while True:
        # next events
        t_h = ht[0] if hn > 0 else INF
        while rhn > 0 and (rstate[rh_i[0]] != 1 or rend[rh_i[0]] != rh_t[0]):
            rhn = _heap_pop(rh_t, rh_i, rhn)
        t_r = rh_t[0] if rhn > 0 else INF
        r_min = rh_i[0] if rhn > 0 else -1
        touched = -1
        t_f = INF
        f_min = -1
        for a in range(nact):
            f = active[a]
            tf = f_last + f_rem[f] / f_rate[f]
            if tf < t_f:
                t_f = tf
                f_min = a
        t = min(t_f, min(t_r, t_h))
        if t == INF:
            break
        if started:
            area += n_sys * (t - now)
        now = t

        if t_f <= t_r and t_f <= t_h:
            # --- a load ends ---------------------------------------------------------
            _advance(active, nact, f_rem, f_rate, now - f_last)
            f_last = now
            f = active[f_min]
            f_rem[f] = 0.0
            nact -= 1
            active[f_min] = active[nact]
            free[nfree] = f
            nfree += 1
            tier = f_tier[f]
            r = f_rep[f]
            cnt_gpu[r, tier] -= 1
            if tier == 0:
                cnt_sw[r // per_switch] -= 1
            else:
                cnt_x -= 1
            ow = f_owner[f]
            end = now + lat[tier]
            if ow >= 0:
                if end > load_end[ow]:
                    load_end[ow] = end
                pending_flows[ow] -= 1
                if pending_flows[ow] == 0:
                    stage[ow] = 1
                    hn = _heap_push(ht, hi, hn, load_end[ow], ow)
            else:
                rr = -1 - ow
                if end > rload_end[rr]:
                    rload_end[rr] = end
                rflows[rr] -= 1
                if rflows[rr] == 0:
                    ld = rload_end[rr] - rbstart[rr]
                    c = rcomp[rr]
                    c += interf * (c if c < ld else ld)
                    hi_ = c if c > ld else ld
                    lo_ = ld if c > ld else c
                    e = rbstart[rr] + rfixed[rr] + hi_
                    if overlap == LAYER:
                        e += lo_ / layers
                    rend[rr] = e
                    rstate[rr] = 1
                    rhn = _heap_push(rh_t, rh_i, rhn, e, rr)
            _rerate(active, nact, f_tier, f_rep, f_rate, cap, cnt_gpu, cnt_sw, per_switch,
                    switch_bw, node_bw, cnt_x)
            continue

        if t_r <= t_h:
            # --- a replica's iteration ends ------------------------------------------
            r = r_min
            rhn = _heap_pop(rh_t, rh_i, rhn)
            touched = r
            busy[r] += now - rbstart[r]
            rstate[r] = 0
            rend[r] = INF
            # prefill pieces
            for k in range(bcount[r]):
                i = bm[r, k]
                done_tok[i] += btk[r, k]
                if done_tok[i] >= new_total[i]:
                    # complete: it is the queue head
                    qhead[r] = qnext[i]
                    if qhead[r] < 0:
                        qtail[r] = -1
                    t_first[i] = now
                    n_sys -= 1
                    held[r] -= prompt[i]
                    if output[i] > 1:
                        remaining[i] = output[i] - 1
                        # join the decode set at the front
                        h = dhead[r]
                        dnext[i] = h
                        dprev[i] = -1
                        if h >= 0:
                            dprev[h] = i
                        dhead[r] = i
                        dcount[r] += 1
                        dctx[r] += prompt[i]
                    else:
                        t_done[i] = now
                        _unfinished_add(outstanding, seg, P, r, -1)
                        finished += 1
                        hn = _wake_next(ht, hi, hn, dep, think, arrival, i, now)
            bcount[r] = 0
            if rdecode[r] == 1:
                rdecode[r] = 0
                ks = rsteps[r]
                if rmacro[r] == 1:
                    stats[S_DECODE_STEPS] += ks
                rsteps[r] = 1
                rmacro[r] = 0
                i = dhead[r]
                dctx[r] += dcount[r] * ks
                while i >= 0:
                    nx = dnext[i]
                    remaining[i] -= ks
                    if remaining[i] == 0:
                        if dprev[i] >= 0:
                            dnext[dprev[i]] = nx
                        else:
                            dhead[r] = nx
                        if nx >= 0:
                            dprev[nx] = dprev[i]
                        dcount[r] -= 1
                        dctx[r] -= prompt[i] + output[i] - 1
                        t_done[i] = now
                        _unfinished_add(outstanding, seg, P, r, -1)
                        finished += 1
                        hn = _wake_next(ht, hi, hn, dep, think, arrival, i, now)
                    i = nx
        else:
            # --- an arrival, or a request's own load done (sum mode) ------------------
            i = hi[0]
            hn = _heap_pop(ht, hi, hn)
            r = -1
            if stage[i] == 0:
                if not started:
                    started = True
                    stats[S_SPAN_START] = now
                t_arr[i] = now
                n_sys += 1
                r = route[i]
                if r == -2:
                    r = rep[prev[i]] if prev[i] >= 0 else -1
                if r < 0:
                    r = seg[1] % P
                rep[i] = r
                _unfinished_add(outstanding, seg, P, r, 1)
                nb = 0
                if overlap == SUM:
                    for tier in range(2):
                        tok = hit_dram[i] if tier == 0 else hit_xmem[i]
                        if tok > 0:
                            nb += 1
                            _advance(active, nact, f_rem, f_rate, now - f_last)
                            f_last = now
                            nact, nfree, cnt_x = _add_flow(
                                active, nact, free, nfree, f_rem, f_rate, f_tier, f_rep,
                                f_owner, cnt_gpu, cnt_sw, per_switch, cnt_x, cap, switch_bw,
                                node_bw, tok * kvb, tier, r, i)
                    loaded[i] = 1
                if nb > 0:
                    pending_flows[i] = nb
                    load_end[i] = now
                    r = -1  # joins the queue when loaded
            else:
                r = rep[i]
            if r >= 0:
                touched = r
                t_ready[i] = now
                if qhead[r] < 0 and rstate[r] == 1 and rmacro[r] == 1 and rsteps[r] > 1:
                    # a prefill now waits: the run of decode steps stops after this step
                    e = rbstart[r]
                    nd = dcount[r]
                    k = 0
                    while k < rsteps[r]:
                        e = e + dec_ovh + _decode_step(nd, dctx[r] + k * nd, lin, attn, kvb,
                                                       wdense, wexp, miss, hbm, comm0,
                                                       comm1)
                        k += 1
                        if e > now:
                            break
                    if k < rsteps[r]:
                        rsteps[r] = k
                        rend[r] = e
                        rhn = _heap_push(rh_t, rh_i, rhn, e, r)
                if qtail[r] >= 0:
                    qnext[qtail[r]] = i
                else:
                    qhead[r] = i
                qtail[r] = i
                qnext[i] = -1

        # --- start an iteration on the replica the event touched, if idle --------------
        lo_r = touched if touched >= 0 else 0
        hi_r = touched + 1 if touched >= 0 else 0
        for r in range(lo_r, hi_r):
            if rstate[r] != 0:
                continue
            if qhead[r] < 0 and dcount[r] == 0:
                continue
            # KV capacity: a new request starts only if its prompt fits next to what the
            # replica holds (always when it holds nothing); else decodes run and free it.
            h = qhead[r]
            prefill = h >= 0
            if prefill and t_start[h] == INF and dcount[r] > 0 and \
                    held[r] + dctx[r] + prompt[h] > kvcap:
                prefill = False
            stats[S_BATCHES] += 1
            rbstart[r] = now
            tokens = 0.0
            lin_t = 0.0
            attn_t = 0.0
            kv_read = 0.0
            fixed = 0.0
            first = False
            dram_b = 0.0
            xmem_b = 0.0
            if prefill:
                budget = float(chunk)
                if mixed == 1 and dcount[r] > 0:
                    budget -= dcount[r]
                    if budget < 1.0:
                        budget = 1.0
                i = qhead[r]
                k = 0
                while i >= 0 and k < bmax:
                    need = new_total[i] - done_tok[i]
                    if need > 0 and budget <= 0:
                        break
                    if t_start[i] == INF and k > 0 and \
                            held[r] + dctx[r] + prompt[i] > kvcap:
                        break
                    take = need if need < budget else budget
                    budget -= take
                    s0 = prompt[i] - new_total[i] + done_tok[i]
                    lin_t += lin * take
                    attn_t += attn * ((s0 + take) * (s0 + take) - s0 * s0)
                    kv_read += (s0 + take) * kvb
                    tokens += take
                    if t_start[i] == INF:
                        t_start[i] = now
                        fixed += tok_ovh * prompt[i]
                        held[r] += prompt[i]
                        first = True
                    if loaded[i] == 0:
                        loaded[i] = 1
                        dram_b += hit_dram[i] * kvb
                        xmem_b += hit_xmem[i] * kvb
                    bm[r, k] = i
                    btk[r, k] = take
                    k += 1
                    if take < need:
                        break
                    i = qnext[i]
                bcount[r] = k
                fixed += pass_ovh
                if first:
                    fixed += t0
                if mixed == 1 and dcount[r] > 0:
                    rdecode[r] = 1
            else:
                rdecode[r] = 1
                fixed = dec_ovh
            if rdecode[r] == 1:
                nd = dcount[r]
                tokens += nd
                lin_t += lin * nd
                attn_t += attn * (2.0 * dctx[r] + nd)
                kv_read += dctx[r] * kvb
            # a batch of prompts cached whole still runs one pass of one token each
            wtok = tokens if tokens > 0 else float(bcount[r])
            comp = _pass_time(wtok, lin_t, attn_t, kv_read, wdense, wexp, miss, hbm)
            if wtok > 0:  # the pass's tensor-parallel all-reduces (model.allreduce_seconds)
                comp += comm0 + comm1 * wtok
            rcomp[r] = comp
            rfixed[r] = fixed
            nb = 0
            for tier in range(2):
                b = dram_b if tier == 0 else xmem_b
                if b > 0:
                    nb += 1
                    _advance(active, nact, f_rem, f_rate, now - f_last)
                    f_last = now
                    nact, nfree, cnt_x = _add_flow(
                        active, nact, free, nfree, f_rem, f_rate, f_tier, f_rep, f_owner,
                        cnt_gpu, cnt_sw, per_switch, cnt_x, cap, switch_bw, node_bw, b, tier,
                        r, -1 - r)
            if nb > 0:
                rflows[r] = nb
                rload_end[r] = now
                rstate[r] = 2
            else:
                rstate[r] = 1
                e = now + fixed + comp
                if not prefill:
                    # decode only: run steps until the first request finishes (an arriving
                    # prefill cuts the run short at the step in progress)
                    ks = remaining[dhead[r]]
                    i = dnext[dhead[r]]
                    while i >= 0:
                        if remaining[i] < ks:
                            ks = remaining[i]
                        i = dnext[i]
                    nd = dcount[r]
                    for k in range(1, ks):
                        e = e + fixed + _decode_step(nd, dctx[r] + k * nd, lin, attn, kvb,
                                                     wdense, wexp, miss, hbm, comm0, comm1)
                    rsteps[r] = ks
                    rmacro[r] = 1
                rend[r] = e
                rhn = _heap_push(rh_t, rh_i, rhn, e, r)

    stats[S_AREA] = area
    stats[S_SPAN_END] = now
    return t_arr, t_ready, t_start, t_first, t_done, rep, busy, stats


# --- the Python side: inputs, checks, results --------------------------------------------

class Traffic:
    """Per-request arrays (one row per request). Tokens as floats, times in seconds.

    arrival: earliest arrival; prev: index of the request this one follows (-1: none);
    think: seconds after prev is done; prompt, hit_hbm, hit_dram, hit_xmem: tokens;
    output: output tokens (>= 1: the first comes with the prefill); route: replica, -1
    (fewest unfinished) or -2 (as prev).
    """

    __slots__ = ("arrival", "prev", "think", "prompt", "hit_hbm", "hit_dram", "hit_xmem",
                 "output", "route")

    def __init__(self, arrival: np.ndarray, prompt: np.ndarray, *,
                 hit_hbm: np.ndarray | None = None, hit_dram: np.ndarray | None = None,
                 hit_xmem: np.ndarray | None = None, output: np.ndarray | None = None,
                 prev: np.ndarray | None = None, think: np.ndarray | None = None,
                 route: np.ndarray | None = None) -> None:
        n = len(arrival)

        def f(a: np.ndarray | None) -> np.ndarray:
            return np.zeros(n) if a is None else np.ascontiguousarray(a, dtype=np.float64)

        def i(a: np.ndarray | None, fill: int) -> np.ndarray:
            return (np.full(n, fill, np.int64) if a is None
                    else np.ascontiguousarray(a, dtype=np.int64))

        self.arrival = f(arrival)
        self.prompt = f(prompt)
        self.hit_hbm = f(hit_hbm)
        self.hit_dram = f(hit_dram)
        self.hit_xmem = f(hit_xmem)
        self.output = i(output, 1)
        self.prev = i(prev, -1)
        self.think = f(think)
        self.route = i(route, -1)
        self.check()

    def __len__(self) -> int:
        return len(self.arrival)

    def check(self) -> None:
        from xmemplan.errors import UsageError

        n = len(self.arrival)
        for name in self.__slots__:
            if len(getattr(self, name)) != n:
                raise UsageError(f"traffic: '{name}' has {len(getattr(self, name))} rows, "
                                 f"not {n}")
        for name in ("arrival", "prompt", "hit_hbm", "hit_dram", "hit_xmem", "think"):
            a = getattr(self, name)
            if a.size and (not np.all(np.isfinite(a)) or a.min() < 0):
                raise UsageError(f"traffic: '{name}' has a negative or non-finite value")
        if n and np.any(self.hit_hbm + self.hit_dram + self.hit_xmem > self.prompt):
            raise UsageError("traffic: hit tokens above the prompt tokens")
        if n and self.output.min() < 1:
            raise UsageError("traffic: every request has at least one output token")
        idx = np.arange(n)
        has = self.prev >= 0
        if np.any(self.prev[has] >= idx[has]) or np.any(self.prev < -1):
            raise UsageError("traffic: 'prev' must name an earlier request or be -1")
        if np.unique(self.prev[has]).size != int(has.sum()):
            raise UsageError("traffic: a request is followed by two others")
        if np.any((self.route == -2) & ~has) or np.any(self.route < -2):
            raise UsageError("traffic: route -2 (as prev) needs a prev")


@dataclass(frozen=True)
class Engine:
    """What the kernel needs from the model, hardware and engine (see the module doc).

    Seconds per token / per (S^2 - P^2), bytes, bytes per second. `replicas` GPUs;
    `gpus_per_switch` share one PCIe switch of `switch_bandwidth` for host-DRAM loads.
    """

    replicas: int = 1
    chunk_tokens: int = 8192
    max_batch: int = 256
    overlap: int = LAYER
    layers: int = 1
    mixed: int = 0
    gpus_per_switch: int = 1
    lin_s_per_token: float = 0.0
    attn_s_per_unit: float = 0.0
    dense_weight_bytes: float = 0.0
    expert_weight_bytes: float = 0.0
    expert_miss: float = 0.0
    sm_interference: float = 0.0
    hbm_bandwidth: float = INF
    kv_bytes_per_token: float = 0.0
    fixed_s: float = 0.0
    per_token_s: float = 0.0
    decode_fixed_s: float = 0.0
    pass_fixed_s: float = 0.0  # every prefill batch (one forward pass): the layer floor
    # the tensor-parallel all-reduces of a pass: latency per pass and seconds per token of
    # the pass (model.allreduce_seconds; 0 at TP 1 and where the calibration does not
    # price them), in the pass's compute like model.compute_seconds
    comm_pass_s: float = 0.0
    comm_s_per_token: float = 0.0
    dram_bandwidth: float = 1.0
    switch_bandwidth: float = INF
    dram_latency_s: float = 0.0
    xmem_bandwidth: float = 1.0
    node_bandwidth: float = INF
    xmem_latency_s: float = 0.0
    kv_capacity_tokens: float = INF

    def replace(self, **kw: float) -> Engine:
        return replace(self, **kw)  # type: ignore[arg-type]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        from xmemplan.errors import UsageError

        f = np.zeros(N_FPAR)
        f[F_LIN] = self.lin_s_per_token
        f[F_ATTN] = self.attn_s_per_unit
        f[F_WFULL] = self.dense_weight_bytes
        f[F_WTOK] = self.expert_weight_bytes
        f[F_MISS] = self.expert_miss
        f[F_INTERF] = self.sm_interference
        f[F_KVCAP] = self.kv_capacity_tokens
        f[F_HBM] = self.hbm_bandwidth
        f[F_KVB] = self.kv_bytes_per_token
        f[F_T0] = self.fixed_s
        f[F_TOK_OVH] = self.per_token_s
        f[F_DEC_OVH] = self.decode_fixed_s
        f[F_PASS] = self.pass_fixed_s
        f[F_COMM0] = self.comm_pass_s
        f[F_COMM1] = self.comm_s_per_token
        f[F_DRAM_CAP] = self.dram_bandwidth
        f[F_SWITCH_BW] = self.switch_bandwidth
        f[F_DRAM_LAT] = self.dram_latency_s
        f[F_XMEM_CAP] = self.xmem_bandwidth
        f[F_NODE_BW] = self.node_bandwidth
        f[F_XMEM_LAT] = self.xmem_latency_s
        ip = np.zeros(N_IPAR, np.int64)
        ip[I_REPLICAS] = int(self.replicas)
        ip[I_CHUNK] = int(self.chunk_tokens)
        ip[I_MAXB] = int(self.max_batch)
        ip[I_OVERLAP] = int(self.overlap)
        ip[I_LAYERS] = int(self.layers)
        ip[I_MIXED] = int(self.mixed)
        ip[I_PER_SWITCH] = int(self.gpus_per_switch)
        if np.any(f < 0) or np.isnan(f).any():
            raise UsageError("engine: a negative or NaN parameter")
        for name in ("hbm_bandwidth", "dram_bandwidth", "switch_bandwidth",
                     "xmem_bandwidth", "node_bandwidth"):
            if not getattr(self, name) > 0:
                raise UsageError(f"engine: {name} must be positive")
        if ip[I_REPLICAS] < 1 or ip[I_CHUNK] < 1 or ip[I_MAXB] < 1 or ip[I_LAYERS] < 1 \
                or ip[I_PER_SWITCH] < 1 or ip[I_OVERLAP] not in (SUM, LAYER, MAX):
            raise UsageError("engine: replicas, chunk, batch, layers and switch size >= 1")
        return f, ip


class SimResult:
    """Per-request times (seconds) and the run's totals; percentiles in `summary`."""

    def __init__(self, traffic: Traffic, arrays: tuple[np.ndarray, ...]) -> None:
        (self.arrival, self.ready, self.start, self.first, self.done, self.replica,
         self.busy, self.stats) = arrays
        self.traffic = traffic

    @property
    def ttft(self) -> np.ndarray:
        return self.first - self.arrival

    @property
    def queue_delay(self) -> np.ndarray:
        return self.start - self.ready

    @property
    def span(self) -> float:
        return float(self.stats[S_SPAN_END] - self.stats[S_SPAN_START])

    @property
    def warm(self) -> np.ndarray:
        """Requests that hit at least half their prompt (any tier)."""
        t = self.traffic
        return (t.hit_hbm + t.hit_dram + t.hit_xmem) * 2 >= t.prompt

    def little(self) -> tuple[float, float]:
        """(L, lambda x W): time-average requests waiting for their first token, and the
        arrival rate times the mean TTFT over the same span."""
        n = len(self.arrival)
        span = self.span
        if n == 0 or span <= 0:
            return 0.0, 0.0
        return float(self.stats[S_AREA] / span), float(n / span * self.ttft.mean())

    def utilisation(self) -> float:
        span = self.span
        return float(self.busy.sum() / (span * len(self.busy))) if span > 0 else 0.0


def simulate(traffic: Traffic, engine: Engine) -> SimResult:
    """Run the numba kernel; see the module docstring for the model."""
    f, ip = engine.arrays()
    t = traffic
    out = simulate_kernel(t.arrival, t.prev, t.think, t.prompt, t.hit_hbm, t.hit_dram,
                          t.hit_xmem, t.output, t.route, f, ip)
    r = SimResult(traffic, out)
    # Little's law on every run: the event loop's own count of requests waiting for a first
    # token, integrated over time, against arrival rate x mean TTFT.
    L, lw = r.little()
    if abs(L - lw) > 1e-6 * max(1.0, abs(lw)):
        raise RuntimeError(f"simulator invariant broken: L = {L!r}, lambda W = {lw!r}")
    return r
