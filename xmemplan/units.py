"""Parse and format the units used on the command line and in data files, in one place.

Conventions (stated once, used everywhere):
- Counts (tokens, requests): SI suffixes are powers of 1000 (`64k` = 64,000; `3M` =
  3,000,000), IEC suffixes powers of 1024 (`64Ki` = 65,536). Prompt sizes in the LLM
  literature ("64K context") usually mean 65,536: write `64Ki` for that.
- Bytes: GB = 1e9 bytes, GiB = 2**30 bytes; likewise kB/KiB, MB/MiB, TB/TiB, PB/PiB.
- Bandwidth: bytes per second with a byte unit over `/s` (`4TB/s`, `50GB/s`, `25GiB/s`).
- Durations: `us`, `ms`, `s`, `m`/`min`, `h` (`500ms`, `2.5s`, `5m`). A bare number is
  rejected: write the unit.
"""

from __future__ import annotations

import math
import re

from xmemplan.errors import UsageError

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

_COUNT_SUFFIX = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "B": 1e9,
    "T": 1e12,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}

_BYTE_UNIT = {
    "B": 1.0,
    "kB": 1e3,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "PB": 1e15,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
    "TiB": 2.0**40,
    "PiB": 2.0**50,
}

_DURATION_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    m = re.fullmatch(_NUM + r"\s*([A-Za-zµ/]*)", text.strip())
    if not m:
        raise UsageError(f"cannot read {what} '{text}'", f"write it like '{example}'")
    return float(m.group(1)), m.group(2)


def parse_count(text: str | int | float, what: str = "count") -> int:
    """`"64k"` -> 64000, `"64Ki"` -> 65536, `"3M"` -> 3000000. Must be a whole number >= 0."""
    if isinstance(text, int | float):
        value, suffix = float(text), ""
    else:
        value, suffix = _split(text, what, "64k, 3M or 64Ki")
    if suffix not in _COUNT_SUFFIX:
        raise UsageError(
            f"unknown suffix '{suffix}' in {what} '{text}'",
            "use k, M, G (powers of 1000) or Ki, Mi, Gi (powers of 1024)",
        )
    n = value * _COUNT_SUFFIX[suffix]
    if not math.isfinite(n) or n < 0 or abs(n - round(n)) > 1e-6 * max(1.0, n):
        raise UsageError(f"{what} '{text}' is not a whole non-negative number")
    return int(round(n))


def parse_bytes(text: str, what: str = "size") -> float:
    """`"24TB"` -> 24e12, `"80GiB"` -> 80 * 2**30. A unit is required."""
    value, unit = _split(text, what, "80GB, 24TB or 64GiB")
    if unit not in _BYTE_UNIT:
        raise UsageError(
            f"{what} '{text}' has no byte unit" if not unit else f"unknown unit '{unit}' in {what}",
            "write it with B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB",
        )
    return value * _BYTE_UNIT[unit]


def is_byte_quantity(text: str) -> bool:
    """True if `text` carries a byte unit (used to tell `--capacity 80GB` from `3M`)."""
    m = re.fullmatch(_NUM + r"\s*([A-Za-z]*)", text.strip())
    return m is not None and m.group(2) in _BYTE_UNIT


def parse_bandwidth(text: str, what: str = "bandwidth") -> float:
    """`"4TB/s"` -> 4e12 bytes/s. The `/s` is required."""
    value, unit = _split(text, what, "4TB/s or 50GB/s")
    if not unit.endswith("/s") or unit[:-2] not in _BYTE_UNIT:
        raise UsageError(
            f"cannot read {what} '{text}'", "write bytes per second, like '4TB/s' or '50GB/s'"
        )
    return value * _BYTE_UNIT[unit[:-2]]


def parse_duration(text: str, what: str = "duration") -> float:
    """`"500ms"` -> 0.5 (seconds). A unit is required: a bare number is ambiguous."""
    value, unit = _split(text, what, "500ms, 2s or 5m")
    if unit not in _DURATION_UNIT:
        raise UsageError(
            f"{what} '{text}' has no time unit" if not unit else f"unknown unit '{unit}' in {what}",
            "write it with us, ms, s, m or h, like '500ms'",
        )
    return value * _DURATION_UNIT[unit]


def format_count(n: float) -> str:
    """12345678 -> '12.3M' (powers of 1000)."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:g}"


def format_bytes(n: float) -> str:
    """1.5e12 -> '1.5 TB' (powers of 1000)."""
    for div, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:g} B"


_FLOPS_UNIT = {"FLOPS": 1.0, "GFLOPS": 1e9, "TFLOPS": 1e12, "PFLOPS": 1e15}


def parse_flops(text: str, what: str = "compute rate") -> float:
    """`"989TFLOPS"` -> 9.89e14 floating-point operations per second. A unit is required."""
    value, unit = _split(text, what, "989TFLOPS")
    if unit not in _FLOPS_UNIT:
        problem = f"{what} '{text}' has no FLOPS unit" if not unit else f"unknown unit '{unit}'"
        raise UsageError(
            problem,
            "write it with GFLOPS, TFLOPS or PFLOPS, like '989TFLOPS'",
        )
    return value * _FLOPS_UNIT[unit]
