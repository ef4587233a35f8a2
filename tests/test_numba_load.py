"""xmemplan.numba_load: cached kernels load without numba's compiler registries,
with the same results as numba's own path, and a kernel compiled afterwards still
compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from xmemplan import numba_load

ROOT = Path(__file__).resolve().parent.parent

KERNELS = '''
import numpy as np
from numba import njit


@njit(cache=True)
def total(a):
    s = 0.0
    for x in a:
        s += x
    return s


@njit(cache=True)
def grown(a, n):  # allocates: needs numba's runtime
    out = np.empty(len(a) + n)
    out[: len(a)] = a
    out[len(a):] = -1.0
    return out


@njit(cache=True)
def summed(a):  # numba.np.arraymath's np.sum and np.max, linked into the kernel
    return np.sum(a) + np.max(a)


@njit(cache=True)
def checked(k):
    if k < 0:
        raise ValueError("k must be >= 0")
    return k * 2
'''

RUN = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
from xmemplan import numba_load
fast = sys.argv[3] == "1"
if fast:
    assert numba_load.install()
import kern
out = {"total": kern.total(np.arange(5.0)), "grown": kern.grown(np.ones(2), 2).tolist(),
       "summed": kern.summed(np.arange(4.0)),
       "hits": sum(d.stats.cache_hits.get(s, 0) for d in (kern.total, kern.grown, kern.summed)
                   for s in d.stats.cache_hits)}
try:
    kern.checked(-1)
except ValueError as e:
    out["error"] = str(e)
# what numba's registries import and the kernels' own code does not
out["registries"] = [m for m in ("numba.np.linalg", "numba.typed.typeddict",
                                 "numba.np.polynomial.polynomial_functions")
                     if m in sys.modules]
# what rebuilding the linked functions' Environments imports (numba's _rebuild_env)
out["env_modules"] = [m for m in ("numba.np.arraymath", "numba.np.arrayobj")
                      if m in sys.modules]
from numba import njit  # a kernel compiled after the loads: the registries load then


@njit
def fresh(a):
    return np.sum(a * 2.0)


out["fresh"] = float(fresh(np.arange(4.0)))
print(json.dumps(out))
'''


def _run(tmp: Path, fast: bool) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp / "cache")}
    r = subprocess.run([sys.executable, str(tmp / "run.py"), str(tmp), str(ROOT),
                        "1" if fast else "0"], capture_output=True, text=True, env=env,
                       timeout=300, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_cached_kernels_load_and_run_without_the_registries(tmp_path):
    (tmp_path / "kern.py").write_text(KERNELS)
    (tmp_path / "run.py").write_text(textwrap.dedent(RUN))
    first = _run(tmp_path, fast=False)  # compiles and writes the cache (numba's path)
    assert first["hits"] == 0
    slow = _run(tmp_path, fast=False)
    fast = _run(tmp_path, fast=True)
    assert slow["hits"] == fast["hits"] == 3  # all three loaded from the cache
    for k in ("total", "grown", "summed", "error", "fresh"):
        assert fast[k] == slow[k] == first[k]
    assert fast["error"] == "k must be >= 0"
    assert len(slow["registries"]) == 3 and not fast["registries"]
    assert len(slow["env_modules"]) == 2 and not fast["env_modules"]


def test_install_is_idempotent():
    assert numba_load.install() == numba_load.install() == numba_load.installed()


def test_the_environment_turns_it_off():
    code = ("from xmemplan import numba_load\n"
            "print(numba_load.install(), numba_load.installed())")
    env = {**os.environ, numba_load.ENV: "0", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout.split()
    assert out == ["False", "False"]
