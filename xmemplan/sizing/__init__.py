"""TTFT model, calibration and the planner behind `xmemplan size`.

    from xmemplan.sizing import ttft, load_seconds
    from xmemplan.sizing.planner import plan
    from xmemplan.sizing.request import build_request
"""

from xmemplan.sizing.model import (
    DEFAULT_CALIBRATION,
    Breakdown,
    Calibration,
    Transfer,
    effective_bandwidth,
    load_seconds,
    tier_load_seconds,
    ttft,
)

__all__ = [
    "DEFAULT_CALIBRATION",
    "Breakdown",
    "Calibration",
    "Transfer",
    "effective_bandwidth",
    "load_seconds",
    "tier_load_seconds",
    "ttft",
]
