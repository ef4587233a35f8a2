"""Flat rows of the catalog for listing (`xmemplan catalog`) and JSON export."""

from __future__ import annotations

from typing import Any

from xmemplan.catalog.loader import Catalog


def catalog_rows(cat: Catalog, kind: str) -> list[dict[str, Any]]:
    if kind == "models":
        return [
            {
                "name": m.name,
                "attention": m.attention,
                "layers": m.layers,
                "q_heads": m.q_heads,
                "kv_heads": m.kv_heads if m.attention == "gqa" else None,
                "head_dim": m.head_dim if m.attention == "gqa" else None,
                "weight_dtype": m.weight_dtype,
                "active_params": m.active_params,
                "kv_bytes_per_token": m.kv_bytes_per_token,
                "source": m.source,
                "sources": m.sources,
            }
            for m in cat.models.values()
        ]
    if kind == "gpus":
        return [
            {
                "name": g.name,
                "bf16_tflops": g.flops["bf16"] / 1e12,
                "fp8_tflops": g.flops.get("fp8", float("nan")) / 1e12,
                "hbm_gb": g.hbm_capacity_bytes / 1e9,
                "hbm_gb_per_s": g.hbm_bandwidth_bytes_per_s / 1e9,
                "pcie_gb_per_s": g.pcie_bandwidth_bytes_per_s / 1e9,
                "nvlink_gb_per_s": g.nvlink_bandwidth_bytes_per_s / 1e9,
                "host_link": g.host_link,
                "source": g.source,
                "sources": g.sources,
            }
            for g in cat.gpus.values()
        ]
    return [
        {
            "name": t.name,
            "kind": t.kind,
            "attach": t.attach,
            "capacity_tb": None if t.capacity_bytes is None else t.capacity_bytes / 1e12,
            "capacity_per": t.capacity_scope,
            "bandwidth_gb_per_s": _gb(t.bandwidth_bytes_per_s),
            "effective_gb_per_s": _gb(t.effective_bandwidth_bytes_per_s),
            "node_gb_per_s": _gb(t.node_bandwidth_bytes_per_s),
            "latency_us": t.latency_s * 1e6,
            "not_published": list(t.unpublished),
            "source": t.source,
            "sources": t.sources,
        }
        for t in cat.tiers.values()
    ]


def _gb(v: float | None) -> float | None:
    return None if v is None else v / 1e9
