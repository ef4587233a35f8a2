"""Scenario tests of the X-Mem HiCache backend: tiny capacities, integer keys, every mode.

`real` runs the real-mode code path against the fake SDK in tests/fake_xmem.
"""

from __future__ import annotations

import ctypes
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from xmemplan.backends import backend_class, create_backend
from xmemplan.backends.config import XMemConfig
from xmemplan.backends.hostpool import HostPool
from xmemplan.backends.media import ArenaMedium, XMemMedium
from xmemplan.backends.store import Entry, SlotIndex
from xmemplan.backends.xmem import PageCorruptError, XMemHiCacheStorage
from xmemplan.errors import UsageError

MODES = ["emulate", "dram", "real"]
PAGE = 256


def make(mode: str, request: pytest.FixtureRequest, **kw) -> XMemHiCacheStorage:
    if mode == "real":
        request.getfixturevalue("fake_xmem_sdk")
    kw.setdefault("capacity_bytes", 4 * PAGE)
    kw.setdefault("banks", 2)
    kw.setdefault("page_bytes", PAGE)
    return create_backend("xmem", mode=mode, **kw)


def page(key: int, n: int = PAGE) -> np.ndarray:
    return np.random.default_rng(key).integers(0, 256, n, dtype=np.uint8)


def index(b: XMemHiCacheStorage) -> SlotIndex:
    assert b._index is not None, "the backend has no slot index yet"
    return b._index


def pin(b: XMemHiCacheStorage, key: int) -> Entry:
    entry = index(b).pin(b._key(key))
    assert entry is not None, f"page {key} is not stored"
    return entry


def corrupt(b: XMemHiCacheStorage, key: int) -> None:
    entry = index(b)._live[b._key(key)]
    if b.mode == "real":
        assert isinstance(b._medium, XMemMedium)
        addr = b._medium._addr(entry.slot)
        ctypes.memset(addr, 0xFF ^ ctypes.c_uint8.from_address(addr).value, 1)
    else:
        assert isinstance(b._medium, ArenaMedium)
        b._medium.slot_view(entry.slot)[0] ^= 0xFF


@pytest.mark.parametrize("mode", MODES)
def test_set_get_exists_roundtrip(mode, request):
    b = make(mode, request)
    assert b.mode == mode
    assert not b.exists(1)
    assert b.get(1) is None
    assert b.set(1, page(1))
    assert b.exists(1) and not b.exists(2)
    np.testing.assert_array_equal(b.get(1), page(1))
    out = np.zeros(PAGE, dtype=np.uint8)
    assert b.get(1, out) is out
    np.testing.assert_array_equal(out, page(1))
    assert b.batch_set([2, 3], [page(2), page(3)])
    got = b.batch_get([3, 9, 2])
    assert got[1] is None
    np.testing.assert_array_equal(got[0], page(3))
    np.testing.assert_array_equal(got[2], page(2))
    b.check_consistency()


@pytest.mark.parametrize("mode", MODES)
def test_batch_exists_counts_leading_run(mode, request):
    b = make(mode, request)
    assert b.batch_exists([1, 2]) == 0
    b.batch_set([1, 2, 3], [page(1), page(2), page(3)])
    assert b.batch_exists([1, 2, 3]) == 3
    assert b.batch_exists([1, 2, 7, 3]) == 2
    assert b.batch_exists([7, 1]) == 0
    assert b.batch_exists([]) == 0


@pytest.mark.parametrize("mode", MODES)
def test_lru_evicts_least_recently_used(mode, request):
    b = make(mode, request)  # 4 slots
    assert b.batch_set([1, 2, 3, 4], [page(k) for k in (1, 2, 3, 4)])
    assert b.batch_exists([1]) == 1  # touch 1: now 2 is the oldest
    assert b.set(5, page(5))
    assert not b.exists(2)
    assert all(b.exists(k) for k in (1, 3, 4, 5))
    np.testing.assert_array_equal(b.get(3), page(3))  # 4 is now the oldest
    assert b.set(6, page(6))
    assert not b.exists(4) and b.exists(3)
    assert b.stats().evictions == 2
    b.check_consistency()


