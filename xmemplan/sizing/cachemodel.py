"""The profile's cache model in a placed workload's caches (vLLM's block pool, SGLang's
radix cache), instead of the placement's own LRU over prefix objects.

`routing.place` routes each request and reads its hits from per-replica LRU caches of
[group prefix][session context] objects. A profile made with `hitrate --cache-model vllm`
or `sglang` says which finite cache the deployment runs; `follow` keeps the router's
choices and re-derives the hits with that model's rules (`xmemplan.prefix.engine_cache`:
page alignment, the prompt - 1 cap, eviction order and unit, spare room, decoded tokens
inserted), replaying
- each replica's requests, in arrival order, through the model at the replica's HBM room
  (`Deployment.hbm_tokens`): the HBM hit;
- each tier domain's requests (every replica reading that tier cache, write-through:
  every request's KV is written there) through the model at the domain's capacity
  (`Deployment.tier_tokens`): the tier holds that much of the prompt, and the tier hit is
  what it holds beyond the HBM hit.
One request at a time (`inflight` 1), as `hitrate` replays a trace for the profile's
curve: the locks of running requests are the engine simulation's concern.

The requests' pages come from the prefix model a v2 profile can express
(`routing` docstring): a prompt is [G tokens of its group's prefix][its session's
context], and its first H tokens (H: its hit with an unlimited cache of its own session,
the profile's hit tokens) are what the session's previous request held there. So page j
(tokens j*P .. (j+1)*P) of a request is
  - the group's page j while (j + 1) * P <= G: every request of the group shares it;
  - else the session's page j of its previous request while (j + 1) * P <= H and that
    request had one: the session's content so far;
  - else a page no earlier request had (it can hit only later requests of the session).
With an unlimited cache a request then hits its H tokens, in whole pages, at most its
prompt - 1 tokens (the engines' rules); which earlier request it shares them with (the
session's last one) is this module's assumption where the profile does not say.

The router's own view (Dynamo's, which reads what each replica holds) stays the
placement's LRU objects: `follow` changes the hits, not the routes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from xmemplan.sizing.routing import Deployment, Placement, Stream, keys_of

ENGINE_MODELS = ("vllm", "sglang")
# a profile that does not record its page (written before `cache_page_tokens`): vLLM's
# block_size default; SGLang's default page is 1 token, a key per token here, so 16 too
DEFAULT_PAGE = {"vllm": 16, "sglang": 16}
GROUP_TAG = np.int64(1) << np.int64(61)
FRESH_TAG = np.int64(2) << np.int64(61)


@dataclass(frozen=True)
class CacheModel:
    """Which model, its page (tokens) and whether decoded tokens are cached."""

    name: str
    page: int
    with_outputs: bool = True


def for_workload(name: str | None, page: int | None, with_outputs: bool | None
                 ) -> CacheModel | None:
    """The engine model a workload's profile names, or None (`lru` or unknown: the
    placement's own LRU objects)."""
    if name not in ENGINE_MODELS:
        return None
    assert name is not None
    return CacheModel(name, int(page) if page else DEFAULT_PAGE[name],
                      True if with_outputs is None else bool(with_outputs))


def page_keys(stream: Stream, page: int) -> tuple[np.ndarray, np.ndarray]:
    """(keys, offsets): one key per full prompt page of each request (module docstring)."""
    P = int(page)
    g, s, _, _ = keys_of(stream)
    n = len(stream.prompt)
    offsets = np.zeros(n + 1, np.int64)
    parts: list[np.ndarray] = []
    last: dict[int, np.ndarray] = {}  # session -> keys of its previous request
    fresh = 0
    for i in range(n):
        S = int(round(float(stream.prompt[i])))
        npg = S // P
        G = float(stream.group_tokens[i]) if g[i] >= 0 else 0.0
        gp = min(npg, int(G // P)) if g[i] >= 0 else 0
        hp = min(npg, int(float(stream.hit[i]) // P))
        prev = last.get(int(s[i]))
        k = np.empty(npg, np.int64)
        if gp:
            k[:gp] = GROUP_TAG | (np.int64(g[i]) << np.int64(28)) | np.arange(gp,
                                                                               dtype=np.int64)
        lo = gp
        if prev is not None and hp > gp:
            hi = min(hp, len(prev))
            if hi > gp:
                k[gp:hi] = prev[gp:hi]
                lo = hi
        k[lo:] = FRESH_TAG | np.arange(fresh, fresh + npg - lo, dtype=np.int64)
        fresh += npg - lo
        last[int(s[i])] = k
        parts.append(k)
        offsets[i + 1] = offsets[i] + npg
    keys = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return keys, offsets


def digest(stream: Stream) -> bytes:
    """What a stream's pages depend on (not its arrival times): streams of one workload
    at several loads, in the same order, share one `Follower`."""
    import hashlib

    h = hashlib.sha1()
    for a in (stream.prompt, stream.output, stream.hit, stream.group, stream.group_tokens,
              stream.session):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.digest()


@dataclass
class Follower:
    """Replays of one stream through one model, kept per (requests, capacity): the
    planner asks for the same replica at the same room under several options."""

    model: CacheModel
    stream: Stream
    memo: dict[tuple[bytes, int], np.ndarray] = field(default_factory=dict, init=False)
    # the picker keeps its tables between replays: one replay at a time (the planner's
    # load curve asks from threads, threads.py)
    lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                 compare=False)

    def __post_init__(self) -> None:
        from xmemplan.prefix.engine_cache import Picker, kv_tokens

        keys, offsets = page_keys(self.stream, self.model.page)
        prompt = np.maximum(0, np.round(np.asarray(self.stream.prompt, np.float64))
                            ).astype(np.int64)
        out = np.maximum(1, np.round(np.asarray(self.stream.output, np.float64))
                         ).astype(np.int64)
        kv = kv_tokens(prompt, out, self.model.with_outputs)
        self.picker = Picker(self.model.name, keys, offsets, prompt, kv, self.model.page)

    def hits(self, idx: np.ndarray, capacity: float) -> np.ndarray:
        """Hit tokens of requests `idx` (arrival order) replayed alone at `capacity`."""
        idx = np.asarray(idx, np.int64)
        cap = int(capacity)
        key = (idx.tobytes(), cap)
        with self.lock:
            got = self.memo.get(key)
            if got is None:
                got = self.memo[key] = self.picker.hits(idx, cap)
        return got

    def follow(self, dep: Deployment, placement: Placement) -> Placement:
        """`placement` with its HBM and tier hits replayed through the model."""
        rep = np.asarray(placement.replica, np.int64)
        n = len(rep)
        hbm = np.zeros(n)
        tier = np.zeros(n)
        for r in np.unique(rep):
            idx = np.flatnonzero(rep == r)
            hbm[idx] = self.hits(idx, dep.hbm_tokens)
        tier_of = np.asarray(dep.tier_of, np.int64)
        if len(dep.tier_tokens):
            dom = tier_of[rep]
            for d in np.unique(dom[dom >= 0]):
                idx = np.flatnonzero(dom == d)
                tier[idx] = np.maximum(0.0, self.hits(idx, dep.tier_tokens[d]) - hbm[idx])
        return Placement(rep.copy(), hbm, tier, np.asarray(placement.prompt, np.float64))


def follow(model: CacheModel, stream: Stream, dep: Deployment, placement: Placement
           ) -> Placement:
    """`placement` with hits from `model` (one-off; the planner keeps a `Follower`)."""
    return Follower(model, stream).follow(dep, placement)
