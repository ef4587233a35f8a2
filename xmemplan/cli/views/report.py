"""The run folder's report.html and summary.md, built from the folder's own files.

report.html is one self-contained page: the CSS is inline, each chart is a PNG data URI, and a
Content-Security-Policy forbids every request (no network, no script). It is rendered with
Jinja2 (autoescaping on: trace paths and notes are user text) from
xmemplan/cli/templates/report.html.j2. The answer comes first, then the hit ratio and its
distribution, the capacity curve, TTFT against load, GPUs and nodes by SLO, costs when the plan
has them, assumptions with sources, the validated range with its measured errors, and the
command that reproduces the run.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xmemplan.errors import InputError

# Charts in the order the report shows them: file name, id, caption.
FIGURES = (
    ("hit_ratio_by_round.png", "fig-by-round",
     "Hit ratio by round: token-weighted and mean per request."),
    ("hit_ratio_histogram.png", "fig-hit-histogram",
     "Distribution of the per-request hit ratio."),
    ("hit_ratio_vs_capacity.png", "fig-capacity",
     "Hit ratio against LRU cache capacity (exact, one pass): the infinite-cache ratio needs "
     "the working set to fit."),
    ("working_set.png", "fig-working-set",
     "Working set over time: the KV of live sessions."),
    ("ttft_vs_load.png", "fig-ttft-load",
     "TTFT against offered load per option, with the SLO, the offered load and the chosen "
     "configuration marked."),
)


@dataclass
class Run:
    """A run folder's documents (see xmemplan/cli/plan.py)."""

    path: Path
    plan: dict[str, Any]
    profile: dict[str, Any] | None = None
    hitrate: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None  # plan --validate: validate --emulate's JSON
    command: str = ""
    figures: dict[str, bytes] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name if self.path.is_dir() else self.path.stem


def load_run(path: Path) -> Run:
    """A run folder, or a bare plan document (`size --format json`), as a Run."""
    from xmemplan.jsonio import read_json, read_text
    from xmemplan.plan import plan_from_doc

    p = Path(path)
    if not p.exists():
        raise InputError("no such run folder or plan file", path=p,
                         hint="pass a folder written by 'xmemplan plan -o', or a plan.json")
    if p.is_dir():
        plan_path = p / "plan.json"
        if not plan_path.is_file():
            raise InputError("not a run folder: it holds no plan.json", path=p,
                             hint="pass a folder written by 'xmemplan plan', or a plan.json")
        plan = read_json(plan_path)
        plan_from_doc(plan, plan_path)
        run = Run(path=p, plan=plan)
        for name, attr in (("profile.json", "profile"), ("hitrate.json", "hitrate"),
                           ("validation.json", "validation")):
            if (p / name).is_file():
                setattr(run, attr, read_json(p / name))
        if (p / "command.txt").is_file():
            run.command = read_text(p / "command.txt")
        for fname, _, _ in FIGURES:
            if (p / fname).is_file():
                run.figures[fname] = (p / fname).read_bytes()
        return run
    plan = read_json(p)
    plan_from_doc(plan, p)
    return Run(path=p, plan=plan)


# --- figures and numbers ------------------------------------------------------------------

