"""Read the TOML catalog files into `ModelSpec`, `GpuSpec` and `TierSpec` records.

A catalog file holds any of `[model.NAME]`, `[gpu.NAME]` and `[tier.NAME]` tables. Each
table needs `source = "..."`; an optional `[KIND.NAME.sources]` table gives a per-field
source. Quantities carry units (`"80GB"`, `"3.35TB/s"`, `"989TFLOPS"`, `"3us"`); a bare
number where a unit is needed is an error, as is a missing or unknown field. Files given
with `--catalog` are read after the shipped ones: a new name adds an entry, an existing
name overrides the fields it lists (and must say where its numbers come from).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from xmemplan import units
from xmemplan.catalog.specs import CalibrationSpec, GpuSpec, ModelSpec, TierSpec
from xmemplan.errors import InputError, UsageError
from xmemplan.jsonio import parse_toml, read_text

KINDS = ("model", "gpu", "tier", "calibration")


def data_dir() -> Path:
    """The shipped data: `xmemplan/_data` in a wheel, else the repository's `data/`."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "_data", package.parent / "data"):
        if (candidate / "models").is_dir() and (candidate / "hardware").is_dir():
            return candidate
    raise InputError(
        "the shipped catalog data is missing",
        path=package / "_data",
        hint="reinstall xmemplan (the wheel carries data/ as xmemplan/_data)",
    )


def shipped_files() -> list[Path]:
    root = data_dir()
    return sorted((root / "models").glob("*.toml")) + sorted((root / "hardware").glob("*.toml"))


# --- field readers ---------------------------------------------------------------------

# Limits of plain-number fields (inclusive), checked with xmemplan.units.check_range; the
# message names the file, the entry and the field (InputError, exit 3).
MAX_DIM = 10**9  # layers, widths, heads, context: ~1,000x any published model
MAX_DTYPE_BYTES = 8  # bytes per KV element: fp64 at most
MAX_SERVER_GPUS = units.MAX_GPUS
MAX_BANKS = 1_000_000
MAX_ETA = 10.0  # a fitted share of a catalog peak: above 1 only when the peak is low


