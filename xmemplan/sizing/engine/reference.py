"""The engine's block pool and scheduling policies in plain Python: the tests' oracle.

Objects, dicts and lists instead of flat arrays; the same rules as pool.py, radix.py and
policy.py (their docstrings state them), for one replica with no tier, stepped the way
`replay_scenario` is (docs/oracles.md section B). tests/test_engine.py checks that the
numba engine gives the same per-step records on generated scenarios (Hypothesis).
SGLang's pool is `RadixPoolRef`: the SGLang cache model's plain-Python RadixCache
(prefix/engine_reference.py `SGLangCache`) over the engine's block keys.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from xmemplan.prefix.engine_reference import SGLangCache
from xmemplan.sizing.engine import OUT_BASE, OUT_STRIDE, defer_block_free

CLIP = 4096
RETRACT_DECODE_STEPS = 20


class PoolRef:
    """A block pool: blocks with a key and a reference count; a free queue (ordered dict,
    least recently freed first, never-used blocks first of all); a key -> block map."""

    def __init__(self, blocks: int) -> None:
        self.key: dict[int, int] = {}  # block -> key (cached blocks only)
        self.ref: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(blocks))
        # key -> its blocks in the order they were cached (the first is the one found)
        self.cached: dict[int, list[int]] = {}

    @property
    def nfree(self) -> int:
        return len(self.free)

    def match(self, keys: list[int]) -> int:
        n = 0
        for k in keys:
            if k not in self.cached:
                break
            n += 1
        return n

    def evictable(self, keys: list[int]) -> int:
        return sum(1 for k in keys if self.ref.get(self.cached[k][0], 0) == 0)

    def touch(self, keys: list[int]) -> list[int]:
        out = []
        for k in keys:
            b = self.cached[k][0]
            if self.ref.get(b, 0) == 0:
                del self.free[b]
            self.ref[b] = self.ref.get(b, 0) + 1
            out.append(b)
        return out

    def alloc(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            b, _ = self.free.popitem(last=False)
            k = self.key.pop(b, None)
            if k is not None:
                self.cached[k].remove(b)
                if not self.cached[k]:
                    del self.cached[k]
            self.ref[b] = 1
            out.append(b)
        return out

    def cache(self, b: int, key: int) -> None:
        if b in self.key:
            return
        # a duplicate keeps its key too (freed as a cached block), found once the blocks
        # cached before it are evicted
        self.key[b] = key
        self.cached.setdefault(key, []).append(b)

    def release(self, blocks: list[int]) -> None:
        front = []
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if b in self.key:
                    self.free[b] = None  # cached: the tail (LRU)
                else:
                    front.append(b)  # nothing can hit it: reused first
        if front:
            rest = self.free
            self.free = OrderedDict((b, None) for b in front)
            self.free.update(rest)

    def held(self, total: int) -> int:
        return total - len(self.free)


class RadixPoolRef:
    """SGLang's pool (radix.py) in plain Python: one page per block key, the radix tree,
    locks, whole-leaf LRU eviction of the shortfall, checkpoints and releases."""

    def __init__(self, blocks: int, bs: int) -> None:
        self.c = SGLangCache(blocks * bs, bs)
        self.bs = bs

    @property
    def nfree(self) -> int:  # free or evictable pages (what admission prices)
        return self.c.free_or_evictable()

    @property
    def avail(self) -> int:
        return self.c.free_pages

    @staticmethod
    def pages(keys: list[int]) -> tuple[tuple[int, ...], ...]:
        return tuple((k,) for k in keys)

    def lookup(self, keys: list[int]) -> tuple[int, Any]:
        return self.c.match(self.pages(keys))

    def path_evictable(self, node: Any) -> int:
        c = 0
        while node is not self.c.root:
            if node.lock == 0:
                c += len(node.key)
            node = node.parent
        return c

    def lock(self, node: Any) -> None:
        self.c.lock(node, +1)

    def make_room(self, tokens: int) -> None:
        self.c._make_room(tokens)

    def take(self, pages: int) -> None:
        assert self.c.free_pages >= pages
        self.c.free_pages -= pages

    def checkpoint(self, q: _Req, key_n: int) -> None:
        q.node = self.c.checkpoint_pages(q.node, q.ncached, self.pages(q.keys[:key_n]),
                                         self.pages(q.keys[:q.prompt // self.bs]))
        q.ncached = key_n

    def release(self, q: _Req, insert: bool) -> None:
        key_n = min(q.comp // self.bs, len(q.keys))
        if insert:
            self.checkpoint(q, key_n)
        self.c.free_pages += q.held - q.ncached
        self.c.lock(q.node, -1)
        q.node, q.ncached, q.held = None, 0, 0

    def held(self, total: int) -> int:
        return total - self.nfree


@dataclass
class _Req:
    idx: int
    rid: str
    arrival: float
    prompt: int
    max_tokens: int
    keys: list[int]
    gen: int = 0
    comp: int = 0
    blocks: list[int] = field(default_factory=list)
    ncached: int = 0
    new_hit: bool = True
    hit: int = 0
    preempt: int = 0
    held: int = 0  # SGLang: pages of its row
    node: Any = None  # SGLang: its locked radix node

    @property
    def ntok(self) -> int:
        return self.prompt + self.gen


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _allocate(pool: PoolRef, q: _Req, new: int, nhit: int, bs: int, caching: bool,
              unseen: int = 0) -> bool:
    """vLLM allocate_slots (policy.allocate): blocks for the hit and `new` tokens; the full
    blocks cached of the tokens the scheduler has seen, all but the last `unseen` (the
    output of the step in flight under async scheduling)."""
    comp = q.comp + nhit * bs
    need = max(0, _cdiv(comp + new, bs) - len(q.blocks) - nhit)
    hk = q.keys[:nhit]
    if need + (pool.evictable(hk) if nhit else 0) > pool.nfree:
        return False
    if nhit:
        q.blocks += pool.touch(hk)
        q.ncached = len(q.blocks)
    if need:
        q.blocks += pool.alloc(need)
    if caching:
        _cache_full(pool, q, comp + new, bs, unseen)
    return True


def _cache_full(pool: PoolRef, q: _Req, computed: int, bs: int, unseen: int) -> None:
    full = min(computed // bs, (q.ntok - unseen) // bs, len(q.keys))
    for j in range(q.ncached, full):
        pool.cache(q.blocks[j], q.keys[j])
    q.ncached = max(q.ncached, full)


def _lookup(pool: PoolRef, q: _Req, bs: int, caching: bool) -> int:
    if not caching:
        return 0
    nmax = min((q.ntok - 1) // bs, len(q.keys))
    return pool.match(q.keys[:nmax]) if nmax > 0 else 0


def replay_reference(scenario: dict[str, Any]) -> list[dict[str, Any]]:  # noqa: C901
    from xmemplan.sizing.engine import chain_keys

    eng = scenario["engine"]
    bs = int(scenario["block_size"])
    sg = eng == "sglang"
    total = int(scenario["num_gpu_blocks"]) - (0 if sg else 1)
    pool = PoolRef(total)
    rp = RadixPoolRef(total, bs)
    page = bs if bs > 1 else 0  # SGLang's spare room: the engine's page (= the block here)
    max_seqs = int(scenario.get("max_num_seqs", 256))
    budget0 = int(scenario.get("max_num_batched_tokens", 8192))
    thr = int(scenario.get("long_prefill_token_threshold", 0))
    chunk0 = int(scenario.get("chunked_prefill_size", 8192))
    caching = bool(scenario.get("enable_prefix_caching", True))
    full_isl = bool(scenario.get("scheduler_reserve_full_isl", True))
    cons = float(scenario.get("schedule_conservativeness", 1.0))
    # async scheduling: a request that arrives while a step runs (after its start, up to
    # its end) is first seen at the step after next, or at once when nothing else runs
    asyn = bool(scenario.get("async_scheduling", False))
    hidden: list[_Req] = []
    busy_from: float | None = None  # the start of the step just run (None: idle)
    # vLLM's async scheduling (loop.py): the requests that finished in the step just run
    # keep their blocks and seats while the next batch is built; with vLLM 0.33's deferred
    # block frees (a KV connector) the ones it scheduled are no preemption victims either
    defer = not sg and asyn
    victims_held = defer and defer_block_free(scenario)
    fin: list[_Req] = []
    inflight: set[str] = set()
    # ... and the requests the step in flight gave an output token: vLLM's scheduler does
    # not hold that token yet (an output placeholder), so the block it completes is not
    # cached while the next batch is built (policy.vllm_schedule, R_OSEQ)
    sampled: set[str] = set()
    # SGLang's overlap loop (async scheduling; loop.py): the step just run is processed
    # after the next batch is built. fin: the requests it finished (they keep their pages
    # and seats meanwhile); pend: what it left per request (1 its output token, not yet
    # counted; 2 its pages to checkpoint); lagged: a step is in flight
    lag = sg and asyn
    pend: dict[str, int] = {}
    lagged = False
    st = scenario.get("step_time", {})
    base, per_tok, per_seq = (float(st.get(k, 0.0)) for k in ("base_s", "per_token_s",
                                                              "per_seq_s"))
    rs = scenario["requests"]
    full = [list(r["tokens"]) + [OUT_BASE + i * OUT_STRIDE + k for k in range(r["max_tokens"])]
            for i, r in enumerate(rs)]
    keys, koff, kn = chain_keys(full, bs)
    reqs = [_Req(i, str(r["id"]), float(r["arrival_s"]), len(r["tokens"]), int(r["max_tokens"]),
                 [int(k) for k in keys[koff[i]:koff[i] + kn[i]]]) for i, r in enumerate(rs)]
    pending = list(reqs)
    waiting: list[_Req] = []
    running: list[_Req] = []
    chunked: _Req | None = None
    batch_full = False  # SGLang's running batch's batch_is_full (policy.sglang_schedule)
    calls = 0  # SGLang's calc_priority calls with requests waiting (policy._sg_refresh_waiting)
    ratio = min(0.7 * cons, 1.0)
    ratio_min = ratio * 0.14
    decay = (ratio - ratio_min) / 600.0
    t = 0.0
    out: list[dict[str, Any]] = []

    def done(q: _Req) -> int:  # outputs processed (overlap: not the one in flight)
        return q.gen - (pend.get(q.rid, 0) & 1)

    def process() -> None:  # SGLang's overlap loop: the step in flight, in batch order
        nonlocal batch_full
        for q in list(running):
            p = pend.pop(q.rid, 0)
            if q in fin:
                running.remove(q)
                rp.release(q, insert=caching)
                batch_full = False
            elif p & 2:
                rp.checkpoint(q, min(q.comp // bs, len(q.keys)))

    def vllm_process() -> None:  # vLLM's update_from_output of the step in flight
        for q in list(running):
            if caching and q.rid in sampled:  # its token is seen: cache_blocks (loop.py)
                _cache_full(pool, q, q.comp, bs, 0)
            if q in fin:
                running.remove(q)
                pool.release(q.blocks)
                q.blocks, q.ncached = [], 0

    while pending or waiting or running or hidden:
        waiting += hidden
        hidden = []
        while pending and pending[0].arrival <= t:
            q = pending.pop(0)
            (hidden if asyn and busy_from is not None and q.arrival > busy_from
             else waiting).append(q)
        rec: dict[str, Any] = {"step": len(out), "t_s": t, "scheduled": {}, "preempted": [],
                               "new_hits": {}, "finished": [], "aborted": []}
        sched: list[tuple[_Req, int]] = []
        prefill_step = False
        if not sg:
            budget = budget0
            preempted = False
            # vLLM 0.33: no long-prefill cap when one request is running or waiting
            cap = thr if len(running) + len(waiting) > 1 else 0
            k = 0
            while k < len(running) and budget > 0:
                q = running[k]
                if q in fin:  # finished in the step in flight: nothing more to schedule
                    k += 1
                    continue
                new = q.ntok - q.comp
                if 0 < cap < new:
                    new = cap
                new = min(new, budget)
                if new <= 0:
                    k += 1
                    continue
                ok = False
                while True:
                    if _allocate(pool, q, new, 0, bs, caching, int(q.rid in sampled)):
                        ok = True
                        break
                    if victims_held and running[-1].rid in inflight:
                        break  # its blocks cannot be freed at once: stop (policy.py)
                    p = running.pop()
                    preempted = True
                    pool.release(p.blocks)
                    p.blocks, p.ncached = [], 0
                    p.preempt += 1
                    rec["preempted"].append(p.rid)
                    if p in fin:  # finished in the step in flight: freed, done (policy.py)
                        fin.remove(p)
                        continue
                    p.comp, p.new_hit = 0, True
                    waiting.insert(0, p)
                    if p is q:
                        break
                if not ok:
                    break
                sched.append((q, new))
                budget -= new
                k += 1
            if not preempted:
                while waiting and budget > 0 and len(running) < max_seqs:
                    q = waiting[0]
                    nhit = _lookup(pool, q, bs, caching) if q.comp == 0 else 0
                    # vLLM 0.33 scheduler_reserve_full_isl: the whole sequence must fit
                    hk = q.keys[:nhit]
                    if full_isl and _cdiv(q.ntok, bs) - len(q.blocks) - nhit + \
                            (pool.evictable(hk) if nhit else 0) > pool.nfree:
                        break
                    new = q.ntok - q.comp - nhit * bs
                    if 0 < cap < new:
                        new = cap
                    new = min(new, budget)
                    if not _allocate(pool, q, new, nhit, bs, caching):
                        break
                    waiting.pop(0)
                    running.append(q)
                    q.hit = nhit * bs
                    q.comp += nhit * bs
                    if q.new_hit:
                        rec["new_hits"][q.rid] = q.hit
                        q.new_hit = False
                    sched.append((q, new))
                    budget -= new
        else:
            nrun0 = len(running)
            if not running:
                batch_full = False
            if waiting and len(running) < max_seqs and (not batch_full or waiting[0].comp > 0):
                queued = [q for q in waiting if q.comp == 0]  # the chunked one is not queued
                if caching and queued:
                    if calls % 32 == 0:  # the waiting-prefix refresh, the head last
                        for q in reversed(queued[:128]):
                            n = min(q.ntok // bs, len(q.keys))
                            if n > 0:
                                rp.lookup(q.keys[:n])
                    calls += 1
                rem_off = sum(min(q.max_tokens - done(q), CLIP) * ratio for q in running)
                rem_chunk = chunk0 if chunk0 > 0 else 1 << 40
                rem_input = 16384
                npend = 0  # pages the batch allocates once formed
                demand = 0  # tokens it asks room for: new tokens and a page each
                for q in list(waiting):
                    if len(running) >= max_seqs:
                        batch_full = batch_full or nrun0 > 0
                        break
                    cont = q.comp > 0
                    if not cont and batch_full:
                        break
                    nhit, node = 0, None
                    if not cont and caching:
                        nmax = min((q.ntok - 1) // bs, len(q.keys))
                        if nmax > 0:
                            nhit, node = rp.lookup(q.keys[:nmax])
                    extend = q.ntok - q.comp - nhit * bs
                    left = min(q.max_tokens - q.gen, CLIP)
                    # SGLang 0.5.23 add_one_req: new tokens + whole remaining output + a page,
                    # against free and evictable tokens with its prefix pinned
                    pin = rp.path_evictable(node) * bs if nhit else 0
                    if not cont and extend + left + bs >= rp.nfree * bs - rem_off - pin:
                        batch_full = batch_full or nrun0 > 0  # NO_TOKEN
                        break
                    if sched and extend > rem_input:
                        break
                    lim = rem_chunk
                    if cont:  # add_chunked_req: cut to the memory budget too
                        room = rp.nfree * bs - rem_off
                        if 0 < room < lim:
                            lim = int(room)
                    take = extend
                    if take > lim:
                        take = lim // bs * bs
                        if take <= 0:
                            if sched:
                                break
                            take = lim
                    # its matched pages (locked) and pages for its new tokens, beside the
                    # batch's (the batch's prefixes enter the tree when it is done)
                    need = max(0, _cdiv(q.comp + nhit * bs + take, bs) - q.held - nhit)
                    if need + (rp.path_evictable(node) if nhit else 0) + npend > rp.nfree:
                        break
                    if nhit:
                        rp.lock(node)
                        q.node, q.ncached = node, nhit
                        q.held += nhit
                    elif q.node is None:
                        q.node, q.ncached = rp.c.root, 0
                    q.held += need
                    npend += need
                    demand += take + page
                    if not cont:
                        q.hit = nhit * bs
                        q.comp = nhit * bs
                    if q.new_hit:
                        rec["new_hits"][q.rid] = nhit * bs
                        q.new_hit = False
                    sched.append((q, take))
                    out_reserve = min(q.max_tokens, CLIP) if take == extend else 0
                    rem_off += _cdiv(take, bs) * bs + bs + out_reserve
                    rem_chunk -= _cdiv(take, bs) * bs  # page-ceiled, as SGLang charges
                    rem_input -= _cdiv(take, bs) * bs
                    # no budget left: NO_TOKEN (before OTHER); after an admission the
                    # batch is full (while requests run) and the pass ends; after a chunk
                    # continued, the next waiting request is matched and refused
                    spent = rp.nfree * bs - rem_off <= 0
                    if spent and not cont and nrun0 > 0:
                        batch_full = True
                    if take < extend:
                        chunked = q
                        if cont and spent:
                            continue
                        break
                    waiting.remove(q)
                    running.append(q)
                    if spent and not cont:
                        break
                    if (rem_chunk <= 0 or rem_input <= 0) and not spent:
                        break
                prefill_step = bool(sched)
                if sched:  # alloc_for_extend
                    rp.make_room(demand)
                    rp.make_room(npend * bs)
                    rp.take(npend)
            # overlap: the finishing requests sit out the decode (_reqs_finishing_inflight)
            live = [q for q in running if q not in fin]
            if not sched and fin:
                batch_full = False
            if not sched and live:
                while True:  # check_decode_mem, retract_decode
                    need = sum(1 for q in live if _cdiv(q.ntok, bs) > q.held)
                    rp.make_room(need * bs)
                    if need <= rp.avail:
                        break
                    if fin:  # no decode: the result in flight frees their pages
                        live = []
                        break
                    if len(running) <= 1:
                        if need == 0:
                            break
                        if not waiting or waiting[0].comp == 0:
                            # even the last decode does not fit: SGLang aborts it
                            q = running.pop()
                            rp.release(q, insert=False)
                            q.comp = 0
                            pend.pop(q.rid, None)
                            rec["aborted"].append(q.rid)
                            batch_full = False
                            ratio = 0.0  # the estimate over no request
                            live = []
                            break
                        q = waiting[0]  # the chunked request holds the pages (policy.py)
                        rp.release(q, insert=False)
                        q.comp, q.new_hit = 0, True
                        q.preempt += 1
                        rec["preempted"].append(q.rid)
                        batch_full = False
                        continue
                    best = running[0]
                    for q in running:  # of equal keys the last goes (a stable sort)
                        if done(q) < done(best) or (done(q) == done(best)
                                                    and q.prompt >= best.prompt):
                            best = q
                    running.remove(best)
                    live.remove(best)
                    rp.release(best, insert=False)
                    best.gen -= pend.pop(best.rid, 0) & 1  # its output in flight is dropped
                    best.comp, best.new_hit = 0, True
                    best.preempt += 1
                    waiting.append(best)
                    rec["preempted"].append(best.rid)
                    batch_full = False
                    rp.make_room(len(running) * RETRACT_DECODE_STEPS)
                retracted = bool(rec["preempted"])
                if retracted:  # estimate_new_token_ratio_after_retract
                    ratio = min(1.0, (sum(done(q) for q in running)
                                      + RETRACT_DECODE_STEPS * len(running))
                                / (sum(q.max_tokens for q in running) + 1))
            if not sched and live:
                rp.make_room(len(live) * (page if page else 1))  # alloc_for_decode
                for q in live:
                    if _cdiv(q.comp + 1, bs) > q.held:
                        if rp.avail < 1:
                            continue
                        rp.take(1)
                        q.held += 1
                    sched.append((q, 1))
        if rec["aborted"]:  # a record of its own; the step in flight is processed, and
            rec["kv_blocks_used"] = rp.held(total)  # SGLang builds again at once
            out.append(rec)
            if lagged:
                process()
            fin, lagged = [], False
            busy_from = None
            continue
        if not sched and (fin or inflight or lagged):
            # vLLM's empty batch, SGLang's None batch: the one in flight is processed, then
            # it schedules again
            if lag:
                process()
            else:
                vllm_process()
            fin, inflight, lagged = [], set(), False
            sampled = set()
            busy_from = None
            continue
        if not sched:
            busy_from = None
            if sg and not waiting and not running:
                ratio = min(0.7 * cons, 1.0)  # on_idle: fully idle, the ratio resets
            if hidden:
                continue  # idle: the hidden requests are seen now
            if not pending:
                break  # nothing can ever run (the engine would stall)
            t = max(t, pending[0].arrival)
            continue
        busy_from = t
        for q, k in sched:
            rec["scheduled"][q.rid] = k
        rec["kv_blocks_used"] = (rp if sg else pool).held(total)
        if defer:  # the step before is processed now that this one is built
            vllm_process()
            fin = []
            inflight = {q.rid for q, _ in sched}
        elif lag:
            process()
            fin = []
            lagged = True
        dt = base + per_tok * sum(k for _, k in sched) + per_seq * len(sched)
        # the step ends: computed tokens, sampling, finishing
        if sg and not prefill_step and not rec["preempted"]:
            ratio = max(ratio - decay, ratio_min)
        # SGLang: the chunked request's KV enters the tree first (the engine's order, loop.py),
        # so a prefix it computed alongside a finishing request is shared, not held twice:
        # SGLang's insert frees the duplicate and points the request at the tree's copy
        # (RadixCache.cache_unfinished_req).
        order = [x for x in sched if x[0] is chunked] + [x for x in sched if x[0] is not chunked]
        sampled = set()
        for q, k in order:
            was_prefill = k > 1 or q.gen == 0
            q.comp += k
            if q is chunked:
                batch_full = False  # left out of the next merge: the batch shrinks
                if sg and caching:  # stash_chunked_request: checkpoint_kv_cache
                    rp.checkpoint(q, min(q.comp // bs, len(q.keys)))
                continue
            if q.comp >= q.ntok:
                q.gen += 1
                if defer:
                    sampled.add(q.rid)
                if q.gen >= q.max_tokens and (defer or lag):
                    fin.append(q)  # freed once the next batch is built
                    rec["finished"].append(q.rid)
                    if lag:  # its last output is in flight as well: SGLang's reserve
                        pend[q.rid] = 1  # counts it as still to come (R_PEND, policy.py)
                elif lag:  # processed once the next batch is built
                    pend[q.rid] = 3 if was_prefill and caching else 1
                elif q.gen >= q.max_tokens:
                    running.remove(q)
                    batch_full = False
                    if sg:  # release_kv_cache(checkpoint=True)
                        rp.release(q, insert=caching)
                    else:
                        pool.release(q.blocks)
                        q.blocks, q.ncached = [], 0
                    rec["finished"].append(q.rid)
                elif sg and was_prefill and caching:  # checkpoint_kv_cache
                    rp.checkpoint(q, min(q.comp // bs, len(q.keys)))
        chunked = None
        out.append(rec)
        t = t + dt
    return out


class PrefetchRef:
    """prefetch.py's L3 prefetch of one request in plain Python, written the way SGLang
    0.5.23 holds it: an operation whose `completed_tokens` grows by acknowledged batches
    (HiCacheController._page_transfer), a wait timer that starts at the first blocked
    poll (UnifiedRadixCache._start_storage_prefetch_wait) and the policy's verdict
    (_can_terminate_prefetch, check_prefetch_progress)."""

    BATCH_PAGES = 128

    def __init__(self, policy: str, page: int, threshold: int, base_s: float,
                 per_ki_s: float) -> None:
        self.policy, self.page = policy, max(page, 1)
        self.threshold = max(threshold, self.page)
        self.base_s, self.per_page_s = base_s, self.page / 1024 * per_ki_s
        self.active = False  # in ongoing_prefetch
        self.landed = False  # the completed_req ack: the whole span is in the host tree
        self.tokens = self.start = self.completed = 0
        self.timer_start: float | None = None
        self.timeout_s = 0.0

    def begin(self, matched: int, top: int) -> int:
        span = (top - matched) // self.page * self.page
        if span < self.threshold:
            return 0
        self.active, self.start, self.tokens = True, matched, span
        return span

    def read(self, moved_bytes: float, kvb: float) -> None:
        """The I/O thread has moved `moved_bytes` of the span: each whole batch read is
        acknowledged; the last (short) one with the rest."""
        if not self.active or self.landed:
            return
        if kvb <= 0 or moved_bytes >= self.tokens * kvb:
            self.completed = self.tokens
            return
        batch = self.BATCH_PAGES * self.page
        done = 0
        while done + batch <= self.tokens and (done + batch) * kvb <= moved_bytes:
            done += batch
        self.completed = done

    def land(self) -> None:
        if self.active:
            self.completed, self.landed = self.tokens, True

    def poll(self, now: float) -> tuple[bool, int]:
        """check_prefetch_progress: (ready, the prefix the tier then gives, -1 unchanged)."""
        if not self.active:
            return True, -1
        if self.landed:
            self.active = False
            return True, self.start + self.tokens
        if self.policy == "wait_complete":
            return False, -1
        if self.policy == "timeout":
            if self.timer_start is None:
                self.timer_start = now
                self.timeout_s = self.base_s + (self.tokens // self.page) * self.per_page_s
                return False, -1
            # SGLang: elapsed() > timeout_s; here the deadline is reached at it (the
            # engine's clock is continuous: the boundary is one instant)
            if now < self.timer_start + self.timeout_s:
                return False, -1
        self.active = False
        return True, self.start + self.completed
