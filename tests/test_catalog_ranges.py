"""Catalog numbers get a range: zero where it means nothing, shares above 1, negative or
non-finite values are refused naming the file, the entry and the field (exit 3); zero
where it means 'none' (a dense model's experts, no SM interference) is still read."""

from __future__ import annotations

import pytest

from xmemplan.catalog.loader import load_catalog
from xmemplan.errors import InputError

ENTRY = {"model": "qwen3-30b-a3b", "gpu": "h100-sxm", "tier": "xmem"}


def _overlay(tmp_path, kind: str, field: str, value: str):
    p = tmp_path / "overlay.toml"
    p.write_text(f'[{kind}.{ENTRY[kind]}]\nsource = "test"\n{field} = {value}\n')
    return p


@pytest.mark.parametrize("kind,field,value", [
    ("model", "layers", "0"),
    ("model", "q_heads", "0"),
    ("model", "kv_dtype_bytes", "0"),
    ("model", "kv_dtype_bytes", "1000"),
    ("model", "active_params", "0"),
    ("model", "total_params", '"0B"'),
    ("gpu", "gpus_per_server", "0"),
    ("tier", "banks", "0"),
    ("tier", "efficiency", "0"),
    ("tier", "efficiency", "1.5"),
    ("tier", "node_efficiency", "0.0"),
    ("tier", "sm_interference", "2"),
    ("tier", "sm_interference", "-0.1"),
    ("tier", "bandwidth", '"0GB/s"'),
    ("tier", "capacity", '"0TB"'),
])
def test_meaningless_value_is_refused(tmp_path, kind, field, value):
    p = _overlay(tmp_path, kind, field, value)
    with pytest.raises(InputError) as e:
        load_catalog([p])
    text = e.value.render()
    assert "overlay.toml" in text and f"'{field}'" in text and f"[{kind}." in text, text


@pytest.mark.parametrize("kind,field,value,attr,want", [
    ("model", "experts", "0", "experts", 0),
    ("model", "expert_params", "0", "expert_params", 0),
    ("tier", "sm_interference", "0.0", "sm_interference", 0.0),
    ("tier", "efficiency", "1.0", "efficiency", 1.0),
    ("tier", "node_efficiency", "0.5", "node_efficiency", 0.5),
])
def test_meaningful_value_is_read(tmp_path, kind, field, value, attr, want):
    cat = load_catalog([_overlay(tmp_path, kind, field, value)])
    entry = {"model": cat.model, "gpu": cat.gpu, "tier": cat.tier}[kind](ENTRY[kind])
    assert getattr(entry, attr) == want


def test_catalog_fifo_is_refused_without_opening(tmp_path):
    import os

    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        load_catalog([fifo])  # would block for ever if it opened the FIFO
