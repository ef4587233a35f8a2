"""Readable references of the engines' finite caches (the oracles of the kernel tests).

Plain Python over token ids, written from the rules of vLLM 0.33.0 (`vllm/v1/core/
block_pool.py`, `kv_cache_manager.py`, `single_type_kv_cache_manager.py`, `kv_cache_utils.py`)
and SGLang 0.5.23 (`sglang/srt/mem_cache/radix_cache.py`, `common.py`, `allocation.py`,
`managers/schedule_batch.py` `_compute_max_prefix_len`). Our own code: it reproduces what
those classes do to a cache, not how they are written. `engine_kernels.py` is the fast
version; `engine_cache.replay_hits` runs either.

How a replay drives an engine (the scenario of docs/capacity.md, the oracle contract A):
- P = page size. A request has L prompt tokens and M output tokens; its KV is K = L + M - 1
  tokens with outputs (the last sampled token is never computed), K = L prefill only.
- A request whose K does not fit in the whole pool (cdiv(K, P) > capacity // P pages) is
  rejected before lookup (hit 0): the engines refuse prompts their pool cannot hold.
- `inflight` k: before request i is admitted, the oldest in-flight requests are released
  while k are in flight, or while fewer than cdiv(K, P) pages are free or evictable.
  Admission runs the lookup, the prefill and every decode step; release finishes the
  request. The rest are released at the end, oldest first.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

OUTPUT_TOKEN_BASE = 1_000_000
OUTPUT_TOKEN_STRIDE = 10_007


def output_tokens(i: int, m: int) -> list[int]:
    """Ids of the m output tokens of request i (distinct from any prompt token)."""
    return [OUTPUT_TOKEN_BASE + i * OUTPUT_TOKEN_STRIDE + k for k in range(m)]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Req:
    prompt: list[int]
    outputs: list[int]  # all M sampled tokens
    with_outputs: bool

    @property
    def kv_tokens(self) -> list[int]:
        """The tokens whose KV the request computes: prompt and outputs but the last."""
        if not self.with_outputs or not self.outputs:
            return self.prompt
        return self.prompt + self.outputs[:-1]


# --- vLLM: the block pool and its free-block queue ------------------------------------------


class _Block:
    __slots__ = ("bid", "ref", "hash")

    def __init__(self, bid: int) -> None:
        self.bid = bid
        self.ref = 0
        self.hash: object | None = None


class VLLMCache:
    """vLLM's BlockPool with one full-attention group (block size = hash block size = P).

    - Free queue: every block with ref 0, in eviction order; a new block is taken from its
      front, and a block taken that still has a hash leaves the cache then (lazy eviction).
    - A block is hashed (cached) once it is full; one hash can map to several blocks (a block
      recomputed because of the prompt - 1 cap); a lookup takes the first one inserted.
    - Lookup: leading full blocks whose chained hash is cached, at most (L - 1) // P.
    - Hit blocks are touched (ref + 1; taken out of the free queue when at ref 0).
    - Release frees the request's blocks tail first: hashed blocks go to the END of the queue
      in that order; an unhashed (partial) block goes to the FRONT (reused first).
    """

    def __init__(self, capacity_tokens: int, page: int) -> None:
        self.page = page
        self.n_blocks = capacity_tokens // page
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(self.n_blocks))
        self.blocks = [_Block(b) for b in range(self.n_blocks)]
        self.by_hash: dict[object, OrderedDict[int, None]] = {}

    def pages(self) -> int:
        return self.n_blocks

    def free_or_evictable(self) -> int:
        return len(self.free)

    @staticmethod
    def hashes(tokens: Sequence[int], page: int) -> list[object]:
        out: list[object] = []
        parent: object = None
        for j in range(len(tokens) // page):
            parent = (parent, tuple(tokens[j * page:(j + 1) * page]))
            out.append(parent)
        return out

    def _pop_free(self) -> _Block:
        bid, _ = self.free.popitem(last=False)
        b = self.blocks[bid]
        if b.hash is not None:
            owners = self.by_hash[b.hash]
            del owners[bid]
            if not owners:
                del self.by_hash[b.hash]
            b.hash = None
        b.ref = 1
        return b

    def _cache(self, b: _Block, h: object) -> None:
        b.hash = h
        self.by_hash.setdefault(h, OrderedDict())[b.bid] = None

    def admit(self, req: Req) -> tuple[int, list[_Block]]:
        P = self.page
        L = len(req.prompt)
        hashes = self.hashes(req.kv_tokens, P)
        hit: list[_Block] = []
        for h in hashes[: (L - 1) // P]:
            owners = self.by_hash.get(h)
            if not owners:
                break
            hit.append(self.blocks[next(iter(owners))])
        for b in hit:  # touch
            if b.ref == 0:
                del self.free[b.bid]
            b.ref += 1
        held = list(hit)
        for _ in range(cdiv(L, P) - len(hit)):  # prefill
            held.append(self._pop_free())
        for j in range(len(hit), L // P):
            self._cache(held[j], hashes[j])
        K = len(req.kv_tokens)
        for t in range(L + 1, K + 1):  # decode: slot for token t - 1, then cache full blocks
            if cdiv(t, P) > len(held):
                held.append(self._pop_free())
            if t % P == 0:
                self._cache(held[t // P - 1], hashes[t // P - 1])
        return len(hit) * P, held

    def release(self, held: list[_Block]) -> None:
        first: list[int] = []
        last: list[int] = []
        for b in reversed(held):
            b.ref -= 1
            if b.ref == 0:
                (first if b.hash is None else last).append(b.bid)
        for bid in reversed(first):  # prepend_n keeps the list's order at the front
            self.free[bid] = None
            self.free.move_to_end(bid, last=False)
        for bid in last:
            self.free[bid] = None


# --- SGLang: the radix tree, whole-leaf LRU eviction, spare room -----------------------------


class _Node:
    __slots__ = ("children", "parent", "key", "lock", "time", "alive")

    def __init__(self, parent: _Node | None, key: tuple[tuple[int, ...], ...], time: int
                 ) -> None:
        self.children: dict[tuple[int, ...], _Node] = {}
        self.parent = parent
        self.key = key  # pages of this edge
        self.lock = 0
        self.time = time
        self.alive = True


class SGLangCache:
    """SGLang's RadixCache (LRU) on a paged token pool of capacity // P pages.

    Time is a counter that moves at each `time.monotonic()` call the engine makes: a lookup
    or insert stamps its whole path with one time; a node created (leaf or split) gets the
    next. A split leaves the part past the divergence with the path's time.
    A request enters the tree by `checkpoint`: after its prefill when it goes on decoding
    (`checkpoint_kv_cache`, so requests in flight can hit its prompt), and at release.
    """

    def __init__(self, capacity_tokens: int, page: int) -> None:
        self.page = page
        self.n_pages = capacity_tokens // page
        self.free_pages = self.n_pages
        self.clock = itertools.count(1)
        self.root = _Node(None, (), 0)
        self.root.lock = 1
        self.evictable_pages = 0

    def pages(self) -> int:
        return self.n_pages

    def free_or_evictable(self) -> int:
        return self.free_pages + self.evictable_pages

    def _pages(self, tokens: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        P = self.page
        return tuple(tuple(tokens[j * P:(j + 1) * P]) for j in range(len(tokens) // P))

    def _split(self, child: _Node, m: int) -> _Node:
        assert child.parent is not None
        new = _Node(child.parent, child.key[:m], next(self.clock))
        new.lock = child.lock
        child.parent.children[child.key[0]] = new
        child.key = child.key[m:]
        child.parent = new
        new.children[child.key[0]] = child
        return new

    def _walk(self, key: tuple[tuple[int, ...], ...]) -> tuple[int, _Node]:
        """match_prefix's helper: matched pages and the last node (splitting there)."""
        t = next(self.clock)
        node = self.root
        node.time = t
        matched = 0
        while matched < len(key) and key[matched] in node.children:
            child = node.children[key[matched]]
            child.time = t
            m = 0
            while m < len(child.key) and matched + m < len(key) and \
                    child.key[m] == key[matched + m]:
                m += 1
            matched += m
            if m < len(child.key):
                node = self._split(child, m)
                break
            node = child
        return matched, node

    def match(self, key: tuple[tuple[int, ...], ...]) -> tuple[int, _Node]:
        if not key:
            return 0, self.root
        return self._walk(key)

    def insert(self, key: tuple[tuple[int, ...], ...]) -> tuple[int, _Node]:
        t = next(self.clock)
        node = self.root
        node.time = t
        matched = 0
        while matched < len(key) and key[matched] in node.children:
            node = node.children[key[matched]]
            node.time = t
            m = 0
            while m < len(node.key) and matched + m < len(key) and \
                    node.key[m] == key[matched + m]:
                m += 1
            matched += m
            if m < len(node.key):
                node = self._split(node, m)
        if matched < len(key):
            leaf = _Node(node, key[matched:], next(self.clock))
            node.children[key[matched]] = leaf
            self.evictable_pages += len(leaf.key)
            node = leaf
        return matched, node

    def lock(self, node: _Node, delta: int) -> None:
        while node is not self.root:
            if delta > 0 and node.lock == 0:
                self.evictable_pages -= len(node.key)
            node.lock += delta
            if delta < 0 and node.lock == 0:
                self.evictable_pages += len(node.key)
            assert node.parent is not None
            node = node.parent

    def _evictable_leaves(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            if n is not self.root and not n.children and n.lock == 0:
                out.append(n)
        return out

    def evict(self, tokens: int) -> None:
        """RadixCache.evict: pop whole unlocked leaves, oldest first, until `tokens` freed."""
        heap = [(n.time, id(n), n) for n in self._evictable_leaves()]
        heapq.heapify(heap)
        done = 0
        while done < tokens and heap:
            _, _, x = heapq.heappop(heap)
            self.free_pages += len(x.key)
            done += len(x.key) * self.page
            self.evictable_pages -= len(x.key)
            parent = x.parent
            assert parent is not None
            del parent.children[x.key[0]]
            x.alive = False
            if not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.time, id(parent), parent))

    def _make_room(self, demand_tokens: int) -> None:
        avail = self.free_pages * self.page
        if avail < demand_tokens:
            self.evict(demand_tokens - avail)

    def admit(self, req: Req) -> tuple[int, tuple[Req, _Node, int]]:
        P = self.page
        L = len(req.prompt)
        hit_pages, last = self.match(self._pages(req.prompt[: L - 1]))
        h = hit_pages * P
        self.lock(last, +1)
        spare = P if P > 1 else 0
        self._make_room(L - h + spare)  # alloc_paged_token_slots_extend / alloc_token_slots
        need = cdiv(L - h, P)
        assert self.free_pages >= need, "the fit check guarantees room"
        self.free_pages -= need
        held = (req, last, hit_pages)
        K = len(req.kv_tokens)
        if K > L:  # unfinished after its prefill: checkpoint_kv_cache (batch_result_processor)
            held = self._checkpoint(held, L)
        for pos in range(L, K):  # decode: the slot of token `pos`
            self._make_room(P if P > 1 else 1)
            if pos % P == 0:
                assert self.free_pages >= 1
                self.free_pages -= 1
        return h, held

    def _checkpoint(self, held: tuple[Req, _Node, int], up_to: int) -> tuple[Req, _Node, int]:
        """RadixCache.checkpoint(req, up_to): insert the KV's full pages, then the prompt's
        (split_prompt), free the duplicates the insert exposed, look the key up again (the
        path's access time), move the lock to the new last node."""
        req, last, protected = held
        key = self._pages(req.kv_tokens[:up_to])
        new_last = self.checkpoint_pages(last, protected, key, self._pages(req.prompt))
        return req, new_last, len(key)

    def checkpoint_pages(self, last: _Node, protected: int,
                         key: tuple[tuple[int, ...], ...],
                         prompt_key: tuple[tuple[int, ...], ...]) -> _Node:
        """`_checkpoint` on pages: the lock at `last` (over `protected` pages) moves to the
        node where `key` ends; returns that node."""
        prefix, _ = self.insert(key)
        self.free_pages += max(0, prefix - protected)
        if 0 < len(prompt_key) < len(key):
            self.insert(prompt_key)
        _, new_last = self.match(key)
        self.lock(last, -1)
        self.lock(new_last, +1)
        return new_last

    def release(self, held: tuple[Req, _Node, int]) -> None:
        """release_kv_cache(checkpoint=True): checkpoint, free the rest of the row, unlock."""
        req, last, _ = self._checkpoint(held, len(held[0].kv_tokens))
        K = len(req.kv_tokens)
        self.free_pages += cdiv(K, self.page) - K // self.page  # the partial page
        self.lock(last, -1)


