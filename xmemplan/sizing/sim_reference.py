"""The prefill-serving simulation of `xmemplan.sizing.sim` in plain Python: the test oracle.

Same model, written for reading: objects instead of flat arrays, `heapq` for arrivals,
lists for queues. Slow (about 100x the kernel); tests compare the two on generated inputs.
The arithmetic is done in the same order as the kernel so that results agree to rounding.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from xmemplan.sizing.sim import LAYER, SUM, Engine, SimResult, Traffic

INF = math.inf


@dataclass
class _Flow:
    remaining: float
    tier: int  # 0 host DRAM, 1 X-Mem
    replica: int
    owner: int  # request (sum mode) or -1 - replica (a batch's loads)
    rate: float = 0.0


@dataclass
class _Replica:
    state: int = 0  # 0 idle, 1 running until `end`, 2 waiting for its batch's loads
    end: float = INF
    start: float = 0.0
    compute: float = 0.0
    fixed: float = 0.0
    flows: int = 0
    load_end: float = 0.0
    decode: bool = False
    batch: list[tuple[int, float]] = field(default_factory=list)  # (request, tokens)
    queue: list[int] = field(default_factory=list)  # FCFS, head first
    running: list[int] = field(default_factory=list)  # decoding, newest first
    ctx: float = 0.0
    outstanding: int = 0
    held: float = 0.0
    busy: float = 0.0
    steps: int = 1  # decode steps in the current iteration
    macro: bool = False  # a run of decode-only steps


def simulate_reference(traffic: Traffic, engine: Engine, *,  # noqa: C901
                       one_step_per_event: bool = False) -> SimResult:
    """The simulation in plain Python. `one_step_per_event` runs every decode step as its
    own event (no runs of steps): the kernel's shortcut must give the same times."""
    t = traffic
    e = engine
    e.arrays()  # the same checks as the kernel's driver
    n = len(t)
    R = int(e.replicas)
    per_switch = int(e.gpus_per_switch)
    cap = [e.dram_bandwidth, e.xmem_bandwidth]
    lat = [e.dram_latency_s, e.xmem_latency_s]
    reps = [_Replica() for _ in range(R)]
    new_total = [float(t.prompt[i] - t.hit_hbm[i] - t.hit_dram[i] - t.hit_xmem[i])
                 for i in range(n)]
    done_tok = [0.0] * n
    loaded = [False] * n
    pending = [0] * n
    load_end = [0.0] * n
    remaining = [0] * n
    stage = [0] * n
    t_arr = [INF] * n
    t_ready = [INF] * n
    t_start = [INF] * n
    t_first = [INF] * n
    t_done = [INF] * n
    rep = [-1] * n
    dep = [-1] * n
    for i in range(n):
        if t.prev[i] >= 0:
            dep[int(t.prev[i])] = i
    heap: list[tuple[float, int]] = [(float(t.arrival[i]), i) for i in range(n)
                                     if t.prev[i] < 0]
    heapq.heapify(heap)

    flows: list[_Flow] = []  # active, in the kernel's order (removal swaps in the last)
    f_last = 0.0
    cnt_gpu = [[0, 0] for _ in range(R)]
    cnt_sw = [0] * ((R + per_switch - 1) // per_switch)
    cnt_x = 0
    now = 0.0
    started = False
    span_start = 0.0
    n_sys = 0
    area = 0.0
    batches = 0
    decode_steps = 0

    def advance(to: float) -> None:
        for fl in flows:
            fl.remaining -= fl.rate * (to - f_last)

    def rerate() -> None:
        for fl in flows:
            rate = cap[fl.tier] / cnt_gpu[fl.replica][fl.tier]
            share = (e.switch_bandwidth / cnt_sw[fl.replica // per_switch] if fl.tier == 0
                     else e.node_bandwidth / cnt_x)
            fl.rate = rate if rate < share else share

    def add_flow(nbytes: float, tier: int, r: int, owner: int) -> None:
        nonlocal f_last, cnt_x
        advance(now)
        f_last = now
        flows.append(_Flow(nbytes, tier, r, owner))
        cnt_gpu[r][tier] += 1
        if tier == 0:
            cnt_sw[r // per_switch] += 1
        else:
            cnt_x += 1
        rerate()

    def decode_step(nd: int, ctx: float) -> float:
        tokens = 0.0 + nd
        wb = (e.dense_weight_bytes + e.expert_weight_bytes * (1.0 - e.expert_miss ** tokens)
              if tokens > 0 else 0.0)
        w_t = wb / e.hbm_bandwidth
        kv_t = (0.0 + ctx * e.kv_bytes_per_token) / e.hbm_bandwidth
        c = (max(0.0 + e.lin_s_per_token * nd, w_t)
             + max(0.0 + e.attn_s_per_unit * (2.0 * ctx + nd), kv_t))
        return c + e.comm_pass_s + e.comm_s_per_token * nd if nd > 0 else c

    def arrive_next(j: int) -> None:
        ta = now + float(t.think[j])
        if t.arrival[j] > ta:
            ta = float(t.arrival[j])
        heapq.heappush(heap, (ta, j))

    while True:
        t_h = heap[0][0] if heap else INF
        t_r, r_min = INF, -1
        for r, rp in enumerate(reps):
            if rp.state == 1 and rp.end < t_r:
                t_r, r_min = rp.end, r
        t_f, f_min = INF, -1
        for a, fl in enumerate(flows):
            tf = f_last + fl.remaining / fl.rate
            if tf < t_f:
                t_f, f_min = tf, a
        now_next = min(t_f, min(t_r, t_h))
        if now_next == INF:
            break
        if started:
            area += n_sys * (now_next - now)
        now = now_next

        if t_f <= t_r and t_f <= t_h:
            advance(now)
            f_last = now
            fl = flows[f_min]
            last = flows.pop()
            if f_min < len(flows):
                flows[f_min] = last
            cnt_gpu[fl.replica][fl.tier] -= 1
            if fl.tier == 0:
                cnt_sw[fl.replica // per_switch] -= 1
            else:
                cnt_x -= 1
            end = now + lat[fl.tier]
            if fl.owner >= 0:
                i = fl.owner
                load_end[i] = max(load_end[i], end)
                pending[i] -= 1
                if pending[i] == 0:
                    stage[i] = 1
                    heapq.heappush(heap, (load_end[i], i))
            else:
                rp = reps[-1 - fl.owner]
                rp.load_end = max(rp.load_end, end)
                rp.flows -= 1
                if rp.flows == 0:
                    ld = rp.load_end - rp.start
                    c = rp.compute
                    c += e.sm_interference * min(c, ld)
                    e_ = rp.start + rp.fixed + max(c, ld)
                    if e.overlap == LAYER:
                        e_ += min(c, ld) / e.layers
                    rp.end = e_
                    rp.state = 1
            rerate()
            continue

        if t_r <= t_h:
            rp = reps[r_min]
            rp.busy += now - rp.start
            rp.state, rp.end = 0, INF
            for i, tok in rp.batch:
                done_tok[i] += tok
                if done_tok[i] >= new_total[i]:
                    assert rp.queue[0] == i
                    rp.queue.pop(0)
                    t_first[i] = now
                    n_sys -= 1
                    rp.held -= float(t.prompt[i])
                    if t.output[i] > 1:
                        remaining[i] = int(t.output[i]) - 1
                        rp.running.insert(0, i)
                        rp.ctx += float(t.prompt[i])
                    else:
                        t_done[i] = now
                        rp.outstanding -= 1
                        if dep[i] >= 0:
                            arrive_next(dep[i])
            rp.batch = []
            if rp.decode:
                rp.decode = False
                ks = rp.steps
                if rp.macro:
                    decode_steps += ks
                rp.steps, rp.macro = 1, False
                rp.ctx += len(rp.running) * ks
                still = []
                for i in rp.running:
                    remaining[i] -= ks
                    if remaining[i] == 0:
                        rp.ctx -= float(t.prompt[i]) + int(t.output[i]) - 1
                        t_done[i] = now
                        rp.outstanding -= 1
                        if dep[i] >= 0:
                            arrive_next(dep[i])
                    else:
                        still.append(i)
                rp.running = still
        else:
            _, i = heapq.heappop(heap)
            r = -1
            if stage[i] == 0:
                if not started:
                    started = True
                    span_start = now
                t_arr[i] = now
                n_sys += 1
                r = int(t.route[i])
                if r == -2:
                    r = rep[int(t.prev[i])]
                if r < 0:
                    r = min(range(R), key=lambda q: (reps[q].outstanding, q))
                rep[i] = r
                reps[r].outstanding += 1
                if e.overlap == SUM:
                    nb = 0
                    for tier, tok in ((0, t.hit_dram[i]), (1, t.hit_xmem[i])):
                        if tok > 0:
                            nb += 1
                            add_flow(float(tok) * e.kv_bytes_per_token, tier, r, i)
                    loaded[i] = True
                    if nb:
                        pending[i] = nb
                        load_end[i] = now
                        r = -1
            else:
                r = rep[i]
            if r >= 0:
                t_ready[i] = now
                rp = reps[r]
                if not rp.queue and rp.state == 1 and rp.macro and rp.steps > 1:
                    # a prefill now waits: the run of decode steps ends with this step
                    end = rp.start
                    for k in range(rp.steps):
                        end = end + e.decode_fixed_s + decode_step(len(rp.running),
                                                                   rp.ctx + k * len(rp.running))
                        if end > now:
                            break
                    if k + 1 < rp.steps:
                        rp.steps, rp.end = k + 1, end
                rp.queue.append(i)

        for r, rp in enumerate(reps):
            if rp.state != 0 or (not rp.queue and not rp.running):
                continue
            def fits(i: int, rp: _Replica = rp) -> bool:
                return rp.held + rp.ctx + float(t.prompt[i]) <= e.kv_capacity_tokens

            prefill = bool(rp.queue)
            if prefill and t_start[rp.queue[0]] == INF and rp.running and \
                    not fits(rp.queue[0]):
                prefill = False
            batches += 1
            rp.start = now
            tokens = lin_t = attn_t = kv_read = fixed = dram_b = xmem_b = 0.0
            first = False
            if prefill:
                budget = float(e.chunk_tokens)
                if e.mixed and rp.running:
                    budget = max(1.0, budget - len(rp.running))
                for k, i in enumerate(rp.queue[: int(e.max_batch)]):
                    need = new_total[i] - done_tok[i]
                    if need > 0 and budget <= 0:
                        break
                    if t_start[i] == INF and k > 0 and not fits(i):
                        break
                    take = need if need < budget else budget
                    budget -= take
                    s0 = float(t.prompt[i]) - new_total[i] + done_tok[i]
                    lin_t += e.lin_s_per_token * take
                    attn_t += e.attn_s_per_unit * ((s0 + take) * (s0 + take) - s0 * s0)
                    kv_read += (s0 + take) * e.kv_bytes_per_token
                    tokens += take
                    if t_start[i] == INF:
                        t_start[i] = now
                        fixed += e.per_token_s * float(t.prompt[i])
                        rp.held += float(t.prompt[i])
                        first = True
                    if not loaded[i]:
                        loaded[i] = True
                        dram_b += float(t.hit_dram[i]) * e.kv_bytes_per_token
                        xmem_b += float(t.hit_xmem[i]) * e.kv_bytes_per_token
                    rp.batch.append((i, take))
                    if take < need:
                        break
                fixed += e.pass_fixed_s
                if first:
                    fixed += e.fixed_s
                rp.decode = bool(e.mixed and rp.running)
            else:
                rp.decode = True
                fixed = e.decode_fixed_s
            if rp.decode:
                nd = len(rp.running)
                tokens += nd
                lin_t += e.lin_s_per_token * nd
                attn_t += e.attn_s_per_unit * (2.0 * rp.ctx + nd)
                kv_read += rp.ctx * e.kv_bytes_per_token
            # a batch of prompts cached whole still runs one pass of one token each
            wtok = tokens if tokens > 0 else float(len(rp.batch))
            wb = (e.dense_weight_bytes + e.expert_weight_bytes * (1.0 - e.expert_miss ** wtok)
                  if wtok > 0 else 0.0)
            w_t = wb / e.hbm_bandwidth
            kv_t = kv_read / e.hbm_bandwidth
            rp.compute = max(lin_t, w_t) + max(attn_t, kv_t)
            if wtok > 0:  # the pass's tensor-parallel all-reduces
                rp.compute += e.comm_pass_s + e.comm_s_per_token * wtok
            rp.fixed = fixed
            nb = 0
            for tier, b in ((0, dram_b), (1, xmem_b)):
                if b > 0:
                    nb += 1
                    add_flow(b, tier, r, -1 - r)
            if nb:
                rp.flows, rp.load_end, rp.state = nb, now, 2
            else:
                end = now + fixed + rp.compute
                if not prefill:  # decode only: steps until the first request finishes
                    ks = 1 if one_step_per_event else min(remaining[i] for i in rp.running)
                    for k in range(1, ks):
                        end = end + fixed + decode_step(len(rp.running),
                                                        rp.ctx + k * len(rp.running))
                    rp.steps, rp.macro = ks, True
                rp.state, rp.end = 1, end

    stats = np.array([area, span_start, now, batches, decode_steps], dtype=np.float64)
    arrays = (np.array(t_arr), np.array(t_ready), np.array(t_start), np.array(t_first),
              np.array(t_done), np.array(rep, dtype=np.int64),
              np.array([rp.busy for rp in reps]), stats)
    return SimResult(traffic, arrays)
