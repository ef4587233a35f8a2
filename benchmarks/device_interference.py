"""Device check for issue 11: SM interference of kernel copies (run on a GPU machine).

SGLang's HiCache `kernel` IO copies KV pages host -> GPU with CUDA threads (SMs) instead of
the copy engine. This script measures, on the GPU present:
- host -> GPU bandwidth of an SM copy kernel (Triton, reading pinned host memory through
  unified addressing) with 8, 32 and all-SM grids;
- how much a BF16 GEMM stream (8192 x 2048 x 12288) slows while such a copy runs on a
  second stream, against a DMA copy (copy engine) and no copy.
One JSON line per figure. The fraction is `sm_interference` in data/hardware/tiers.toml.

    python benchmarks/device_interference.py
"""

from __future__ import annotations

import json


def emit(**kw: object) -> None:
    print(json.dumps(kw), flush=True)


def main() -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        for start in range(pid * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)

    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = (1 << 30) // 8
    host = torch.ones(n, dtype=torch.int64).pin_memory()
    dst = torch.empty(n, dtype=torch.int64, device=dev)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def kcopy(grid: int) -> None:
        copy_kernel[(grid,)](host, dst, n, BLOCK=2048)

    for grid in (8, 32, sms):
        kcopy(grid)
        torch.cuda.synchronize()
        s.record()
        for _ in range(3):
            kcopy(grid)
        e.record()
        torch.cuda.synchronize()
        emit(what="h2d_kernel", ctas=grid, sms=sms,
             gb_per_s=round(3 * n * 8 / (s.elapsed_time(e) / 1e3) / 1e9, 2))
    assert bool(dst[:1024].eq(1).all())

    a = torch.randn(8192, 2048, device=dev, dtype=torch.bfloat16)
    b = torch.randn(12288, 2048, device=dev, dtype=torch.bfloat16)
    reps = 300

    def gemms() -> float:
        s.record()
        for _ in range(reps):
            a @ b.t()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3

    gemms()
    torch.cuda.synchronize()
    alone = min(gemms() for _ in range(3))
    side = torch.cuda.Stream()
    for label, grid in (("kernel-8", 8), ("kernel-32", 32), ("kernel-all", sms), ("dma", 0)):
        slows = []
        for _ in range(3):
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                for _ in range(12):  # enough copies to outlast the GEMMs
                    if grid:
                        kcopy(grid)
                    else:
                        dst.copy_(host, non_blocking=True)
            busy = gemms()
            torch.cuda.synchronize()
            slows.append(busy / alone - 1)
        emit(what="gemm_slowdown", copy=label, gemm_alone_s=round(alone, 4),
             slowdown_runs=[round(x, 4) for x in slows],
             slowdown_median=round(sorted(slows)[1], 4))


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - a device check reports, never hides
        emit(what="error", error=f"{type(exc).__name__}: {exc}"[:500])
