"""Finite prefix caches: the one-pass LRU driver and the readable reference it is tested against.

    from xmemplan.prefix.lru import lru_match
    res = lru_match(keys, offsets, resets, page_tokens, capacities=[3_000_000, 10_000_000])
    res.hits[:, 0]      # leading pages each request finds in a 3M-token LRU

The cache policy (the same in both): a page is one key; a request first counts its leading
pages that are cached (a page can hit only if every page before it hit), then touches its
whole path, deepest page first, and the least recently used pages are evicted until the
cached pages fit in the capacity (in tokens: each page weighs its request's `page_tokens`).
Touching deepest-first makes a page always more recent than its descendants, so only leaves
are ever evicted: this is SGLang's leaf-first radix-cache LRU, and no page is left cached
under an evicted parent. `lru_kernels.py` explains why one pass answers every capacity.

References (plain Python, for tests): `ReferenceLRU` / `reference_lru`, a trie of pages that
evicts the least recently used leaf; `reference_flat_lru`, the same policy spelled as a flat
`OrderedDict` of prefix-chained block ids touched deepest first (fast enough for the Mooncake
trace). `reference_plain_lru` is the other common reading, a flat LRU of blocks touched first
to last (research/traces.md section 3): it can keep pages whose parent was evicted, which
count as cached but can never hit. It is here for comparison only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xmemplan.prefix.lru_kernels import lru_replay
from xmemplan.prefix.matcher import check_requests, tree_sizes
from xmemplan.traces.keys import page_keys

# Reuse-gap histogram bins, seconds: 0, 1 s, 2 s, 5 s, 10 s, 30 s, 1 m, 2 m, 5 m, 10 m, 30 m,
# 1 h, 2 h, 6 h, 1 d, and beyond. 5 m and 1 h are Anthropic's two prompt-cache TTLs.
GAP_EDGES_S = np.array(
    [0, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, np.inf],
    dtype=np.float64,
)


@dataclass
class LRUReplay:
    """Per-request results of `lru_match`, in the order of the requests given."""

    matched: np.ndarray  # int64 (n,): leading pages cached in an infinite cache
    hits: np.ndarray  # int64 (n, J): leading pages cached in an LRU of capacities[j] tokens
    capacities: np.ndarray  # int64 (J,): as given (not sorted)
    gap_s: np.ndarray  # float64 (n,): seconds since the deepest hit page was last used
    gap_edges_s: np.ndarray  # float64 (G + 1,)
    gap_tokens: np.ndarray  # float64 (G,): hit tokens of the infinite cache by reuse gap
    distinct_tokens: int  # tokens of distinct pages in the largest single cache
    # with engine_ids: the engine models' page ids, their offsets (kv_page_ids' layout)
    # and how many prefixes they number (ids of key pages are below it)
    engine_ids: tuple[np.ndarray, np.ndarray, int] | None = None


def lru_match(
    keys: np.ndarray,
    offsets: np.ndarray,
    resets: np.ndarray,
    page_tokens: np.ndarray | int,
    capacities: Sequence[int] | np.ndarray,
    prompt: np.ndarray | None = None,
    timestamps: np.ndarray | None = None,
    gap_edges_s: np.ndarray = GAP_EDGES_S,
    engine_ids: tuple[np.ndarray, int, int] | None = None,
) -> LRUReplay:
    """Replay requests through LRU caches of every capacity (tokens) in one pass.

    `keys`/`offsets` as in `xmemplan.prefix.matcher.match` (one key per page), `resets[r]`
    empties the caches before request r. `page_tokens` (per request or one int) is what a
    page weighs against the capacity; `prompt` caps the hit tokens of a partial last page
    (for the reuse-gap histogram only); `timestamps` (seconds, NaN = unknown) give the reuse
    gaps. `engine_ids` = (KV tokens per request, page, never): also the page ids the
    engine models replay (`engine_cache.kv_page_ids`' layout, from this pass's tree: no
    radix pass of their own; `engine_cache.engine_replay(page_ids=...)`).
    """
    keys, offsets, resets = check_requests(keys, offsets, resets)
    n = offsets.shape[0] - 1
    pt = np.broadcast_to(np.asarray(page_tokens, dtype=np.int64), (n,))
    pt = np.ascontiguousarray(pt)
    if n and pt.min() < 1:
        raise ValueError("page_tokens must be >= 1")
    caps = np.asarray(capacities, dtype=np.int64).reshape(-1)
    if caps.size and caps.min() < 0:
        raise ValueError("capacities must be >= 0 tokens")
    order = np.argsort(caps, kind="stable")
    lengths = np.diff(offsets)
    if prompt is None:
        prompt = lengths * pt
    prompt = np.ascontiguousarray(prompt, dtype=np.int64)
    ts = (
        np.full(n, np.nan)
        if timestamps is None
        else np.ascontiguousarray(timestamps, dtype=np.float64)
    )
    edges = np.ascontiguousarray(gap_edges_s, dtype=np.float64)
    matched = np.zeros(n, dtype=np.int64)
    hits_sorted = np.zeros((n, caps.size), dtype=np.int64)
    gap = np.full(n, np.nan)
    gap_tokens = np.zeros(max(edges.size - 1, 0), dtype=np.float64)
    stats = np.zeros(1, dtype=np.int64)
    ids_off = np.zeros(0, dtype=np.int64)
    ids_have = ids_off
    never = 0
    if engine_ids is not None:
        kv, page, never = engine_ids
        ids_have = np.ascontiguousarray(np.minimum(lengths, prompt // int(page)))
        total = np.maximum(np.asarray(kv, dtype=np.int64) // int(page), ids_have)
        ids_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(total, out=ids_off[1:])
    out_ids = np.empty(int(ids_off[-1]) if ids_off.size else 0, dtype=np.int64)
    dense = np.empty(keys.shape[0] if engine_ids is not None else 0, dtype=np.int64)
    count = np.zeros(1, dtype=np.int64)
    if n:
        resets, nodes, table = tree_sizes(resets)
        longest = int(lengths.max()) + 2
        lru_replay(
            keys, offsets, resets, pt, prompt, ts, np.ascontiguousarray(caps[order]), edges,
            matched, hits_sorted, gap, gap_tokens, stats,
            np.empty(nodes, dtype=np.int64),
            np.empty(nodes, dtype=np.int64),
            np.empty(nodes, dtype=np.int64),
            np.empty(table, dtype=np.int64),
            np.empty(table, dtype=np.int64),
            np.empty(table, dtype=np.int64),
            np.full(table, -1, dtype=np.int64),
            np.zeros(n + 1, dtype=np.int64),
            np.zeros(n + 1, dtype=np.int64),
            np.empty(longest, dtype=np.int64),
            np.empty(longest, dtype=np.int64),
            np.empty(longest, dtype=np.int64),
            np.empty(longest, dtype=np.int64),
            np.empty(longest, dtype=np.int64),
            ids_off, ids_have, int(never), out_ids, dense, count,
        )
    hits = np.empty_like(hits_sorted)
    hits[:, order] = hits_sorted
    return LRUReplay(matched, hits, caps, gap, edges, gap_tokens, int(stats[0]),
                     None if engine_ids is None else (out_ids, ids_off, int(count[0])))


def token_pages(
    tokens: np.ndarray, offsets: np.ndarray, page: int
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids -> one prefix-chained key per full page of `page` tokens (keys, offsets).

    A page's key identifies all tokens up to its end, so the page tree is as small as the
    number of pages and a partial last page is never cached (it has no key).
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if page < 1:
        raise ValueError("page must be >= 1")
    total = int((np.diff(offsets) // page).sum())
    out = np.empty(total, dtype=np.int64)
    out_offsets = np.empty(offsets.shape[0], dtype=np.int64)
    page_keys(tokens, offsets, page, out, out_offsets)
    return out, out_offsets


# --- The reference (readable, slow): the oracle of the tests --------------------------------


class _Node:
    __slots__ = ("children", "parent", "key", "stamp", "tokens", "depth")

    def __init__(self, parent: _Node | None, key: int, tokens: int, depth: int) -> None:
        self.children: dict[int, _Node] = {}
        self.parent = parent
        self.key = key
        self.stamp = -1
        self.tokens = tokens
        self.depth = depth


class ReferenceLRU:
    """A finite prefix cache: a trie with one node per page, evicting least recently used leaves.

    A request's pages all get the request's stamp when it is inserted; eviction takes the
    leaf with the oldest stamp (deepest first on a tie) until the cached tokens fit.
    """

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = capacity_tokens
        self.root = _Node(None, 0, 0, 0)
        self.used = 0
        self.clock = 0
        self.nodes: set[_Node] = set()

    def match(self, pages: Sequence[int]) -> int:
        """Number of leading pages of `pages` that are cached."""
        node = self.root
        n = 0
        for k in pages:
            child = node.children.get(k)
            if child is None:
                break
            node = child
            n += 1
        return n

    def insert(self, pages: Sequence[int], page_tokens: int) -> None:
        self.clock += 1
        node = self.root
        for k in pages:
            child = node.children.get(k)
            if child is None:
                child = _Node(node, k, page_tokens, node.depth + 1)
                node.children[k] = child
                self.nodes.add(child)
                self.used += page_tokens
            child.stamp = self.clock
            node = child
        while self.used > self.capacity:
            victim = min(
                (x for x in self.nodes if not x.children), key=lambda x: (x.stamp, -x.depth)
            )
            assert victim.parent is not None
            del victim.parent.children[victim.key]
            self.nodes.discard(victim)
            self.used -= victim.tokens

    def contains_path(self, pages: Sequence[int]) -> list[bool]:
        """For each page of the path: is it cached? (Used to test prefix closure.)"""
        node: _Node | None = self.root
        out = []
        for k in pages:
            node = node.children.get(k) if node is not None else None
            out.append(node is not None)
        return out


def reference_lru(
    requests: Sequence[Sequence[int]],
    resets: Sequence[bool],
    page_tokens: Sequence[int],
    capacity_tokens: int,
) -> list[int]:
    """Match-then-insert each request through a `ReferenceLRU`; `resets[i]` empties it."""
    cache = ReferenceLRU(capacity_tokens)
    out = []
    for pages, reset, pt in zip(requests, resets, page_tokens):
        if reset:
            cache = ReferenceLRU(capacity_tokens)
        out.append(cache.match(pages))
        cache.insert(pages, pt)
    return out


def _flat_lru(
    requests: Sequence[Sequence[int]], page_tokens: int, capacity_tokens: int,
    deepest_first: bool,
) -> list[int]:
    cache: OrderedDict[int, None] = OrderedDict()
    limit = capacity_tokens // page_tokens
    out = []
    for pages in requests:
        k = 0
        for key in pages:
            if key not in cache:
                break
            k += 1
        out.append(k)
        for key in (reversed(pages) if deepest_first else pages):
            cache[key] = None
            cache.move_to_end(key)
        while len(cache) > limit:
            cache.popitem(last=False)
    return out


def reference_flat_lru(
    requests: Sequence[Sequence[int]], page_tokens: int, capacity_tokens: int
) -> list[int]:
    """The policy as a flat LRU of chained block ids touched LAST to first (deepest first).

    A second, independent spelling of `ReferenceLRU` for prefix-chained keys, fast enough
    for the Mooncake trace: touching the deepest page first keeps every page more recent than
    its descendants, so the least recently used block is always a leaf.
    """
    return _flat_lru(requests, page_tokens, capacity_tokens, deepest_first=True)


def reference_plain_lru(
    requests: Sequence[Sequence[int]], page_tokens: int, capacity_tokens: int
) -> list[int]:
    """A flat LRU of chained block ids touched first to last (for comparison, not the policy).

    Keys must be prefix-chained (a key identifies its whole prefix, as Mooncake's do).
    """
    return _flat_lru(requests, page_tokens, capacity_tokens, deepest_first=False)
