"""tests/oracles: the engines' own code as the oracle (docs/oracles.md).

These tests need vLLM 0.33.0 / SGLang 0.5.23 on torch CPU, which only `.ci/steps/engines.sh`
installs (its own venv). Elsewhere they skip with the reason; under that step
(XMEMPLAN_ENGINES=1) a missing engine fails instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from oracle_support import need  # noqa: E402


@pytest.fixture
def vllm_engine() -> None:
    need("vllm")


@pytest.fixture
def sglang_engine() -> None:
    need("sglang")
