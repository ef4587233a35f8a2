"""SGLang 0.5.23's HiCache L3 prefetch decisions on CPU (docs/oracles.md, part C).

`Prefetch` drives SGLang's own `UnifiedRadixCache.check_prefetch_progress` (with
`_can_terminate_prefetch`, `_start_storage_prefetch_wait`, `_prefetch_deadline_expired`,
`_mark_prefetch_deadline_expired`, the controller's `terminate_prefetch`, SGLang's
`PrefetchOperation`, `StoragePrefetchRetries` and `PollTimer`) for one request, the way the
scheduler calls it for a waiting request (`Scheduler._get_new_batch_prefill_raw`). The cache
is built without its `__init__` (which builds the device and host pools and the storage
backend): the fields those methods read are set as `__init__` and
`StorageAttachment.apply_runtime_config` set them (one rank: no collective runs). Ours,
the I/O only: the storage read's progress (`read` sets `completed_tokens` as the ack drain
`_drain_ack_prefetch` does), its end (`land`: the completed_req ack), and
`_handle_prefetch_result`'s host-tree insert, which here records the tokens the request
then has. PollTimer's clock is the scenario's (`time.perf_counter` in
sglang.srt.utils.poll_timer).

`acks(tokens, page)`: SGLang's own I/O loop `HiCacheController._page_transfer` (and
`_page_transfer_kv_batch`) over a storage stand-in that has every page: the
`completed_tokens` of each PrefetchAck it sends, batch after batch.

`span(matched, top, page, threshold)`: the tokens `prefetch_from_storage` fetches, from
SGLang's `RadixKey.page_aligned` and its threshold test (`max(prefetch_threshold,
page_size)`, `attach_storage_backend`).
"""

from __future__ import annotations

import types
from typing import Any

_STATE: dict[str, Any] = {}


def _sglang() -> dict[str, Any]:
    if not _STATE:
        from . import standins

        standins.install()
        import torch
        from sglang.srt.managers.cache_controller import HiCacheController
        from sglang.srt.mem_cache import unified_radix_cache as urc
        from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle
        from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import (
            PrefetchOperation,
        )
        from sglang.srt.mem_cache.radix_cache import RadixKey
        from sglang.srt.mem_cache.storage_prefetch import StoragePrefetchRetries
        from sglang.srt.utils import poll_timer

        _STATE.update(torch=torch, HiCacheController=HiCacheController, urc=urc,
                      CacheRequestHandle=CacheRequestHandle,
                      PrefetchOperation=PrefetchOperation, RadixKey=RadixKey,
                      StoragePrefetchRetries=StoragePrefetchRetries, poll_timer=poll_timer)
    return _STATE


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:  # the rest of `time`
        import time

        return getattr(time, name)


class Prefetch:
    """One request's prefetch through SGLang's decision code (module doc)."""

    def __init__(self, policy: str, page: int, threshold: int, base_s: float,
                 per_ki_s: float, matched: int, tokens: int) -> None:
        s = _sglang()
        self.s = s
        self.clock = _Clock()
        s["poll_timer"].time = self.clock
        c = object.__new__(s["urc"].UnifiedRadixCache)
        # as __init__ / StorageAttachment.apply_runtime_config set them, one rank
        c.tree_core = types.SimpleNamespace(page_size=page)  # (page_size is its property)
        c.prefetch_stop_policy = policy
        c.prefetch_threshold = threshold
        c.prefetch_timeout_base = base_s
        c.prefetch_timeout_per_page = page / 1024 * per_ki_s
        c.ongoing_prefetch = {}
        c._storage_prefetch_wait = {}
        c.storage_prefetch_retries = s["StoragePrefetchRetries"]()
        c.pp_rank, c.pp_size, c.pp_group = 0, 1, None
        c.attn_cp_group = c.attn_tp_group = None
        c.tp_world_size, c.work_list = 1, []
        cc = types.SimpleNamespace(pp_prefetch_decisions={})
        cc.terminate_prefetch = types.MethodType(s["HiCacheController"].terminate_prefetch, cc)
        c.cache_controller = cc
        self.given: int | None = None  # the prefix the host tree then holds for it
        self.start, self.tokens = matched, tokens

        def handle_result(operation: Any) -> None:  # the host-tree insert (ours)
            self.given = self.start + operation.completed_tokens
            del c.ongoing_prefetch[operation.handle]

        c._handle_prefetch_result = handle_result
        c._finish_storage_prefetch = lambda *a, **k: None
        c.revoke_pending_prefetch = lambda h: c.ongoing_prefetch.pop(h, None)
        self.cache = c
        self.handle = s["CacheRequestHandle"]("r0", 0)
        self.op = None
        if tokens > 0:
            op = s["PrefetchOperation"](self.handle, list(range(tokens)))
            op.host_indices = s["torch"].arange(tokens)  # the hit query found the span
            op.hash_value = [str(k) for k in range(tokens // page)]
            op.storage_hit_count = op.stats_requested_tokens = tokens
            c.ongoing_prefetch[self.handle] = s["urc"]._OngoingPrefetch(
                None, None, op.host_indices, op, None, {})
            self.op = op

    def read(self, completed: int) -> None:
        """The ack drain: the I/O thread has acknowledged `completed` tokens."""
        if self.op is not None and self.handle in self.cache.ongoing_prefetch:
            self.op.completed_tokens = max(self.op.completed_tokens, completed)

    def land(self) -> None:
        """The completed_req ack: the whole span read (_drain_ack_prefetch)."""
        if self.op is not None and self.handle in self.cache.ongoing_prefetch:
            self.op.completed_tokens = self.tokens
            self.cache._handle_prefetch_result(self.op)

    def poll(self, now: float) -> tuple[bool, int]:
        """check_prefetch_progress at `now`: (ready, the prefix the request then has from
        the tier, -1 when this poll does not change it)."""
        self.clock.now = now
        ready = bool(self.cache.check_prefetch_progress(self.handle))
        given, self.given = self.given, None
        return ready, (-1 if given is None else given)


def acks(tokens: int, page: int) -> list[int]:
    """completed_tokens of each PrefetchAck SGLang's _page_transfer sends for a span of
    `tokens` tokens that storage holds whole."""
    s = _sglang()
    sent: list[int] = []
    ctl = types.SimpleNamespace(page_size=page)
    ctl.prefetch_sync_queue = types.SimpleNamespace(
        put=lambda ack: sent.append(int(ack.completed_tokens)))
    ctl.page_get_func = lambda op, hashes, idx, info: len(hashes)  # storage has every page
    ctl._page_transfer_kv_batch = types.MethodType(
        s["HiCacheController"]._page_transfer_kv_batch, ctl)
    op = s["PrefetchOperation"](s["CacheRequestHandle"]("r0", 0), list(range(tokens)))
    op.hash_value = [str(k) for k in range(tokens // page)]
    op.host_indices = s["torch"].arange(tokens)
    s["HiCacheController"]._page_transfer(ctl, op)
    return sent


def span(matched: int, top: int, page: int, threshold: int) -> int:
    """The tokens prefetch_from_storage asks L3 for (0: declined under the threshold)."""
    s = _sglang()
    key = s["RadixKey"](list(range(matched, max(matched, top)))).page_aligned(page)
    return len(key) if len(key) >= max(threshold, page) else 0
