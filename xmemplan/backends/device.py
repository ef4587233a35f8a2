"""The emulated X-Mem node: a device model of its own (data/devices/*.toml) and its timing.

The planner predicts loads from the catalog (`data/hardware/tiers.toml`); the emulator
times them from this model, built from other figures (per-bank copy rates, the per-GPU
NVLink ceiling, the node's aggregate bandwidth, a transfer-size curve), so that `validate`
can disagree with the planner. What it models:

- per-operation latency: a fixed cost per batch call;
- per-link bandwidth: each reader (one simulated GPU, one backend instance) copies its
  pages one after another over its own link, at min(link, bank rate) x efficiency(copy
  size) for each copy (a page is 2 copies, K and V, in SGLang's page_first layout; 2 x
  layers copies in layer_first);
- node bandwidth: ONE token bucket shared by every reader of the node (refilled at the
  node rate, `node_burst` deep); a page waits until the bucket has paid for its bytes, so
  k readers that together ask for more than the node gives each get about node / k;
- transfer-size efficiency: log-interpolated between the model's points, flat outside.

All emulated time is `time_scale` x the device's time (a machine copies memory far slower
than X-Mem; validate divides the factor back out). Reservations are made page by page, so
concurrent readers interleave on the bucket (fair sharing at page granularity).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.errors import InputError, UsageError

DEFAULT_DEVICE = "xmem-node"


@dataclass(frozen=True)
class DeviceModel:
    """One emulated memory node. Bytes, bytes per second, seconds."""

    name: str
    display_name: str
    link_bytes_per_s: float
    bank_bytes_per_s: tuple[float, ...]
    node_bytes_per_s: float
    node_burst_bytes: float
    op_latency_s: float
    transfer_chunk_bytes: tuple[float, ...]
    transfer_efficiency: tuple[float, ...]
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    path: str = ""

    def efficiency(self, chunk_bytes: float) -> float:
        """Share of the large-copy rate reached by one copy of `chunk_bytes`."""
        if not self.transfer_chunk_bytes:
            return 1.0
        x = np.log(np.asarray(self.transfer_chunk_bytes, dtype=np.float64))
        return float(np.interp(math.log(max(chunk_bytes, 1.0)), x,
                               np.asarray(self.transfer_efficiency, dtype=np.float64)))

    def bank_rate(self, bank: int) -> float:
        """What one reader pulls from `bank` (its link caps it)."""
        rate = self.bank_bytes_per_s[bank % len(self.bank_bytes_per_s)]
        return min(self.link_bytes_per_s, rate)

    def copy_seconds(self, bank: int, parts: Sequence[int]) -> float:
        """Device time of one reader's copies of one page (no contention)."""
        rate = self.bank_rate(bank)
        return sum(n / (rate * self.efficiency(n)) for n in parts)

    def reader_bytes_per_s(self, part_bytes: float, banks: int) -> float:
        """One reader's rate for pages of copies of `part_bytes`, striped over `banks`."""
        per = [part_bytes / (self.bank_rate(b) * self.efficiency(part_bytes))
               for b in range(banks)]
        return part_bytes * len(per) / sum(per)

    def assumed(self) -> list[str]:
        """The fields whose source says they are assumed."""
        return [k for k, v in self.sources.items() if v.lower().startswith("assumed")]


