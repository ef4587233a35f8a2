"""The engines' finite caches: vLLM's block pool and SGLang's radix cache, replayed.

    from xmemplan.prefix.engine_cache import replay_hits
    replay_hits({"engine": "vllm", "page_size": 16, "capacity_tokens": 1_000_000,
                 "with_outputs": True, "inflight": 1,
                 "requests": [{"id": "a", "tokens": [...], "output_tokens": 200}, ...]})

`replay_hits` takes the scenario of the oracle contract (docs/capacity.md, section "Engine
models"); `engine_replay` is what `hitrate --cache-model vllm|sglang` calls on page keys. The
rules are in `engine_reference` (plain Python, the tests' oracle); the kernels are in
`engine_kernels`. One replay per capacity (neither engine's cache is a stack algorithm).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

ENGINES = ("vllm", "sglang")


@dataclass
class EngineReplay:
    hits: np.ndarray  # int64 (n, J): hit tokens at capacities[j]
    rejected: np.ndarray  # bool (n, J): the request's KV alone exceeds the pool
    capacities: np.ndarray  # int64 (J,)


def kv_tokens(prompt: np.ndarray, outputs: np.ndarray | None, with_outputs: bool
              ) -> np.ndarray:
    """K per request: L + M - 1 with outputs (the last sampled token is never computed)."""
    prompt = np.asarray(prompt, dtype=np.int64)
    if not with_outputs or outputs is None:
        return prompt.copy()
    m = np.maximum(np.asarray(outputs, dtype=np.int64), 1)  # unknown (-1) or 0: none
    return prompt + m - 1


def kv_page_ids(
    keys: np.ndarray, offsets: np.ndarray, resets: np.ndarray, prompt: np.ndarray,
    kv: np.ndarray, page: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, offsets): one id per full page of each request's KV (`engine_kernels.
    kv_page_ids`). The first min(keys, L // page) pages are the trace's (a partial last
    block's key is dropped); the rest hold output tokens or have no key: they never hit."""
    from xmemplan.prefix.engine_kernels import kv_page_ids as kernel
    from xmemplan.prefix.matcher import tree_sizes

    keys = np.ascontiguousarray(keys, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    have = np.ascontiguousarray(np.minimum(np.diff(offsets), np.asarray(prompt) // page))
    total = np.maximum(np.asarray(kv, dtype=np.int64) // page, have)
    out_off = np.zeros(len(total) + 1, dtype=np.int64)
    np.cumsum(total, out=out_off[1:])
    ids = np.empty(int(out_off[-1]), dtype=np.int64)
    if len(total):
        r2, nodes, table = tree_sizes(np.asarray(resets, dtype=bool))
        kernel(keys, offsets, have, out_off, r2, ids, np.empty(nodes, dtype=np.int64),
               np.empty(nodes, dtype=np.int64), np.empty(nodes, dtype=np.int64),
               np.empty(table, dtype=np.int64), np.empty(table, dtype=np.int64),
               np.empty(table, dtype=np.int64), np.full(table, -1, dtype=np.int64))
    return ids, out_off


def engine_replay(
    engine: str,
    keys: np.ndarray,
    offsets: np.ndarray,
    resets: np.ndarray,
    prompt: np.ndarray,
    kv: np.ndarray,
    page: int,
    capacities: Sequence[int] | np.ndarray,
    inflight: int = 1,
    page_ids: tuple[np.ndarray, np.ndarray, int] | None = None,
) -> EngineReplay:
    """Hit tokens of each request in `engine`'s cache at every capacity (tokens).

    `keys`/`offsets`: the trace's page keys per request (as `prefix.matcher.match` takes
    them); `resets[r]` starts an empty cache at r (a new session under --scope session);
    `prompt` = L and `kv` = K tokens per request (`kv_tokens`). `page_ids`: (ids,
    offsets, the bound of key pages' ids) from the LRU pass over the same keys and resets
    (`lru_match(engine_ids=(kv, page, NEVER for vLLM, else 0))`): no radix pass of their
    own.
    """
    from xmemplan.prefix import engine_kernels as ek
    from xmemplan.prefix.matcher import check_requests

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    if page < 1 or inflight < 1:
        raise ValueError("page and inflight must be >= 1")
    keys, offsets, resets = check_requests(keys, offsets, resets)
    prompt = np.ascontiguousarray(prompt, dtype=np.int64)
    kv = np.ascontiguousarray(kv, dtype=np.int64)
    if page_ids is None:
        canon, offsets = kv_page_ids(keys, offsets, resets, prompt, kv, page)
        n_ids = canon.shape[0]
    else:  # key pages' ids are numbers below n_ids (the rest NEVER, or len(keys) + i)
        canon, offsets, n_ids = page_ids
    caps = np.asarray(capacities, dtype=np.int64).reshape(-1)
    n = offsets.shape[0] - 1
    hits = np.zeros((n, caps.size), dtype=np.int64)
    rejected = np.zeros((n, caps.size), dtype=bool)
    if n == 0 or caps.size == 0:
        return EngineReplay(hits, rejected, caps)
    resets = resets.copy()
    resets[0] = True
    starts = np.flatnonzero(resets)
    universes = len(starts)  # caches replayed per capacity: epochs never repeat across calls
    need = (kv + page - 1) // page
    most = int(max(need.max(), 1))
    per_universe_requests = int(np.diff(np.append(starts, n)).max())
    out_h = np.empty(n, dtype=np.int64)
    out_r = np.empty(n, dtype=bool)
    if engine == "vllm":
        blocks_used = int(np.add.reduceat(need, starts).max())
        pg = np.zeros((max(1, n_ids), 4), dtype=np.int64)  # epochs start at 1: zeros are empty rows
        for j, c in enumerate(caps):
            n_blocks = int(c) // page
            b = max(1, min(n_blocks, blocks_used))
            ek.vllm_replay(
                canon, offsets, resets, prompt, kv, page, n_blocks, inflight,
                1 + j * universes, out_h, out_r,
                np.empty((b + 3, 8), dtype=np.int64), pg,
                np.empty((inflight, most), dtype=np.int64), np.zeros(inflight, np.int64),
                np.zeros(inflight, np.int64), np.empty(most, dtype=np.int64),
                np.empty(most, dtype=np.int64),
            )
            hits[:, j] = out_h
            rejected[:, j] = out_r
    else:
        nodes = 1 + 8 * per_universe_requests
        table = 1 << max(4, int(2 * nodes - 1).bit_length())
        heap = 12 * per_universe_requests + nodes + 16
        sc = _sglang_scratch(nodes, table, heap)
        try:
            for j, c in enumerate(caps):
                ek.sglang_replay(
                    canon, offsets, resets, prompt, kv, page, int(c) // page, inflight,
                    sc.epoch + j * universes, out_h, out_r, sc.nd, sc.tb,
                    sc.h_time, sc.h_node,
                    np.zeros(inflight, np.int64), np.zeros(inflight, np.int64),
                    np.zeros(inflight, np.int64), np.empty(most + 3, dtype=np.int64),
                )
                hits[:, j] = out_h
                rejected[:, j] = out_r
        finally:
            sc.epoch += caps.size * universes
            if sc.tb.nbytes <= _SCRATCH_KEEP:
                _SCRATCH[table] = sc
    return EngineReplay(hits, rejected, caps)


@dataclass
class _Scratch:
    """SGLang's tables kept between calls of one table size: the child table's slots are
    live only at the epochs a call stamps (each call starts above the last one's), so it
    is zeroed once, not per call, and the node rows and heaps are written before read."""

    nd: np.ndarray
    tb: np.ndarray
    h_time: np.ndarray
    h_node: np.ndarray
    epoch: int = 1


_SCRATCH: dict[int, _Scratch] = {}
_SCRATCH_KEEP = 1 << 25  # bytes of child table kept after a call (larger: freed)


def _sglang_scratch(nodes: int, table: int, heap: int) -> _Scratch:
    sc = _SCRATCH.pop(table, None)  # taken while in use: a second caller makes its own
    if sc is None or sc.nd.shape[0] < nodes or sc.h_time.shape[0] < heap:
        sc = _Scratch(np.empty((nodes, 8), dtype=np.int64),
                      np.zeros((table, 4), dtype=np.int64),  # epochs from 1: zeros empty
                      np.empty(heap, dtype=np.int64), np.empty(heap, dtype=np.int64),
                      1 if sc is None else sc.epoch)
    return sc


class Picker:
    """Replays of requests picked from one layout of page ids, one capacity each.

    `kv_page_ids` runs once over all requests (`keys`/`offsets` as for `engine_replay`,
    no resets); `hits(idx, capacity)` replays requests `idx` (in that order, an empty
    cache first) as `engine_replay` would replay them alone: equal ids still mean equal
    prefixes in any subset. The kernels read each request's ids from its start in the
    whole layout, and the tables are kept between calls (epochs), so a pick costs its
    replay only."""

    def __init__(self, engine: str, keys: np.ndarray, offsets: np.ndarray,
                 prompt: np.ndarray, kv: np.ndarray, page: int) -> None:
        from xmemplan.prefix.matcher import check_requests

        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}")
        n = offsets.shape[0] - 1
        keys, offsets, resets = check_requests(keys, offsets, np.zeros(n, dtype=bool))
        self.engine, self.page = engine, int(page)
        self.prompt = np.ascontiguousarray(prompt, dtype=np.int64)
        self.kv = np.ascontiguousarray(kv, dtype=np.int64)
        ids, self.starts = kv_page_ids(keys, offsets, resets, self.prompt, self.kv, page)
        if engine == "vllm" and ids.size:  # rows of the id table: dense ids
            _, inv = np.unique(ids, return_inverse=True)
            ids = inv.reshape(-1).astype(np.int64)
        self.ids = ids
        self.epoch = 1
        self.need = (self.kv + page - 1) // page
        nodes = 1 + 8 * max(n, 1)
        if engine == "vllm":
            self.pg = np.zeros((max(1, int(ids.max()) + 1 if ids.size else 1), 4),
                               dtype=np.int64)
        else:
            table = 1 << max(4, int(2 * nodes - 1).bit_length())
            heap = 12 * max(n, 1) + nodes + 16
            self.nd = np.empty((nodes, 8), dtype=np.int64)
            self.tb = np.zeros((table, 4), dtype=np.int64)
            self.h_time = np.empty(heap, dtype=np.int64)
            self.h_node = np.empty(heap, dtype=np.int64)

    def hits(self, idx: np.ndarray, capacity: int) -> np.ndarray:
        from xmemplan.prefix import engine_kernels as ek

        idx = np.ascontiguousarray(idx, dtype=np.int64)
        m = idx.shape[0]
        out_h = np.zeros(m, dtype=np.int64)
        if m == 0:
            return out_h
        out_r = np.empty(m, dtype=bool)
        off = np.empty(m + 1, dtype=np.int64)  # starts; the kernels read no end
        off[:m] = self.starts[idx]
        off[m] = self.starts[-1]
        prompt, kv, need = self.prompt[idx], self.kv[idx], self.need[idx]
        resets = np.zeros(m, dtype=bool)
        page = self.page
        most = int(max(need.max(), 1))
        if self.engine == "vllm":
            n_blocks = int(capacity) // page
            b = max(1, min(n_blocks, int(need.sum())))
            ek.vllm_replay(
                self.ids, off, resets, prompt, kv, page, n_blocks, 1, self.epoch, out_h,
                out_r, np.empty((b + 3, 8), dtype=np.int64), self.pg,
                np.empty((1, most), dtype=np.int64), np.zeros(1, np.int64),
                np.zeros(1, np.int64), np.empty(most, dtype=np.int64),
                np.empty(most, dtype=np.int64))
        else:
            ek.sglang_replay(
                self.ids, off, resets, prompt, kv, page, int(capacity) // page, 1,
                self.epoch, out_h, out_r, self.nd, self.tb, self.h_time, self.h_node,
                np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64),
                np.empty(most + 3, dtype=np.int64))
        self.epoch += 1
        return out_h


# --- The oracle contract's scenario (section A) ----------------------------------------------


def _check_scenario(scenario: dict[str, Any]) -> tuple[str, int, int, bool, int, list[Any]]:
    engine = scenario.get("engine")
    if engine not in ENGINES:
        raise ValueError(f"scenario engine must be one of {ENGINES}, not {engine!r}")
    page = scenario.get("page_size")
    cap = scenario.get("capacity_tokens")
    inflight = scenario.get("inflight", 1)
    for name, v in (("page_size", page), ("capacity_tokens", cap), ("inflight", inflight)):
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "capacity_tokens"
                                                                 else 1):
            raise ValueError(f"scenario {name} must be a positive integer, not {v!r}")
    requests = scenario.get("requests")
    if not isinstance(requests, list):
        raise ValueError("scenario requests must be a list")
    assert isinstance(page, int) and isinstance(cap, int) and isinstance(inflight, int)
    return engine, page, cap, bool(scenario.get("with_outputs", False)), inflight, requests


def replay_detail(scenario: dict[str, Any], reference: bool = False) -> dict[str, list[Any]]:
    """{"hit_tokens": [...], "rejected": [...]} of a contract scenario (`reference`: the
    plain-Python reference instead of the kernels)."""
    engine, page, cap, with_outputs, inflight, requests = _check_scenario(scenario)
    prompts = [list(r["tokens"]) for r in requests]
    outs = [int(r.get("output_tokens", 0) or 0) for r in requests]
    if reference:
        from xmemplan.prefix.engine_reference import reference_replay

        res = reference_replay(engine, prompts, outs, page, cap, with_outputs, inflight)
        return {"hit_tokens": res.hit_tokens, "rejected": res.rejected}
    from xmemplan.prefix.lru import token_pages

    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.array([t for p in prompts for t in p], dtype=np.int64)
    pk, poff = token_pages(tokens, offsets, page)
    kv = kv_tokens(lengths, np.array(outs, dtype=np.int64), with_outputs)
    res2 = engine_replay(engine, pk, poff, np.zeros(len(prompts), dtype=bool), lengths, kv,
                         page, [cap], inflight)
    return {"hit_tokens": res2.hits[:, 0].tolist(), "rejected": res2.rejected[:, 0].tolist()}


def replay_hits(scenario: dict[str, Any]) -> list[int]:
    """Hit tokens per request of a contract scenario, in order (the kernels)."""
    return list(replay_detail(scenario)["hit_tokens"])
