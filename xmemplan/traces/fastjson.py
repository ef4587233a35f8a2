"""Pull large integer arrays out of JSON text at memory speed, before the JSON parser sees it.

Trace files are mostly long integer lists (`hash_ids`, `input_ids`). A general JSON parser
turns each element into a Python int, and numpy then converts them back: two object
round-trips per key, about 70% of a Claude Code block trace's read time. `extract` scans the
raw bytes once (a numba kernel), parses every `"<field>": [ints]` array into one flat int64
array, and returns the text with those arrays emptied (`"<field>":[]`), which the JSON
parser then reads in a fraction of the time.

The scan is conservative: anything but optional whitespace, an optional minus sign and
digits inside the array (floats, strings, nested lists, numbers of 19+ digits) makes it
return None, and the reader falls back to the plain parser, which reports the bad field
with its line. Arrays are found in text order, and each is tagged with its line number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from xmemplan import numba_load

numba_load.install()  # cached kernels load without numba's compiler registries


@njit(cache=True)
def _is_ws(c: int) -> bool:
    return c == 32 or c == 10 or c == 13 or c == 9


@njit(cache=True)
def _scan(data, pattern, vals, offsets, lines, stripped):  # noqa: ANN001, C901
    """Returns (arrays, stripped length); arrays = -1 on anything it does not handle."""
    n = data.shape[0]
    m = pattern.shape[0]
    i = 0
    o = 0  # stripped fill
    nv = 0
    na = 0
    line = 1
    while i < n:
        c = data[i]
        if c == 10:
            line += 1
        if c == 34 and i + m <= n:  # '"': compare with the quoted field name
            same = True
            for j in range(m):
                if data[i + j] != pattern[j]:
                    same = False
                    break
            if same and (i == 0 or data[i - 1] != 92):  # not an escaped quote
                k = i + m
                while k < n and _is_ws(data[k]):
                    k += 1
                if k < n and data[k] == 58:  # ':'
                    k += 1
                    while k < n and _is_ws(data[k]):
                        k += 1
                    if k < n and data[k] == 91:  # '['
                        # copy everything up to and including '['
                        for j in range(i, k + 1):
                            stripped[o] = data[j]
                            o += 1
                        k += 1
                        offsets[na] = nv
                        lines[na] = line
                        while True:
                            while k < n and _is_ws(data[k]):
                                if data[k] == 10:
                                    line += 1
                                k += 1
                            if k >= n:
                                return -1, 0
                            if data[k] == 93 and nv == offsets[na]:  # ']' of an empty list
                                break
                            neg = False
                            if data[k] == 45:  # '-'
                                neg = True
                                k += 1
                            start = k
                            v = np.int64(0)
                            while k < n and 48 <= data[k] <= 57:
                                v = v * 10 + (data[k] - 48)
                                k += 1
                            if k == start or k - start > 18:
                                return -1, 0
                            vals[nv] = -v if neg else v
                            nv += 1
                            while k < n and _is_ws(data[k]):
                                if data[k] == 10:
                                    line += 1
                                k += 1
                            if k >= n:
                                return -1, 0
                            if data[k] == 44:  # ','
                                k += 1
                                continue
                            if data[k] == 93:  # ']'
                                break
                            return -1, 0
                        na += 1
                        offsets[na] = nv
                        stripped[o] = 93
                        o += 1
                        i = k + 1
                        continue
        stripped[o] = c
        o += 1
        i += 1
    return na, o


@dataclass
class Extracted:
    values: np.ndarray  # int64, all arrays back to back
    offsets: np.ndarray  # int64, arrays + 1
    lines: np.ndarray  # int64, 1-based line of each array's field name... or where it starts
    text: bytes  # the input with those arrays emptied

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def array(self, k: int) -> np.ndarray:
        return self.values[self.offsets[k] : self.offsets[k + 1]]


def extract(data: bytes, field: str) -> Extracted | None:
    """Parse every `"field": [ints]` array of `data`; None if any is not a plain int list."""
    raw = np.frombuffer(data, dtype=np.uint8)
    n = raw.shape[0]
    pattern = np.frombuffer(f'"{field}"'.encode(), dtype=np.uint8)
    vals = np.empty(n // 2 + 1, dtype=np.int64)
    max_arrays = n // (len(pattern) + 3) + 1
    offsets = np.zeros(max_arrays + 1, dtype=np.int64)
    lines = np.zeros(max_arrays, dtype=np.int64)
    stripped = np.empty(n, dtype=np.uint8)
    na, length = _scan(raw, pattern, vals, offsets, lines, stripped)
    if na < 0:
        return None
    nv = int(offsets[na])
    return Extracted(vals[:nv].copy(), offsets[: na + 1].copy(), lines[:na].copy(),
                     stripped[:length].tobytes())
