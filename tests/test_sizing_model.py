"""The TTFT model: formulas against research/perf-model.md, vectorization, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from xmemplan.catalog import load_catalog
from xmemplan.errors import UsageError
from xmemplan.sizing.model import (
    DEFAULT_CALIBRATION,
    SGLANG_HICACHE,
    Calibration,
    Transfer,
    combine,
    compute_seconds,
    effective_bandwidth,
    load_seconds,
    prefill_flops,
    transfer_efficiency,
    ttft,
)

CAT = load_catalog()
QWEN = CAT.model("qwen3-30b-a3b-fp8")
H100 = CAT.gpu("h100-sxm")
HOST = CAT.tier("host-dram-pcie5")
XMEM = CAT.tier("xmem")
S = 65_536


def test_flops_match_the_research_formulas() -> None:
    lin, attn = prefill_flops(QWEN, S, 0)
    # research 2.7: a full 64K prefill of Qwen3-30B-A3B is 2.05 PFLOP.
    assert (lin + attn) / 1e15 == pytest.approx(2.05, rel=0.01)
    lin, attn = prefill_flops(QWEN, S, S)
    assert lin == 0 and attn == 0
    lin, attn = prefill_flops(QWEN, 1000, 400)
    assert lin == 2 * QWEN.active_params * 600
    assert attn == 393_216 * (1000**2 - 400**2)


@pytest.mark.parametrize("h, compute_ms", [(0.90, 592), (0.95, 303), (0.98, 123), (0.99, 62)])
def test_compute_reproduces_the_worked_check(h: float, compute_ms: float) -> None:
    # research/perf-model.md 2.7 uses eta_lin 0.35 of FP8 peak and eta_attn 0.6 of BF16.
    cal = Calibration(eta_linear=0.35, eta_attention=0.6, fixed_overhead_s=0.0)
    got = compute_seconds(QWEN, H100, S, h * S, cal) * 1e3
    assert float(got) == pytest.approx(compute_ms, rel=0.02)


def test_load_is_bytes_over_bandwidth_plus_latency() -> None:
    hits = np.array([0, 1000, 65_536])
    got = load_seconds(QWEN, hits, 50e9, latency_s=3e-6)
    assert got[0] == 0.0
    assert got[1] == pytest.approx(1000 * 98_304 / 50e9 + 3e-6)
    # research 2.7: 0.98 x 64K at 50 GB/s is 126 ms.
    assert float(load_seconds(QWEN, 0.98 * S, 50e9)) * 1e3 == pytest.approx(126, rel=0.01)


def test_breakdown_load_part_uses_the_documented_formula() -> None:
    b = ttft(QWEN, H100, XMEM, S, 60_000)
    bw = float(b.effective_bandwidth_bytes_per_s)
    assert float(b.load_s) == pytest.approx(60_000 * 98_304 / bw + XMEM.latency_s)


def test_overlap_rules() -> None:
    load, comp = np.array([0.1, 0.3]), np.array([0.2, 0.05])
    assert np.allclose(combine(load, comp, "sum", 48), load + comp)
    assert np.allclose(combine(load, comp, "max", 48), [0.2, 0.3])
    assert np.allclose(combine(load, comp, "layer", 48), [0.2 + 0.1 / 48, 0.3 + 0.05 / 48])
    for h in (0.9, 0.98, 1.0):
        s, lay, mx = (float(ttft(QWEN, H100, HOST, S, h * S, overlap=o).ttft_s)
                      for o in ("sum", "layer", "max"))
        assert s >= lay >= mx
    with pytest.raises(UsageError, match="overlap"):
        ttft(QWEN, H100, HOST, S, S, overlap="both")


def test_concurrency_pipelines_on_the_bottleneck_stage() -> None:
    one = ttft(QWEN, H100, HOST, S, 0.98 * S)
    eight = ttft(QWEN, H100, HOST, S, 0.98 * S, concurrency=8)
    step = max(float(one.load_s), float(one.compute_s))
    assert float(eight.ttft_last_s) == pytest.approx(float(one.single_s) + 7 * step)
    assert float(eight.ttft_s) == pytest.approx(float(one.single_s) + 3.5 * step)
    with pytest.raises(UsageError):
        ttft(QWEN, H100, HOST, S, S, concurrency=0)


def test_vectorized_equals_scalar() -> None:
    prompts = np.array([1024.0, 8192.0, 65_536.0, 131_072.0])
    hits = np.floor(prompts * np.array([0.0, 0.5, 0.98, 1.0]))
    vec = ttft(QWEN, H100, XMEM, prompts, hits, concurrency=4)
    for i in range(len(prompts)):
        one = ttft(QWEN, H100, XMEM, prompts[i], hits[i], concurrency=4)
        assert float(vec.ttft_s[i]) == pytest.approx(float(one.ttft_s))
    bws = np.array([25e9, 50e9, 350e9])
    swept = ttft(QWEN, H100, XMEM, S, 0.99 * S, bandwidth_bytes_per_s=bws)
    assert np.all(np.diff(swept.ttft_s) < 0)


def test_effective_bandwidth_takes_the_lowest_limit() -> None:
    # 8 GPUs on one node: share 500 GB/s > per-GPU link 450 -> link-bound; x 350/450.
    bw8 = effective_bandwidth(QWEN, H100, XMEM, nodes=1, gpus_loading=8)
    assert float(bw8) == pytest.approx(350e9)
    bw16 = effective_bandwidth(QWEN, H100, XMEM, nodes=1, gpus_loading=16)
    assert float(bw16) == pytest.approx(4e12 / 16 * 350 / 450)
    bw16_2 = effective_bandwidth(QWEN, H100, XMEM, nodes=2, gpus_loading=16)
    assert float(bw16_2) == pytest.approx(350e9)
    # Host DRAM: the fitted large-transfer bandwidth times the 64 KiB kernel-copy share.
    host = effective_bandwidth(QWEN, H100, HOST, transfer=SGLANG_HICACHE)
    expected = DEFAULT_CALIBRATION.host_bandwidth_bytes_per_s * 41.9 / 51.2
    assert float(host) == pytest.approx(expected, rel=1e-3)
    hbm = effective_bandwidth(QWEN, H100, CAT.tier("hbm"))
    assert float(hbm) == pytest.approx(3.35e12 * 0.8)


def test_transfer_efficiency_curve() -> None:
    assert SGLANG_HICACHE.chunk_bytes(QWEN) == 64 * 1024  # 64 tokens x 1 KiB (K or V)
    assert Transfer(16, "page_first", "dma").chunk_bytes(QWEN) == 16 * 98_304
    assert transfer_efficiency(HOST, 64 * 1024, "kernel") == pytest.approx(41.9 / 51.2)
    assert transfer_efficiency(HOST, 16 * 2**20, "dma") == pytest.approx(1.0)
    sizes = [4096, 65_536, 2**20, 2**24]
    for io in ("dma", "kernel"):
        effs = [transfer_efficiency(HOST, c, io) for c in sizes]
        assert effs == sorted(effs)
    assert transfer_efficiency(XMEM, 4096, "kernel") == 1.0  # no published curve


@pytest.mark.parametrize("prompt, hit", [(0, 0), (100, 101), (100, -1)])
def test_bad_tokens(prompt: int, hit: int) -> None:
    with pytest.raises(UsageError):
        ttft(QWEN, H100, HOST, prompt, hit)


def test_mla_model_runs() -> None:
    ds = CAT.model("deepseek-v3")
    b = ttft(ds, CAT.gpu("b200"), XMEM, 32_768, 32_000)
    assert math.isfinite(float(b.ttft_s)) and float(b.load_s) > 0


def test_sweep_grid_matches_single_calls() -> None:
    from xmemplan.sizing.sweep import sweep

    grid = sweep(QWEN, H100, XMEM, prompt_tokens=[8192, 65_536], hit_rates=[0.9, 1.0],
                 bandwidths_bytes_per_s=[50e9, 350e9], concurrencies=[1, 8])
    assert grid["ttft_s"].shape == (2, 2, 2, 2)
    one = ttft(QWEN, H100, XMEM, 65_536, math.floor(65_536 * 0.9), concurrency=8,
               bandwidth_bytes_per_s=50e9)
    assert grid["ttft_s"][1, 0, 0, 1] == pytest.approx(float(one.ttft_s))
    assert grid["ttft_last_s"][1, 0, 0, 1] == pytest.approx(float(one.ttft_last_s))


def test_tier_load_seconds_is_the_breakdown_load() -> None:
    from xmemplan.sizing import tier_load_seconds

    b = ttft(QWEN, H100, HOST, S, 64_000)
    assert float(tier_load_seconds(QWEN, H100, HOST, 64_000)) == pytest.approx(float(b.load_s))