@pytest.mark.parametrize("mode", MODES)
def test_pages_held_by_reads_are_never_evicted(mode, request):
    b = make(mode, request)
    b.batch_set([1, 2, 3, 4], [page(k) for k in (1, 2, 3, 4)])
    held = [pin(b, k) for k in (1, 2, 3)]  # three in-flight reads
    assert b.set(5, page(5))  # evicts 4, the only unpinned page
    assert not b.exists(4) and all(b.exists(k) for k in (1, 2, 3))
    held.append(pin(b, 5))
    assert not b.set(6, page(6))  # everything pinned: refused, nothing overwritten
    assert b.stats().refused_writes == 1
    for e in held:
        index(b).unpin(e)
    for k in (1, 2, 3, 5):
        np.testing.assert_array_equal(b.get(k), page(k))
    assert b.set(6, page(6))
    b.check_consistency()


@pytest.mark.parametrize("mode", MODES)
def test_refuse_policy_and_no_overwrite(mode, request):
    b = make(mode, request, eviction="refuse")
    assert b.batch_set([1, 2, 3, 4], [page(k) for k in (1, 2, 3, 4)])
    assert not b.set(5, page(5))
    assert not b.exists(5)
    # A live page is never overwritten (pages are content-addressed by their key).
    assert b.set(1, page(99))
    np.testing.assert_array_equal(b.get(1), page(1))
    assert not b.batch_set([2, 6], [page(2), page(6)])
    b.check_consistency()


@pytest.mark.parametrize("mode", MODES)
def test_corrupt_page_is_an_error_never_data(mode, request):
    b = make(mode, request)
    b.batch_set([1, 2], [page(1), page(2)])
    corrupt(b, 1)
    dst = np.zeros(PAGE, dtype=np.uint8)
    assert b.get(1, dst) is None
    assert not b.exists(1)  # dropped
    assert b.stats().corrupt_pages == 1
    np.testing.assert_array_equal(b.get(2), page(2))
    strict = make(mode, request, strict=True)
    strict.set(1, page(1))
    corrupt(strict, 1)
    with pytest.raises(PageCorruptError):
        strict.get(1)
    strict.check_consistency()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_v1_zero_copy_roundtrip_through_host_pool(mode, layout, request):
    pool = HostPool(layer_num=3, head_num=2, head_dim=4, size=8 * 4, page_size=4, layout=layout)
    b = make(mode, request, page_bytes=None, capacity_bytes=8 * pool.page_bytes)
    b.register_mem_pool_host(pool)
    assert b.slot_bytes == pool.page_bytes == 2 * 3 * 2 * 4 * 2 * 4
    assert b.config.suffix.endswith(f"_{layout}_uint16_4")  # from the pool
    pool.kv_buffer[:] = np.random.default_rng(0).integers(0, 2**16, pool.kv_buffer.shape)
    pages = [pool.get_data_page(p * 4).copy() for p in range(3)]
    idx = np.concatenate([pool.page_indices(p) for p in range(3)])
    assert b.batch_set_v1(["a", "b", "c"], idx) == [True, True, True]
    pool.kv_buffer[:] = 0
    dst = np.concatenate([pool.page_indices(p) for p in (5, 6, 7)])
    assert b.batch_get_v1(["a", "b", "c"], dst) == [True, True, True]
    for p, want in zip((5, 6, 7), pages):
        np.testing.assert_array_equal(pool.get_data_page(p * 4), want)
    # A miss ends the read: SGLang uses only the leading run of True.
    assert b.batch_get_v1(["a", "zz", "c"], dst) == [True, False, False]
    with pytest.raises(UsageError):
        b.batch_get_v1(["a"], np.arange(3))  # not whole pages
    # The generic path (flat pages) and the v1 path store the same bytes under a key.
    assert b.set("flat", pages[1])
    assert b.batch_get_v1(["flat"], pool.page_indices(0)) == [True]
    np.testing.assert_array_equal(pool.get_data_page(0), pages[1])
    np.testing.assert_array_equal(b.get("a"), pages[0].view(np.uint8))


@pytest.mark.parametrize("mode", MODES)
def test_pointer_mode(mode, request):
    b = make(mode, request)
    src = (ctypes.c_uint8 * PAGE).from_buffer_copy(page(4).tobytes())
    assert b.set(4, target_location=ctypes.addressof(src), target_sizes=PAGE)
    dst = (ctypes.c_uint8 * PAGE)()
    assert b.get(4, target_location=ctypes.addressof(dst), target_sizes=PAGE) is True
    assert bytes(dst) == page(4).tobytes()


