"""Load xmemplan's X-Mem backend through SGLang's own StorageBackendFactory and drive it.

Run by .ci/steps/sglang.sh inside a venv holding SGLang's CPU-importable subset. It checks,
with SGLang's real classes and code:
1. `XMemHiCacheStorage` subclasses SGLang's real `HiCacheStorage` (not the local stand-in);
2. `StorageBackendFactory.create_backend("dynamic", ...)` builds it from the extra config
   exactly as `--hicache-storage-backend dynamic` does;
3. generic set / exists / batch_exists / get / batch_get with pages of a host pool;
4. zero-copy batch_set_v1 / batch_get_v1 against a host pool whose `get_page_buffer_meta`,
   `get_data_page`, `get_size_per_token` are SGLang's own `MHATokenToKVPoolHost` methods,
   in the page_first and layer_first layouts, with keys from SGLang's own page hash;
5. the same under SGLang's HiCacheStorageFailureInjector (random failures and delays):
   every page reported read is byte-exact.
Exits non-zero on any failure.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import os
import sys
import time
from pathlib import Path

import torch
import torch.utils._triton as _torch_triton

# The CI's `triton` is a stub that only lets SGLang's modules import; torch must not take it
# for a real Triton (importing torch._dynamo would probe triton.language and triton.backends).
_torch_triton.has_triton_package = lambda: False  # type: ignore[assignment]
_torch_triton.has_triton = lambda *a, **k: False  # type: ignore[assignment]

from sglang.srt.mem_cache import hicache_storage  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from xmemplan.backends import base as xbase  # noqa: E402
from xmemplan.backends.xmem import XMemHiCacheStorage  # noqa: E402

try:  # noqa: E402
    from sglang.srt.mem_cache.utils import get_hash_str
except ImportError:  # <= 0.5.10
    from sglang.srt.mem_cache.hicache_storage import get_hash_str  # type: ignore[no-redef]

L, H, D, P, PAGES = 4, 2, 16, 8, 12  # layers, kv heads, head dim, page size, host pages


def fail(msg: str) -> None:
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond: bool, msg: str) -> None:
    if not cond:
        fail(msg)


POOL_METHODS = ("get_page_buffer_meta", "get_data_page", "set_from_flat_data_page",
                "get_dummy_flat_data_page", "get_size_per_token")


def sglang_pool_methods() -> dict:
    """SGLang's own MHATokenToKVPoolHost methods that storage backends use, compiled from its
    source file. Importing the module itself drags in transformers, JIT kernels and
    torch._dynamo (which probes Triton); these five methods need only torch.
    """
    mem_cache = Path(hicache_storage.__file__).parent
    origin = mem_cache / "pool_host" / "mha.py"
    if not origin.is_file():  # older layout (<= 0.5.12)
        origin = mem_cache / "memory_pool_host.py"
    if not origin.is_file():
        fail("cannot find SGLang's MHA host pool source")
    tree = ast.parse(origin.read_text())
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef)
                and n.name == "MHATokenToKVPoolHost"), None)
    if cls is None:
        fail(f"no MHATokenToKVPoolHost in {origin}")
    funcs = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in POOL_METHODS]
    if {f.name for f in funcs} != set(POOL_METHODS):
        fail(f"MHATokenToKVPoolHost lacks some of {POOL_METHODS}")
    for f in funcs:
        f.decorator_list = []
    namespace: dict = {"torch": torch}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), str(origin), "exec"), namespace)
    print(f"  host-pool methods compiled from {origin}")
    return {name: namespace[name] for name in POOL_METHODS}


class SGLangLayoutPool:
    """A CPU host pool whose storage-facing methods are SGLang's MHATokenToKVPoolHost code."""

    def __init__(self, layout: str) -> None:
        self.layout, self.page_size, self.size = layout, P, P * PAGES
        self.layer_num, self.head_num, self.head_dim, self.v_head_dim = L, H, D, D
        self.dtype, self.device, self.pin_memory = torch.bfloat16, "cpu", False
        dims = (2, self.size, L, H, D) if layout == "page_first" else (2, L, self.size, H, D)
        self.kv_buffer = torch.zeros(dims, dtype=self.dtype)

    def indices(self, pages: list[int]) -> torch.Tensor:
        return torch.cat([torch.arange(p * P, (p + 1) * P, dtype=torch.int64) for p in pages])


def storage_config(layout: str) -> hicache_storage.HiCacheStorageConfig:
    extra = {
        "backend_name": "xmem", "module_path": "xmemplan.backends.xmem",
        "class_name": "XMemHiCacheStorage", "interface_v1": 1,
        "xmem_mode": "emulate", "xmem_capacity": "1MiB", "xmem_banks": 2,
        "emu_read_bandwidth": "20GB/s", "emu_write_bandwidth": "20GB/s",
        "emu_op_latency": "5us",
    }
    values = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                  is_mla_model=False, enable_storage_metrics=False,
                  is_page_first_layout=layout == "page_first", model_name="Qwen/Qwen3-test",
                  extra_config=extra)
    names = {f.name for f in dataclasses.fields(hicache_storage.HiCacheStorageConfig)}
    return hicache_storage.HiCacheStorageConfig(**{k: v for k, v in values.items() if k in names})


def page_keys(n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 150_000, (n * P,), generator=g).tolist()
    keys, prior = [], None
    for i in range(n):
        prior = get_hash_str(tokens[i * P:(i + 1) * P], prior)
        keys.append(prior)
    return keys


