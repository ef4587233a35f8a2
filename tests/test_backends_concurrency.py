"""Threads mixing batch_set / batch_get / batch_exists for a bounded time, plus faults."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from xmemplan.backends import create_backend

PAGE = 64 << 10
KEYS = 48
RUN_S = 0.6


def content(key: int) -> np.ndarray:
    # Distinct per key and per position: a page from another slot or a torn copy differs.
    base = np.arange(PAGE // 8, dtype=np.uint64) * np.uint64(2654435761)
    return (base ^ np.uint64(key * 0x9E3779B97F4A7C15 % 2**64)).view(np.uint8)


@pytest.fixture(params=["emulate", "real"])
def mode(request):
    if request.param == "real":
        request.getfixturevalue("fake_xmem_sdk")
    return request.param


def hammer(b, seconds: float, seed: int, errors: list, written: set, lock: threading.Lock):
    rng = np.random.default_rng(seed)
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        op = rng.integers(3)
        keys = [int(k) for k in rng.integers(0, KEYS, rng.integers(1, 5))]
        try:
            if op == 0:
                ok = b._batch_set_list(keys, [content(k) for k in keys], None, None)
                with lock:
                    written.update(k for k, good in zip(keys, ok) if good)
            elif op == 1:
                for k, got in zip(keys, b.batch_get(keys)):
                    if got is not None and not np.array_equal(got, content(k)):
                        errors.append(f"wrong data for key {k}")
            else:
                n = b.batch_exists(keys)
                if not 0 <= n <= len(keys):
                    errors.append(f"batch_exists returned {n}")
        except Exception as exc:  # noqa: BLE001 - any exception is a test failure
            errors.append(repr(exc))


def run_threads(b, threads: int = 4, seconds: float = RUN_S):
    errors: list = []
    written: set = set()
    lock = threading.Lock()
    ts = [threading.Thread(target=hammer, args=(b, seconds, i, errors, written, lock))
          for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors, written


def test_no_lost_or_corrupt_page_without_eviction(mode):
    b = create_backend(mode=mode, capacity_bytes=KEYS * PAGE, banks=4, page_bytes=PAGE,
                       read_bytes_per_s=20e9, op_latency_s=1e-5)
    errors, written = run_threads(b)
    assert errors == []
    assert len(written) > KEYS // 2
    b.check_consistency()
    for k in written:  # capacity holds every key: nothing written may be lost
        assert b.exists(k)
        np.testing.assert_array_equal(b.get(k), content(k))
    s = b.stats()
    assert s.corrupt_pages == 0 and s.evictions == 0 and s.pages_read > 0


def test_no_corrupt_page_under_eviction_pressure(mode):
    b = create_backend(mode=mode, capacity_bytes=8 * PAGE, banks=2, page_bytes=PAGE)
    errors, _ = run_threads(b)
    assert errors == []
    b.check_consistency()
    assert b.stats().evictions > 0
    for k in range(KEYS):
        got = b.get(k)
        assert got is None or np.array_equal(got, content(k))


def test_faults_give_clear_failures_and_a_consistent_store(mode):
    b = create_backend(mode=mode, capacity_bytes=16 * PAGE, banks=2, page_bytes=PAGE,
                       fault_rate=0.2, delay_rate=0.2, delay_s=0.001, fault_seed=7)
    flips = []

    def flipper():  # torn/corrupted pages: flip a byte of random live pages
        rng = np.random.default_rng(3)
        stop = time.perf_counter() + RUN_S
        while time.perf_counter() < stop:
            live = b._index.live_keys() if b._index is not None else []
            if live and b.mode != "real":
                key = live[int(rng.integers(len(live)))]
                entry = b._index._live.get(key)
                if entry is not None:
                    b._medium.slot_view(entry.slot)[int(rng.integers(PAGE))] ^= 0x5A
                    flips.append(key)
            time.sleep(0.01)

    t = threading.Thread(target=flipper)
    t.start()
    errors, written = run_threads(b)
    t.join()
    assert errors == []  # failures came back as False/None, never exceptions or bad data
    s = b.stats()
    assert s.failed_ops > 0 and s.pages_written > 0 and s.pages_read > 0
    if b.mode != "real":
        assert flips and s.corrupt_pages > 0
    b.check_consistency()
    b.config = b.config.replace(fault_rate=0.0, delay_rate=0.0)
    for k in range(KEYS):
        got = b.get(k)
        assert got is None or np.array_equal(got, content(k))
    # After the storm the store still works normally.
    b.clear()
    assert b.batch_set([1, 2], [content(1), content(2)])
    np.testing.assert_array_equal(b.get(2), content(2))
    b.check_consistency()
