"""Stand-in for `triton`, only so that SGLang's CPU-importable modules import (CI only).

SGLang's `sglang/srt/utils/common.py` imports triton at module level; the storage-backend
modules never call it. Anything that would really run a kernel fails loudly.
"""

__version__ = "0.0.0-xmemplan-stub"


def jit(fn=None, **_kwargs):
    if fn is None:
        return lambda f: f
    return fn


def autotune(*_args, **_kwargs):
    return lambda f: f


def heuristics(*_args, **_kwargs):
    return lambda f: f


class Config:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def cdiv(a, b):
    return -(-a // b)


def next_power_of_2(n):
    return 1 << max(0, int(n) - 1).bit_length()


def __getattr__(name):
    raise AttributeError(f"triton stub (xmemplan CI) has no attribute {name!r}")
