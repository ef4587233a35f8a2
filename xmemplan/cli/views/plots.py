"""PNG charts of a `hitrate` result: hit ratio by round, hit ratio vs capacity, working set.

matplotlib is the optional `plot` extra (`pip install 'xmemplan[plot]'`); it is imported only
here, only when charts are asked for, with the non-interactive Agg backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmemplan.errors import NotAvailableError, UsageError

if TYPE_CHECKING:
    from xmemplan.hitrate.capacity import CapacityResult
    from xmemplan.hitrate.pipeline import HitrateResult


_INPUTS: list[Path] = []  # what the run read: the charts are not written among them


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise NotAvailableError(
            "--plot needs matplotlib, which is not installed",
            "install the plot extra: pip install 'xmemplan[plot]' (or drop --plot)",
        ) from exc
    return plt


def save_figure(fig: Any, path: Path, flag: str, inputs: Sequence[Path] = ()) -> None:
    """Save a figure through the one safe writer (temporary file, then rename)."""
    import io

    from xmemplan.jsonio import write_output

    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", dpi=120)
    write_output(Path(path), buf.getvalue(), flag, inputs)


def check_available() -> None:
    """NotAvailableError now, rather than after a long replay, when matplotlib is missing."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        _pyplot()  # raises the error with its hint


def write_plots(result: HitrateResult, directory: Path,
                inputs: Sequence[Path] = ()) -> list[Path]:
    """Write the charts that the result has data for; returns their paths."""
    from xmemplan.jsonio import check_not_input

    plt = _pyplot()
    directory = Path(directory)
    check_not_input(directory, "--plot", inputs)
    _INPUTS[:] = list(inputs)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create the plot directory '{directory}' ({exc.strerror or exc})",
            "pass --plot a directory you can write to",
        ) from exc
    written = [_by_round(plt, result, directory / "hit_ratio_by_round.png")]
    cap = result.capacity
    if cap is not None and cap.curve:
        written.append(_curve(plt, cap, directory / "hit_ratio_vs_capacity.png"))
    if cap is not None and cap.working_series is not None and len(cap.working_series.times):
        written.append(_working_set(plt, cap, directory / "working_set.png"))
    return written


