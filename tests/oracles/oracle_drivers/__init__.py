"""Drivers that run the engines' own code on the oracle contract's scenarios (docs/oracles.md).

- `cache_vllm.replay_hits` / `cache_sglang.replay_hits`: cache replay (issue 22) through vLLM's
  `KVCacheManager`/`BlockPool` and SGLang's `RadixCache` + KV allocator.
- `sched_vllm.replay_scenario`: scheduler stepping (issue 19) through vLLM's V1 `Scheduler`.
- `sched_sglang.replay_scenario`: scheduler stepping through SGLang's own `Scheduler` step loop
  (built without its `__init__`); `first_prefill`: its `PrefillAdder` alone.

The drivers are our code; the classes they drive are the engines'. They import vLLM/SGLang
lazily, so this package imports anywhere; `available()` says whether an engine is importable.
"""

from __future__ import annotations

import importlib.util

OUTPUT_TOKEN_BASE = 1_000_000
OUTPUT_TOKEN_STRIDE = 10_007


def output_token(i: int, k: int) -> int:
    """Token id of output k of request i (0-based, list order): never a prompt token."""
    return OUTPUT_TOKEN_BASE + i * OUTPUT_TOKEN_STRIDE + k


def available(engine: str) -> bool:
    return importlib.util.find_spec(engine) is not None
