"""Drop the engine's cached numba kernels when any source they compile from changed.

numba's on-disk cache (`cache=True`) keys a kernel by its own file's modification time.
The loop kernel inlines the policy, pool and step-time kernels from sibling files and
calls helpers from `sizing/sim.py`, so an edit to one of those alone left the old compiled
loop running (seen in this round: six `tests/test_engine.py` cases failed in checkouts
holding an older cache, and passed after the cache was deleted). This module stamps one
fingerprint of every source the kernels compile from and, when it differs, removes the
cached kernels so that numba compiles them again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

STAMP = "xmemplan-sources.sha1"


def fingerprint(sources: list[Path]) -> str:
    h = hashlib.sha1()
    for p in sorted(sources):
        h.update(p.name.encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def drop_stale_cache(package: Path, extra: list[Path]) -> bool:
    """Remove `package/__pycache__/*.nbi|*.nbc` when the sources' fingerprint changed
    since the last stamp; True when it removed (or found nothing stamped). Never raises on
    file-system errors: a read-only install cannot hold a stale cache of ours either."""
    try:
        digest = fingerprint([*package.glob("*.py"), *extra])
    except OSError:
        return False
    cache = package / "__pycache__"
    stamp = cache / STAMP
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    try:
        for f in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            f.unlink()
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        pass
    return True
