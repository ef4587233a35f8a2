"""Cache replay through SGLang's own `RadixCache` and KV allocator (docs/oracles.md, part A).

SGLang's scheduler glue (`ScheduleBatch`, the model runner) needs a GPU-shaped setup; the driver
makes the calls on the cache and the allocator that it makes, with a small stand-in request
and `req_to_token_pool` (only the fields `RadixCache.checkpoint` reads). Per request:
1. `match_prefix(RadixKey(prompt, limit=prompt - 1))` (`Req._compute_max_prefix_len`: the last
   token is always recomputed; `match_prefix` page-aligns the key) -> the hit, recorded;
   the tree locks the matched node (`lock`).
2. Prefill allocation as `alloc_for_extend` does: the allocator's
   `evict_to_free_tokens(tree, extend + page_size)` (`alloc_paged_token_slots_extend`'s
   one-page-per-request over-estimate; `alloc_token_slots` asks for `extend` alone at page
   size 1), then `alloc_extend` (paged) or `alloc` (page size 1).
3. A request that goes on decoding (with outputs, 2 or more) is checkpointed after its
   prefill, as the prefill result path does for an unfinished request
   (`checkpoint_kv_cache` -> `RadixCache.checkpoint`): later requests in flight can match it.
4. Each later output k allocates the slot of output k-1 as `alloc_paged_token_slots_decode`
   does (evict `page_size` first, 1 at page size 1; then `alloc_decode` / `alloc`), so the KV
   holds prompt + outputs - 1 tokens (the last sampled token is never computed).
5. Release as `release_kv_cache(checkpoint=True)`: `RadixCache.checkpoint(req, up_to=KV)`
   (the page-aligned insert, the prompt split off as its own node, duplicates freed, the
   lock moved), then the row past the tree is freed and the lock dropped.

Admission, in-flight holding and refusal follow the contract (docs/oracles.md): a request
whose KV needs more pages than the pool has is refused before any call (hit 0); before
admitting, the oldest requests in flight are released while `inflight` are held or fewer
pages than the request needs are free or evictable (`available_size() + evictable_size()`).

The tree's clock: `RadixCache` stamps nodes with `time.monotonic()`; the driver gives the
module a clock that ticks once per call, so that LRU order never rests on equal stamps
(which a fast loop can produce, and which would make the order depend on memory addresses).
"""

from __future__ import annotations

import itertools
import time
from array import array
from collections import deque
from typing import Any

from . import output_token

_STATE: dict[str, Any] = {}