def _n(v: Any, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _ratio(v: Any) -> str:
    return "-" if v is None or v != v else f"{v:.4f}"


def _tokens(v: Any) -> str:
    from xmemplan.units import format_count

    if v is None:
        return "-"
    return format_count(v) if v >= 1000 else f"{v:,.0f}"


def _rps(o: dict[str, Any]) -> str:
    v = o.get("goodput_rps")
    if v is None:
        return "-"
    return f">={v:,.0f}" if o.get("goodput_capped") else f"{v:,.1f}"


def options_rows(plan: dict[str, Any]) -> list[list[str]]:
    rows = []
    for o in plan.get("options", []):
        t = o.get("ttft_ms") or {}
        w, c = t.get("warm", {}), t.get("cold", {})
        rows.append([o["option"], _n(o.get("gpus")), _n(o.get("nodes")),
                     _ratio(o.get("hit_ratio")), _n(w.get("p50")), _n(w.get("p99")),
                     _n(c.get("p99")), _rps(o)])
    return rows


def stats_rows(hitrate: dict[str, Any] | None) -> list[list[str]]:
    from xmemplan.hitrate.stats import DISTRIBUTIONS, STAT_KEYS

    stats = (hitrate or {}).get("stats") or {}
    rows = []
    for name, label in DISTRIBUTIONS:
        d = stats.get(name)
        if not d or not d.get("count"):
            continue
        show = _ratio if name == "request_hit_ratio" else _tokens
        rows.append([label, _n(d["count"]), *(show(d[k]) for k in STAT_KEYS[1:])])
    return rows


def validation(plan: dict[str, Any]) -> dict[str, Any]:
    """The model's measured errors (docs/model.md section 3, computed now from the shipped
    calibration) and whether this plan's prompt length is inside the measured range."""
    from xmemplan.sizing.calibration import fit_table, public_points, summary

    rows = fit_table()
    pts = public_points()
    lo = min(p.prompt_tokens for p in pts if p.prompt_tokens > 0)
    hi = max(p.prompt_tokens for p in pts)
    med = summary(rows)
    p50 = plan.get("prompt_tokens_p50")
    inside = p50 is not None and lo <= p50 <= hi
    return {
        "rows": [[r.id, r.kind, r.quantity, _fmt_q(r.quantity, r.measured),
                  _fmt_q(r.quantity, r.predicted), f"{r.error:+.1%}", r.role] for r in rows],
        "lo": _tokens(lo), "hi": _tokens(hi), "p50": _tokens(p50), "inside": inside,
        "fit_median": f"{med['fit']:.1%}", "held_out_median": f"{med['held-out']:.1%}",
        "held_out_ttft": f"{med['held-out full-hit ttft']:.1%}",
        "gpus": sorted({p.gpu for p in pts}),
    }


def _emulated(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """plan --validate's verdict: PASS/FAIL, the largest error, what it covers, per class."""
    if not doc:
        return None

    def pct(v: Any) -> str:
        return "-" if v is None else f"{v:+.1%}"

    return {
        "verdict": "PASS" if doc.get("passed") else "FAIL",
        "error": f"{doc.get('error', float('nan')):.1%}",
        "tolerance": f"{doc.get('tolerance', float('nan')):.0%}",
        "verdict_on": doc.get("verdict_on", ""),
        "lines": [doc.get("note", ""), *doc.get("preamble", [])],
        "rows": [[c["name"], _n(c.get("requests")), _n(c.get("load_p50_ms"), 2),
                  _n(c.get("predicted_load_p50_ms"), 2), pct(c.get("load_error_p50")),
                  _n(c.get("load_p90_ms"), 2), _n(c.get("predicted_load_p90_ms"), 2),
                  pct(c.get("load_error_p90"))] for c in doc.get("classes", [])],
    }


def _fmt_q(quantity: str, v: float) -> str:
    if quantity.startswith("ratio"):
        return f"{v:.2f}x"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def costs_rows(plan: dict[str, Any]) -> list[list[str]]:
    """Costs when the plan has them (`size --cost`): the answer's, then each option's."""
    basis = plan.get("cost_basis")
    per = "/h" if basis == "hour" else ""

    def money(v: Any) -> str:
        return "-" if v is None else (f"${v:,.2f}{per}" if v < 1000 else f"${v:,.0f}{per}")

    rows = []
    if plan.get("cost") is not None:
        rows.append(["the answer", money(plan["cost"])])
    if plan.get("saving") is not None:
        rows.append(["saving (vs the cheapest answer with the other X-Mem choice)",
                     money(plan["saving"])])
    for o in plan.get("options", []):
        if o.get("cost") is not None:
            rows.append([o["option"], money(o["cost"])])
    return rows


def context(run: Run) -> dict[str, Any]:
    """Everything the template and summary.md show."""
    plan, hit, prof = run.plan, run.hitrate or {}, run.profile or {}
    figures = []
    for fname, fid, caption in FIGURES:
        data = run.figures.get(fname)
        if data is not None:
            figures.append({"id": fid, "file": fname, "caption": caption,
                            "uri": "data:image/png;base64," + base64.b64encode(data).decode()})
    src = prof.get("source") or {}
    ws = (hit.get("capacity") or {}).get("working_set") or prof.get("working_set") or {}
    return {
        "name": run.name,
        "plan": plan,
        "answer": plan.get("answer", ""),
        "options": options_rows(plan),
        "pooled_note": (pooled_note(plan.get("slo_percentile", 99))
                        if any((o.get("replications") or 1) > 1
                               for o in plan.get("options", [])) else ""),
        "by_slo": [[_n(t["ttft_slo_ms"]), _n(t["gpus_host_dram"]), _n(t["gpus_xmem"]),
                    _n(t["xmem_nodes"]), _n(t["gpus_saved"])] for t in plan.get("table", [])],
        "assumptions": plan.get("assumptions", []),
        "reasons": plan.get("reasons", []),
        "warnings": plan.get("warnings", []) + list(hit.get("notes", [])),
        "costs": costs_rows(plan),
        "hit": {
            "token": _ratio(hit.get("token_hit_ratio", (prof.get("hit_ratio") or {}).get(
                "token_hit_ratio"))),
            "mean": _ratio(hit.get("mean_request_hit_ratio")),
            "rounds_ge1": _ratio(hit.get("rounds_ge1_token_hit_ratio")),
            "requests": _n(hit.get("requests", prof.get("requests"))),
            "sessions": _n(hit.get("sessions", prof.get("sessions"))),
            "scope": hit.get("scope", src.get("scope", "-")),
            "aiperf": ((hit.get("stats") or {}).get("aiperf_cache_hit_rate") or ""),
        },
        "stats": stats_rows(hit),
        "profile_assumptions": list(prof.get("assumptions") or []),
        "stat_keys": ["requests", "mean", "p25", "p50", "p75", "p90", "p99", "max"],
        "start_together": bool(ws.get("sessions_start_together")),
        "figures": figures,
        "missing_figures": [_why_missing(f, plan, run) for f, _, _ in FIGURES
                            if f not in run.figures],
        "validation": validation(plan),
        "emulated": _emulated(run.validation),
        "command": run.command,
        "version": _version(),
    }


def _why_missing(fname: str, plan: dict[str, Any], run: Run) -> str:
    if fname == "ttft_vs_load.png" and not plan.get("load_curve"):
        return (f"{fname} (no load curve: a closed-loop load, --users, has no request rate "
                "to scale)")
    if not run.figures:
        return f"{fname} (matplotlib is not installed: pip install 'xmemplan[plot]')"
    return f"{fname} (no data for it in this trace)"


def _version() -> str:
    from xmemplan import __version__

    return __version__


def render_html(run: Run) -> str:
    """report.html of `run` (Jinja2, autoescaped)."""
    env = _env()
    return env.get_template("report.html.j2").render(**context(run))


def _env() -> Any:
    try:
        import jinja2
    except ImportError as exc:  # a dependency: only a broken install lacks it
        from xmemplan.errors import NotAvailableError

        raise NotAvailableError("the report needs Jinja2, which is not installed",
                                "pip install 'jinja2>=3.1' (a dependency of xmemplan)") from exc
    return jinja2.Environment(
        loader=jinja2.PackageLoader("xmemplan.cli", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True,
    )


def _md_table(cols: list[str], rows: list[list[str]]) -> list[str]:
    def cell(x: str) -> str:
        return str(x).replace("|", "\\|")

    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
            *("| " + " | ".join(cell(x) for x in r) + " |" for r in rows)]


def pooled_note(percentile: float) -> str:
    """Under a table of options: its percentiles pool every replication's requests, while
    the answer's figure (the SLO's statistic) is the mean of each replication's own."""
    return (f"warm and cold percentiles: every replication's requests pooled; line 1's "
            f"p{percentile:g} is the mean of the replications' own, the figure the SLO is "
            "judged on")


def summary_markdown(run: Run) -> str:
    """summary.md: the answer, the options, GPUs by SLO and the command, as Markdown."""
    c = context(run)
    p = c["plan"]
    lines = [
        f"# {c['name']}: {c['answer']}", "",
        f"{p.get('model')} on {p.get('gpu')}, engine {p.get('engine')}; SLO "
        f"{p.get('ttft_slo_ms', 0):,.0f} ms at p{p.get('slo_percentile', 99):g} of "
        f"{p.get('slo_on')} requests. Load: {p.get('load')}. Cheapest compliant option: "
        f"{p.get('cheapest')}.", "",
        f"Token hit ratio {c['hit']['token']} ({c['hit']['scope']} scope, infinite cache; "
        f"{c['hit']['requests']} requests, {c['hit']['sessions']} sessions).", "",
        "## Fewest GPUs meeting the SLO (TTFT in ms)", "",
        *_md_table(["option", "GPUs", "nodes", "hit", "warm p50", "warm p99", "cold p99",
                    "max r/s"], c["options"]), "",
    ]
    if c["pooled_note"]:
        lines += [f"({c['pooled_note']}.)", ""]
    if c["by_slo"]:
        lines += ["## GPUs and X-Mem nodes by SLO", "",
                  *_md_table(["SLO ms", "GPUs, host DRAM", "GPUs, X-Mem", "nodes, X-Mem",
                              "GPUs saved"], c["by_slo"]), ""]
    if c["costs"]:
        lines += ["## Costs", "", *_md_table(["", "value"], c["costs"]), ""]
    if c["stats"]:
        lines += ["## Trace statistics (per request)", "",
                  *_md_table(["", *c["stat_keys"]], c["stats"]), "", c["hit"]["aiperf"] + ".",
                  ""]
    if c["emulated"]:
        e = c["emulated"]
        lines += ["## Validation in emulation", "",
                  f"{e['verdict']}: largest error {e['error']} (tolerance {e['tolerance']}; "
                  f"{e['verdict_on']}).", ""]
    if c["reasons"] or c["warnings"]:
        lines += ["## Reasons and warnings", "", *(f"- {r}" for r in c["reasons"]),
                  *(f"- Warning: {w}" for w in c["warnings"]), ""]
    lines += ["## Charts", "", *(f"- [{f['file']}]({f['file']}): {f['caption']}"
                                 for f in c["figures"]), ""]
    if c["command"]:
        lines += ["## Reproduce", "", "```", c["command"].rstrip("\n"), "```", ""]
    lines += ["The assumptions with their sources, and the model's measured errors, are in "
              "report.html.", ""]
    return "\n".join(lines)
