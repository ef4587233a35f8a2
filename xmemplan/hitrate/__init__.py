"""The `hitrate` stage: replay a canonical request table through a prefix cache.

    from xmemplan.hitrate import HitrateOptions, analyze
    result = analyze([Path("traces/")], HitrateOptions(scope="session"))
    result.summary["token_hit_ratio"]

Modules: `pipeline` (read, replay, the result), `metrics` (the DESIGN.md metrics),
`capacity` (finite LRU caches, curves, tiers), `workingset` (KV of live sessions over
time, reuse gaps), `reported` (API-reported vs reconstructed ratios). Nothing here prints:
the terminal views live in `xmemplan.cli.views`.
"""

from xmemplan.hitrate.capacity import CapacityResult, CapacitySpec, build_spec
from xmemplan.hitrate.pipeline import HitrateOptions, HitrateResult, Replayed, analyze, replay

__all__ = [
    "CapacityResult",
    "CapacitySpec",
    "HitrateOptions",
    "HitrateResult",
    "Replayed",
    "analyze",
    "build_spec",
    "replay",
]
