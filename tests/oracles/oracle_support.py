"""Helpers of the oracle tests: skip or fail when an engine is missing, shared traces, the
xmemplan functions under comparison."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest
from oracle_drivers import available

REQUIRED = os.environ.get("XMEMPLAN_ENGINES") == "1"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def need(engine: str) -> None:
    if available(engine):
        return
    if REQUIRED:
        pytest.fail(f"{engine} is not importable in the engines venv (.ci/steps/engines.sh)")
    pytest.skip(f"{engine} not installed (the engines' oracle runs in .ci/steps/engines.sh)")


def shared_trace(*parts: str) -> Path:
    path = SHARED_TRACES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is not checked out here)")
    return path


def xmemplan_side(module: str, name: str) -> Any:
    """xmemplan's function under comparison, or a skip naming what has not landed yet."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        pytest.skip(f"{module} does not exist yet (xmemplan's side of docs/oracles.md)")
    fn = getattr(mod, name, None)
    if fn is None:
        pytest.skip(f"{module}.{name} does not exist yet (xmemplan's side of docs/oracles.md)")
    return fn
