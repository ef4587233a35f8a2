"""What every fuzz and corpus case asserts (docs/reliability.md), in one place.

- the exit code is one of the documented ones for a bad input (never 1, internal error);
- no traceback, on stdout or stderr;
- an error names what to fix: the file (its name), the flag, or the field;
- the inputs are unchanged (SHA-256 before and after);
- for the cases about bounds: the command runs in a subprocess under an address-space limit
  (RLIMIT_AS) and a timeout, and must end inside both.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck

from xmemplan.errors import ExitCode

# What a bad input may get: success (read with counted skips), a flag error, an input error,
# "not available", a failed check. Never INTERNAL (1); INTERRUPTED only on Ctrl-C.
DOCUMENTED = {ExitCode.OK, ExitCode.USAGE, ExitCode.INPUT, ExitCode.NOT_AVAILABLE,
              ExitCode.CHECK_FAILED}

# Fuzz sizes: modest in CI (the whole suite stays well under 2 minutes); raise with
# XMEMPLAN_FUZZ_EXAMPLES=500 for a longer local hunt (random seeds then, not derandomized).
EXAMPLES = int(os.environ.get("XMEMPLAN_FUZZ_EXAMPLES", "0")) or None


def examples(ci: int) -> int:
    return EXAMPLES or ci


def derandomize() -> bool:
    return EXAMPLES is None


def digest(paths: Iterable[Path]) -> dict[str, str]:
    """SHA-256 of every regular file under `paths` (folders walked; links not followed)."""
    out: dict[str, str] = {}
    for p in paths:
        p = Path(p)
        items = [p] if not p.is_dir() else sorted(p.rglob("*"))
        for q in items:
            if q.is_symlink() or not q.is_file():
                continue
            try:
                out[str(q)] = hashlib.sha256(q.read_bytes()).hexdigest()
            except OSError:
                out[str(q)] = "unreadable"
    return out


def assert_clean(
    r, *, names: Iterable[str] = (), codes: Iterable[int] = DOCUMENTED,
    before: dict[str, str] | None = None, inputs: Iterable[Path] = (),
) -> None:
    """The assertions every case makes (see the module docstring)."""
    codes = set(codes)
    text = r.out + r.err
    assert r.code in codes, f"exit {r.code} not in {sorted(codes)}:\n{r.err[-2000:]}"
    assert "Traceback" not in text, text[-3000:]
    assert "internal error" not in r.err, r.err[-2000:]
    if r.code != ExitCode.OK:
        assert "Error: " in r.err, r.err[-2000:]
        wanted = [n for n in names if n]
        if wanted:
            assert any(n in r.err for n in wanted), (
                f"the message names none of {wanted}:\n{r.err[-2000:]}")
    if before is not None:
        assert digest(inputs) == before, "an input file changed"


@dataclass
class Bounded:
    code: int
    out: str
    err: str
    wall_s: float
    timed_out: bool


def run_bounded(args: list[str], *, memory: int = 2 << 30, timeout: float = 60.0,
                cwd: Path | None = None) -> Bounded:
    """`xmemplan ARGS` in a subprocess under RLIMIT_AS=`memory` bytes and a wall timeout."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = dict(os.environ, COLUMNS="120", NO_COLOR="1", NUMBA_NUM_THREADS="1")
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "xmemplan", *map(str, args)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, preexec_fn=limit, env=env, cwd=cwd, start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        timed_out = True
    return Bounded(p.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                   time.perf_counter() - t0, timed_out)


def hypothesis_settings(*extra: HealthCheck) -> dict[str, object]:
    """The fuzz tests' Hypothesis settings: no deadline on a shared machine, fixed seeds in
    CI (see `derandomize`), function-scoped fixtures allowed."""
    return dict(deadline=None, derandomize=derandomize(),
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, *extra])

