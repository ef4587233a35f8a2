"""`XMemConfig`: the one configuration of the X-Mem HiCache backend.

Built either directly (library, `validate`) or from SGLang's `HiCacheStorageConfig` plus the
`--hicache-storage-backend-extra-config` JSON (`XMemConfig.from_sglang`). Units: bytes,
bytes per second (GB/s = 1e9 B/s) and seconds; the extra config also takes unit strings
("64GiB", "25GB/s", "5us").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from xmemplan.errors import UsageError

MODES = ("auto", "real", "emulate", "dram")
EVICTIONS = ("lru", "refuse")

# Extra-config keys this backend reads (SGLang leaves backend_name, module_path, class_name
# and interface_v1 in the dict too; they are accepted and ignored here).
_EXTRA_KEYS = {
    "xmem_mode": "mode",
    "xmem_capacity": "capacity_bytes",
    "xmem_banks": "banks",
    "xmem_device": "device",
    "xmem_page_bytes": "page_bytes",
    "emu_read_bandwidth": "read_bytes_per_s",
    "emu_write_bandwidth": "write_bytes_per_s",
    "emu_bank_bandwidth": "bank_bytes_per_s",
    "emu_link_bandwidth": "link_bytes_per_s",
    "emu_op_latency": "op_latency_s",
    "emu_shaping": "shaping",
    "emu_time_scale": "time_scale",
    "eviction": "eviction",
    "checksum": "checksum",
    "key_prefix": "key_prefix",
    "strict": "strict",
}
_SGLANG_KEYS = {"backend_name", "module_path", "class_name", "interface_v1"}


@dataclass(frozen=True)
class XMemConfig:
    """Settings of one `XMemHiCacheStorage` (one TP/PP rank of one server)."""

    mode: str = "auto"
    capacity_bytes: int = 1 << 30
    banks: int = 4
    page_bytes: int | None = None  # slot size; None: one page of the registered host pool
    device: int = 0  # CUDA device of the X-Mem allocations (real mode)
    # Emulated tier (emulate/dram); None = no limit from that resource.
    read_bytes_per_s: float | None = None  # whole node, reads (tier -> host)
    write_bytes_per_s: float | None = None  # whole node, writes (host -> tier)
    bank_bytes_per_s: float | None = None  # one bank, either direction
    link_bytes_per_s: float | None = None  # this client's link (per GPU)
    op_latency_s: float = 0.0  # fixed cost of one batch operation
    shaping: bool = True  # False: copies run at memory speed, no sleeps
    pin_host: bool = True  # dram mode: page-lock the arena when torch sees CUDA
    # Wall time of the emulated tier is time_scale x the tier's time: lets a machine whose
    # memcpy is slower than the tier emulate it faithfully (validate divides it back out).
    time_scale: float = 1.0
    eviction: str = "lru"
    checksum: bool = True
    strict: bool = False  # raise on a corrupt page instead of reporting a miss
    key_prefix: str = ""
    # Key suffix (SGLang's keys carry none of this).
    model_name: str = "model"
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    layout: str = "page_first"
    dtype: str = "bfloat16"
    page_size: int = 64
    enable_storage_metrics: bool = False
    # Fault injection (tests): probability per page op of a failure / of a delay.
    fault_rate: float = 0.0
    delay_rate: float = 0.0
    delay_s: float = 0.0
    fault_seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown X-Mem mode '{self.mode}'", f"use one of {', '.join(MODES)}")
        if self.eviction not in EVICTIONS:
            raise UsageError(
                f"unknown eviction '{self.eviction}'", f"use one of {', '.join(EVICTIONS)}"
            )
        if self.capacity_bytes <= 0 or self.banks < 1:
            raise UsageError("X-Mem capacity and bank count must be positive")
        if self.page_bytes is not None and self.page_bytes <= 0:
            raise UsageError("page_bytes must be positive")
        for name in ("read_bytes_per_s", "write_bytes_per_s", "bank_bytes_per_s",
                     "link_bytes_per_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be positive")
        if self.op_latency_s < 0 or self.time_scale <= 0:
            raise UsageError("op latency must be >= 0 and time scale > 0")

    def replace(self, **changes: Any) -> XMemConfig:
        return dataclasses.replace(self, **changes)

    @property
    def suffix(self) -> str:
        """Appended to every key: one rank's page of one model in one layout and dtype."""
        s = f"_{self.model_name.replace('/', '-')}_{self.tp_rank}_{self.tp_size}"
        if self.pp_size > 1:
            s += f"_pp{self.pp_rank}_{self.pp_size}"
        return s + f"_{self.layout}_{self.dtype}_{self.page_size}"

    @classmethod
    def from_sglang(cls, storage_config: Any, extra: dict[str, Any] | None = None) -> XMemConfig:
        """From SGLang's `HiCacheStorageConfig` (read with getattr: fields vary by version)."""
        if extra is None:
            extra = getattr(storage_config, "extra_config", None) or {}
        fields: dict[str, Any] = {}
        if storage_config is not None:
            model = getattr(storage_config, "model_name", None)
            if model:
                fields["model_name"] = str(model)
            for name in ("tp_rank", "tp_size", "pp_rank", "pp_size"):
                value = getattr(storage_config, name, None)
                if isinstance(value, int):
                    fields[name] = value
            fields["layout"] = (
                "page_first" if getattr(storage_config, "is_page_first_layout", False)
                else "layer_first"
            )
            fields["enable_storage_metrics"] = bool(
                getattr(storage_config, "enable_storage_metrics", False)
            )
        unknown = [
            k for k in extra
            if (k.startswith(("xmem_", "emu_")) and k not in _EXTRA_KEYS)
        ]
        if unknown:
            raise UsageError(
                f"unknown X-Mem extra-config key(s): {', '.join(sorted(unknown))}",
                f"known keys: {', '.join(sorted(_EXTRA_KEYS))}",
            )
        for key, value in extra.items():
            if key in _SGLANG_KEYS or key not in _EXTRA_KEYS:
                continue
            fields[_EXTRA_KEYS[key]] = _parse_value(_EXTRA_KEYS[key], value)
        return cls(**fields)


def _parse_value(field: str, value: Any) -> Any:
    from xmemplan import units

    if field in ("capacity_bytes", "page_bytes"):
        return int(units.parse_bytes(value, field) if isinstance(value, str) else value)
    if field.endswith("_bytes_per_s"):
        return float(units.parse_bandwidth(value, field) if isinstance(value, str) else value)
    if field == "op_latency_s":
        return float(units.parse_duration(value, field) if isinstance(value, str) else value)
    if field in ("banks", "device"):
        return int(value)
    if field == "time_scale":
        return float(value)
    if field in ("shaping", "checksum", "strict"):
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)
    return str(value)
