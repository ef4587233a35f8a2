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
    # research/perf-model.md 2.7 uses eta_lin 0.35 of FP8 peak and eta_attn 0.6 of BF16,
    # FLOPs only (an unbounded HBM takes the memory roofline out).
    cal = Calibration(eta_linear=0.35, eta_attention=0.6, fixed_overhead_s=0.0,
                      hbm_efficiency=1e6)
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
    # X-Mem at 64 KiB kernel pages: the blog's 350 GB/s per GPU (link-bound with 8 GPUs).
    bw8 = effective_bandwidth(QWEN, H100, XMEM, nodes=1, gpus_loading=8)
    assert float(bw8) == pytest.approx(350e9)
    # 16 GPUs on one node: the node's 4 TB/s, nominal (no published node efficiency), is
    # shared; the per-GPU link ratio is NOT applied to the node a second time.
    bw16 = effective_bandwidth(QWEN, H100, XMEM, nodes=1, gpus_loading=16)
    assert float(bw16) == pytest.approx(4e12 / 16)
    bw16_2 = effective_bandwidth(QWEN, H100, XMEM, nodes=2, gpus_loading=16)
    assert float(bw16_2) == pytest.approx(350e9)
    # Host DRAM: the fitted large-transfer bandwidth times the 64 KiB kernel-copy share.
    host = effective_bandwidth(QWEN, H100, HOST, transfer=SGLANG_HICACHE)
    # (the engine's share of the H100's measured 51.2 GB/s pinned-copy peak)
    assert DEFAULT_CALIBRATION.host_efficiency is not None
    expected = DEFAULT_CALIBRATION.host_efficiency * 51.2e9 * 41.9 / 51.2
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
    # X-Mem: two published points (64 KiB SGLang pages 350 GB/s, 256 MiB copies 379).
    assert transfer_efficiency(XMEM, 64 * 1024, "kernel") == pytest.approx(350 / 379)
    assert transfer_efficiency(XMEM, 2**28, "dma") == pytest.approx(1.0)
    assert XMEM.unpublished  # and the catalog says what is not published


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


# --- issue 11: roofline, shape, topology, options --------------------------------------

def test_memory_roofline_charges_weight_reads_for_a_short_suffix() -> None:
    from xmemplan.sizing.model import active_weight_bytes, compute_parts, expert_fraction_touched

    # A 26-token suffix touches 1 - (1 - 8/128)^26 = 81 % of Qwen3-30B-A3B's experts.
    assert float(expert_fraction_touched(QWEN, 26)) == pytest.approx(1 - (120 / 128) ** 26)
    w = float(active_weight_bytes(QWEN, 26))
    assert 22e9 < w < 26e9  # FP8 weights: dense 1.5 GB + 81 % of 29 GB of experts
    flop_s, bytes_s = compute_parts(QWEN, H100, S, S - 26)
    # about 10 ms of weight and KV reads on an H100, far above the FLOP time
    assert 8e-3 < float(bytes_s) < 14e-3
    assert float(flop_s) < 4e-3  # attention of 26 tokens over 64K of context
    floor = QWEN.layers * DEFAULT_CALIBRATION.layer_latency_s  # one pass's layer floor
    assert float(compute_seconds(QWEN, H100, S, S - 26)) == pytest.approx(
        float(flop_s + bytes_s) + floor)
    # Long cold prefills stay FLOP-bound: the byte part is a small share there.
    flop_s, bytes_s = compute_parts(QWEN, H100, S, 0)
    assert float(bytes_s) < 0.05 * float(flop_s)


def test_shape_splits_compute_and_kv() -> None:
    from xmemplan.sizing.model import Shape, kv_bytes_per_token_per_gpu

    one = ttft(QWEN, H100, HOST, S, 0.9 * S, overlap="sum")
    tp4 = ttft(QWEN, H100, HOST, S, 0.9 * S, overlap="sum", shape=Shape(tp=4, ep=4))
    assert float(tp4.load_s) == pytest.approx(float(one.load_s) / 4, rel=1e-3)
    assert float(tp4.compute_s) < float(one.compute_s) / 2
    # GQA heads divide under TP (4 KV heads: tp8 keeps one head per rank, replicated)
    assert kv_bytes_per_token_per_gpu(QWEN, Shape(tp=4)) == QWEN.kv_bytes_per_token / 4
    assert kv_bytes_per_token_per_gpu(QWEN, Shape(tp=8)) == QWEN.kv_bytes_per_token / 4
    ds = CAT.model("deepseek-v3")  # MLA latents are replicated on every rank
    assert kv_bytes_per_token_per_gpu(ds, Shape(tp=8, ep=8)) == ds.kv_bytes_per_token
    # DP attention: the serving rank holds the whole request's KV
    assert kv_bytes_per_token_per_gpu(QWEN, Shape(tp=4, dp_attention=True)) == \
        QWEN.kv_bytes_per_token
    with pytest.raises(UsageError, match="ep"):
        Shape(tp=4, ep=3)


def test_shapes_that_do_not_fit_are_refused_and_the_smallest_fit_is_default() -> None:
    from xmemplan.sizing.model import Shape, check_shape, smallest_shape

    big = CAT.model("qwen3-235b-a22b")  # 470 GB of BF16 weights
    with pytest.raises(UsageError, match="does not fit") as e:
        check_shape(big, H100, Shape(tp=2, ep=2), kv_tokens=65_536)
    assert "tp8" in str(e.value.render())
    assert smallest_shape(big, H100, 65_536) == Shape(tp=8, ep=8)
    assert smallest_shape(QWEN, H100, 65_536) == Shape()
    ds = CAT.model("deepseek-v3")  # 671 GB FP8: 8 x H200 fits, 8 x H100 does not
    on_h200 = smallest_shape(ds, CAT.gpu("h200-sxm"), 65_536)
    on_h100 = smallest_shape(ds, H100, 65_536)
    assert on_h200 is not None and on_h200.tp == 8
    assert on_h100 is not None and on_h100.tp == 16


