"""Calibration internals: fitted constants are physical; the tests of the shipped fit and
of `xmemplan calibrate` are in tests/test_calibrate.py."""

from __future__ import annotations

from xmemplan.sizing import calibration as calib


def test_efficiencies_are_physical() -> None:
    p = calib.fit().params
    assert 0.3 < p["eta_attention"] <= 1.0
    assert "eta_linear" not in p  # measured on a GPU (data/measurements), not fitted
    assert 40e9 < p["host_bw"] < 63e9  # below PCIe Gen5 x16
    # t0 fitted on full-hit points is a few ms for the offline vLLM harness, not the
    # ~24 ms intercept of cold-prefill curves
    assert 1e-3 < p["t0:vllm"] < 10e-3
