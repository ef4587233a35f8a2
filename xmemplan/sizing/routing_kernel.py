"""The placement kernel of `xmemplan.sizing.routing` (numba), kept apart so that importing
the routers' names and dataclasses does not load numba. The model is routing.py's module
docstring; `routing.place_reference` is the same in plain Python (the tests' oracle)."""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.sizing.routing import (
    DYNAMO,
    LEAST_LOADED,
    LLMD,
    LLMD_PRECISE,
    RANDOM,
    ROUND_ROBIN,
    SESSION,
    SGLANG,
)
from xmemplan.sizing.sim import _heap_pop, _heap_push  # the engine loop's heap too

__all__ = ["DYNAMO", "LEAST_LOADED", "LLMD", "LLMD_PRECISE", "RANDOM", "ROUND_ROBIN",
           "SESSION", "SGLANG", "block_keys_kernel", "draw", "place_kernel"]


TIE = 1e-9  # relative: totals this close are equal (the kernel and reference sum alike)


@njit(cache=True, inline="always")
def draw(i, seed, R):  # noqa: ANN001, ANN201
    """Request i's replica under RANDOM: splitmix64 of (seed, i) mod R (the same integers
    in the plain-Python reference, routing.draw_reference)."""
    x = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(i + 1)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return np.int64(x % np.uint64(R))


@njit(cache=True, inline="always")
def _match(lens, row, g, G, skey, H, prompt):  # noqa: ANN001, ANN202
    """Tokens of this request a cache row holds (the module's prefix model)."""
    gpart = 0.0
    if g >= 0 and G > 0:
        gl = lens[row, g]
        gpart = gl if gl < G else G
    spart = 0.0
    if g < 0 or G <= 0 or gpart >= G:
        rest = H - G if g >= 0 else H
        if rest > 0:
            sl = lens[row, skey]
            spart = sl if sl < rest else rest
    m = gpart + spart
    return m if m < prompt else prompt


@njit(cache=True)
def _evict(lens, last, lock, used, row, cap, K):  # noqa: ANN001, ANN202
    """Drop least recently used unlocked objects of `row` until it fits (or none is left)."""
    while used[row] > cap:
        best = -1
        bt = np.inf
        for k in range(K):
            if lens[row, k] > 0 and lock[row, k] == 0 and last[row, k] < bt:
                bt = last[row, k]
                best = k
        if best < 0:
            return
        used[row] -= lens[row, best]
        lens[row, best] = 0.0


@njit(cache=True, inline="always")
def _put(lens, last, used, row, k, length, tick):  # noqa: ANN001, ANN202
    if length > lens[row, k]:
        used[row] += length - lens[row, k]
        lens[row, k] = length
    last[row, k] = tick


@njit(cache=True, inline="always")
def _put_locked(lens, last, used, lock, locked, row, k, length, tick):  # noqa: ANN001, ANN202, PLR0913
    """_put, then lock the object for a running request; `locked[row]` keeps the tokens
    of the row's locked objects (each counted once however many requests hold it)."""
    old = lens[row, k]
    _put(lens, last, used, row, k, length, tick)
    locked[row] += lens[row, k] - (old if lock[row, k] > 0 else 0.0)
    lock[row, k] += 1


@njit(cache=True, inline="always")
def _unlock(lens, lock, locked, row, k):  # noqa: ANN001, ANN202
    lock[row, k] -= 1
    if lock[row, k] == 0:
        locked[row] -= lens[row, k]


@njit(cache=True)
def _lru_ranks(cold_tick, rank, R):  # noqa: ANN001, ANN202
    """llm-d no-hit-lru-scorer ranks (no_hit_lru.go): replicas never given a cold request
    first, in index order, then the others from the least recently given one."""
    k = 0
    for q in range(R):
        if cold_tick[q] < 0:
            rank[q] = k
            k += 1
    for q in range(R):
        if cold_tick[q] >= 0:
            older = 0
            for p in range(R):
                if cold_tick[p] >= 0 and cold_tick[p] < cold_tick[q]:
                    older += 1
            rank[q] = k + older