def test_kv_fp8_and_fp8_attention() -> None:
    from xmemplan.sizing.model import with_kv_dtype

    q8 = with_kv_dtype(QWEN, "fp8")
    assert q8.kv_bytes_per_token == QWEN.kv_bytes_per_token // 2
    ds8 = with_kv_dtype(CAT.model("deepseek-v3"), "fp8")
    assert ds8.kv_bytes_per_token == 61 * 656  # research 2.1: 40,016 B per token
    big = Transfer(128, "page_first", "dma")  # 12 and 6 MiB copies: both at full speed
    a = ttft(QWEN, H100, HOST, S, S - 64, overlap="sum", transfer=big)
    b = ttft(q8, H100, HOST, S, S - 64, overlap="sum", transfer=big)
    assert float(b.load_s) == pytest.approx(float(a.load_s) / 2, rel=0.02)
    # 64-token layer_first pages shrink to 32 KiB in FP8: copies get less efficient.
    c = ttft(q8, H100, HOST, S, S - 64, overlap="sum")
    assert float(c.effective_bandwidth_bytes_per_s) < float(
        ttft(QWEN, H100, HOST, S, S - 64, overlap="sum").effective_bandwidth_bytes_per_s)
    bf = compute_seconds(QWEN, H100, S, 0)
    f8 = compute_seconds(QWEN, H100, S, 0, attention_dtype="fp8")
    assert float(f8) < 0.6 * float(bf)
    with pytest.raises(UsageError):
        with_kv_dtype(QWEN, "int3")


def test_max_context_mask() -> None:
    from xmemplan.sizing.model import over_max_context

    base = CAT.model("qwen3-30b-a3b")
    assert base.max_context == 40_960
    mask = over_max_context(base, np.array([1000, 40_960, 40_961, 200_000]))
    assert mask.tolist() == [False, False, True, True]


def test_host_path_shares_uplinks_and_socket_dram() -> None:
    from dataclasses import replace

    from xmemplan.sizing.model import host_path_limit, load_bandwidth

    b200 = CAT.gpu("b200")  # PCIe Gen6 128 GB/s per GPU, 358 GB/s DRAM per 4-GPU socket
    assert host_path_limit(b200, 1) == pytest.approx(128e9)
    assert host_path_limit(b200, 8) == pytest.approx(358.4e9 / 4)
    shared = replace(H100, gpus_per_host_uplink=2)  # two GPUs behind one PCIe switch
    assert host_path_limit(shared, 8) == pytest.approx(32e9)
    assert host_path_limit(shared, 1) == pytest.approx(64e9)
    ks = load_bandwidth(QWEN, shared, HOST, [1, 2, 4, 8])
    assert list(ks) == sorted(ks, reverse=True) and ks[-1] < ks[0]


def test_grace_host_memory_is_behind_c2c() -> None:
    from xmemplan.sizing.model import host_tier_for, notes

    gb200 = CAT.gpu("gb200")
    assert gb200.host_link == "c2c" and CAT.gpu("gb300").host_link == "c2c"
    tier = host_tier_for(CAT, gb200)
    assert tier.name == "host-dram-c2c"
    assert host_tier_for(CAT, H100).name == "host-dram-pcie5"
    bw = float(effective_bandwidth(QWEN, gb200, tier, transfer=Transfer(128, "page_first")))
    assert bw > 3 * float(effective_bandwidth(QWEN, H100, HOST,
                                              transfer=Transfer(128, "page_first")))
    assert any("C2C" in n for n in notes(gb200, HOST))


def test_sm_interference_only_for_overlapped_kernel_copies() -> None:
    k = ttft(QWEN, H100, HOST, S, 0.9 * S, overlap="layer", transfer=SGLANG_HICACHE)
    assert float(k.interference_s) == pytest.approx(
        HOST.sm_interference * min(float(k.load_s), float(k.compute_s - k.interference_s)))
    d = ttft(QWEN, H100, HOST, S, 0.9 * S, overlap="layer",
             transfer=Transfer(64, "layer_first", "dma"))
    assert float(d.interference_s) == 0.0
    s = ttft(QWEN, H100, HOST, S, 0.9 * S, overlap="sum")
    assert float(s.interference_s) == 0.0


def test_calibration_overlay_applies(tmp_path) -> None:
    from xmemplan.sizing.model import calibration_for

    f = tmp_path / "c.toml"
    f.write_text('[calibration.vllm]\nsource = "test"\nfixed_overhead = "5ms"\n'
                 'host_bandwidth = "40GB/s"\neta_linear = 0.5\n')
    cat = load_catalog([f])
    c = calibration_for(cat, "vllm")
    assert c.fixed_overhead_s == pytest.approx(5e-3) and c.eta_linear == 0.5
    assert c.host_bandwidth_bytes_per_s == pytest.approx(40e9)
    assert calibration_for(cat, "sglang").fixed_overhead_s == pytest.approx(
        DEFAULT_CALIBRATION.fixed_overhead_by_engine["sglang"])
