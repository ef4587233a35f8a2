"""Cache replay through vLLM's own `KVCacheManager` / `BlockPool` (docs/oracles.md, part A).

What the driver does per request, in list order (the calls the V1 scheduler makes):
1. `Request(..., block_hasher=get_request_block_hasher(page_size, sha256))`: hashes full
   blocks of the prompt, as vLLM's engine core does when a request arrives.
2. `KVCacheManager.get_computed_blocks(request)` -> the hit (full blocks only, capped at
   prompt - 1 tokens by vLLM itself). That is the figure recorded.
3. `allocate_slots(request, prompt - hit, hit, computed_blocks)`; the request is RUNNING.
4. With outputs: the prefill samples output 0; each later output k first allocates the slot of
   output k-1 (`allocate_slots(request, 1)`), so the KV holds prompt + outputs - 1 tokens, as in
   the engine (the last sampled token is never computed). Full blocks are cached as they fill.
5. The request holds its blocks until `inflight` later requests have been admitted, then
   `free(request)` (oldest first).
Admission, in-flight holding and refusal follow the contract (docs/oracles.md): a request
whose KV (prompt + outputs - 1 tokens, or the prompt alone) needs more blocks than the pool
has is refused before any call (hit 0); before admitting, the oldest requests in flight are
released while `inflight` are held or fewer blocks than the request needs are free
(`BlockPool.get_num_free_blocks()`, cached free blocks included).

Capacity: `capacity_tokens // page_size` usable blocks; the pool gets one more, its null
block (`BlockPool` reserves block 0).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from . import output_token

_STATE: dict[str, Any] = {}


def _vllm() -> dict[str, Any]:
    if not _STATE:
        import torch

        torch.set_num_threads(1)  # small tensors only: a thread pool only costs here
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.request import Request, RequestStatus

        hash_fn = get_hash_fn_by_name("sha256")
        init_none_hash(hash_fn)
        _STATE.update(
            torch=torch, SamplingParams=SamplingParams, KVCacheManager=KVCacheManager,
            get_request_block_hasher=get_request_block_hasher, FullAttentionSpec=FullAttentionSpec,
            KVCacheConfig=KVCacheConfig, KVCacheGroupSpec=KVCacheGroupSpec, Request=Request,
            RequestStatus=RequestStatus, hash_fn=hash_fn,
        )
    return _STATE


def make_manager(page_size: int, num_blocks: int, enable_caching: bool = True) -> Any:
    v = _vllm()
    spec = v["FullAttentionSpec"](
        block_size=page_size, num_kv_heads=1, head_size=1, dtype=v["torch"].float32
    )
    config = v["KVCacheConfig"](
        num_blocks=num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[v["KVCacheGroupSpec"](["layer.0"], spec)],
    )
    return v["KVCacheManager"](
        config, max_model_len=1 << 40, scheduler_block_size=page_size,
        hash_block_size=page_size, enable_caching=enable_caching,
    )


class VllmCache:
    """One replay: a KVCacheManager and the requests it holds."""

    def __init__(self, page_size: int, capacity_tokens: int, inflight: int = 1) -> None:
        v = _vllm()
        self.page_size = page_size
        self.manager = make_manager(page_size, capacity_tokens // page_size + 1)
        self.hasher = v["get_request_block_hasher"](page_size, v["hash_fn"])
        self.inflight = max(1, inflight)
        self.blocks = capacity_tokens // page_size
        self.held: deque[Any] = deque()
        self.used_tokens_peak = 0

    def _release_oldest(self) -> bool:
        if not self.held:
            return False
        self.manager.free(self.held.popleft())
        return True

    def _allocate(self, req: Any, *args: Any) -> bool:
        while self.manager.allocate_slots(req, *args) is None:
            if not self._release_oldest():
                return False
        return True

    def admit(self, i: int, rid: str, tokens: list[int], outputs: int) -> int:
        """`outputs`: sampled tokens (0 = prefill only). Returns the hit tokens."""
        v = _vllm()
        kv_tokens = len(tokens) + max(outputs, 1) - 1
        need = -(-kv_tokens // self.page_size)
        if need > self.blocks:
            return 0  # the pool cannot hold it: refused before any engine call
        pool = self.manager.block_pool
        while self.held and (len(self.held) >= self.inflight
                             or pool.get_num_free_blocks() < need):
            self._release_oldest()
        params = v["SamplingParams"](max_tokens=max(1, outputs))
        req = v["Request"](rid, list(tokens), params, None, block_hasher=self.hasher)
        blocks, hit, _ = self.manager.get_computed_blocks(req)
        if not self._allocate(req, len(tokens) - hit, hit, blocks):
            return 0  # cannot be allocated: refused (not reached under the rules above)
        req.status = v["RequestStatus"].RUNNING
        req.num_computed_tokens = len(tokens)
        req.append_output_token_ids(output_token(i, 0))
        for k in range(1, outputs):
            if not self._allocate(req, 1):
                break
            req.num_computed_tokens += 1
            req.append_output_token_ids(output_token(i, k))
        self.held.append(req)
        return int(hit)

    def close(self) -> None:
        while self._release_oldest():
            pass


def replay_hits(scenario: dict[str, Any]) -> list[int]:
    """Hit tokens per request through vLLM's own KVCacheManager (contract part A)."""
    cache = VllmCache(
        int(scenario["page_size"]), int(scenario["capacity_tokens"]),
        int(scenario.get("inflight", 1)),
    )
    with_outputs = bool(scenario.get("with_outputs", False))
    hits = []
    for i, r in enumerate(scenario["requests"]):
        outputs = int(r.get("output_tokens", 0)) if with_outputs else 0
        hits.append(cache.admit(i, str(r["id"]), r["tokens"], outputs))
    cache.close()
    return hits
