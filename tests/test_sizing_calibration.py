"""Calibration internals: fitted constants are physical; the tests of the shipped fit and
of `xmemplan calibrate` are in tests/test_calibrate.py."""

from __future__ import annotations

from xmemplan.sizing import calibration as calib


def test_efficiencies_are_physical() -> None:
    p = calib.fit().params
    assert 0.3 < p["eta_attention"] <= 1.0
    assert "eta_linear" not in p  # measured on a GPU (data/measurements), not fitted
    assert 0.7 < p["host_eff"] <= 1.0  # a share of the GPU's measured copy peak
    # A forward pass's per-layer floor from batch-1 decode steps: tens to hundreds of us
    # (kernel launches and small kernels), not milliseconds.
    assert 20e-6 < p["layer_s"] < 300e-6
    # t0 fitted on full-hit points is a few ms at most for the offline vLLM harness (its
    # per-request cost is a pass's floor and weight reads), not the ~24 ms intercept of
    # cold-prefill curves
    assert 0.0 <= p["t0:vllm"] < 10e-3
