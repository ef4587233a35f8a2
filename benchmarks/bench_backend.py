"""Benchmark of the X-Mem HiCache backend's emulated mode (docs/performance.md, "backend").

1. Shaping off, 6 MiB pages (one 64-token page of Qwen3-30B-A3B): read and write bandwidth
   through `batch_get_v1` / `batch_set_v1` against a host pool in SGLang's page_first
   layout, xxHash checksums on, versus numpy's single-thread copy of the same pages in the
   same run. Target: >= 70% of the numpy copy.
2. Shaping on: achieved bandwidth of batched reads and writes with a configured tier
   bandwidth below this machine's copy speed. Target: within 5% of the configured value.
3. `--node`: the emulated X-Mem node (data/devices/xmem-node.toml) read by 1, 4 and 8
   readers at once (threads, one backend and host pool each): per-reader bandwidth in
   device time against the device model's own figure, min(one reader's rate, node / k).

Every figure is the median of --runs runs (each run: the best of --repeats passes).

    python benchmarks/bench_backend.py [--pages 32] [--runs 7] [--json] [--node]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import numpy as np
from _util import positive_int

from xmemplan.backends import create_backend
from xmemplan.backends.hostpool import HostPool

# Qwen3-30B-A3B: 48 layers, 4 KV heads, head dim 128, bf16 -> 96 KiB/token, 6 MiB/page.
LAYERS, HEADS, HEAD_DIM, PAGE_TOKENS = 48, 4, 128, 64


def numpy_copy_bps(page_bytes: int, pages: int, repeats: int) -> float:
    src = np.random.default_rng(0).integers(0, 255, page_bytes * pages, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for p in range(pages):
            s = slice(p * page_bytes, (p + 1) * page_bytes)
            np.copyto(dst[s], src[s])
        best = min(best, time.perf_counter() - t0)
    return page_bytes * pages / best


def backend_bps(pool: HostPool, pages: int, repeats: int, checksum: bool = True,
                **shape: float) -> tuple[float, float]:
    """(read, write) bytes/s through the v1 calls; batches of up to 16 pages."""
    b = create_backend("xmem", mode="emulate", capacity_bytes=pool.page_bytes * (pages + 2),
                       banks=4, page_bytes=pool.page_bytes, checksum=checksum,
                       shaping=bool(shape), **shape)
    b.register_mem_pool_host(pool)
    batch = 16
    src_pages = list(range(pages))

    def indices(ps: list[int]) -> np.ndarray:
        return np.concatenate([pool.page_indices(p) for p in ps])

    def write_all(tag: str) -> float:
        t0 = time.perf_counter()
        for s in range(0, pages, batch):
            keys = [f"{tag}{p}" for p in src_pages[s:s + batch]]
            assert all(b.batch_set_v1(keys, indices(src_pages[s:s + batch])))
        return time.perf_counter() - t0

    def read_all() -> float:
        t0 = time.perf_counter()
        for s in range(0, pages, batch):
            keys = [f"w0-{p}" for p in src_pages[s:s + batch]]
            assert all(b.batch_get_v1(keys, indices(src_pages[s:s + batch])))
        return time.perf_counter() - t0

    write_all("w0-")  # also faults the arena in
    write_times = []
    for _ in range(repeats):
        b.clear()  # so that every pass really writes (a live key is never rewritten)
        write_times.append(write_all("w0-"))
    w = min(write_times)
    r = min(read_all() for _ in range(repeats))
    b.close()
    nbytes = pool.page_bytes * pages
    return nbytes / r, nbytes / w


def node_bps(readers: int, pages: int, scale: float) -> tuple[float, float]:
    """(achieved, expected) per-reader bytes/s of `readers` reading `pages` pages each from
    one emulated node at once (device time: wall time / scale)."""
    from xmemplan.backends.device import EmulatedNode, load_device

    dev = load_device()
    node = EmulatedNode(dev, scale)
    stores, pools = [], []
    for _ in range(readers):
        pool = HostPool(LAYERS, HEADS, HEAD_DIM, pages * PAGE_TOKENS, PAGE_TOKENS, "page_first")
        pool.kv_buffer[:] = 1  # fault the destination in: not part of a load
        b = create_backend("xmem", mode="emulate", banks=len(dev.bank_bytes_per_s),
                           capacity_bytes=pool.page_bytes * (pages + 2),
                           page_bytes=pool.page_bytes, node=node)
        b.register_mem_pool_host(pool)
        idx = np.concatenate([pool.page_indices(p) for p in range(pages)])
        assert all(b.batch_set_v1([f"k{p}" for p in range(pages)], idx))
        stores.append((b, idx))
        pools.append(pool)
    barrier = threading.Barrier(readers)
    took = [0.0] * readers

    def run(i: int) -> None:
        b, idx = stores[i]
        barrier.wait()
        t0 = time.perf_counter()
        assert all(b.batch_get_v1([f"k{p}" for p in range(pages)], idx))
        took[i] = (time.perf_counter() - t0) / scale

    threads = [threading.Thread(target=run, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b, _ in stores:
        b.close()
    part = pools[0].page_bytes // 2  # page_first: K and V halves
    expect = min(dev.reader_bytes_per_s(part, len(dev.bank_bytes_per_s)),
                 dev.node_bytes_per_s / readers)
    return pools[0].page_bytes * pages / statistics.median(took), expect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=32)
    ap.add_argument("--runs", type=positive_int, default=7)
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--node", action="store_true",
                    help="Only the emulated-node section (1, 4, 8 readers).")
    args = ap.parse_args()
    if args.node:
        out = {}
        for k in (1, 4, 8):
            got = [node_bps(k, 16, scale=150.0 * k) for _ in range(args.runs)]
            ach = statistics.median(a for a, _ in got)
            out[k] = {"achieved_bytes_per_s": ach, "device_bytes_per_s": got[0][1]}
            if not args.json:
                print(f"node, {k} reader(s): {ach / 1e9:7.1f} GB/s per reader, device model "
                      f"{got[0][1] / 1e9:.1f} GB/s ({ach / got[0][1]:.1%})")
        if args.json:
            print(json.dumps(out, indent=2))
        return
    pool = HostPool(LAYERS, HEADS, HEAD_DIM, args.pages * PAGE_TOKENS, PAGE_TOKENS, "page_first")
    pool.kv_buffer[:] = np.random.default_rng(1).integers(0, 2**16, pool.kv_buffer.shape)
    page_bytes = pool.page_bytes

    runs: dict[str, list[float]] = {k: [] for k in (
        "numpy_copy", "read", "write", "read_nochecksum", "shaped_read", "shaped_write")}
    shaped_read_cfg, shaped_write_cfg = 4e9, 3e9
    for _ in range(args.runs):
        runs["numpy_copy"].append(numpy_copy_bps(page_bytes, args.pages, args.repeats))
        r, w = backend_bps(pool, args.pages, args.repeats)
        runs["read"].append(r)
        runs["write"].append(w)
        runs["read_nochecksum"].append(backend_bps(pool, args.pages, args.repeats,
                                                   checksum=False)[0])
        sr, sw = backend_bps(pool, args.pages, 1, read_bytes_per_s=shaped_read_cfg,
                             write_bytes_per_s=shaped_write_cfg)
        runs["shaped_read"].append(sr)
        runs["shaped_write"].append(sw)
    med = {k: statistics.median(v) for k, v in runs.items()}
    result = {
        "page_bytes": page_bytes, "pages": args.pages, "runs": args.runs,
        "median_bytes_per_s": med,
        "read_vs_numpy": med["read"] / med["numpy_copy"],
        "write_vs_numpy": med["write"] / med["numpy_copy"],
        "read_nochecksum_vs_numpy": med["read_nochecksum"] / med["numpy_copy"],
        "shaped_read_vs_configured": med["shaped_read"] / shaped_read_cfg,
        "shaped_write_vs_configured": med["shaped_write"] / shaped_write_cfg,
        # Each run measures numpy and the backend back to back: the median of the per-run
        # ratios is less sensitive to other load on a shared machine than a ratio of medians.
        "read_vs_numpy_per_run_median": statistics.median(
            r / n for r, n in zip(runs["read"], runs["numpy_copy"])),
        "write_vs_numpy_per_run_median": statistics.median(
            w / n for w, n in zip(runs["write"], runs["numpy_copy"])),
        "all_runs_bytes_per_s": runs,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    gb = 1e9
    print(f"pages of {page_bytes / 2**20:.0f} MiB x {args.pages}, median of {args.runs} runs")
    print(f"numpy single-thread copy   {med['numpy_copy'] / gb:7.2f} GB/s")
    print(f"backend read  (checksum)   {med['read'] / gb:7.2f} GB/s  "
          f"{result['read_vs_numpy']:.0%} of numpy (target >= 70%)")
    print(f"backend write (checksum)   {med['write'] / gb:7.2f} GB/s  "
          f"{result['write_vs_numpy']:.0%} of numpy (target >= 70%)")
    print(f"per-run ratios (median): read {result['read_vs_numpy_per_run_median']:.0%}, "
          f"write {result['write_vs_numpy_per_run_median']:.0%} of numpy")
    print(f"backend read  (no checksum){med['read_nochecksum'] / gb:7.2f} GB/s  "
          f"{result['read_nochecksum_vs_numpy']:.0%} of numpy")
    print(f"shaped read   {shaped_read_cfg / gb:.0f} GB/s set   {med['shaped_read'] / gb:7.3f} GB/s  "
          f"{result['shaped_read_vs_configured']:.1%} of configured (target 95-105%)")
    print(f"shaped write  {shaped_write_cfg / gb:.0f} GB/s set   {med['shaped_write'] / gb:7.3f} GB/s  "
          f"{result['shaped_write_vs_configured']:.1%} of configured (target 95-105%)")


if __name__ == "__main__":
    main()
