"""The engines' own KV pool accounting (model.engine_kv_room_tokens)."""

from xmemplan.catalog import load_catalog
from xmemplan.sizing import model as M

GIB = 2**30


def test_vllm_pool_is_smaller_by_the_profile_runs_activations() -> None:
    c = load_catalog()
    m, g = c.model("qwen3-30b-a3b-fp8"), c.gpu("h100-sxm")
    plain = M.kv_room_tokens(m, g, M.ONE_GPU, 0.75)
    small = M.engine_kv_room_tokens(m, g, M.ONE_GPU, "vllm", 0.75, 2048)
    big = M.engine_kv_room_tokens(m, g, M.ONE_GPU, "vllm", 0.75, 65536)
    assert big < small
    # the engine multiplies the memory the driver reports (79.22 GiB), not the nominal 80 GB
    seen = g.device_memory_bytes * 0.75 - M.weight_bytes_per_gpu(m, M.ONE_GPU)
    assert abs(seen / M.kv_bytes_per_token_per_gpu(m, M.ONE_GPU) - plain) > 1e4
    assert big < seen / M.kv_bytes_per_token_per_gpu(m, M.ONE_GPU)
    # the MoE workspaces: 65,536 x 8 x (2,048 + 2,048) x 2 B = 4 GiB, plus 3 x hidden
    act = M.profile_activation_bytes(65536, 2048, 768, 8)
    assert abs(act / GIB - 65536 * (3 * 2048 + 8 * 4096) * 2 / GIB) < 1e-9
    assert M.engine_kv_room_tokens(m, g, M.ONE_GPU, "other", 0.75) == plain


def test_the_check_runs_with_every_row_held_out() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "kv_pool_check.py")],
                         capture_output=True, text=True, check=True).stdout
    rows = (root / "data" / "measurements" / "kv-pool.csv").read_text().count("\n") - 1
    assert f"held-out: {rows} rows" in out and "fit:" not in out
    assert "14 B per logit" in out


def test_intermediate_sizes_follow_from_the_catalogs_counts() -> None:
    c = load_catalog()
    # Hugging Face config.json intermediate_size / moe_intermediate_size, within 0.1 %
    for name, want, k in (("llama-3.1-8b", 14336, 0), ("llama-3.1-70b", 28672, 0),
                          ("qwen3-30b-a3b", 768, 8)):
        got, topk = M.mlp_intermediate(c.model(name))
        assert abs(got / want - 1) < 1e-3 and topk == k, name


def test_sglang_pool_is_mem_fraction_of_what_the_context_leaves() -> None:
    kv = M.sglang_kv_bytes(80 * GIB, 0.9, 40 * GIB, context=1 * GIB)
    assert abs(kv - (79 * 0.9 - 40) * GIB) < 1
