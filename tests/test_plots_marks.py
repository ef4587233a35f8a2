"""Charts mark what the question needs: the capacity chart follows --tiers; the TTFT chart
labels the SLO and marks the offered load and the chosen configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from xmemplan.cli.main import run

pytest.importorskip("matplotlib")


def test_capacity_chart_with_tiers(tmp_path: Path) -> None:
    out = tmp_path / "charts"
    assert run(["-q", "hitrate", str(ROOT / "examples" / "traces"), "--tiers",
                "HBM=20k,DRAM=60k", "--model", "qwen3-30b-a3b", "--plot", str(out)]) == 0
    assert (out / "hit_ratio_vs_capacity.png").stat().st_size > 10_000


def test_ttft_chart_marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The figure's artists: the SLO label with its value, the offered-load line, the star
    of the chosen option; log y only when values span more than a decade."""
    import matplotlib.pyplot as plt

    from xmemplan.cli.views import sizeplots

    doc: dict[str, Any] = {"ttft_slo_ms": 500.0, "slo_percentile": 99, "slo_on": "warm", "model": "m",
           "gpu": "g", "cheapest": "xmem",
           "options": [{"option": "xmem", "gpus": 4, "nodes": 1}],
           "load_curve": {"gpus": 4, "load_rps": [1.25, 2.5, 3.75, 5, 6.25, 7.5, 10],
                          "hbm-only": [9000.0] * 7, "host-dram": [600.0] * 7,
                          "xmem": [300.0] * 7, "xmem_overloaded": [False] * 7}}
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig: figs.append(fig))
    sizeplots.ttft_vs_load(doc, tmp_path / "t.png")
    ax = figs[0].axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "SLO 500 ms (p99)" in texts
    assert any(t.startswith("offered 5 r/s") for t in texts)
    assert any("chosen: + X-Mem, 4 GPUs, 1 node" in t.get_text()
               for t in ax.get_legend().get_texts())
    assert ax.get_yscale() == "log"  # 300 to 9,000 ms
    doc["load_curve"]["hbm-only"] = [400.0] * 7
    figs.clear()
    sizeplots.ttft_vs_load(doc, tmp_path / "t2.png")
    assert figs[0].axes[0].get_yscale() == "linear"  # 300 to 600 ms


def test_capacity_chart_names_the_engine_cache_model(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """--cache-model sglang --plot: the curve is SGLang's radix cache, not "exact LRU"."""
    from types import SimpleNamespace

    import matplotlib.pyplot as plt

    from xmemplan.cli.views import plots

    figs: list[object] = []
    monkeypatch.setattr(plt, "close", lambda fig: figs.append(fig))
    for model, title in (("sglang", "Hit ratio vs cache capacity (SGLang radix cache, one "
                                    "replay per point)"),
                         ("lru", "Hit ratio vs cache capacity (exact LRU)")):
        cap = SimpleNamespace(
            curve=[{"capacity_tokens": 1000, "token_hit_ratio": 0.1,
                    "rounds_ge1_token_hit_ratio": None},
                   {"capacity_tokens": 5000, "token_hit_ratio": 0.8,
                    "rounds_ge1_token_hit_ratio": None}],
            capacities=[], tiers=[], infinite_token_hit_ratio=0.8, per_session_cache=False,
            cache_model=model, kv_bytes_per_token=None, model=None)
        figs.clear()
        plots._curve(plt, cap, tmp_path / f"{model}.png")  # type: ignore[arg-type]
        ax = figs[0].axes[0]  # type: ignore[attr-defined]
        assert ax.get_title() == title
        assert ax.get_xlabel().startswith("SGLang radix cache capacity" if model == "sglang"
                                          else "LRU capacity")