def run_layout(layout: str) -> None:
    cfg = storage_config(layout)
    backend = StorageBackendFactory.create_backend("dynamic", cfg, None)
    check(type(backend) is XMemHiCacheStorage, f"factory built {type(backend).__name__}")
    check(backend.mode == "emulate", f"mode {backend.mode}")
    pool = SGLangLayoutPool(layout)
    backend.register_mem_pool_host(pool)
    page_bytes = pool.get_size_per_token() * P
    want = f"_Qwen-Qwen3-test_0_1_{layout}_bfloat16_{P}"
    check(backend.config.suffix == want, f"key suffix {backend.config.suffix} != {want}")
    check(backend.slot_bytes == page_bytes, f"slot {backend.slot_bytes} != page {page_bytes}")
    pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape, dtype=torch.float32).to(torch.bfloat16))
    keys = page_keys(6, seed=1 if layout == "page_first" else 2)
    check(all(len(k) == 64 for k in keys), "SGLang page keys are 64 hex chars")
    snapshot = [pool.get_data_page(p * P).clone() for p in range(PAGES)]

    # Generic path (SGLang's non-v1 controller): flat data pages in, dummy pages out.
    check(backend.set(keys[0], pool.get_data_page(0)), "set")
    check(backend.exists(keys[0]) and not backend.exists(keys[1]), "exists")
    check(backend.batch_set(keys[1:3], [pool.get_data_page(p * P) for p in (1, 2)]), "batch_set")
    check(backend.batch_exists(keys[:4]) == 3, "batch_exists counts the leading run")
    out = backend.get(keys[1], pool.get_dummy_flat_data_page())
    check(out is not None and torch.equal(out, snapshot[1]), "get returns page 1 byte-exact")
    outs = backend.batch_get(keys[:3], [pool.get_dummy_flat_data_page() for _ in range(3)])
    check(all(torch.equal(o, snapshot[i]) for i, o in enumerate(outs)), "batch_get")
    check(backend.get(keys[5], pool.get_dummy_flat_data_page()) is None, "get of a miss is None")
    pool.set_from_flat_data_page(7 * P, outs[2])
    check(torch.equal(pool.get_data_page(7 * P), snapshot[2]), "set_from_flat_data_page")

    # Zero-copy v1 path (interface_v1): host-pool slots in and out.
    ok = backend.batch_set_v1(keys[3:6], pool.indices([3, 4, 5]))
    check(ok == [True, True, True], f"batch_set_v1 {ok}")
    pool.kv_buffer.zero_()
    ok = backend.batch_get_v1(keys[:6], pool.indices([6, 7, 8, 9, 10, 11]))
    check(ok == [True] * 6, f"batch_get_v1 {ok}")
    for i in range(6):
        check(torch.equal(pool.get_data_page((6 + i) * P), snapshot[i]), f"v1 page {i} exact")
    miss = backend.batch_get_v1([keys[0], "0" * 64, keys[2]], pool.indices([0, 1, 2]))
    check(miss == [True, False, False], f"a miss ends the v1 read: {miss}")
    stats = backend.get_stats()
    check(stats.pages_read >= 9 and stats.corrupt_pages == 0, f"stats {stats}")
    backend.clear()
    check(backend.batch_exists(keys) == 0, "clear")
    backend.close()
    print(f"  {layout}: generic + v1 round trips byte-exact ({page_bytes} B pages)")


def run_with_failure_injector() -> None:
    os.environ["SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE"] = "0.3"
    os.environ["SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY"] = "0.002"
    try:
        backend = StorageBackendFactory.create_backend("dynamic", storage_config("page_first"),
                                                       None)
    finally:
        del os.environ["SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE"]
        del os.environ["SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY"]
    if type(backend).__name__ != "HiCacheStorageFailureInjector":
        print("  failure injector: not in this SGLang version, skipped")
        return
    pool = SGLangLayoutPool("page_first")
    backend.register_mem_pool_host(pool)
    pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape).to(torch.bfloat16))
    snapshot = [pool.get_data_page(p * P).clone() for p in range(6)]
    keys = page_keys(6, seed=3)
    failures = reads = 0
    for _ in range(40):
        ok = backend.batch_set_v1(keys, pool.indices(list(range(6))))
        failures += ok.count(False) if ok else 6
        ok = backend.batch_get_v1(keys, pool.indices(list(range(6, 12))))
        for i, good in enumerate(ok or []):
            if good:
                reads += 1
                check(torch.equal(pool.get_data_page((6 + i) * P), snapshot[i]),
                      "a page reported read under injected faults is byte-exact")
    check(failures > 0 and reads > 0, f"injector exercised (failures {failures}, reads {reads})")
    backend.close()
    print(f"  failure injector: {failures} injected failures, {reads} exact reads")


def main() -> None:
    t0 = time.perf_counter()
    version = importlib.metadata.version("sglang")
    check(xbase.SGLANG_BASE is hicache_storage.HiCacheStorage,
          "backend base is SGLang's HiCacheStorage")
    check(issubclass(XMemHiCacheStorage, hicache_storage.HiCacheStorage), "issubclass")
    print(f"sglang {version}, torch {torch.__version__}: XMemHiCacheStorage subclasses "
          "sglang's HiCacheStorage")
    for name, func in sglang_pool_methods().items():
        setattr(SGLangLayoutPool, name, func)
    for layout in ("page_first", "layer_first"):
        run_layout(layout)
    run_with_failure_injector()
    print(f"sglang client check passed in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
