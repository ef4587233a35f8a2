"""Matcher throughput: numba radix tree vs a Python dict trie vs xxhash-chained page hashes.

    python benchmarks/bench_matcher.py [--sessions 20] [--repeat 5]

Two workloads of int token ids, one session each (match then insert every request):
- agent: each request extends the previous one by 2K tokens (64K ... ~100K tokens);
- branchy: 64K-token requests, each sharing a random 16K-60K prefix of a base request.
Throughput counts every key of every request once (match + insert). The page-hash baseline
is what vLLM/Mooncake do: xxh3 of each 64-token page seeded with the previous page's hash,
kept in a Python set; it works at page granularity (it cannot see a hit shorter than a page).
"""

from __future__ import annotations

import argparse

import numpy as np
import xxhash
from _util import machine, median_time

from xmemplan.prefix.matcher import match


def agent_requests(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    base = rng.integers(0, 150_000, 64 * 1024, dtype=np.int64)
    out = []
    for _ in range(n):
        out.append(base.copy())
        base = np.concatenate([base, rng.integers(0, 150_000, 2048, dtype=np.int64)])
    return out


def branchy_requests(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    base = rng.integers(0, 150_000, 64 * 1024, dtype=np.int64)
    out = []
    for _ in range(n):
        cut = int(rng.integers(16 * 1024, 60 * 1024))
        tail = rng.integers(0, 150_000, 64 * 1024 - cut, dtype=np.int64)
        out.append(np.concatenate([base[:cut], tail]))
    return out


def flat(requests: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in requests])
    return np.concatenate(requests), offsets


def dict_trie(lists: list[list[int]]) -> int:
    root: dict = {}
    hits = 0
    for keys in lists:
        node = root
        i = 0
        for k in keys:
            child = node.get(k)
            if child is None:
                break
            node = child
            i += 1
        hits += i
        for k in keys[i:]:
            node = node.setdefault(k, {})
    return hits


def page_hash_set(requests: list[np.ndarray], page: int = 64) -> int:
    seen: set[int] = set()
    hits = 0
    for r in requests:
        data = r.tobytes()
        step = page * 8
        h = 0
        matching = True
        for off in range(0, len(data) - step + 1, step):
            h = xxhash.xxh3_64_intdigest(data[off : off + step], seed=h)
            if matching and h in seen:
                hits += page
            else:
                matching = False
                seen.add(h)
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=40, help="requests per workload")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"machine: {machine()}")
    print(f"{'workload':<8} {'method':<28} {'median s':>9} {'Mkeys/s':>9} {'numba x':>8}")
    for name, reqs in (("agent", agent_requests(args.sessions, rng)),
                       ("branchy", branchy_requests(args.sessions, rng))):
        keys, offsets = flat(reqs)
        resets = np.zeros(len(reqs), dtype=bool)
        n_keys = keys.shape[0]
        lists = [r.tolist() for r in reqs]
        matched = match(keys, offsets, resets)  # compile + check
        ref_hits = dict_trie(lists)
        assert int(matched.sum()) == ref_hits, (int(matched.sum()), ref_hits)
        t_numba, _ = median_time(lambda: match(keys, offsets, resets), args.repeat)
        t_dict, _ = median_time(lambda: dict_trie(lists), max(2, args.repeat // 2))
        t_page, _ = median_time(lambda: page_hash_set(reqs), args.repeat)
        for method, t in (("numba radix tree", t_numba), ("python dict trie (lists)", t_dict),
                          ("xxh3 64-token pages + set", t_page)):
            print(f"{name:<8} {method:<28} {t:9.4f} {n_keys / t / 1e6:9.0f} {t / t_numba:8.1f}")


if __name__ == "__main__":
    main()
