"""The reference prefix cache: a plain-Python trie, one dict per node, one node per key.

Slow and obviously correct; it is the oracle the numba radix tree is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence


class ReferencePrefixCache:
    """An infinite prefix cache over integer keys."""

    def __init__(self) -> None:
        self.root: dict[int, dict] = {}

    def match(self, keys: Sequence[int]) -> int:
        """Number of leading keys of `keys` already in the cache."""
        node = self.root
        n = 0
        for k in keys:
            child = node.get(k)
            if child is None:
                break
            node = child
            n += 1
        return n

    def insert(self, keys: Sequence[int]) -> None:
        node = self.root
        for k in keys:
            node = node.setdefault(k, {})


def reference_match(requests: Sequence[Sequence[int]], resets: Sequence[bool]) -> list[int]:
    """Match-then-insert each request in order; `resets[i]` empties the cache before i."""
    cache = ReferencePrefixCache()
    out = []
    for keys, reset in zip(requests, resets):
        if reset:
            cache = ReferencePrefixCache()
        out.append(cache.match(keys))
        cache.insert(keys)
    return out
