"""Parse and format the units used on the command line and in data files, in one place.

Conventions (stated once, used everywhere):
- Counts (tokens, requests): SI suffixes are powers of 1000 (`64k` = 64,000; `3M` =
  3,000,000), IEC suffixes powers of 1024 (`64Ki` = 65,536). Prompt sizes in the LLM
  literature ("64K context") usually mean 65,536: write `64Ki` for that.
- Bytes: GB = 1e9 bytes, GiB = 2**30 bytes; likewise kB/KiB, MB/MiB, TB/TiB, PB/PiB.
- Bandwidth: bytes per second with a byte unit over `/s` (`4TB/s`, `50GB/s`, `25GiB/s`).
- Durations: `us`, `ms`, `s`, `m`/`min`, `h` (`500ms`, `2.5s`, `5m`). A bare number is
  rejected: write the unit.

Every parser here checks its range at the border (docs/reliability.md): NaN, infinities and
values that overflow (`1e400s`, `1e30` tokens) are refused, and a value outside the allowed
range raises `UsageError` naming the flag or field and the range. Each quantity has its
limits below (`MAX_*`), chosen well above anything real and well inside int64 and float64,
so a typo is caught before it reaches an array or a search.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from xmemplan.errors import UsageError

# Limits per quantity (inclusive). Generous: each is far above any real value and far below
# what overflows an int64 (9.2e18) or makes a search run for ever.
MAX_COUNT = 10**18  # any count: fits int64 with room for sums
MAX_PROMPT_TOKENS = 100_000_000  # one prompt: ~50x the longest context windows (2M tokens)
MAX_CACHE_TOKENS = 10**15  # a cache: 1e15 tokens is ~100 EB of KV for a 70B model
MAX_PAGE_TOKENS = 1 << 20  # tokens per KV page (SGLang 1-64, vLLM 16)
MAX_BYTES = 1e18  # 1 EB: ~40,000 fully populated 24 TB X-Mem nodes
MAX_BANDWIDTH = 1e15  # 1 PB/s: 250x an X-Mem node (4 TB/s), 500x NVLink 5 (1.8 TB/s)
MAX_FLOPS = 1e18  # 1 EFLOPS: 100x a B200's dense FP4
MAX_DURATION_S = 366 * 86400.0  # a year
MAX_RATE = 1e6  # requests per second over a whole deployment
MAX_GPUS = 100_000
MAX_CONCURRENCY = 100_000  # prefills in flight per GPU (real engines: tens)
MAX_SESSIONS = 1_000_000
MAX_REQUESTS = 10_000_000

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


def parse_count(
    text: str | int | float, what: str = "count", lo: int = 0, hi: int = MAX_COUNT
) -> int:
    """`"64k"` -> 64000, `"64Ki"` -> 65536, `"3M"` -> 3000000. A whole number in [lo, hi]."""
    if isinstance(text, bool):
        raise UsageError(f"{what} '{text}' is not a number")
    if isinstance(text, int):
        check_range(text, what, lo, hi)
        return text
    if isinstance(text, float):
        value, suffix = text, ""
    else:
        value, suffix = _split(text, what, "64k, 3M or 64Ki")
    if suffix not in _COUNT_SUFFIX:
        raise UsageError(
            f"unknown suffix '{suffix}' in {what} '{text}'",
            "use k, M, G (powers of 1000) or Ki, Mi, Gi (powers of 1024)",
        )
    n = value * _COUNT_SUFFIX[suffix]
    check_range(n, what, lo, hi, text=str(text))
    if n < 0 or abs(n - round(n)) > 1e-6 * max(1.0, n):
        raise UsageError(f"{what} '{text}' is not a whole non-negative number")
    return int(round(n))


def parse_bytes(
    text: str, what: str = "size", lo: float = 0.0, hi: float = MAX_BYTES, *, lo_open: bool = True
) -> float:
    """`"24TB"` -> 24e12, `"80GiB"` -> 80 * 2**30. A unit is required; (0, 1 EB] by default."""
    value, unit = _split(text, what, "80GB, 24TB or 64GiB")
    if unit not in _BYTE_UNIT:
        raise UsageError(
            f"{what} '{text}' has no byte unit" if not unit else f"unknown unit '{unit}' in {what}",
            "write it with B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB",
        )
    return check_range(value * _BYTE_UNIT[unit], what, lo, hi, lo_open=lo_open, text=text,
                       show=_fmt_bytes_limit)


def _fmt_bytes_limit(x: float) -> str:
    if x >= 1e18:
        return f"{x / 1e18:g}EB"
    return format_bytes(x).replace(" ", "")


def _fmt_seconds(x: float) -> str:
    for div, unit in ((86400.0, "days"), (3600.0, "h"), (1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(x) >= div:
            return f"{x / div:g} {unit}"
    return f"{x:g} s"


def is_byte_quantity(text: str) -> bool:
    """True if `text` carries a byte unit (used to tell `--capacity 80GB` from `3M`)."""
    m = re.fullmatch(_NUM + r"\s*([A-Za-z]*)", text.strip())
    return m is not None and m.group(2) in _BYTE_UNIT


def parse_bandwidth(
    text: str, what: str = "bandwidth", lo: float = 0.0, hi: float = MAX_BANDWIDTH
) -> float:
    """`"4TB/s"` -> 4e12 bytes/s. The `/s` is required; a zero bandwidth is refused (it would
    read as a tier that never delivers, or, divided through, as an unlimited one)."""
    value, unit = _split(text, what, "4TB/s or 50GB/s")
    if not unit.endswith("/s") or unit[:-2] not in _BYTE_UNIT:
        raise UsageError(
            f"cannot read {what} '{text}'", "write bytes per second, like '4TB/s' or '50GB/s'"
        )
    return check_range(value * _BYTE_UNIT[unit[:-2]], what, lo, hi, lo_open=True,
                       text=text, show=lambda x: _fmt_bytes_limit(x) + "/s")


def parse_duration(
    text: str, what: str = "duration", lo: float = 0.0, hi: float = MAX_DURATION_S, *,
    lo_open: bool = False,
) -> float:
    """`"500ms"` -> 0.5 (seconds). A unit is required: a bare number is ambiguous.

    [0 s, a year] by default; an SLO or an idle time passes `lo_open=True` (positive)."""
    value, unit = _split(text, what, "500ms, 2s or 5m")
    if unit not in _DURATION_UNIT:
        raise UsageError(
            f"{what} '{text}' has no time unit" if not unit else f"unknown unit '{unit}' in {what}",
            "write it with us, ms, s, m or h, like '500ms'",
        )
    return check_range(value * _DURATION_UNIT[unit], what, lo, hi, lo_open=lo_open, text=text,
                       show=_fmt_seconds)


def _fmt_limit(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    if float(x).is_integer():
        mant, exp = f"{x:.6e}".split("e")
        return f"{float(mant):g}e{int(exp)}"
    return f"{x:.6g}"


def range_text(lo: float | None, hi: float | None, unit: str = "", lo_open: bool = False,
               show: Callable[[float], str] | None = None) -> str:
    """`[1, 1,048,576] tokens`, `(0, 1e+15] bytes/s`: the allowed range, as messages print it."""
    f = show or _fmt_limit
    left = "(" if lo_open else "["
    a = "-inf" if lo is None else f(lo)
    b = "inf" if hi is None else f(hi)
    return f"{left}{a}, {b}]" + (f" {unit}" if unit else "")


def check_range(
    value: float, what: str, lo: float | None = None, hi: float | None = None, *,
    lo_open: bool = False, unit: str = "", text: str | None = None,
    show: Callable[[float], str] | None = None, error: type[Exception] = UsageError,
) -> float:
    """`value` if it is finite and inside the range; else `error` naming `what` and the range.

    `text` is the value as the user wrote it (quoted in the message); `error` is UsageError
    for a flag (exit 2). File readers catch it and re-raise as an InputError naming the file.
    """
    shown = text if text is not None else (
        f"{value:g}" if isinstance(value, float) else str(value))
    allowed = range_text(lo, hi, unit, lo_open, show)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{what} '{shown}' is not a number", f"allowed: {allowed}")
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"{what} '{shown}' is not a finite number", f"allowed: {allowed}")
    below = lo is not None and (value <= lo if lo_open else value < lo)
    if below and lo == 0 and lo_open:
        raise error(f"{what} '{shown}' is not positive", f"allowed: {allowed}")
    if below or (hi is not None and value > hi):
        raise error(f"{what} '{shown}' is out of range", f"allowed: {allowed}")
    return value


def check_int(
    value: int, what: str, lo: int = 0, hi: int = MAX_COUNT, unit: str = ""
) -> int:
    """A whole-number flag (`--page-size`, `--concurrency`, `--sessions`) checked to [lo, hi]."""
    check_range(value, what, lo, hi, unit=unit)
    return int(value)


def parse_number(
    text: str | int | float, what: str = "number", lo: float | None = 0.0,
    hi: float | None = None, *, lo_open: bool = False, unit: str = "",
) -> float:
    """A plain number (`50`, `0.98`, `2.5e3`) in range; `nan`, `inf` and `1e400` refused."""
    if isinstance(text, bool):
        raise UsageError(f"{what} '{text}' is not a number")
    if isinstance(text, int | float):
        value = float(text)
        shown = f"{text:g}" if isinstance(text, float) else str(text)
    else:
        shown = text
        if not re.fullmatch(r"[+-]?" + _NUM, text.strip()):
            raise UsageError(f"cannot read {what} '{text}'", "write a plain number like 20 or 0.5")
        value = float(text.strip())
    return check_range(value, what, lo, hi, lo_open=lo_open, unit=unit, text=shown)


def parse_rate(text: str | int | float, what: str = "--rate") -> float:
    """Requests per second: (0, MAX_RATE]."""
    return parse_number(text, what, 0.0, MAX_RATE, lo_open=True, unit="requests/s")


def parse_fraction(text: str | int | float, what: str = "fraction", *, lo_open: bool = False
                   ) -> float:
    """A share in [0, 1]: `0.98` or `98%`."""
    if isinstance(text, str) and text.strip().endswith("%"):
        pct = parse_number(text.strip()[:-1], what, None, None)
        return check_range(pct / 100.0, what, 0.0, 1.0, lo_open=lo_open, text=text)
    return parse_number(text, what, 0.0, 1.0, lo_open=lo_open)


def parse_percent(text: str | int | float, what: str = "percentage") -> float:
    """A positive share that may exceed 1: `15%` -> 0.15, `0.15` -> 0.15, `1000%` -> 10."""
    if isinstance(text, str) and text.strip().endswith("%"):
        pct = parse_number(text.strip()[:-1], what, 0.0, None, lo_open=True)
        return pct / 100.0
    return parse_number(text, what, 0.0, None, lo_open=True)


def parse_tokens(text: str | int | float, what: str = "tokens",
                 hi: int = MAX_PROMPT_TOKENS) -> int:
    """A token count of one prompt or page: a whole number in [1, hi]."""
    return parse_count(text, what, lo=1, hi=hi)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and its noun, singular for one: '1 GPU', '5 GPUs', '2,801 requests'."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def format_count(n: float | None) -> str:
    """12345678 -> '12.3M' (powers of 1000); '-' for a figure that is not known (None,
    NaN: a working set of a trace whose timestamps are all equal)."""
    if n is None or n != n:
        return "-"
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:g}"


def format_bytes(n: float | None) -> str:
    """1.5e12 -> '1.5 TB' (powers of 1000); '-' when not known."""
    if n is None or n != n:
        return "-"
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
    return check_range(value * _FLOPS_UNIT[unit], what, 0.0, MAX_FLOPS, lo_open=True,
                       unit="FLOPS", text=text)
