"""`hitrate` on Claude Code transcripts: the hidden prefix, token ratios, the API's cache
rules and the per-call reasons (xmemplan/hitrate/transcript_calls.py), as tables, JSON and
`--out` columns."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from xmemplan.hitrate.transcript_calls import CallsReport

TOKENS_MODES = ("tokenizer", "calibrated")
CACHE_MODELS = ("infinite", "anthropic")


def check_flags(hidden_prefix: str | None, tokens: str | None, cache_model: str | None) -> None:
    from xmemplan.errors import UsageError
    from xmemplan.traces.hidden_prefix import parse_mode

    parse_mode(hidden_prefix)
    if tokens is not None and tokens not in TOKENS_MODES:
        raise UsageError(f"unknown --tokens '{tokens}'", f"use {' or '.join(TOKENS_MODES)}")
    if cache_model is not None and cache_model not in CACHE_MODELS:
        raise UsageError(f"unknown --cache-model '{cache_model}'",
                         f"use {' or '.join(CACHE_MODELS)}")


def _short(context: str) -> str:
    """A conversation's name: its file's stem (the session id), and its sub-agent's id.
    Whole: a table folds it rather than cutting it to '…'."""
    path, _, agent = context.partition("#")
    name = Path(path).stem
    return f"{name} agent {agent}" if agent and agent not in name else name


def to_json(rep: CallsReport, cache_model: str | None) -> dict[str, Any]:
    return {
        "hidden_prefix": [
            {"context": e.context, "model": e.model, "version": e.version, "calls": e.calls,
             "hidden_tokens": round(e.hidden_tokens),
             "spread_tokens": {"min": round(e.spread[0]), "median": round(e.spread[1]),
                               "max": round(e.spread[2])},
             "reconstructed_per_api_token": e.ratio,
             "reconstructed_per_api_token_by_kind": e.kind_ratios(), "fitted": e.fitted}
            for e in rep.estimates.values()
        ],
        "files": [{k: v for k, v in f.items() if cache_model == "anthropic" or k != "anthropic"}
                  for f in rep.files],
        "explained_share": rep.explained_share,
        "difference_tokens": rep.difference_tokens,
        "unexplained_tokens": rep.unexplained_tokens,
        "cache_rules": rep.cache_rules if cache_model == "anthropic" else None,
    }


def csv_rows(rep: CallsReport, cache_model: str | None) -> list[tuple[str, Any]]:
    """`metric,value` rows of the per-call report for `--format csv`: the JSON's per-file
    ratios and per-conversation hidden prefix, named like `capacity[3M].token_hit_ratio`."""
    doc = to_json(rep, cache_model)
    rows: list[tuple[str, Any]] = []
    for f in doc["files"]:
        name = Path(f["file"]).stem
        rows += [(f"transcripts.file[{name}].{k}", v) for k, v in f.items()
                 if k not in ("file", "reason_tokens")]
        rows += [(f"transcripts.file[{name}].reason_tokens.{k}", v)
                 for k, v in (f.get("reason_tokens") or {}).items()]
    for e in doc["hidden_prefix"]:
        name = _short(e["context"])
        rows += [(f"transcripts.hidden_prefix[{name}].{k}", e[k]) for k in (
            "model", "calls", "hidden_tokens", "reconstructed_per_api_token", "fitted")]
    rows += [(f"transcripts.{k}", doc[k]) for k in (
        "explained_share", "difference_tokens", "unexplained_tokens")]
    return rows


def say_added(rep: CallsReport) -> None:
    """What --hidden-prefix put before the calls, and how large it was (stderr)."""
    from xmemplan.cli.views import render

    sizes = [r["hidden_prefix_tokens"] for r in rep.rows]
    total = sum(sizes)
    if not total:
        return
    lo, hi = min(sizes), max(sizes)
    each = f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"
    render.info(f"Hidden prefix: a stand-in of {each} tokens was put before each of "
                f"{len(sizes):,} calls ({total:,} tokens in all); per conversation in the "
                "hidden-prefix table (json: transcripts.hidden_prefix).")


def show(rep: CallsReport, cache_model: str | None) -> None:
    from xmemplan.cli.views import render

    rows = []
    for e in rep.estimates.values():
        kr = e.kind_ratios()
        rows.append((
            _short(e.context), e.model.removeprefix("claude-"), e.calls,
            f"{e.hidden_tokens:,.0f}",
            f"{e.spread[0]:,.0f} / {e.spread[1]:,.0f} / {e.spread[2]:,.0f}",
            f"{e.ratio:.3f}",
            " ".join(f"{v:.2f}" if v else "-" for v in (kr["text"], kr["tool_result"],
                                                          kr["code"])),
        ))
    render.table(
        ["conversation", "model", "calls", "hidden prefix", "per call min / med / max",
         "ours/API", "text tool code"],
        rows, title="Hidden prefix and token ratio, from each conversation's usage",
        caption="hidden prefix = API prompt - k x reconstructed, smallest over the calls "
        "(API tokens); ours/API = reconstructed tokens per API token (docs/text-traces.md)",
    )
    anth = cache_model == "anthropic"
    head = ["file", "calls", "API", "reconstructed", "+ hidden prefix", "ceiling"]
    head += ["anthropic rules"] if anth else []
    head += ["explained"]
    frows = []
    for f in rep.files:
        r = [Path(f["file"]).stem, f["calls"], f["api"], f["plain"], f["hidden"],
             f["ceiling"]]
        r += [f["anthropic"]] if anth else []
        r += [f"{f['explained_share']:.1%}"]
        frows.append(tuple(r))
    render.table(
        head, frows, title="API-reported vs reconstructed token hit ratio, per file",
        caption="ceiling: every earlier prompt cached, in the API's tokens, hidden prefix warm "
        "as the API's shared cache held it; explained: share of the per-call difference "
        "(API - reconstructed) the reasons account for (--out has them per call)",
    )
    totals: dict[str, float] = {}
    for f in rep.files:
        for k, v in f["reason_tokens"].items():
            totals[k] = totals.get(k, 0.0) + v
    parts = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(totals.items(), key=lambda x: -x[1])
                      if v)
    render.info(f"Per-call difference {rep.difference_tokens:,} tokens: {parts}; "
                f"unexplained {rep.unexplained_tokens:,} "
                f"({1 - rep.explained_share:.1%}).")


def out_columns(frame: pl.DataFrame, rep: CallsReport) -> pl.DataFrame:
    """The per-request table with the per-call report's columns (joined per call)."""
    import polars as pl

    keep = ["session_id", "timestamp_s", "api_prompt_tokens", "hidden_prefix_tokens",
            "hit_tokens_plain", "hit_tokens_hidden", "hit_tokens_ceiling",
            "hit_tokens_anthropic", "prompt_tokens_calibrated", "reason", "unexplained_tokens"]
    keep += [c for c in rep.rows[0] if c.startswith("d_")] if rep.rows else []
    extra = pl.DataFrame([{k: r[k] for k in keep} for r in rep.rows],
                         infer_schema_length=None)
    extra = extra.rename({"api_prompt_tokens": "reported_prompt_tokens"}).unique(
        ["session_id", "timestamp_s", "reported_prompt_tokens"], keep="first",
        maintain_order=True)
    return frame.join(extra, on=["session_id", "timestamp_s", "reported_prompt_tokens"],
                      how="left", nulls_equal=True)