class _TickClock:
    """Stands in for the `time` module inside radix_cache: monotonic() ticks by one."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)

    def monotonic(self) -> float:
        return float(next(self._ticks))

    def perf_counter(self) -> float:
        return time.perf_counter()

    def time(self) -> float:
        return time.time()


def _sglang() -> dict[str, Any]:
    if not _STATE:
        from oracle_drivers.standins import install

        install()
        import torch

        # one thread: the driver's tensors are small, and a thread pool on a busy machine
        # made SGLang's alloc_extend 10x slower (measured)
        torch.set_num_threads(1)
        from sglang.srt.mem_cache import radix_cache
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.base_prefix_cache import (
            EvictParams,
            InsertParams,
            MatchPrefixParams,
        )
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams

        radix_cache.time = _TickClock()
        _STATE.update(
            torch=torch, radix_cache=radix_cache, Paged=PagedTokenToKVPoolAllocator,
            Token=TokenToKVPoolAllocator, EvictParams=EvictParams, InsertParams=InsertParams,
            MatchPrefixParams=MatchPrefixParams, CacheInitParams=CacheInitParams,
        )
    return _STATE


class _Rows:
    """`req_to_token_pool.req_to_token`: one kv row per request slot."""

    def __init__(self) -> None:
        self.rows: dict[int, Any] = {}

    def __getitem__(self, index: tuple[int, Any]) -> Any:
        idx, cols = index
        return self.rows[idx][cols]


class _ReqToTokenPool:
    def __init__(self) -> None:
        self.req_to_token = _Rows()

    def write(self, index: tuple[int, slice], values: Any) -> None:
        idx, cols = index
        self.req_to_token.rows[idx][cols] = values


class _Kv:
    __slots__ = ("req_pool_idx", "cache_protected_len", "cache_inserted_len", "swa_evict_floor")

    def __init__(self, idx: int, protected: int) -> None:
        self.req_pool_idx = idx
        self.cache_protected_len = protected
        self.cache_inserted_len = 0
        self.swa_evict_floor = 0


class _Req:
    """The fields of `Req` that `RadixCache.checkpoint` reads."""

    def __init__(self, idx: int, prompt: array, protected: int, lock: Any) -> None:
        self.kv = _Kv(idx, protected)
        self.origin_input_ids = prompt
        self.full_untruncated_fill_ids = array("q", prompt)  # prompt + computed outputs
        self.extra_key = None
        self.cache_salt = None
        self.priority = None
        self.lock = lock
        self.last_node = lock.node


class SglangCache:
    def __init__(self, page_size: int, capacity_tokens: int, inflight: int = 1) -> None:
        s = _sglang()
        torch = s["torch"]
        self.torch = torch
        self.page = page_size
        size = capacity_tokens // page_size * page_size
        self.pages = size // page_size
        if page_size > 1:
            self.alloc = s["Paged"](size, page_size, torch.int64, "cpu", None, False)
        else:
            self.alloc = s["Token"](size, torch.int64, "cpu", None, False)
        self.pool = _ReqToTokenPool()
        params = s["CacheInitParams"](
            disable=False, req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.alloc,
            page_size=page_size,
        )
        self.tree = s["radix_cache"].RadixCache(params)
        self.radix_key = s["radix_cache"].RadixKey
        self.inflight = max(1, inflight)
        self.held: deque[_Req] = deque()
        self.next_idx = 0

    # -- the engine's calls ------------------------------------------------------------
    def _evict_for(self, num_tokens: int) -> None:
        self.alloc.evict_to_free_tokens(self.tree, num_tokens)

    def _alloc_extend(self, prefix_len: int, seq_len: int, last_loc: int) -> Any:
        torch = self.torch
        extend = seq_len - prefix_len
        if self.page == 1:
            self._evict_for(extend)
            return self.alloc.alloc(extend)
        self._evict_for(extend + self.page)
        p = torch.tensor([prefix_len], dtype=torch.int64)
        q = torch.tensor([seq_len], dtype=torch.int64)
        return self.alloc.alloc_extend(p, p, q, q, torch.tensor([last_loc]), extend)

    def _alloc_decode(self, seq_len: int, last_loc: int) -> Any:
        torch = self.torch
        if self.page == 1:
            self._evict_for(1)
            return self.alloc.alloc(1)
        self._evict_for(self.page)
        q = torch.tensor([seq_len], dtype=torch.int64)
        return self.alloc.alloc_decode(q, q, torch.tensor([last_loc]))

    def _row(self, req: _Req) -> Any:
        return self.pool.req_to_token.rows[req.kv.req_pool_idx]

    def _release(self, req: _Req) -> None:
        """release_kv_cache(req, tree, checkpoint=True)."""
        n = len(req.full_untruncated_fill_ids)
        self.tree.checkpoint(req, up_to=n)
        row = self._row(req)
        if req.kv.cache_protected_len < n:  # the row past the tree (free_kv_row)
            self.alloc.free(row[req.kv.cache_protected_len : n])
        self.tree.unlock(req.lock)
        req.lock = None
        del self.pool.req_to_token.rows[req.kv.req_pool_idx]

    def _release_oldest(self) -> bool:
        if not self.held:
            return False
        self._release(self.held.popleft())
        return True

    def _room_pages(self) -> int:
        return (self.alloc.available_size() + self.tree.evictable_size()) // self.page

    # -- one request -------------------------------------------------------------------
    def admit(self, i: int, tokens: list[int], outputs: int) -> int:
        """`outputs`: sampled tokens (0 = prefill only). Returns the hit tokens."""
        s = _sglang()
        torch = self.torch
        n = len(tokens)
        kv_tokens = n + max(outputs, 1) - 1
        need = -(-kv_tokens // self.page)
        if need > self.pages:
            return 0  # the pool cannot hold it: refused before any engine call
        while self.held and (len(self.held) >= self.inflight or self._room_pages() < need):
            self._release_oldest()
        prompt = array("q", tokens)
        match = self.tree.match_prefix(
            s["MatchPrefixParams"](key=self.radix_key(prompt, limit=max(0, n - 1)))
        )
        hit = int(match.device_prefix_len)
        lock = self.tree.lock(match.last_device_node)
        prefix = (self.tree.path_device_indices(match.last_device_node) if hit
                  else torch.empty(0, dtype=torch.int64))
        last_loc = int(prefix[-1]) if hit else -1
        while (new := self._alloc_extend(hit, n, last_loc)) is None:
            if not self._release_oldest():
                self.tree.unlock(lock)
                return 0  # cannot be allocated: refused (not reached under the rules above)
        req = _Req(self.next_idx, prompt, hit, lock)
        self.next_idx += 1
        row = torch.empty(kv_tokens, dtype=torch.int64)  # the request's row, filled as it runs
        row[:hit] = prefix
        row[hit:n] = new
        self.pool.req_to_token.rows[req.kv.req_pool_idx] = row
        if outputs >= 2:
            self.tree.checkpoint(req, up_to=n)  # unfinished after its prefill
        for k in range(1, outputs):
            row = self._row(req)
            seq_len = len(req.full_untruncated_fill_ids) + 1
            while (loc := self._alloc_decode(seq_len, int(row[seq_len - 2]))) is None:
                if not self._release_oldest():
                    break
            if loc is None:
                break  # no room even alone: its outputs end here
            req.full_untruncated_fill_ids.append(output_token(i, k - 1))
            row[seq_len - 1] = loc[0]
        self.held.append(req)
        return hit

    def close(self) -> None:
        while self._release_oldest():
            pass

    def cached_tokens(self) -> int:
        return int(self.tree.evictable_size() + self.tree.protected_size())


def replay_hits(scenario: dict[str, Any]) -> list[int]:
    """Hit tokens per request through SGLang's own RadixCache (contract part A)."""
    cache = SglangCache(
        int(scenario["page_size"]), int(scenario["capacity_tokens"]),
        int(scenario.get("inflight", 1)),
    )
    with_outputs = bool(scenario.get("with_outputs", False))
    hits = []
    for i, r in enumerate(scenario["requests"]):
        outputs = int(r.get("output_tokens", 0)) if with_outputs else 0
        hits.append(cache.admit(i, r["tokens"], outputs))
    cache.close()
    return hits