@pytest.mark.parametrize("mode", MODES)
def test_clear_and_close(mode, request):
    b = make(mode, request)
    b.batch_set([1, 2, 3], [page(k) for k in (1, 2, 3)])
    b.clear()
    assert b.batch_exists([1, 2, 3]) == 0 and b.get(1) is None
    assert b.stats().live_pages == 0
    b.check_consistency()
    assert b.set(1, page(1))
    b.close()
    with pytest.raises(UsageError):
        b.set(9, page(9))


@pytest.mark.parametrize("mode", MODES)
def test_oversized_page_fails_cleanly(mode, request):
    b = make(mode, request)
    assert not b.set(1, page(1, PAGE + 1))
    assert not b.exists(1)
    b.check_consistency()


def test_keys_carry_model_rank_layout_dtype_page_suffix():
    cfg = XMemConfig(model_name="Qwen/Qwen3-30B-A3B", tp_rank=1, tp_size=2, layout="layer_first",
                     dtype="float8", page_size=64)
    assert cfg.suffix == "_Qwen-Qwen3-30B-A3B_1_2_layer_first_float8_64"
    a = create_backend(mode="emulate", page_bytes=PAGE, capacity_bytes=4 * PAGE)
    assert a._key("abc") == "abc" + a.config.suffix


def test_config_from_sglang_storage_config_and_extra():
    sc = SimpleNamespace(
        tp_rank=3, tp_size=4, pp_rank=0, pp_size=1, model_name="m/x", is_page_first_layout=True,
        extra_config={
            "backend_name": "xmem", "module_path": "xmemplan.backends.xmem",
            "class_name": "XMemHiCacheStorage", "interface_v1": 1, "xmem_mode": "emulate",
            "xmem_capacity": "64MiB", "xmem_banks": 8, "emu_read_bandwidth": "25GB/s",
            "emu_op_latency": "5us", "emu_shaping": "false",
        },
    )
    b = XMemHiCacheStorage(sc, {})
    c = b.config
    assert (c.mode, c.capacity_bytes, c.banks, c.read_bytes_per_s) == (
        "emulate", 64 << 20, 8, 25e9)
    assert c.op_latency_s == pytest.approx(5e-6) and c.shaping is False
    assert c.suffix.startswith("_m-x_3_4_page_first")
    sc.extra_config = {"xmem_capacty": "1GB"}
    with pytest.raises(UsageError, match="xmem_capacty"):
        XMemHiCacheStorage(sc, {})


def test_factory_is_lazy_and_lists_known_names():
    assert backend_class("xmem") is XMemHiCacheStorage
    with pytest.raises(UsageError) as info:
        backend_class("nope")
    assert info.value.render() == "unknown storage backend 'nope'. Known backends: xmem."


def test_shaping_follows_configured_bandwidth_and_latency():
    n = 1 << 20
    b = create_backend(mode="emulate", capacity_bytes=8 * n, banks=2, page_bytes=n,
                       read_bytes_per_s=100e6, write_bytes_per_s=200e6, op_latency_s=0.002)
    pages = [page(k, n) for k in range(4)]
    t0 = time.perf_counter()
    assert b.batch_set(list(range(4)), pages)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert all(x is not None for x in b.batch_get(list(range(4))))
    read_s = time.perf_counter() - t0
    assert write_s == pytest.approx(4 * n / 200e6 + 0.002, rel=0.25)
    assert read_s == pytest.approx(4 * n / 100e6 + 0.002, rel=0.25)
    # time_scale stretches the emulated tier's time.
    slow = create_backend(mode="emulate", capacity_bytes=8 * n, banks=2, page_bytes=n,
                          write_bytes_per_s=400e6, time_scale=3.0)
    t0 = time.perf_counter()
    slow.batch_set(list(range(4)), pages)
    assert time.perf_counter() - t0 == pytest.approx(3 * 4 * n / 400e6, rel=0.25)


def test_emulate_mode_never_imports_the_sdk(fake_xmem_sdk):
    create_backend(mode="emulate", page_bytes=PAGE, capacity_bytes=4 * PAGE).set(1, page(1))
    assert "xmem" not in sys.modules
