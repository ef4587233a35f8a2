"""KV pool check: the engines' own pool accounting against published pool sizes.

`python benchmarks/kv_pool_check.py` reads data/measurements/kv-pool.csv and prints, per
row, the published figure, what xmemplan.sizing.model's accounting gives (vLLM: util x
total - weights - profile peak - non-torch - CUDA graphs; SGLang: (total - context) x
mem_fraction_static - weights) and what the weights-only `kv_room_tokens` gives, fit and
held-out rows apart (no constant is fitted: every row is held out). The vLLM 0.6 rows
(PR 10511) ran an older sampler than the one the accounting reads (0.33).
Totals are the GPU memory the engine sees (vLLM's logged total_gpu_memory), not the
catalog's nominal HBM.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from xmemplan.catalog import load_catalog
from xmemplan.sizing import model as M

GIB = 2**30
CSV = Path(__file__).resolve().parent.parent / "data" / "measurements" / "kv-pool.csv"
# models the shipped catalog lacks (Llama-3.1-70B-Instruct FP8: the rate check's overlay)
OVERLAY = CSV.parent / "rate-models.toml"


def _weights(row: dict[str, str], m: M.ModelSpec, shape: M.Shape) -> float:
    return float(row["weights_gib"]) * GIB if row["weights_gib"] else \
        M.weight_bytes_per_gpu(m, shape)


def _activation(row: dict[str, str], m: M.ModelSpec, shape: M.Shape) -> float:
    inter, k = M.mlp_intermediate(m)
    return M.profile_activation_bytes(int(row["batched_tokens"]), m.hidden_size, inter, k,
                                      shape.tp, shape.ep, vocab=M.vocab_size(m),
                                      seqs=int(row["max_num_seqs"]))


def predict(row: dict[str, str]) -> tuple[float, float | None]:
    """(our figure, the weights-only figure or None) for one row's quantity."""
    q, tp = row["quantity"], int(row["tp"])
    if q == "min_fraction":  # SGLang: the KV pool is empty when fraction = W / (total - ctx)
        free_after = 12.25e9 / GIB  # the row's logged avail mem after the weights
        return float(row["weights_gib"]) / (float(row["weights_gib"]) + free_after), None
    cat = load_catalog([OVERLAY])
    m = cat.model(row["model"])
    shape = M.Shape(tp=tp, ep=1)
    total = float(row["total_gib"]) * GIB
    util = float(row["fraction"])
    w = _weights(row, m, shape)
    act = _activation(row, m, shape)
    if q == "activation_gib":
        return act / GIB, None
    kv = M.vllm_kv_bytes(total, util, w, act, M.vllm_other_bytes(tp))
    plain = max(0.0, cat.gpu(row["gpu"]).hbm_capacity_bytes * util - w)
    if q == "kv_gib":
        return kv / GIB, plain / GIB
    per_tok = M.kv_bytes_per_token_per_gpu(m, shape)
    return kv / per_tok, plain / per_tok


def main() -> None:
    rows = list(csv.DictReader(CSV.open()))
    v0 = next(r for r in rows if r["id"] == "pr10511-tp1")
    seqs, vocab = int(v0["max_num_seqs"]), M.vocab_size(load_catalog().model(v0["model"]))
    v0_bytes = float(v0["value"]) * GIB / (seqs * vocab)
    errs: dict[str, list[float]] = {"fit": [], "held-out": []}
    print("KV pool: published / ours (engine accounting) / weights-only kv_room_tokens "
          "(catalog HBM)")
    print(f"{'row':16} {'role':8} {'quantity':14} {'published':>10} {'ours':>10} {'err':>6} "
          f"{'w-only':>10} {'err':>6}")
    for r in rows:
        ours, plain = predict(r)
        v = float(r["value"])
        e = ours / v - 1
        errs.setdefault(r["role"], []).append(abs(e))
        pe = "-" if plain is None else f"{plain / v - 1:+.1%}"
        ps = "-" if plain is None else f"{plain:,.4g}"
        print(f"{r['id']:16} {r['role']:8} {r['quantity']:14} {v:10,.4g} {ours:10,.4g} "
              f"{e:+6.1%} {ps:>10} {pe:>6}")
    for role, es in errs.items():
        if es:
            print(f"{role}: {len(es)} rows, median |error| {statistics.median(es):.1%}, "
                  f"max {max(es):.1%}")
    print("sensitivity, the llm-d rows' unstated --max-num-seqs (1,024 assumed: vLLM's H100 "
          "default in 0.33; 256: older vLLM):")
    for r in rows:
        if r["id"].startswith("llmd"):
            alt = dict(r, max_num_seqs="256")
            print(f"  {r['id']}: max_num_seqs 256 -> {predict(alt)[0] / float(r['value']) - 1:+.1%}")
    print(f"sampler: {M.VLLM_SAMPLER_BYTES_PER_LOGIT:.0f} B per logit (read in vLLM 0.33's "
          f"sampler); the vLLM 0.6 log's peak, were it all sampler: {v0_bytes:.1f} B")


if __name__ == "__main__":
    main()
