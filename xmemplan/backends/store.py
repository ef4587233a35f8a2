"""The slot index: key -> slot, LRU order, in-flight pins, free slots. Thread-safe.

Every state change happens under one lock and is O(1) except eviction (a scan past pinned
pages from the LRU end). Copies happen outside the lock: a writer first *reserves* a free
slot (invisible to readers), copies, then *commits* the key with its checksum; a reader
*pins* a live entry, copies, then *unpins* it. A pinned entry is never evicted, and a slot
is reused only after its entry is gone and no reader holds it, so no copy ever overwrites
live or in-use data.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

EXISTS = "exists"


@dataclass
class Entry:
    key: Any
    slot: int
    nbytes: int
    checksum: int = 0
    pins: int = 0
    live: bool = False
    dropped: bool = False  # removed from the index while pinned: free the slot on unpin
    generation: int = 0


class SlotIndex:
    def __init__(self, slots: int, eviction: str = "lru") -> None:
        self.slots = slots
        self.eviction = eviction
        self._lock = threading.Lock()
        self._live: OrderedDict[Any, Entry] = OrderedDict()  # oldest first
        self._pending: dict[Any, Entry] = {}
        self._free: list[int] = list(range(slots - 1, -1, -1))
        self._generation = 0
        self.evictions = 0
        self.refused = 0

    # -- writes --------------------------------------------------------------------------
    def reserve(self, key: Any, nbytes: int) -> Entry | str | None:
        """A free slot for `key`, `EXISTS` if it is live or being written, None if full."""
        with self._lock:
            if key in self._live or key in self._pending:
                if key in self._live:
                    self._live.move_to_end(key)
                return EXISTS
            if not self._free and not self._evict_one():
                self.refused += 1
                return None
            entry = Entry(key, self._free.pop(), nbytes, generation=self._generation)
            self._pending[key] = entry
            return entry

    def _evict_one(self) -> bool:
        if self.eviction != "lru":
            return False
        for key, entry in self._live.items():
            if entry.pins == 0:
                del self._live[key]
                self._free.append(entry.slot)
                self.evictions += 1
                return True
        return False

    def commit(self, entry: Entry, checksum: int) -> bool:
        """Make a reserved entry live. False if `clear()` ran meanwhile (slot released)."""
        with self._lock:
            self._pending.pop(entry.key, None)
            if entry.generation != self._generation:
                self._free.append(entry.slot)
                return False
            entry.checksum = checksum
            entry.live = True
            self._live[entry.key] = entry
            return True

    def abort(self, entry: Entry) -> None:
        with self._lock:
            if self._pending.get(entry.key) is entry:
                del self._pending[entry.key]
            self._free.append(entry.slot)

    # -- reads ---------------------------------------------------------------------------
    def pin(self, key: Any) -> Entry | None:
        with self._lock:
            entry = self._live.get(key)
            if entry is None:
                return None
            self._live.move_to_end(key)
            entry.pins += 1
            return entry

    def unpin(self, entry: Entry) -> None:
        with self._lock:
            entry.pins -= 1
            if entry.dropped and entry.pins == 0:
                self._free.append(entry.slot)

    def drop(self, entry: Entry) -> None:
        """Remove a (pinned) entry, e.g. after a checksum mismatch; slot freed on unpin."""
        with self._lock:
            if self._live.get(entry.key) is entry:
                del self._live[entry.key]
                entry.dropped = True
                if entry.pins == 0:
                    self._free.append(entry.slot)

    # -- queries -------------------------------------------------------------------------
    def exists(self, key: Any) -> bool:
        with self._lock:
            return key in self._live

    def leading_hits(self, keys: list[Any]) -> int:
        with self._lock:
            n = 0
            for key in keys:
                if key not in self._live:
                    break
                self._live.move_to_end(key)
                n += 1
            return n

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            for entry in self._live.values():
                entry.dropped = True
                if entry.pins == 0:
                    self._free.append(entry.slot)
            self._live.clear()

    def counts(self) -> dict[str, int]:
        with self._lock:
            pinned = sum(1 for e in self._live.values() if e.pins)
            return {
                "live": len(self._live),
                "pending": len(self._pending),
                "free": len(self._free),
                "pinned": pinned,
                "slots": self.slots,
            }

    def live_keys(self) -> list[Any]:
        with self._lock:
            return list(self._live)
