"""The emulated X-Mem node: device model file, transfer curve, one shared token bucket."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from xmemplan.backends import create_backend
from xmemplan.backends.device import DeviceModel, EmulatedNode, TokenBucket, load_device
from xmemplan.backends.hostpool import HostPool
from xmemplan.errors import InputError, UsageError

MiB = 1 << 20


def device(**kw) -> DeviceModel:
    base: dict[str, Any] = dict(name="t", display_name="t", link_bytes_per_s=400e9,
                bank_bytes_per_s=(400e9, 200e9), node_bytes_per_s=4e12,
                node_burst_bytes=1 * MiB, op_latency_s=0.0,
                transfer_chunk_bytes=(64 * 1024, 256 * MiB), transfer_efficiency=(0.5, 1.0))
    base.update(kw)
    return DeviceModel(**base)


def test_shipped_device_has_a_source_for_every_figure():
    d = load_device()
    assert d.name == "xmem-node" and d.node_bytes_per_s == 4e12
    assert d.bank_bytes_per_s == (396e9, 362e9) and d.link_bytes_per_s == 478e9
    for field in ("link_bandwidth", "bank_bandwidth", "node_bandwidth", "node_burst",
                  "op_latency", "transfer_efficiency"):
        assert d.sources.get(field), field
    assert d.assumed() == ["node_burst", "op_latency", "writes"]
    # One reader striping 3 MiB copies over both banks: the harmonic mean x the curve.
    assert d.reader_bytes_per_s(3 * MiB, 2) == pytest.approx(
        2 / (1 / 396e9 + 1 / 362e9) * d.efficiency(3 * MiB))


def test_transfer_curve_is_log_interpolated_and_flat_outside():
    d = device()
    assert d.efficiency(64 * 1024) == pytest.approx(0.5)
    assert d.efficiency(256 * MiB) == pytest.approx(1.0)
    assert d.efficiency(4 * MiB) == pytest.approx(0.75)  # halfway in log2 (16 -> 22 -> 28)
    assert d.efficiency(1) == 0.5 and d.efficiency(1 << 40) == 1.0
    # The link caps a bank faster than it; a copy costs size / (rate x efficiency).
    assert device(link_bytes_per_s=300e9).bank_rate(0) == 300e9
    assert d.copy_seconds(1, [64 * 1024]) == pytest.approx(64 * 1024 / (200e9 * 0.5))


def test_device_files_are_checked(tmp_path):
    with pytest.raises(UsageError, match="unknown device 'nope'"):
        load_device("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text('[device.x]\nlink_bandwidth = "1GB/s"\n')
    with pytest.raises(InputError, match="has no 'bank_bandwidth'"):
        load_device(bad)
    bad.write_text('[device.x]\nlink_bandwidth = "fast"\nbank_bandwidth = "1GB/s"\n')
    with pytest.raises(InputError, match="cannot read link_bandwidth"):
        load_device(bad)


def test_token_bucket_makes_concurrent_takers_share_the_rate():
    b = TokenBucket(rate=1e9, burst=0.0, scale=1.0)
    now = time.perf_counter()
    ends = [b.take(1e6, now) for _ in range(4)]  # 4 x 1 MB at 1 GB/s: 1, 2, 3, 4 ms
    assert [e - now for e in ends] == pytest.approx([1e-3, 2e-3, 3e-3, 4e-3])
    b2 = TokenBucket(rate=1e9, burst=2e6, scale=10.0)
    t = time.perf_counter()
    assert b2.take(2e6, t) == t  # the burst pays at once
    assert b2.take(1e6, t) == pytest.approx(t + 10 * 1e-3)  # then the rate, x the scale


def _readers(node: EmulatedNode, k: int, pages: int) -> list[float]:
    """k backends on one node read `pages` 1 MiB pages each, at once; seconds each."""
    pool_args: dict[str, Any] = dict(layer_num=1, head_num=1, head_dim=MiB // 4, size=pages,
                                     page_size=1)
    stores, pools = [], []
    for _ in range(k):
        pool = HostPool(**pool_args)
        s = create_backend("xmem", mode="emulate", capacity_bytes=(pages + 2) * MiB, banks=2,
                           page_bytes=MiB, node=node)
        s.register_mem_pool_host(pool)
        keys = [f"p{i}" for i in range(pages)]
        assert all(s.batch_set_v1(keys, np.arange(pages)))
        stores.append(s)
        pools.append(pool)
    barrier = threading.Barrier(k)
    took = [0.0] * k

    def run(i: int) -> None:
        barrier.wait()
        t0 = time.perf_counter()
        assert all(stores[i].batch_get_v1([f"p{j}" for j in range(pages)], np.arange(pages)))
        took[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return took


@pytest.mark.timing
def test_readers_share_the_node_but_not_their_links():
    # Device: each reader's link gives 1 GB/s (a 1 MiB page takes ~1 ms of device time,
    # 5 ms of wall time at scale 5, so that late thread wake-ups matter little), the node
    # 2 GB/s in all.
    d = device(link_bytes_per_s=1e9, bank_bytes_per_s=(1e9,), node_bytes_per_s=2e9,
               node_burst_bytes=MiB, transfer_chunk_bytes=(), transfer_efficiency=())
    # Best of 2 runs: the first run of a process pays page faults and imports.
    alone = min(_readers(EmulatedNode(d, 5.0), 1, 16)[0] for _ in range(2)) / 5
    assert alone == pytest.approx(16 * MiB / 1e9, rel=0.25)  # link-bound: ~16.8 ms
    four = min((_readers(EmulatedNode(d, 5.0), 4, 16) for _ in range(2)), key=np.median)
    # 4 readers x 16 MiB through 2 GB/s: ~33.5 ms, each at about half its link rate.
    assert np.median(four) / 5 == pytest.approx(4 * 16 * MiB / 2e9, rel=0.25)
    assert np.median(four) / 5 > 1.5 * alone
