"""Terminal views of the capacity pass: tables for `xmemplan hitrate --capacity`, and the CLI
glue that checks outputs before the replay and writes the profile and charts after it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.hitrate.capacity import TABLE_ROWS, CapacityResult, CapacitySpec, build_spec
from xmemplan.units import format_bytes, format_count

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import HitrateResult


def cli_spec(
    capacity: str | None,
    curve: str | None,
    tiers: str | None,
    model: str | None,
    idle: str | None,
    page_size: int,
    profile_out: Path | None,
    plot: Path | None,
    cache_model: str | None = None,
    prefill_only: bool = False,
) -> CapacitySpec | None:
    """The spec for `xmemplan hitrate`'s flags; None when only the infinite cache is asked."""
    from xmemplan.errors import UsageError
    from xmemplan.hitrate.capacity import CACHE_MODELS

    finite = cache_model if cache_model in CACHE_MODELS else None
    wanted = (capacity, curve, tiers, model, idle, profile_out, plot)
    if all(v is None for v in wanted):
        if finite is not None:
            raise UsageError(
                f"--cache-model {finite} is a finite cache, and no size is given",
                "add --capacity SIZE, --capacity-curve or --tiers",
            )
        if prefill_only:
            raise UsageError("--prefill-only applies to --cache-model vllm or sglang",
                             "add --cache-model vllm --capacity SIZE, or drop it")
        return None
    if prefill_only and finite in (None, "lru"):
        raise UsageError("--prefill-only applies to --cache-model vllm or sglang",
                         "the LRU model never caches decoded tokens; drop --prefill-only")
    if plot is not None:
        from xmemplan.cli.views.plots import check_available

        check_available()
    return build_spec(
        capacity, curve, tiers, model, idle, page_size,
        want_curve=profile_out is not None or plot is not None,
        cache_model=finite or "lru", with_outputs=not prefill_only,
    )


def finish_cli(
    result: HitrateResult, fmt: str, paths: list[Path], profile_out: Path | None,
    plot: Path | None,
) -> None:
    """After the infinite-cache report: capacity tables, the profile file, the charts."""
    from xmemplan.cli.views import render

    cap = result.capacity
    if cap is None:
        return
    if fmt == "table":
        render_tables(cap)
        for note in cap.notes:
            render.info(f"Note: {note}")
    if profile_out is not None:
        from xmemplan.profile import build_profile, save_profile

        save_profile(profile_out, build_profile(result, paths), paths)
        render.info(f"Wrote the workload profile to {profile_out}")
    if plot is not None:
        from xmemplan.cli.views.plots import write_plots

        written = write_plots(result, plot, paths)
        render.info(f"Wrote {len(written)} charts to {plot}: {', '.join(p.name for p in written)}")


def render_tables(cap: CapacityResult) -> None:
    """Print the capacity, curve, tier, reuse and working-set tables (stdout)."""
    from xmemplan.cli.views import render

    if cap.capacities:
        cols = ["metric"] + [cap_label(c) for c in cap.capacities]
        rows = [
            [label] + [c[key] for c in cap.capacities] for key, label in TABLE_ROWS
        ]
        render.table(cols, rows, title=f"{_title(cap)} of finite capacity (same metrics per "
                     "capacity)")
    if cap.curve:
        values = [c["token_hit_ratio"] for c in cap.curve]
        render.table(
            ["capacity tokens", "capacity bytes", "token hit", "share of infinite",
             "rounds >= 1 token hit"],
            [(c["capacity_tokens"], _bytes(c["capacity_bytes"]), c["token_hit_ratio"],
              c["share_of_infinite"], c["rounds_ge1_token_hit_ratio"]) for c in cap.curve],
            title="Hit ratio vs capacity (exact LRU, one pass)" if cap.cache_model == "lru"
            else f"Hit ratio vs capacity ({_title(cap)}, one replay per point)",
            caption=f"token hit vs capacity: {render.sparkline(values, 0.0, None)}",
        )
    if cap.tiers:
        render.table(
            ["tier", "capacity", "tokens served", "share", "cum. hit", "to GPU"],
            [(t["name"], t["capacity"], t["hit_tokens"], t["token_share"],
              t["cumulative_token_hit_ratio"], _bytes(t["bytes_to_gpu"])) for t in cap.tiers],
            title="Tiers (inclusive, write-through): where each prompt token came from",
        )
    reuse = cap.reuse
    if reuse.get("requests_with_gap"):
        render.table(
            ["", "p50", "p90", "p99", "hit tokens within 5 min", "within 1 h"],
            [("reuse gap (s)", reuse["gap_s_p50"],
              reuse["gap_s_p90"], reuse["gap_s_p99"], reuse["hit_token_share_within_300s"],
              reuse["hit_token_share_within_3600s"])],
            title="Time between reuses of a prefix (infinite cache): seconds since the hit "
            "prefix was last used",
        )
    ws = cap.working_set
    if ws is not None:
        unit = "bytes" if ws.get("peak_bytes") is not None else "tokens"
        render.table(
            ["", "peak", "p99", "mean", "live sessions peak", "idle timeout"],
            [(f"KV {unit}", _ws(ws, "peak", unit), _ws(ws, "p99", unit),
              _ws(ws, "mean", unit), ws["sessions_peak"],
              "-" if ws["idle_s"] is None else f"{ws['idle_s']:g} s")],
            title="Working set over time: KV of live sessions",
            caption=f"over time: {render.sparkline(_spark_series(cap), 0.0, None)}"
            if cap.working_series is not None else None,
        )


def _title(cap: CapacityResult) -> str:
    from xmemplan.hitrate.capacity import MODEL_TITLE

    t = MODEL_TITLE[cap.cache_model]
    return "LRU cache" if cap.cache_model == "lru" else t


def cap_label(c: dict[str, Any]) -> str:
    if c["capacity_bytes"] is not None and not str(c["capacity"]).endswith("B"):
        return f"{c['capacity']} ({format_bytes(c['capacity_bytes'])})"
    if c["capacity_bytes"] is not None:
        return f"{c['capacity']} ({format_count(c['capacity_tokens'])} tok)"
    return f"{c['capacity']} tokens"


def _bytes(value: float | None) -> str:
    return "-" if value is None else format_bytes(value)


def _ws(ws: dict[str, Any], key: str, unit: str) -> str:
    if unit == "bytes":
        return format_bytes(ws[f"{key}_bytes"])
    return format_count(ws[f"{key}_tokens"])


def _spark_series(cap: CapacityResult, width: int = 48) -> list[float]:
    s = cap.working_series
    if s is None or len(s.times) < 2:
        return []
    grid = np.linspace(s.times[0], s.times[-1], width)
    idx = np.searchsorted(s.times, grid, side="right") - 1
    return [float(v) for v in s.tokens[np.clip(idx, 0, len(s.tokens) - 1)]]
