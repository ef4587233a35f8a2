"""Device check for issue 11 (run on a GPU machine; not part of the test suite).

Measures on whatever GPU is present, printing one JSON line per figure:
- pinned host -> GPU copy bandwidth (DMA, cudaMemcpyAsync) against chunk size, the
  transfer-size curve the model uses for host DRAM (catalog tier host-dram-pcie5);
- GPU -> GPU copy bandwidth of a large buffer (the HBM efficiency of the memory roofline);
- BF16 (and FP8 where torch has it) GEMM throughput at 1K and 8K tokens for a
  Qwen3-30B-A3B-like expert shape (eta_linear).
Uses torch when importable, else the CUDA runtime through ctypes (copies only).

    python benchmarks/device_h2d.py
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

CHUNKS = [16 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 12 << 20, 64 << 20]
TOTAL = 1 << 30


def emit(**kw: object) -> None:
    print(json.dumps(kw), flush=True)


def with_torch() -> None:
    import torch

    dev = torch.device("cuda")
    emit(what="gpu", name=torch.cuda.get_device_name(0), torch=torch.__version__)
    host = torch.empty(TOTAL, dtype=torch.uint8).pin_memory()
    gpu = torch.empty(TOTAL, dtype=torch.uint8, device=dev)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for chunk in CHUNKS:
        n = TOTAL // chunk
        best = 0.0
        for _ in range(3):
            torch.cuda.synchronize()
            s.record()
            for i in range(n):
                gpu[i * chunk:(i + 1) * chunk].copy_(host[i * chunk:(i + 1) * chunk],
                                                     non_blocking=True)
            e.record()
            torch.cuda.synchronize()
            best = max(best, n * chunk / (s.elapsed_time(e) / 1e3) / 1e9)
        emit(what="h2d_dma", chunk_bytes=chunk, gb_per_s=round(best, 2))
    big = torch.empty(8 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(big)
    best = 0.0
    for _ in range(5):
        torch.cuda.synchronize()
        s.record()
        dst.copy_(big)
        e.record()
        torch.cuda.synchronize()
        best = max(best, 2 * big.numel() / (s.elapsed_time(e) / 1e3) / 1e9)
    emit(what="d2d_read_plus_write", gb_per_s=round(best, 1))
    del big, dst
    for tokens in (1024, 8192):
        for dtype in ("bf16", "fp8"):
            k, nn = 2048, 768 * 8 * 2  # hidden x (8 experts' gate+up), a dense stand-in
            a = torch.randn(tokens, k, device=dev, dtype=torch.bfloat16)
            b = torch.randn(nn, k, device=dev, dtype=torch.bfloat16)
            try:
                if dtype == "fp8":
                    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
                    one = torch.tensor(1.0, device=dev)

                    def f() -> object:
                        return torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16)
                else:
                    def f() -> object:
                        return a @ b.t()
                f()
                torch.cuda.synchronize()
                reps = 50
                s.record()
                for _ in range(reps):
                    f()
                e.record()
                torch.cuda.synchronize()
                t = s.elapsed_time(e) / 1e3 / reps
                emit(what="gemm", dtype=dtype, tokens=tokens, k=k, n=nn,
                     tflops=round(2 * tokens * k * nn / t / 1e12, 1))
            except Exception as exc:  # noqa: BLE001 - report and go on
                emit(what="gemm", dtype=dtype, tokens=tokens, error=str(exc)[:200])


def with_ctypes() -> None:
    rt = None
    for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if rt is None:
        emit(what="error", error="neither torch nor libcudart available")
        return
    host, gpu = ctypes.c_void_p(), ctypes.c_void_p()
    assert rt.cudaHostAlloc(ctypes.byref(host), ctypes.c_size_t(TOTAL), 0) == 0
    assert rt.cudaMalloc(ctypes.byref(gpu), ctypes.c_size_t(TOTAL)) == 0
    for chunk in CHUNKS:
        n = TOTAL // chunk
        best = 0.0
        for _ in range(3):
            rt.cudaDeviceSynchronize()
            t = time.perf_counter()
            for i in range(n):
                rt.cudaMemcpyAsync(ctypes.c_void_p(gpu.value + i * chunk),
                                   ctypes.c_void_p(host.value + i * chunk),
                                   ctypes.c_size_t(chunk), 1, None)
            rt.cudaDeviceSynchronize()
            best = max(best, TOTAL / (time.perf_counter() - t) / 1e9)
        emit(what="h2d_dma", chunk_bytes=chunk, gb_per_s=round(best, 2), via="ctypes")


if __name__ == "__main__":
    try:
        import torch  # noqa: F401
        with_torch()
    except ImportError:
        emit(what="note", note="torch not importable; copies only via ctypes",
             python=sys.version.split()[0])
        with_ctypes()
