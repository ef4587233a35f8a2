"""Stand-ins for `triton` and `torchvision`, so that SGLang's CPU-only modules import.

SGLang imports triton kernels at module level all the way down to `RadixCache`
(radix_cache -> base_prefix_cache -> memory_pool -> layers.quantization -> triton kernels),
and its config modules import torchvision. Neither is installed in the engines' venv:
triton is ~1 GB and needs a GPU to run, and torchvision from PyPI replaces the CPU torch with
a CUDA build (../shared/docs/research/engines-on-cpu.md). The cache and the scheduling policy
never run a kernel, so a stand-in that only lets the modules *define* their kernels will do.

`install()` first makes torch and transformers record that triton and torchvision are absent
(their checks are cached), then puts a finder on `sys.meta_path` that answers `triton`,
`triton.*`, `torchvision` and `torchvision.*` with permissive modules: every attribute is a
stand-in class; calling one with a single function returns the function (a decorator such as
`@triton.jit`), any other call returns another stand-in. Running a kernel through a stand-in
fails: nothing here computes.
"""

from __future__ import annotations

import enum
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

ROOTS = ("triton", "torchvision")
# A stand-in that raises instead: no GPU driver is active (SGLang's fla utils ask triton's
# driver for the device and fall back to "cpu" when the call raises).
RAISES = frozenset({"triton.runtime.driver.active"})


class _StandInMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if f"{cls.__name__}.{name}" in RAISES:
            raise RuntimeError(f"{cls.__name__}.{name}: no GPU driver (stand-in)")
        return _stand_in(f"{cls.__name__}.{name}")

    def __getitem__(cls, _key: Any) -> Any:
        return _stand_in(f"{cls.__name__}[]")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: keep the Python function
        return _stand_in(f"{cls.__name__}()")

    def __bool__(cls) -> bool:
        return False


def _stand_in(name: str) -> Any:
    return _StandInMeta(name, (), {})


class InterpolationMode(enum.Enum):  # torchvision.transforms: used as dict keys at import
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class _Module(types.ModuleType):
    __version__: str  # set by _Finder.create_module

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "InterpolationMode":
            return InterpolationMode
        if f"{self.__name__}.{name}" in RAISES:
            raise RuntimeError(f"{self.__name__}.{name}: no GPU driver (stand-in)")
        value = _stand_in(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".")[0] not in ROOTS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+xmemplan-stand-in"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


_installed = False


def install() -> None:
    """Idempotent; call before importing any `sglang` module."""
    global _installed
    if _installed:
        return
    for root in ROOTS:
        if root in sys.modules and not isinstance(sys.modules[root], _Module):
            raise RuntimeError(f"a real {root} is imported; the stand-ins would shadow it")
    # torch and transformers cache "is triton / torchvision installed?": ask them first, while
    # neither is importable, and import torch's modules that probe triton at import time.
    import torch.utils._triton as torch_triton

    if torch_triton.has_triton_package():
        raise RuntimeError("triton is installed in this venv: the stand-in is not needed")
    import functorch.compile  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch._dynamo.testing  # noqa: F401
    import torch._inductor.runtime.triton_compat  # noqa: F401
    from transformers.utils import import_utils

    if import_utils.is_torchvision_available():
        raise RuntimeError("torchvision is installed in this venv: it may be a CUDA build")
    sys.meta_path.insert(0, _Finder())
    _installed = True
