"""Measurements of the machine at hand: copy bandwidth, the backend's unshaped read speed
(`--calibrate`), and, where torch sees a GPU, host-to-GPU copies and matmul time."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from xmemplan.errors import NotAvailableError
from xmemplan.validate.pages import Pattern, host_pool, page_view


def memcpy_bandwidth(page_bytes: int, pages: int = 8, repeats: int = 3) -> float:
    """Single-thread numpy copy of `pages` pages of `page_bytes`, best of `repeats` (B/s)."""
    src = np.random.default_rng(1).integers(0, 255, page_bytes * pages, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for p in range(pages):
            np.copyto(dst[p * page_bytes:(p + 1) * page_bytes],
                      src[p * page_bytes:(p + 1) * page_bytes])
        best = min(best, time.perf_counter() - t0)
    return page_bytes * pages / best


class Calibrator:
    """Unshaped read bandwidth of the backend on this machine (checksums included), B/s.

    Keeps a small backend and its own host pool open for the whole run, so that --calibrate
    can sample it between requests: on a shared machine the copy speed drifts, and the
    median of samples taken through the replay matches what the replay saw.
    """

    def __init__(self, mode: str, model: Any, page_tokens: int, pages: int, banks: int,
                 pattern: Pattern, sink: CudaSink | None = None,
                 layout: str = "page_first") -> None:
        from xmemplan.backends import create_backend

        # With a GPU (DRAM tier), the load that matters is pinned host -> GPU: sample that.
        self.sink = sink
        self.pool = host_pool(model, pages, page_tokens, layout=layout,
                              pinned=sink is not None)
        self.pages = pages
        # a page more than the calibration pages in every bank: the arena gives each bank
        # capacity // banks whole pages (5 pages in 6 slots over 4 banks held only 4, and a
        # small --max-bytes failed here with "did not take the calibration pages")
        slots = banks * -(-(pages + 1) // banks)
        self.backend = create_backend(
            "xmem", mode=mode, capacity_bytes=self.pool.page_bytes * slots, banks=banks,
            page_bytes=self.pool.page_bytes, shaping=False)
        self.backend.register_mem_pool_host(self.pool)
        self.keys = [f"cal{i}" for i in range(pages)]
        self.idx = np.concatenate([self.pool.page_indices(p) for p in range(pages)])
        for p in range(pages):
            pattern.fill(10_000 + p, page_view(self.pool, p))
        if not all(self.backend.batch_set_v1(self.keys, self.idx)):
            # Nothing was measured yet: not a failed check (5), a tier this run cannot use.
            raise NotAvailableError(
                f"the tier did not take the {pages} calibration pages (full or failing): "
                "nothing was measured", "check --device/--backend, or lower --page-tokens")
        self.backend.batch_get_v1(self.keys, self.idx)  # warm up
        self.samples: list[float] = []

    def sample(self, passes: int = 3) -> float:
        """One sample: the fastest of `passes` timed reads (as the replay times a request)."""
        times = []
        for _ in range(passes):
            if self.sink is not None:
                times.append(self.sink.copy(self.pool.kv_buffer))
                continue
            t0 = time.perf_counter()
            ok = self.backend.batch_get_v1(self.keys, self.idx)
            times.append(time.perf_counter() - t0)
            if not all(ok):
                raise NotAvailableError(
                    "the tier did not return the calibration pages: nothing was measured",
                    "check --device/--backend")
        bw = self.pool.page_bytes * self.pages / min(times)
        self.samples.append(bw)
        return bw

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    def close(self) -> None:
        self.backend.close()


class CudaSink:
    """A CUDA tensor the hit pages are copied into, when torch sees a GPU."""

    def __init__(self, nbytes: int) -> None:
        import torch

        self.torch = torch
        self.dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def copy(self, *host: np.ndarray) -> float:
        """Seconds to copy the host arrays (back to back) into the CUDA tensor."""
        torch = self.torch
        srcs = [torch.from_numpy(h.reshape(-1).view(np.uint8)) for h in host]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        off = 0
        for src in srcs:
            self.dst[off:off + src.numel()].copy_(src, non_blocking=True)
            off += src.numel()
        torch.cuda.synchronize()
        return time.perf_counter() - t0


def gpu_matmul_seconds(flops: float, n: int = 4096) -> float:
    """Seconds this GPU takes for `flops` of bf16 matmul (n x n x n blocks, scaled).

    Stands in for the prefill compute when a GPU is present: same FLOPs, dense GEMM.
    """
    import torch

    if flops <= 0:
        return 0.0
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    per = 2.0 * n**3
    reps = max(1, math.ceil(flops / per))
    torch.matmul(a, b)  # warm-up (cuBLAS heuristics)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * flops / (reps * per)


def cuda_sink(nbytes: int) -> CudaSink | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
    except Exception:  # noqa: BLE001 - no torch: host memory is the destination
        return None
    return CudaSink(nbytes)