def hit_histogram(hist: dict[str, Any], path: Path, flag: str = "--out",
                  inputs: Sequence[Path] = ()) -> Path:
    """Requests by hit ratio (the profile's 20 bins of 0.05, every request)."""
    plt = _pyplot()
    edges, counts = hist["edges"], hist["counts"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    widths = [b - a for a, b in zip(edges[:-1], edges[1:])]
    ax.bar(edges[:-1], counts, width=widths, align="edge", edgecolor="white")
    ax.set_xlim(0, 1)
    ax.set_xlabel("request hit ratio (hit tokens / prompt tokens, infinite cache)")
    ax.set_ylabel("requests")
    ax.set_title("Distribution of the per-request hit ratio")
    fig.tight_layout()
    try:
        save_figure(fig, path, flag, inputs)
    finally:
        plt.close(fig)
    return path


def _finite(v: Any) -> float:
    return float(v) if v is not None and math.isfinite(v) else math.nan


def _by_round(plt: Any, result: HitrateResult, path: Path) -> Path:
    rows = [r for r in result.summary["by_round"] if r["requests"]]  # empty rounds left out
    labels = [r["round"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [_finite(r["token_hit_ratio"]) for r in rows], 0.4,
           label="token hit ratio")
    ax.bar([i + 0.2 for i in x], [_finite(r["mean"]) for r in rows], 0.4,
           label="mean request hit ratio")
    for i, r in enumerate(rows):
        ax.annotate(f"n={r['requests']:,}", (i, 1.01), ha="center", fontsize=7)
    ax.set_xticks(list(x), labels)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("round (0 = first request of a session)")
    ax.set_ylabel("hit ratio (infinite cache)")
    ax.set_title(f"Prefix-cache hit ratio by round ({result.scope} scope)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    save_figure(fig, path, "--plot", _INPUTS)
    plt.close(fig)
    return path


def _curve(plt: Any, cap: CapacityResult, path: Path) -> Path:
    pts = cap.curve or []
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [p["capacity_tokens"] for p in pts]
    ax.plot(xs, [_finite(p["token_hit_ratio"]) for p in pts], marker="o", label="token hit ratio")
    if any(p["rounds_ge1_token_hit_ratio"] is not None
           and math.isfinite(p["rounds_ge1_token_hit_ratio"]) for p in pts):
        ax.plot(xs, [_finite(p["rounds_ge1_token_hit_ratio"]) for p in pts], marker=".",
                label="rounds >= 1 token hit ratio")
    ax.axhline(cap.infinite_token_hit_ratio, linestyle="--", color="grey",
               label=f"infinite cache ({cap.infinite_token_hit_ratio:.3f})")
    for c in cap.capacities:
        ax.axvline(c["capacity_tokens"], linestyle=":", color="tab:red", alpha=0.6)
    # --tiers: each tier's capacity (inclusive tiers: the hit ratio it reaches with the
    # faster tiers inside it), marked and named on the curve
    for t in cap.tiers or []:
        if t.get("capacity_tokens") is None:  # the 'miss (prefill)' row
            continue
        x, y = t["capacity_tokens"], _finite(t["cumulative_token_hit_ratio"])
        ax.axvline(x, linestyle="-.", color="tab:purple", alpha=0.5)
        ax.plot([x], [y], marker="D", color="tab:purple", linestyle="none")
        ax.annotate(f"{t['name']} {t['capacity']}: {y:.3f}", (x, y), xytext=(4, -12),
                    textcoords="offset points", fontsize=7, color="tab:purple")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    from xmemplan.hitrate.capacity import MODEL_TITLE

    lru = cap.cache_model == "lru"  # --cache-model vllm|sglang: that engine's cache, not LRU
    name = "LRU" if lru else MODEL_TITLE[cap.cache_model]
    ax.set_xlabel(f"{name} capacity (tokens"
                  + (", per session)" if cap.per_session_cache else ")"))
    ax.set_ylabel("token hit ratio")
    ax.set_title("Hit ratio vs cache capacity (" + ("exact LRU" if lru else
                                                    f"{name}, one replay per point") + ")")
    ax.legend(loc="lower right")
    if cap.kv_bytes_per_token:
        bpt = cap.kv_bytes_per_token
        top = ax.secondary_xaxis("top", functions=(lambda t: t * bpt / 1e9,
                                                   lambda b: b * 1e9 / bpt))
        top.set_xlabel(f"GB of KV ({cap.model})")
    fig.tight_layout()
    save_figure(fig, path, "--plot", _INPUTS)
    plt.close(fig)
    return path


def _working_set(plt: Any, cap: CapacityResult, path: Path) -> Path:
    s = cap.working_series
    ws = cap.working_set
    if s is None or ws is None:  # write_plots only asks when both exist
        return path
    fig, ax = plt.subplots(figsize=(7, 4))
    t0 = float(s.times[0])
    hours = (s.times[-1] - t0) > 3 * 3600
    scale = 3600.0 if hours else 60.0
    x = (s.times - t0) / scale
    bpt = cap.kv_bytes_per_token
    y = s.tokens * bpt / 1e9 if bpt else s.tokens
    ax.step(x, y, where="post", label="working set")
    peak = ws["peak_bytes"] / 1e9 if bpt else ws["peak_tokens"]
    ax.axhline(peak, linestyle="--", color="tab:red", alpha=0.6, label=f"peak {_short(peak)}")
    if ws["p99_tokens"] is not None:
        p99 = ws["p99_bytes"] / 1e9 if bpt else ws["p99_tokens"]
        ax.axhline(p99, linestyle=":", color="tab:orange", label=f"p99 {_short(p99)}")
    if _all_start_at_zero(cap):
        ax.annotate("every session starts at t=0 in this trace:\nthe early peak is that "
                    "artefact, not load", (0.97, 0.8), xycoords="axes fraction", va="top",
                    ha="right", fontsize=8, color="dimgrey")
    ax.set_xlabel("time since the first request (" + ("h" if hours else "min") + ")")
    ax.set_ylabel(f"KV of live sessions ({'GB, ' + str(cap.model) if bpt else 'tokens'})")
    idle = ws["idle_s"]
    ax.set_title("Working set over time" + (f" (idle timeout {idle:g} s)" if idle else ""))
    ax.legend(loc="best", fontsize=8, framealpha=0.8)  # where it covers the least
    fig.tight_layout()
    save_figure(fig, path, "--plot", _INPUTS)
    plt.close(fig)
    return path


def _all_start_at_zero(cap: CapacityResult) -> bool:
    """Whether the working set's sessions all began together (their first requests at one
    instant): traces of recorded sessions replayed from 0, whose early peak is an artefact."""
    ws = cap.working_set or {}
    return bool(ws.get("sessions_start_together"))


def _short(v: float) -> str:
    """3 significant figures, whole numbers with separators: 4.87, 589, 13,400."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
