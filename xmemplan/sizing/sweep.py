"""Evaluate a grid of configurations in one vectorized call (benchmarks, what-if tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xmemplan.catalog.specs import GpuSpec, ModelSpec, TierSpec
from xmemplan.sizing.model import DEFAULT_CALIBRATION, SGLANG_HICACHE, Calibration, Transfer, ttft


def sweep(
    model: ModelSpec, gpu: GpuSpec, tier: TierSpec, *,
    prompt_tokens: Sequence[float], hit_rates: Sequence[float],
    bandwidths_bytes_per_s: Sequence[float], concurrencies: Sequence[int],
    overlap: str = "layer", transfer: Transfer = SGLANG_HICACHE,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> dict[str, Any]:
    """TTFT (mean and last position) on the full grid prompt x hit x bandwidth x concurrency.

    Returns arrays of shape (len(prompt), len(hit), len(bandwidth), len(concurrency)).
    """
    s = np.asarray(prompt_tokens, dtype=np.float64)[:, None, None, None]
    h = np.asarray(hit_rates, dtype=np.float64)[None, :, None, None]
    bw = np.asarray(bandwidths_bytes_per_s, dtype=np.float64)[None, None, :, None]
    n = np.asarray(concurrencies, dtype=np.float64)[None, None, None, :]
    b = ttft(model, gpu, tier, s, np.floor(s * h), concurrency=n, overlap=overlap,
             transfer=transfer, calibration=calibration, bandwidth_bytes_per_s=bw)
    shape = np.broadcast_shapes(s.shape, h.shape, bw.shape, n.shape)
    return {
        "ttft_s": np.broadcast_to(b.ttft_s, shape),
        "ttft_last_s": np.broadcast_to(b.ttft_last_s, shape),
        "compute_s": np.broadcast_to(b.compute_s, shape),
        "load_s": np.broadcast_to(b.load_s, shape),
    }