def _whole(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError("expected a whole number")
    return v


def _int_in(lo: int, hi: int) -> Callable[[Any], int]:
    """A whole number in [lo, hi] (lo = 1 where zero means nothing, 0 where it means 'none')."""
    def read(v: Any) -> int:
        return int(units.check_int(_whole(v), "value", lo, hi))

    return read


_int = _int_in(1, MAX_DIM)  # a positive whole number: zero or less means nothing here
_int0 = _int_in(0, MAX_DIM)  # zero allowed: none (dense model, no MLA, not published)


def _float_in(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[Any], float]:
    """A finite plain number in the range (NaN, infinities and 1e400 refused)."""
    def read(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError("expected a number")
        return units.check_range(float(v), "value", lo, hi, lo_open=lo_open)

    return read


_share = _float_in(0.0, 1.0, lo_open=True)  # a share of a nominal figure: (0, 1]
_share0 = _float_in(0.0, 1.0)  # a slowdown share: [0, 1]
_eta = _float_in(0.0, MAX_ETA, lo_open=True)


def _text(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("expected a non-empty string")
    return v


def _count_in(lo: int) -> Callable[[Any], int]:
    def read(v: Any) -> int:
        if isinstance(v, int) and not isinstance(v, bool):
            return int(units.check_int(v, "parameter count", lo, units.MAX_COUNT))
        if isinstance(v, str):
            return units.parse_count(v, "parameter count", lo=lo)
        raise ValueError("expected a count like 2.73B or 30500000000")

    return read


_count = _count_in(1)
_count0 = _count_in(0)


def _unit(parse: Callable[[str], float], example: str) -> Callable[[Any], float]:
    def read(v: Any) -> float:
        if not isinstance(v, str):
            raise ValueError(f"value without a unit: write it like \"{example}\"")
        return parse(v)

    return read


_bytes = _unit(units.parse_bytes, "80GB")
_bw = _unit(units.parse_bandwidth, "50GB/s")
_flops = _unit(units.parse_flops, "989TFLOPS")
_time = _unit(units.parse_duration, "3us")


def _choice(*options: str) -> Callable[[Any], str]:
    def read(v: Any) -> str:
        if v not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return str(v)

    return read


def _list(reader: Callable[[Any], float]) -> Callable[[Any], tuple[float, ...]]:
    def read(v: Any) -> tuple[float, ...]:
        if not isinstance(v, list) or not v:
            raise ValueError("expected a non-empty list")
        return tuple(reader(x) for x in v)

    return read


def _aliases_text(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ValueError("expected a list of texts")
    return tuple(v)


def _aliases(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError("expected a list of names")
    return tuple(x.lower() for x in v)


# field -> (reader, required)
_COMMON: dict[str, tuple[Callable[[Any], Any], bool]] = {
    "display_name": (_text, False),
    "source": (_text, True),
    "aliases": (_aliases, False),
}
_MODEL_FIELDS = {
    **_COMMON,
    "attention": (_choice("gqa", "mla"), True),
    "layers": (_int, True),
    "hidden_size": (_int, True),
    "q_heads": (_int, True),
    "kv_heads": (_int, False),
    "head_dim": (_int, False),
    "kv_dtype_bytes": (_int_in(1, MAX_DTYPE_BYTES), True),
    "weight_dtype": (_choice("bf16", "fp16", "fp8", "fp4"), True),
    "active_params": (_count, True),
    "total_params": (_count, True),
    "kv_lora_rank": (_int, False),
    "qk_rope_head_dim": (_int, False),
    "qk_nope_head_dim": (_int, False),
    "v_head_dim": (_int, False),
    "experts": (_int0, False),
    "experts_per_token": (_int0, False),
    "expert_params": (_count0, False),
    "max_context": (_int, False),
}
_GPU_FIELDS = {
    **_COMMON,
    "bf16": (_flops, True),
    "fp16": (_flops, False),
    "fp8": (_flops, False),
    "fp4": (_flops, False),
    "hbm_capacity": (_bytes, True),
    "device_memory": (_bytes, False),
    "hbm_bandwidth": (_bw, True),
    "pcie_bandwidth": (_bw, True),
    "nvlink_bandwidth": (_bw, True),
    "gpus_per_server": (_int_in(1, MAX_SERVER_GPUS), True),
    "host_link": (_choice("pcie", "c2c"), False),
    "host_link_bandwidth": (_bw, False),
    "gpus_per_host_uplink": (_int_in(1, MAX_SERVER_GPUS), False),
    "host_uplink_bandwidth": (_bw, False),
    "gpus_per_socket": (_int_in(0, MAX_SERVER_GPUS), False),
    "socket_dram_bandwidth": (_bw, False),
    "host_copy_bandwidth": (_bw, False),
}
_TIER_FIELDS = {
    **_COMMON,
    "kind": (_choice("hbm", "host", "xmem", "rdma", "nvme"), True),
    "attach": (_choice("hbm", "pcie", "nvlink", "nic", "host"), True),
    "capacity": (_bytes, False),
    "capacity_scope": (_choice("gpu", "server", "node", "drive"), True),
    "bandwidth": (_bw, False),
    "effective_bandwidth": (_bw, False),
    "node_bandwidth": (_bw, False),
    "per_gpu_link": (_bw, False),
    "efficiency": (_share, False),
    "latency": (_time, True),
    "banks": (_int_in(1, MAX_BANKS), False),
    "transfer_chunk": (_list(_bytes), False),
    "transfer_dma": (_list(_bw), False),
    "transfer_kernel": (_list(_bw), False),
    "node_efficiency": (_share, False),
    "sm_interference": (_share0, False),
    "unpublished": (_aliases_text, False),
    "share_scope": (_choice("replica", "server", "rack", "cluster"), False),
    "share_gpus": (_int_in(1, 1 << 20), False),
}
# [calibration.ENGINE]: constants of the TTFT model fitted by `xmemplan calibrate`.
_CALIBRATION_FIELDS: dict[str, tuple[Callable[[Any], Any], bool]] = {
    **_COMMON,
    "eta_linear": (_eta, False),
    "eta_attention": (_eta, False),
    "fixed_overhead": (_time, False),
    "per_token_overhead": (_time, False),
    "host_bandwidth": (_bw, False),
    "xmem_bandwidth": (_bw, False),
    "hbm_efficiency": (_eta, False),
    "host_efficiency": (_eta, False),
    "layer_latency": (_time, False),
    "moe_layer_latency": (_time, False),
    "allreduce_latency": (_time, False),
    "allreduce_bus_share": (_share, False),
    "floor_rule": (_choice("add", "max"), False),
    "step_base": (_time, False),
    "step_per_token": (_time, False),
    "step_per_seq": (_time, False),
    "points": (_int0, False),
}
_FIELDS = {"model": _MODEL_FIELDS, "gpu": _GPU_FIELDS, "tier": _TIER_FIELDS,
           "calibration": _CALIBRATION_FIELDS}


@dataclass
class _Raw:
    """One entry's fields as read, with where each came from (for error messages)."""

    fields: dict[str, Any]
    where: dict[str, tuple[Path, int | None]]
    sources: dict[str, str]


def _line_of(text: str, kind: str, name: str, fieldname: str | None) -> int | None:
    lines = text.splitlines()
    i = _header_index(lines, kind, name)
    if i is None:
        return None
    return i + 1 if fieldname is None else _field_line(lines, i, fieldname)


def _header_index(lines: list[str], kind: str, name: str) -> int | None:
    """The 0-based line of the first `[kind.name]` header, None when there is none."""
    header = re.compile(r"^\s*\[\s*" + re.escape(kind) + r'\s*\.\s*"?' + re.escape(name)
                        + r'"?\s*\]\s*$')
    for i, line in enumerate(lines):
        if header.match(line):
            return i
    return None


def _field_line(lines: list[str], i: int, fieldname: str) -> int:
    """The 1-based line of `fieldname = ...` in the table whose header is line i (the
    header's own line when the table does not set it on a line of its own)."""
    field = re.compile(r"^\s*" + re.escape(fieldname) + r"\s*=")
    for j in range(i + 1, len(lines)):
        if lines[j].lstrip().startswith("["):
            break
        if field.match(lines[j]):
            return j + 1
    return i + 1


def _read_file(path: Path, raws: dict[str, dict[str, _Raw]], override: bool) -> None:
    text = read_text(path, "catalog file", hint="pass a catalog TOML file")
    doc = parse_toml(text, path)
    lines = text.splitlines()
    unknown_top = [k for k in doc if k not in KINDS]
    if unknown_top:
        raise InputError(
            f"unknown table '[{unknown_top[0]}]'", path=path,
            line=_line_of(text, unknown_top[0], "", None),
            hint="catalog files hold [model.NAME], [gpu.NAME], [tier.NAME] and "
            "[calibration.ENGINE] tables",
        )
    for kind, entries in doc.items():
        if not isinstance(entries, dict):
            raise InputError(f"'{kind}' must be a table of named entries", path=path)
        for name, table in entries.items():
            key = name.lower()
            if not isinstance(table, dict):
                raise InputError(
                    f"'{kind}.{name}' must be a table", path=path,
                    line=_line_of(text, kind, name, None),
                )
            if "source" not in table:
                raise InputError(
                    f"[{kind}.{name}] has no source", path=path, field="source",
                    line=_line_of(text, kind, name, None),
                    hint='add source = "where these numbers come from"',
                )
            fields = {k: v for k, v in table.items() if k != "sources"}
            per_field = table.get("sources", {})
            if not isinstance(per_field, dict):
                raise InputError("'sources' must be a table", path=path, field="sources")
            # each entry's header found once (not once per field: 25 ms of every command)
            head = _header_index(lines, kind, name)
            where = {f: (path, None if head is None else _field_line(lines, head, f))
                     for f in fields}
            existing = raws[kind].get(key)
            if existing is not None and override:
                existing.fields.update(fields)
                existing.where.update(where)
                # Fields this file sets are sourced by this file.
                for f in fields:
                    existing.sources[f] = str(per_field.get(f, fields["source"]))
                existing.sources.update({k: str(v) for k, v in per_field.items()})
            else:
                raws[kind][key] = _Raw(
                    dict(fields), where, {k: str(v) for k, v in per_field.items()}
                )


def _build(kind: str, name: str, raw: _Raw) -> Any:
    spec = _FIELDS[kind]
    values: dict[str, Any] = {}
    for f, v in raw.fields.items():
        path, line = raw.where.get(f, (Path("?"), None))
        if f not in spec:
            close = difflib.get_close_matches(f, list(spec), n=1)
            raise InputError(
                f"unknown field in [{kind}.{name}]", path=path, line=line, field=f,
                hint=f"did you mean '{close[0]}'?" if close else
                f"known fields: {', '.join(sorted(spec))}",
            )
        try:
            values[f] = spec[f][0](v)
        except (ValueError, UsageError) as exc:
            msg = exc.render() if isinstance(exc, UsageError) else str(exc)
            raise InputError(
                f"[{kind}.{name}]: {msg}", path=path, line=line, field=f
            ) from None
    for f, (_, required) in spec.items():
        if required and f not in values:
            path, line = next(iter(raw.where.values()), (Path("?"), None))
            raise InputError(
                f"[{kind}.{name}] is missing a required field", path=path, field=f,
                hint=f"add {f} = ... with its unit",
            )
    origin = str(next(iter(raw.where.values()))[0]) if raw.where else ""
    common = dict(
        name=name,
        display_name=values.get("display_name", name),
        source=values["source"],
        sources=dict(raw.sources),
        aliases=values.get("aliases", ()),
        origin=origin,
    )
    first = next(iter(raw.where.values()), (Path("?"), None))
    if kind == "calibration":
        return CalibrationSpec(
            engine=name, source=values["source"], origin=origin,
            values={k: float(v) for k, v in values.items()
                    if k not in ("display_name", "source", "aliases", "floor_rule")},
            rules={k: str(values[k]) for k in ("floor_rule",) if k in values},
        )
    if kind == "model":
        attention = values["attention"]
        need = ("kv_heads", "head_dim") if attention == "gqa" else (
            "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        for f in need:
            if f not in values:
                raise InputError(
                    f"[model.{name}] ({attention}) is missing a required field",
                    path=first[0], field=f,
                )
        _model_rules(name, values, raw)
        return ModelSpec(
            **common,
            attention=attention,
            layers=values["layers"],
            hidden_size=values["hidden_size"],
            q_heads=values["q_heads"],
            kv_heads=values.get("kv_heads", 0),
            head_dim=values.get("head_dim", 0),
            kv_dtype_bytes=values["kv_dtype_bytes"],
            weight_dtype=values["weight_dtype"],
            active_params=values["active_params"],
            total_params=values["total_params"],
            kv_lora_rank=values.get("kv_lora_rank", 0),
            qk_rope_head_dim=values.get("qk_rope_head_dim", 0),
            qk_nope_head_dim=values.get("qk_nope_head_dim", 0),
            v_head_dim=values.get("v_head_dim", 0),
            experts=values.get("experts", 0),
            experts_per_token=values.get("experts_per_token", 0),
            expert_params=values.get("expert_params", 0),
            max_context=values.get("max_context", 0),
        )
    if kind == "gpu":
        flops: dict[str, float] = {
            d: values[d] for d in ("bf16", "fp16", "fp8", "fp4") if d in values
        }
        flops.setdefault("fp16", flops["bf16"])
        return GpuSpec(
            **common,
            flops=flops,
            hbm_capacity_bytes=values["hbm_capacity"],
            device_memory_bytes=values.get("device_memory", 0.0),
            hbm_bandwidth_bytes_per_s=values["hbm_bandwidth"],
            pcie_bandwidth_bytes_per_s=values["pcie_bandwidth"],
            nvlink_bandwidth_bytes_per_s=values["nvlink_bandwidth"],
            gpus_per_server=values["gpus_per_server"],
            host_link=values.get("host_link", "pcie"),
            host_link_bandwidth_bytes_per_s=values.get("host_link_bandwidth"),
            gpus_per_host_uplink=values.get("gpus_per_host_uplink", 1),
            host_uplink_bandwidth_bytes_per_s=values.get("host_uplink_bandwidth"),
            gpus_per_socket=values.get("gpus_per_socket", 0),
            socket_dram_bandwidth_bytes_per_s=values.get("socket_dram_bandwidth"),
            host_copy_bandwidth_bytes_per_s=values.get("host_copy_bandwidth"),
        )
    if values["kind"] != "hbm":
        for f in ("capacity", "bandwidth"):
            if f not in values:
                raise InputError(
                    f"[tier.{name}] is missing a required field", path=first[0], field=f,
                    hint="every tier but hbm needs capacity and bandwidth",
                )
    curve = [values.get(f, ()) for f in ("transfer_chunk", "transfer_dma", "transfer_kernel")]
    if any(curve) and len({len(c) for c in curve}) != 1:
        raise InputError(
            f"[tier.{name}]: transfer_chunk, transfer_dma and transfer_kernel must have the "
            "same length", path=first[0], field="transfer_chunk",
        )
    return TierSpec(
        **common,
        kind=values["kind"],
        attach=values["attach"],
        capacity_bytes=values.get("capacity"),
        capacity_scope=values["capacity_scope"],
        bandwidth_bytes_per_s=values.get("bandwidth"),
        effective_bandwidth_bytes_per_s=values.get("effective_bandwidth"),
        node_bandwidth_bytes_per_s=values.get("node_bandwidth"),
        per_gpu_link_bytes_per_s=values.get("per_gpu_link"),
        efficiency=values.get("efficiency"),
        latency_s=values["latency"],
        banks=values.get("banks"),
        transfer_chunk_bytes=curve[0],
        transfer_dma_bytes_per_s=curve[1],
        transfer_kernel_bytes_per_s=curve[2],
        node_efficiency=values.get("node_efficiency"),
        sm_interference=values.get("sm_interference", 0.0),
        unpublished=values.get("unpublished", ()),
        share_scope=values.get("share_scope", "replica"),
        share_gpus=values.get("share_gpus"),
    )


# Cross-field rules of a model entry: (field, the field it may not exceed). Each names the
# file, the line and the field of the entry that breaks it (the fields may come from two
# files: an overlay over the shipped catalog).
_AT_MOST = (("active_params", "total_params"), ("experts_per_token", "experts"),
            ("expert_params", "total_params"), ("kv_heads", "q_heads"))


def _model_rules(name: str, values: dict[str, Any], raw: _Raw) -> None:
    for small, big in _AT_MOST:
        a, b = values.get(small), values.get(big)
        if not a or not b or a <= b:
            continue
        path, line = raw.where.get(small, raw.where.get(big, (Path("?"), None)))
        raise InputError(
            f"[model.{name}]: {small} {a:,} is more than {big} {b:,}", path=path, line=line,
            field=small, hint=f"check both fields: {small} is at most {big}")


class Catalog:
    """Models, GPUs and tiers by lowercase name; lookups accept aliases."""

    def __init__(
        self,
        models: Mapping[str, ModelSpec],
        gpus: Mapping[str, GpuSpec],
        tiers: Mapping[str, TierSpec],
        files: Iterable[Path] = (),
        calibrations: Mapping[str, CalibrationSpec] | None = None,
    ) -> None:
        self.models: Mapping[str, ModelSpec] = MappingProxyType(dict(models))
        self.gpus: Mapping[str, GpuSpec] = MappingProxyType(dict(gpus))
        self.tiers: Mapping[str, TierSpec] = MappingProxyType(dict(tiers))
        self.calibrations: Mapping[str, CalibrationSpec] = MappingProxyType(
            dict(calibrations or {}))
        self.files = tuple(files)

    def model(self, name: str) -> ModelSpec:
        return _lookup(self.models, name, "model")

    def gpu(self, name: str) -> GpuSpec:
        return _lookup(self.gpus, name, "GPU")

    def tier(self, name: str) -> TierSpec:
        return _lookup(self.tiers, name, "tier")


def _lookup(entries: Mapping[str, Any], name: str, what: str) -> Any:
    key = name.strip().lower()
    if key in entries:
        return entries[key]
    for entry in entries.values():
        if key in entry.aliases:
            return entry
    names = sorted(entries)
    candidates = names + [a for e in entries.values() for a in e.aliases]
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.5)
    close_names = []
    for c in close:
        real = c if c in entries else next(e.name for e in entries.values() if c in e.aliases)
        if real not in close_names:
            close_names.append(real)
    hint = f"known {what}s: {', '.join(names)}"
    if close_names:
        hint = f"closest: {', '.join(close_names)}; " + hint
    raise UsageError(f"unknown {what} '{name}'", hint + " (add your own with --catalog FILE)")


@lru_cache(maxsize=16)
def _load(files: tuple[Path, ...], n_shipped: int) -> Catalog:
    raws: dict[str, dict[str, _Raw]] = {k: {} for k in KINDS}
    for i, path in enumerate(files):
        _read_file(path, raws, override=i >= n_shipped)
    built = {k: {n: _build(k, n, r) for n, r in raws[k].items()} for k in KINDS}
    return Catalog(built["model"], built["gpu"], built["tier"], files, built["calibration"])


def load_catalog(extra: Iterable[Path | str] = ()) -> Catalog:
    """The shipped catalog plus `extra` files (later files add or override entries)."""
    shipped = shipped_files()
    files = tuple(shipped) + tuple(Path(p) for p in extra)
    return _load(files, len(shipped))
