"""The chart of a `size` result: SLO-percentile TTFT against offered load, per option.

Drawn from the plan document (`size --format json`), so that `size --plot`, `plan` and the
report draw the same figure. Marked: the SLO (its value labelled), the offered load, and the
chosen configuration (the answer's option at the offered load). The y axis is logarithmic
when the values span more than a decade (HBM-only under overload reaches seconds while the
tiers stay at tens of ms). Overloaded runs are drawn as crosses: a queue that grows through
the run, whose percentile depends on the run's length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xmemplan.cli.views.plots import _pyplot, save_figure

OPTION_LABELS = {"hbm-only": "HBM only", "host-dram": "+ host DRAM", "xmem": "+ X-Mem"}
OFFERED_SCALE = 1.0  # load_rps[i] is the offered load times LOAD_SCALES[i]; 1.0 is offered


def ttft_vs_load(doc: dict[str, Any], path: Path, flag: str = "--out",
                 inputs: Sequence[Path] = ()) -> Path:
    """Write the chart of `doc` (a plan document with a load curve) to `path` (PNG)."""
    plt = _pyplot()
    c = doc.get("load_curve") or {}
    slo = float(doc["ttft_slo_ms"])
    pct = f"p{doc['slo_percentile']:g}"
    fig, ax = plt.subplots(figsize=(7, 5), dpi=120)
    values: list[float] = [slo]
    loads = list(c.get("load_rps") or [])
    offered = _offered(doc, loads)
    ceiling = OFF_SCALE * slo  # an overloaded queue reaches 10^6 ms: drawn at the top
    clipped = False
    for name, label in OPTION_LABELS.items():
        raw = c.get(name)
        if not raw:
            continue
        ys = [None if y is None else min(y, ceiling) for y in raw]
        off = [(x, ceiling) for x, y in zip(loads, raw) if y is not None and y > ceiling]
        clipped = clipped or bool(off)
        over = c.get(name + "_overloaded") or [False] * len(ys)
        ok = [(x, y) for x, y, o in zip(loads, ys, over) if y is not None and not o]
        bad = [(x, y) for x, y, o in zip(loads, ys, over) if y is not None and o]
        line = ax.plot([x for x, y in zip(loads, ys) if y is not None],
                       [y for y in ys if y is not None], marker="o", label=label)[0]
        if bad:
            ax.plot([x for x, _ in bad], [y for _, y in bad], linestyle="none", marker="x",
                    markersize=9, color=line.get_color())
        if off:
            ax.plot([x for x, _ in off], [y for _, y in off], linestyle="none", marker="^",
                    markersize=9, color=line.get_color())
        values += [y for _, y in ok + bad]
    ax.axhline(slo, color="black", linewidth=1)
    ax.annotate(f"SLO {slo:,.0f} ms ({pct})", (0.01, slo), xycoords=("axes fraction", "data"),
                xytext=(0, 3), textcoords="offset points", fontsize=8)
    if offered is not None:
        ax.axvline(offered, color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"offered {offered:,.3g} r/s", (offered, 1.0),
                    xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8, color="dimgrey")
    chosen = _chosen(doc, c, loads)
    if chosen is not None:
        x, y, text = chosen
        ax.plot([x], [y], marker="*", markersize=16, color="gold", markeredgecolor="black",
                linestyle="none", label=text, zorder=5)
    finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if finite and max(finite) / min(finite) > 10:
        ax.set_yscale("log")
    if clipped:
        ax.annotate(f"^ off scale: above {_ms(ceiling)} ({OFF_SCALE:g}x the SLO)",
                    (0.99, 0.99), xycoords="axes fraction", ha="right", va="top",
                    fontsize=7, color="dimgrey")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel(f"TTFT {pct} of {doc['slo_on']} requests (ms)")
    gpus = c.get("gpus", "-")
    ax.set_title(f"{doc['model']} on {gpus} x {doc['gpu']} (every option at {gpus} GPUs; "
                 "x = overloaded)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
              frameon=False)
    fig.tight_layout()
    try:
        save_figure(fig, path, flag, inputs)
    finally:
        plt.close(fig)
    return path


OFF_SCALE = 20.0  # TTFT above this multiple of the SLO is drawn at the top, marked '^'


def _ms(v: float) -> str:
    return f"{v / 1e3:,.0f} s" if v >= 1e4 else f"{v:,.0f} ms"


def _offered(doc: dict[str, Any], loads: list[float]) -> float | None:
    from xmemplan.sizing.planner import LOAD_SCALES

    if isinstance(doc.get("offered_rps"), int | float):  # the plan states it
        return float(doc["offered_rps"])
    if OFFERED_SCALE in LOAD_SCALES and len(loads) == len(LOAD_SCALES):
        return float(loads[LOAD_SCALES.index(OFFERED_SCALE)])
    return None


def _chosen(doc: dict[str, Any], c: dict[str, Any], loads: list[float]
            ) -> tuple[float, float, str] | None:
    """(offered load, TTFT, label) of the answer's option, when the curve's GPU count is
    that option's."""
    from xmemplan.sizing.planner import LOAD_SCALES

    name = doc.get("cheapest")
    ys = c.get(name) if isinstance(name, str) else None
    if not ys or len(loads) != len(LOAD_SCALES) or OFFERED_SCALE not in LOAD_SCALES:
        return None
    i = LOAD_SCALES.index(OFFERED_SCALE)
    if ys[i] is None:
        return None
    opt: dict[str, Any] = next(
        (o for o in doc.get("options", []) if o.get("option") == name), {})
    if opt.get("gpus") != c.get("gpus"):  # the curve is at another GPU count
        return None
    nodes = f", {opt['nodes']} node{'s' if opt['nodes'] != 1 else ''}" if opt.get(
        "nodes") and name == "xmem" else ""
    return float(loads[i]), float(ys[i]), (
        f"chosen: {OPTION_LABELS.get(str(name), str(name))}, {opt.get('gpus')} GPUs{nodes}")
