"""Catalog: shipped data loads with sources; overrides; every bad-file case is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xmemplan.catalog import load_catalog, shipped_files
from xmemplan.catalog.loader import data_dir
from xmemplan.cli.main import run
from xmemplan.errors import InputError, UsageError


def test_kv_bytes_per_token_from_the_architecture() -> None:
    cat = load_catalog()
    # research/perf-model.md section 4: Qwen3-30B-A3B BF16 = 2 x 48 x 4 x 128 x 2.
    assert cat.model("qwen3-30b-a3b").kv_bytes_per_token == 98_304
    assert cat.model("qwen3-235b-a22b").kv_bytes_per_token == 2 * 94 * 4 * 128 * 2
    assert cat.model("llama-3.1-8b").kv_bytes_per_token == 131_072
    assert cat.model("llama-3.1-70b").kv_bytes_per_token == 327_680
    # MLA: one 512 latent + 64 rope key per layer.
    assert cat.model("deepseek-v3").kv_bytes_per_token == 61 * 576 * 2
    assert cat.model("qwen3-30b-a3b").attention_flops_coef == 393_216


def test_required_entries_exist_and_every_entry_has_a_source() -> None:
    cat = load_catalog()
    for name in ("qwen3-30b-a3b", "qwen3-235b-a22b", "llama-3.1-8b", "llama-3.1-70b",
                 "deepseek-v3"):
        assert cat.model(name).source
    for name in ("h100-sxm", "h200-sxm", "b200", "gb200"):
        g = cat.gpu(name)
        assert g.source and g.flops["bf16"] > 0 and g.flops["fp8"] > g.flops["bf16"]
    for name in ("host-dram-pcie5", "xmem", "rdma-cx7", "nvme-gen5", "hbm"):
        assert cat.tier(name).source
    xmem = cat.tier("xmem")
    assert xmem.capacity_bytes == 24e12
    assert xmem.node_bandwidth_bytes_per_s == 4e12
    assert xmem.per_gpu_link_bytes_per_s == 450e9
    assert xmem.latency_s > 0
    host = cat.tier("host-dram-pcie5")
    assert host.bandwidth_bytes_per_s is not None and host.effective_bandwidth_bytes_per_s
    assert host.effective_bandwidth_bytes_per_s < host.bandwidth_bytes_per_s


def test_every_number_in_the_data_files_has_a_source() -> None:
    import tomllib

    for path in shipped_files():
        doc = tomllib.loads(path.read_text())
        for kind, entries in doc.items():
            for name, table in entries.items():
                assert table.get("source"), f"{path}: [{kind}.{name}] has no source"


def test_aliases_and_case() -> None:
    cat = load_catalog()
    assert cat.gpu("H100").name == "h100-sxm"
    assert cat.tier("host-dram").name == "host-dram-pcie5"


@pytest.mark.parametrize("kind, name, known", [
    ("model", "qwen3-30b-a4b", "qwen3-30b-a3b"),
    ("gpu", "h1000-sxm", "h100-sxm"),
    ("tier", "xmen", "xmem"),
])
def test_unknown_name_lists_known_and_closest(kind: str, name: str, known: str) -> None:
    cat = load_catalog()
    with pytest.raises(UsageError) as info:
        getattr(cat, kind)(name)
    text = info.value.render()
    assert f"unknown {'GPU' if kind == 'gpu' else kind} '{name}'" in text
    assert "Closest: " + known in text
    listing = text.split("; known ")[1]
    for other in getattr(cat, kind + "s" if kind != "gpu" else "gpus"):
        assert other in listing


def test_data_is_found_in_the_repo_or_the_wheel_layout() -> None:
    root = data_dir()
    assert (root / "models").is_dir() and (root / "hardware").is_dir()
    assert root.name in ("data", "_data")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "extra.toml"
    p.write_text(text)
    return p


def test_extra_file_adds_and_overrides(tmp_path: Path) -> None:
    p = _write(tmp_path, """
[gpu.h100-sxm]
source = "my lab measurement"
pcie_bandwidth = "55GB/s"

