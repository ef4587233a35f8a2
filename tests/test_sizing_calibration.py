"""Calibration internals: fitted constants are physical; the tests of the shipped fit and
of `xmemplan calibrate` are in tests/test_calibrate.py."""

from __future__ import annotations

from xmemplan.sizing import calibration as calib


def test_efficiencies_are_physical() -> None:
    p = calib.fit().params
    assert 0.3 < p["eta_attention"] <= 1.0
    assert "eta_linear" not in p  # measured on a GPU (data/measurements), not fitted
    # Host loads copy at the measured one-transfer rate of the block size: fixed, not fitted
    assert "host_eff" not in p
    assert calib.DEFAULT_CALIBRATION.host_efficiency == calib.PUBLIC_HOST_EFFICIENCY == 1.0
    # The engine's per-token host work (hashing, block tables): well under a microsecond
    assert 0.0 < p["per_token:vllm"] < 1e-6
    # A forward pass's per-layer floor from batch-1 decode steps: tens to hundreds of us
    # (kernel launches and small kernels), not milliseconds.
    assert 20e-6 < p["layer_s"] < 300e-6
    # t0 fitted on full-hit points is a few ms at most for the offline vLLM harness (its
    # per-request cost is a pass's floor and weight reads), not the ~24 ms intercept of
    # cold-prefill curves
    assert 0.0 <= p["t0:vllm"] < 10e-3