@njit(cache=True)
def place_kernel(arrival, hold, prompt, output, hit, group, gtok, session,  # noqa: ANN001, ANN201, PLR0913, PLR0912, PLR0915
                 n_groups, n_keys, replicas, router, hbm_tokens, tier_of, tier_tokens,
                 par):
    """See the module docstring. Requests in arrival order; session >= 0 for every request
    (a request of its own has a session of its own); key of group g = g, of session s =
    n_groups + s. Returns (replica, hit_hbm, hit_tier)."""
    n = arrival.shape[0]
    R = replicas
    K = n_keys
    T = tier_tokens.shape[0]
    hl = np.zeros((R, K))
    hlast = np.zeros((R, K))
    hlock = np.zeros((R, K), np.int64)
    hused = np.zeros(R)
    hlocked = np.zeros(R)  # tokens of locked (running) objects: vLLM's KV cache usage
    tl = np.zeros((max(T, 1), K))
    tlast = np.zeros((max(T, 1), K))
    tlock = np.zeros((max(T, 1), K), np.int64)  # never locked: a tier keeps nothing running
    tused = np.zeros(max(T, 1))
    tree = router in (SGLANG, LLMD)  # the router's own view of what it sent where
    view = np.zeros((R, K)) if tree else np.zeros((1, 1))
    vlast = np.zeros((R, K)) if tree else np.zeros((1, 1))
    vlock = np.zeros((R, K), np.int64) if tree else np.zeros((1, 1), np.int64)
    vused = np.zeros(R)
    # llm-d's second approximate index (the CPU tier's prefix-cache scorer), when weighted
    tview = router == LLMD and par[16] != 0.0
    v2 = np.zeros((R, K)) if tview else np.zeros((1, 1))
    v2last = np.zeros((R, K)) if tview else np.zeros((1, 1))
    v2used = np.zeros(R)
    cold_tick = np.full(R, -1.0)  # no-hit LRU scorer: when each replica last took a cold one
    cold_rank = np.zeros(R)
    wait = np.zeros(R)
    tots = np.zeros(R)
    out_n = np.zeros(R)
    out_tok = np.zeros(R)
    sess_rep = np.full(max(K - n_groups, 1), -1, np.int64)
    ht = np.empty(n + 1)
    hi = np.empty(n + 1, np.int64)
    nh = 0
    rep = np.empty(n, np.int64)
    h_hbm = np.zeros(n)
    h_tier = np.zeros(n)
    score = np.zeros(R)
    cache_thr, b_abs, b_rel = par[0], par[1], par[2]
    w_pre, w_q, cap_tok, w_ov, blk = par[3], par[4], par[5], par[6], par[7]
    w_kv, w_act, view_cap = par[8], par[9], par[10]
    if router == LLMD_PRECISE:
        w_pre, w_q, w_kv, w_act = par[11], par[12], par[13], par[14]
    seed = np.int64(par[15])
    w_tier, tier_view_cap, w_nohit = par[16], par[17], par[18]
    if router != LLMD:
        view_cap = np.inf  # SGLang's router tree: no eviction modelled
    for i in range(n):
        t = arrival[i]
        while nh > 0 and ht[0] <= t:
            j = hi[0]
            nh = _heap_pop(ht, hi, nh)
            r = rep[j]
            out_n[r] -= 1.0
            out_tok[r] -= prompt[j] + output[j]
            if group[j] >= 0 and gtok[j] > 0:
                _unlock(hl, hlock, hlocked, r, group[j])
            _unlock(hl, hlock, hlocked, r, n_groups + session[j])
        g = group[i]
        G = gtok[i] if g >= 0 else 0.0
        s = session[i]
        skey = n_groups + s
        S = prompt[i]
        H = hit[i]
        cold = False  # llm-d: no replica's index holds any of the prompt
        # least-loaded replica (lowest index on ties)
        ll = 0
        for q in range(1, R):
            if out_n[q] < out_n[ll]:
                ll = q
        if router == ROUND_ROBIN:
            r = i % R
        elif router == LEAST_LOADED:
            r = ll
        elif router == SESSION:
            r = sess_rep[s]
            if r < 0:
                r = ll
                sess_rep[s] = r
        elif router == SGLANG:
            mx = out_n.max()
            mn = out_n.min()
            if mx - mn > b_abs and mx > b_rel * mn:
                r = ll
            else:
                best = 0
                bm = -1.0
                for q in range(R):
                    m = _match(view, q, g, G, skey, H, S)
                    if m > bm:
                        bm = m
                        best = q
                rate = bm / S if S > 0 else 0.0
                r = best if rate > cache_thr else ll
        elif router == RANDOM:
            r = draw(i, seed, R)
        elif router in (LLMD, LLMD_PRECISE):
            # the queue scorer reads vLLM's waiting requests: none while what the
            # running requests hold fits the replica's KV room, else the share of its
            # in-flight requests beyond it
            for q in range(R):
                over = hlocked[q] - hbm_tokens
                wait[q] = out_n[q] * over / hlocked[q] if over > 0 else 0.0
            mx = wait.max()
            mn = wait.min()
            amax = out_n.max()
            total = min(S, cap_tok)
            # precise: matched tokens on the replica's actual HBM (KV events), min-max
            # normalised over the replicas holding any of the prompt
            pmax = 0.0
            pmin = np.inf
            if router == LLMD_PRECISE:
                for q in range(R):
                    m = _match(hl, q, g, G, skey, H, S)
                    score[q] = m
                    if m > 0:
                        pmax = max(pmax, m)
                        pmin = min(pmin, m)
            cold = w_nohit != 0.0
            if cold:  # no replica's (GPU) index holds any of the prompt
                for q in range(R):
                    if _match(hl if router == LLMD_PRECISE else view, q, g, G, skey, H,
                              S) > 0:
                        cold = False
                        break
            if cold:
                _lru_ranks(cold_tick, cold_rank, R)
            r = 0
            bs = -np.inf
            for q in range(R):
                if router == LLMD_PRECISE:
                    m = score[q]
                    pre = 0.0 if m <= 0 else (1.0 if pmax == pmin
                                              else (m - pmin) / (pmax - pmin))
                else:
                    m = _match(view, q, g, G, skey, H, S)
                    if m > cap_tok:
                        m = cap_tok
                    pre = m / total if total > 0 else 0.0
                qs = 1.0 if mx == mn else (mx - wait[q]) / (mx - mn)
                act = 1.0 if out_n[q] <= 0 or amax <= 0 else (amax - out_n[q]) / amax
                use = hlocked[q] / hbm_tokens if hbm_tokens > 0 else 1.0
                kv = 1.0 - (use if use < 1.0 else 1.0)
                tot = w_pre * pre + w_q * qs + w_kv * kv + w_act * act
                if tview:
                    m2 = _match(v2, q, g, G, skey, H, S)
                    tot += w_tier * (min(m2, cap_tok) / total if total > 0 else 0.0)
                if w_nohit != 0.0:
                    tot += w_nohit * ((1.0 - cold_rank[q] / (R - 1) if R > 1 else 1.0)
                                      if cold else 0.5)
                tots[q] = tot
                if tot > bs:
                    bs = tot
            # the max-score picker draws among equal totals (GIE max_score_picker.go
            # shuffles the endpoints first): the draw of this request among the tied
            nt = 0
            for q in range(R):
                if tots[q] >= bs - TIE * max(1.0, abs(bs)):
                    nt += 1
            k = draw(i, seed, nt)
            for q in range(R):
                if tots[q] >= bs - TIE * max(1.0, abs(bs)):
                    if k == 0:
                        r = q
                        break
                    k -= 1
        else:  # DYNAMO
            r = 0
            bc = np.inf
            for q in range(R):
                m = _match(hl, q, g, G, skey, H, S)
                cost = w_ov * (S - m) / blk + out_tok[q] / blk
                if cost < bc:
                    bc = cost
                    r = q
        rep[i] = r
        own = _match(hl, r, g, G, skey, H, S)
        h_hbm[i] = own
        ti = tier_of[r] if T > 0 else -1
        if ti >= 0:
            th = _match(tl, ti, g, G, skey, H, S)
            h_tier[i] = th - own if th > own else 0.0
        # the request's KV: group prefix and its session's context, written where it ran
        tail = S + output[i] - G
        if tail < 0.0:
            tail = 0.0
        tick = i + 1.0
        if g >= 0 and G > 0:
            _put_locked(hl, hlast, hused, hlock, hlocked, r, g, G, tick)
        _put_locked(hl, hlast, hused, hlock, hlocked, r, skey, tail, tick)
        _evict(hl, hlast, hlock, hused, r, hbm_tokens, K)
        if ti >= 0:
            if g >= 0 and G > 0:
                _put(tl, tlast, tused, ti, g, G, tick)
            _put(tl, tlast, tused, ti, skey, tail, tick)
            _evict(tl, tlast, tlock, tused, ti, tier_tokens[ti], K)
        if tree:  # the router records what it sent (an LRU of view_cap tokens: GIE's)
            if g >= 0 and G > 0:
                _put(view, vlast, vused, r, g, G, tick)
            _put(view, vlast, vused, r, skey, tail, tick)
            _evict(view, vlast, vlock, vused, r, view_cap, K)
        if tview:
            if g >= 0 and G > 0:
                _put(v2, v2last, v2used, r, g, G, tick)
            _put(v2, v2last, v2used, r, skey, tail, tick)
            _evict(v2, v2last, vlock, v2used, r, tier_view_cap, K)
        if cold:
            cold_tick[r] = tick
        out_n[r] += 1.0
        out_tok[r] += S + output[i]
        nh = _heap_push(ht, hi, nh, t + hold[i], i)
    return rep, h_hbm, h_tier