# --- Replay -----------------------------------------------------------------------------------


@dataclass
class ReferenceResult:
    hit_tokens: list[int] = field(default_factory=list)
    rejected: list[bool] = field(default_factory=list)


def reference_replay(
    engine: str,
    requests: Sequence[Sequence[int]],
    outputs: Sequence[int],
    page: int,
    capacity_tokens: int,
    with_outputs: bool = False,
    inflight: int = 1,
) -> ReferenceResult:
    """Hit tokens of each request through one engine's cache (module docstring: the rules)."""
    cache: VLLMCache | SGLangCache
    if engine == "vllm":
        cache = VLLMCache(capacity_tokens, page)
    elif engine == "sglang":
        cache = SGLangCache(capacity_tokens, page)
    else:
        raise ValueError(f"unknown engine {engine!r}")
    res = ReferenceResult()
    running: list[object] = []
    for i, (prompt, m) in enumerate(zip(requests, outputs)):
        req = Req(list(prompt), output_tokens(i, max(int(m), 0)), with_outputs)
        need = cdiv(len(req.kv_tokens), page)
        if need > cache.pages() or len(req.prompt) == 0:
            res.hit_tokens.append(0)
            res.rejected.append(True)
            continue
        while running and (len(running) >= inflight or cache.free_or_evictable() < need):
            cache.release(running.pop(0))  # type: ignore[arg-type]
        hit, held = cache.admit(req)
        running.append(held)
        res.hit_tokens.append(hit)
        res.rejected.append(False)
    while running:
        cache.release(running.pop(0))  # type: ignore[arg-type]
    return res