def devices_dir() -> Path:
    """The shipped device models: `xmemplan/_data/devices` in a wheel, else `data/devices`
    of the repository (found here, not through the catalog: backends sit beside it)."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "_data" / "devices", package.parent / "data" / "devices"):
        if candidate.is_dir():
            return candidate
    raise InputError("the shipped device models are missing", path=package / "_data",
                     hint="reinstall xmemplan (the wheel carries data/ as xmemplan/_data)")


# Bounds of a device model (docs/reliability.md): the emulator sleeps for what the device
# would take, so a bandwidth of 1 kB/s would make one replay last for days. A memory tier
# below 1 GB/s is not one (the slowest in the catalog, host DRAM over PCIe 4, is ~25 GB/s).
MIN_BANDWIDTH = 1e9
MAX_OP_LATENCY_S = 1.0


def _no_unit(v: Any, key: str) -> float:
    raise UsageError(f"{key} {v!r} has no unit" if isinstance(v, int | float) and not
                     isinstance(v, bool) else f"{key} {v!r} is not a quantity",
                     'write it as a string with its unit, like "396GB/s", "6MiB" or "10us"')


def _at_least(got: float, lo: float, key: str, text: Any, unit: str) -> None:
    if not got >= lo:
        raise UsageError(f"{key} {text!r} is below {lo / 1e9:g} G{unit}",
                         "the emulator waits for what the device takes: a memory tier "
                         f"moves at least {lo / 1e9:g} G{unit}")


def _parse(path: Path, text: str) -> dict[str, DeviceModel]:
    from xmemplan import units
    from xmemplan.jsonio import parse_toml

    doc = parse_toml(text, path)
    devices = doc.get("device") or {}
    if not isinstance(devices, dict):
        raise InputError(f"'device' must be a table of [device.NAME] tables, not "
                         f"{type(devices).__name__}", path=path, field="device")
    out: dict[str, DeviceModel] = {}
    def num(v: Any, what: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
            raise UsageError(f"{what}: {v!r} is not a share in (0, 1]")
        return float(v)

    for name, d in devices.items():
        if not isinstance(d, dict):
            raise InputError(f"device.{name} must be a table, not {type(d).__name__}",
                             path=path, field=f"device.{name}")

        def get(key: str, conv: Any, d: dict[str, Any] = d, name: str = name) -> Any:
            if key not in d:
                raise InputError(f"device '{name}' has no '{key}'", path=path,
                                 field=f"device.{name}.{key}")
            try:
                v = d[key]
                if isinstance(v, list) and not v:
                    raise UsageError(f"{key} is an empty list", "give at least one value")
                vals = v if isinstance(v, list) else [v]
                got = [conv(x, key) if conv is num or isinstance(x, str) else _no_unit(x, key)
                       for x in vals]
                if conv is units.parse_bandwidth:
                    for x, g in zip(vals, got, strict=True):
                        _at_least(g, MIN_BANDWIDTH, key, x, "B/s")
                if conv is units.parse_duration:
                    for x, g in zip(vals, got, strict=True):
                        if g > MAX_OP_LATENCY_S:
                            raise UsageError(f"{key} {x!r} is more than {MAX_OP_LATENCY_S:g} s",
                                             "an operation latency is microseconds")
                return got if isinstance(v, list) else got[0]
            except UsageError as exc:
                raise InputError(exc.message, path=path, field=f"device.{name}.{key}",
                                 hint=exc.hint) from None


        chunks = tuple(get("transfer_chunk", units.parse_bytes)) if "transfer_chunk" in d \
            else ()
        effs = tuple(get("transfer_efficiency", num)) if "transfer_efficiency" in d else ()
        if len(chunks) != len(effs) or list(chunks) != sorted(chunks):
            raise InputError("transfer_chunk and transfer_efficiency must be lists of the "
                             "same length, chunks ascending", path=path,
                             field=f"device.{name}.transfer_efficiency")
        banks = get("bank_bandwidth", units.parse_bandwidth)
        out[name] = DeviceModel(
            name=name, display_name=str(d.get("display_name", name)),
            link_bytes_per_s=get("link_bandwidth", units.parse_bandwidth),
            bank_bytes_per_s=tuple(banks if isinstance(banks, list) else [banks]),
            node_bytes_per_s=get("node_bandwidth", units.parse_bandwidth),
            node_burst_bytes=get("node_burst", units.parse_bytes),
            op_latency_s=get("op_latency", units.parse_duration),
            transfer_chunk_bytes=chunks, transfer_efficiency=effs,
            source=str(d.get("source", "")),
            sources={str(k): str(v) for k, v in (d.get("sources") or {}).items()},
            path=str(path),
        )
    return out


def load_device(spec: str | Path | None = None) -> DeviceModel:
    """A device by name (data/devices/*.toml) or from a TOML file (its only/first device)."""
    spec = spec or DEFAULT_DEVICE
    p = Path(spec)
    if p.suffix == ".toml" or p.exists():
        from xmemplan.jsonio import read_text

        found = _parse(p, read_text(p, "device file", hint="pass --device a device TOML file"))
        if not found:
            raise InputError("no [device.NAME] table", path=p, field="device")
        return next(iter(found.values()))
    known: dict[str, DeviceModel] = {}
    for f in sorted(devices_dir().glob("*.toml")):
        known.update(_parse(f, f.read_text(encoding="utf-8")))
    if str(spec) not in known:
        raise UsageError(f"unknown device '{spec}'",
                         f"known devices: {', '.join(sorted(known))}, or a TOML file")
    return known[str(spec)]


class TokenBucket:
    """A token bucket in bytes, refilled at `rate` (device bytes/s) up to `burst` bytes;
    debt is allowed and makes later takers wait. Thread-safe; wall time = scale x device
    time."""

    def __init__(self, rate: float, burst: float, scale: float) -> None:
        self.rate = rate
        self.burst = burst
        self.scale = scale
        self._tokens = burst
        self._last = time.perf_counter()
        self._lock = threading.Lock()

    def take(self, nbytes: float, now: float) -> float:
        """Take `nbytes`; returns the wall time at which they are paid for."""
        with self._lock:
            if now > self._last:
                self._tokens = min(self.burst,
                                   self._tokens + (now - self._last) * self.rate / self.scale)
                self._last = now
            self._tokens -= nbytes
            debt = -self._tokens
            return now + (debt * self.scale / self.rate if debt > 0 else 0.0)


class EmulatedNode:
    """One emulated node shared by every reader (backend instance) attached to it."""

    def __init__(self, device: DeviceModel, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise UsageError("time scale must be positive")
        self.device = device
        self.time_scale = time_scale
        self.bucket = TokenBucket(device.node_bytes_per_s, device.node_burst_bytes, time_scale)

    def client(self) -> DeviceShaper:
        return DeviceShaper(self)


class DeviceShaper:
    """One reader's view of the node: its own link, the node's shared bucket."""

    per_page = True
    active = True

    def __init__(self, node: EmulatedNode) -> None:
        self.node = node
        self._link_free = 0.0
        self._stream_from = -math.inf
        self._lock = threading.Lock()

    def _in_batch(self, now: float) -> bool:
        return self._stream_from > -math.inf

    def end_batch(self) -> None:
        with self._lock:
            self._stream_from = -math.inf

    def begin_batch(self, now: float) -> None:
        """A batch call starts: its pages stream back to back on the link from here (the
        reader's own time between pages is not lost link time, as with a DMA queue)."""
        with self._lock:
            self._stream_from = max(now, self._link_free)
            self._link_free = self._stream_from

    def reserve(self, direction: str, pages: Sequence[tuple[int, Sequence[int]]],
                now: float) -> float:
        """Reserve the link and the node for `pages` [(bank, copy sizes)]; a deadline."""
        dev, scale = self.node.device, self.node.time_scale
        link_s = sum(dev.copy_seconds(bank, parts) for bank, parts in pages)
        total = sum(sum(parts) for _, parts in pages)
        with self._lock:
            start = self._link_free if self._in_batch(now) else max(now, self._link_free)
            self._link_free = start + scale * link_s
            link_end = self._link_free
        return max(link_end, self.node.bucket.take(total, now))

    def batch_latency(self) -> float:
        return self.node.time_scale * self.node.device.op_latency_s

    @staticmethod
    def wait_until(deadline: float) -> None:
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