@njit(cache=True)
def block_keys_kernel(prompt, output, group_tokens, hit, g, s, n_sess, bs):  # noqa: ANN001, ANN201, PLR0913
    """routing.block_keys_reference's keys, koff and kn in one pass over the requests:
    a group's prefix blocks are (1 << 61) | group << 24 | block, a session's blocks below
    its reusable tokens the same keys as its previous request's, every block past them a
    new (2 << 61) | counter. A session's previous keys are read back from the output."""
    n = len(prompt)
    kn = np.zeros(n, np.int64)
    gbs = np.zeros(n, np.int64)
    koff = np.zeros(n, np.int64)
    pos = np.int64(0)
    for i in range(n):
        nb = np.int64((prompt[i] + output[i]) // bs)
        gb = np.int64(0)
        if g[i] >= 0:
            gb = min(nb, np.int64(group_tokens[i] // bs))
        kn[i] = nb
        gbs[i] = gb
        koff[i] = pos
        pos += nb
    keys = np.empty(pos, np.int64)
    last = np.full(n_sess, -1, np.int64)  # session -> its previous request
    fresh = 0
    for i in range(n):
        nb = kn[i]
        gb = gbs[i]
        o = koff[i]
        for j in range(gb):
            keys[o + j] = (np.int64(1) << 61) | (g[i] << 24) | j
        p = last[s[i]]
        share = np.int64(min(hit[i], prompt[i]) // bs) - gb
        share = min(share, nb - gb)
        share = min(share, 0 if p < 0 else kn[p] - gbs[p])
        share = max(0, share)
        for t in range(share):
            keys[o + gb + t] = keys[koff[p] + gbs[p] + t]
        for t in range(nb - gb - share):
            keys[o + gb + share + t] = (np.int64(2) << 61) | (fresh + t)
        fresh += nb - gb - share
        last[s[i]] = i
    return keys, koff, kn