[gpu.mygpu]
source = "vendor sheet"
bf16 = "100TFLOPS"
hbm_capacity = "64GB"
hbm_bandwidth = "2TB/s"
pcie_bandwidth = "32GB/s"
nvlink_bandwidth = "100GB/s"
gpus_per_server = 4
""")
    cat = load_catalog([p])
    h100 = cat.gpu("h100-sxm")
    assert h100.pcie_bandwidth_bytes_per_s == 55e9
    assert h100.hbm_bandwidth_bytes_per_s == 3.35e12  # untouched fields kept
    assert h100.sources["pcie_bandwidth"] == "my lab measurement"
    assert cat.gpu("mygpu").flops["bf16"] == 100e12
    assert load_catalog().gpu("h100-sxm").pcie_bandwidth_bytes_per_s == 64e9  # no leak


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    p = _write(tmp_path, """
[gpu.half]
source = "x"
bf16 = "100TFLOPS"
hbm_capacity = "64GB"
pcie_bandwidth = "32GB/s"
nvlink_bandwidth = "100GB/s"
gpus_per_server = 4
""")
    with pytest.raises(InputError) as info:
        load_catalog([p])
    assert info.value.field == "hbm_bandwidth"
    assert str(p) in info.value.render() and "missing" in info.value.render()


def test_value_without_unit_names_line_and_field(tmp_path: Path) -> None:
    p = _write(tmp_path, """
[tier.mytier]
source = "x"
kind = "host"
attach = "pcie"
capacity = "1TB"
capacity_scope = "server"
bandwidth = 50
latency = "3us"
""")
    with pytest.raises(InputError) as info:
        load_catalog([p])
    assert info.value.field == "bandwidth"
    assert info.value.line == 8
    assert "without a unit" in info.value.render()


@pytest.mark.parametrize("body, needle", [
    ('[gpu.x]\nbf16 = "1TFLOPS"\n', "no source"),
    ('[gpu.h100-sxm]\nsource = "x"\nhbm_bandwith = "1TB/s"\n', "Did you mean 'hbm_bandwidth'"),
    ('[gpu.h100-sxm]\nsource = "x"\nbf16 = "989 furlongs"\n', "bf16"),
    ('[widget.a]\nsource = "x"\n', "unknown table"),
    ('[gpu.h100-sxm\n', "not valid TOML"),
])
def test_bad_catalog_files(tmp_path: Path, body: str, needle: str) -> None:
    p = _write(tmp_path, body)
    with pytest.raises(InputError) as info:
        load_catalog([p])
    assert needle in info.value.render()


def test_missing_catalog_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such catalog file"):
        load_catalog([tmp_path / "nope.toml"])


def test_cli_catalog_json_and_errors(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert run(["catalog", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = {m["name"]: m for m in doc["models"]}
    assert names["qwen3-30b-a3b"]["kv_bytes_per_token"] == 98_304
    assert {t["name"] for t in doc["tiers"]} >= {"xmem", "host-dram-pcie5"}
    assert run(["catalog", "tiers", "--sources"]) == 0
    assert "lm-sys" in capsys.readouterr().out
    bad = _write(tmp_path, '[gpu.h100-sxm]\nsource = "x"\nhbm_bandwidth = 3\n')
    assert run(["catalog", "--catalog", str(bad)]) == 3
    err = capsys.readouterr().err
    assert "hbm_bandwidth" in err and "unit" in err and "Traceback" not in err
    assert run(["catalog", "widgets"]) == 2


def test_sources_with_json_is_refused(capsys) -> None:
    """JSON carries every entry's sources: --sources changed nothing there (exit 0)."""
    assert run(["catalog", "gpus", "--format", "json", "--sources"]) == 2
    got = capsys.readouterr()
    assert got.out == ""
    assert "Error: --sources adds the source column to the table or CSV" in got.err.replace(
        "\n  ", " ")
    assert run(["catalog", "gpus", "--format", "csv", "--sources"]) == 0
    assert ",source" in capsys.readouterr().out.splitlines()[0]
