"""`xmemplan size --gpus N`: the load sweep (interactivity against throughput per option).

The first line answers (X-Mem's gains over host DRAM at the medium and the high load),
then the points table with the Pareto points marked, the gains per load and the notes;
assumptions with their sources go to stderr. `--format json|csv` carry the same points;
`--plot FILE.png` draws them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xmemplan.sizing.pareto import SweepRequest, SweepResult
    from xmemplan.sizing.synthetic import SyntheticWorkload

SPREAD_NOTE = 0.03  # interactivity varying more than this over the last re-plans


def parse_list(text: str, what: str, *, integer: bool = False) -> tuple[float, ...]:
    """'3,3,3.5' -> (3.0, 3.0, 3.5); each value checked as --rate / a count."""
    from xmemplan import units
    from xmemplan.errors import UsageError

    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise UsageError(f"{what} '{text}' is not a comma-separated list",
                         f"write it like {what} 3,3.5,4")
    out: list[float] = []
    for p in parts:
        if integer:
            try:
                v = int(p)
            except ValueError:
                raise UsageError(f"{what} '{p}' is not a whole number",
                                 f"write it like {what} 8,16,32") from None
            units.check_int(v, what, 1, units.MAX_CONCURRENCY)
            out.append(float(v))
        else:
            out.append(units.parse_rate(p, what))
    return tuple(out)


def build(*, gpus: int, workload: SyntheticWorkload, rates: str | None,
          concurrency: str | None, model: str | None, gpu: str, engine: str,
          host_tier: str, xmem_tier: str, tier_capacity: str | None,
          catalog: list[Path], requests: int, seed: int, nodes: int = 1,
          xmem_path: str = "direct", prefetch_policy: str | None = None,
          ) -> tuple[SweepRequest, list[dict[str, str]]]:
    """The sweep request from `size`'s flags, with every assumption and its source."""
    from xmemplan import units
    from xmemplan.catalog import load_catalog
    from xmemplan.defaults import SEED_MODEL
    from xmemplan.errors import UsageError
    from xmemplan.sizing import model as M
    from xmemplan.sizing.deployment import (
        ENGINES,
        hicache_said,
        replica_shape,
        resolve_tiers,
    )
    from xmemplan.sizing.pareto import SweepRequest
    from xmemplan.sizing.simmodel import PREFETCH_DEFAULT, Setup
    from xmemplan.sizing.synthetic import POST

    units.check_int(gpus, "--gpus", 1, units.MAX_GPUS)
    units.check_int(requests, "--requests", 200, 200_000)
    units.check_int(seed, "--seed", 0, 2**63 - 1)
    workload.check()
    if rates is not None and concurrency is not None:
        raise UsageError("give --user-centric-rate or --concurrency, not both")
    for flag, v in (("--gpu", gpu), ("--engine", engine)):
        if "," in v:
            raise UsageError(f"--gpus sweeps one GPU and one engine; {flag} '{v}' names "
                             "several", f"give one {flag}, or drop --gpus to compare them")
    if engine not in ENGINES:
        raise UsageError(f"unknown engine '{engine}'", "use sglang or vllm")
    overlap, transfer, mixed = ENGINES[engine]
    said: list[tuple[str, str]] = []
    hicache = hicache_said(engine, xmem_path, prefetch_policy)
    post_loads = "3,3,3.5,4,4.5,5.5"
    qps = parse_list(rates, "--user-centric-rate") if rates is not None else ()
    conc = parse_list(concurrency, "--concurrency", integer=True) \
        if concurrency is not None else ()
    if not qps and not conc:
        qps = parse_list(post_loads, "--user-centric-rate")
        said.append((f"loads: user-centric QPS {post_loads}", "default: " + POST))
    elif qps:
        said.append((f"loads: user-centric QPS {rates} over {workload.num_users} users "
                     "(AIPerf --user-centric-rate: each user sends every num_users / QPS s, "
                     "or when its reply is done if later)", "flag"))
    else:
        said.append((f"loads: {concurrency} concurrent users, each turn sent when the reply "
                     "is done (AIPerf --concurrency)", "flag"))
    if len(qps) + len(conc) > 32:
        raise UsageError("more than 32 loads", "sweep fewer loads")
    cat = load_catalog(catalog)
    m = cat.model(model or SEED_MODEL)
    g = cat.gpu(gpu)
    if m.max_context and workload.longest_prompt + workload.osl > m.max_context:
        raise UsageError(
            f"the last turn's prompt ({workload.longest_prompt:,} tokens) plus "
            f"{workload.osl:,} output tokens exceeds {m.name}'s {m.max_context:,}-token "
            "context", "fewer --session-turns-mean or shorter prompts")
    shape = replica_shape(m, g, float(workload.longest_prompt), max_gpus=gpus)
    host, xmem = resolve_tiers(cat, g, host_tier, xmem_tier)
    cal = M.calibration_for(cat, engine)
    setup = Setup(model=m, gpu=g, host=host, xmem=xmem, calibration=cal, transfer=transfer,
                  overlap=overlap, shape=shape, mixed=mixed, xmem_path=xmem_path,
                  prefetch_policy=prefetch_policy or PREFETCH_DEFAULT)
    caps: dict[str, float] = {}
    if tier_capacity is not None:
        cap = units.parse_bytes(tier_capacity, "--tier-capacity")
        if cap <= 0:
            raise UsageError(f"--tier-capacity '{tier_capacity}' is not positive")
        caps = {"host-dram": cap, "xmem": cap}
        said.append((f"KV tier of {tier_capacity} for host DRAM and for X-Mem", "flag"))
    else:
        for opt, t in (("host-dram", host), ("xmem", xmem)):
            c = float(t.capacity_bytes or 0.0)
            if t.capacity_scope == "node":
                c *= nodes
            elif t.capacity_scope == "server":
                c *= max(1, -(-gpus // g.gpus_per_server))
            else:
                c *= gpus
            caps[opt] = c
        said.append(("tier capacity from the catalog (host DRAM per server, X-Mem per node)",
                     "catalog (--tier-capacity overrides)"))
    said += [
        (workload.describe(), "flags (AIPerf's option names)"),
        (f"{m.name} on {gpus} x {g.name} ({shape.label} replicas), engine {engine} "
         f"(overlap {overlap}, {transfer.page_tokens}-token pages)", "flags / defaults"),
        ("GPU prefix caching off: every hit is loaded from the tier (the post's run)",
         "default: " + POST),
        ("hits: the previous turn's prompt + reply while the tier still holds it (LRU over "
         "prefixes, whole pages); a user's first turn computes its context",
         "model (xmemplan/sizing/synthetic.py)"),
        ("inter-token latency per request = (last token - first token) / (output - 1), "
         "from the iteration-level engine's decode steps; interactivity = its inverse, "
         "averaged",
         "AIPerf metrics reference (v0.13.0)"),
        *hicache,
        (f"{requests:,} simulated requests per load and option, seed {seed}, first tenth "
         "left out", "default" if requests == 4000 and seed == 0 else "flag"),
    ]
    req = SweepRequest(setup=setup, workload=workload, gpus=gpus, rates=qps,
                       concurrencies=tuple(int(c) for c in conc), tier_capacity_bytes=caps,
                       nodes=nodes, requests=requests, seed=seed)
    return req, [{"assumption": a, "source": s} for a, s in said]


def _ms(d: dict[str, float], key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:,.0f}"


def _first_of_each(items: list[Any], key: Callable[[Any], Any]) -> list[Any]:
    """`items` in order, each key's first only."""
    seen: set[Any] = set()
    out = []
    for x in items:
        k = key(x)
        if k not in seen:
            seen.add(k)
            out.append(x)
    return out


def report(r: SweepResult, fmt: str) -> None:
    from xmemplan.cli.views import render
    from xmemplan.sizing.pareto import LATE_SHARE, OPTION_NAMES, pct

    cols = ["option", "load_kind", "load", "interactivity_tok_s_user", "throughput_tok_s_gpu",
            "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p90_ms",
            "itl_p99_ms", "served_rps", "pareto"]
    rows = [[p.option, p.load_kind, p.load, p.interactivity, p.throughput_per_gpu,
             p.ttft_ms.get("p50"), p.ttft_ms.get("p90"), p.ttft_ms.get("p99"),
             p.itl_ms.get("p50"), p.itl_ms.get("p90"), p.itl_ms.get("p99"), p.served_rps,
             p.pareto] for p in r.points]
    if fmt == "json":
        render.emit_json(r.to_dict())
        return
    if fmt == "csv":
        render.emit_csv(cols, rows)
        return
    render.answer(r.answer)
    kind = r.points[0].load_kind if r.points else "qps"
    render.line(f"Workload: {r.workload}.")
    render.line(f"{r.model} on {r.gpus} x {r.gpu}, engine {r.engine}.")
    # a load listed again (the post runs QPS 3.0 twice) is the same simulation: one row of
    # each in the tables (JSON and CSV keep every listing, with its run index)
    shown = _first_of_each(r.points, lambda p: (p.option, p.load_kind, p.load))
    render.table(
        ["option", "QPS" if kind == "qps" else "users", "tok/s per user", "tok/s per GPU",
         "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "Pareto"],
        [[OPTION_NAMES.get(p.option, p.option), f"{p.load:g}", f"{p.interactivity:,.1f}",
          f"{p.throughput_per_gpu:,.0f}", _ms(p.ttft_ms, "p50"), _ms(p.ttft_ms, "p99"),
          _ms(p.itl_ms, "p50"), _ms(p.itl_ms, "p99"), "yes" if p.pareto else "-"]
         for p in shown],
        title="Interactivity and throughput per load; TTFT and ITL in ms",
    )
    if r.gains:
        render.table(
            ["QPS" if kind == "qps" else "users", "interactivity", "throughput",
             "TTFT p50", "ITL p50"],
            [[f"{g['load']:g}", pct(g["interactivity"]), pct(g["throughput"]),
              pct(g["ttft_p50"]), pct(g["itl_p50"])]
             for g in _first_of_each(r.gains, lambda g: g["load"])],
            title="X-Mem against host DRAM, same load",
        )
    listings = Counter(p.load for p in r.points if p.option == r.points[0].option)
    again = sorted(ld for ld, k in listings.items() if k > 1)
    if again:
        unit = "QPS " if kind == "qps" else ""
        listed = ", ".join(f"{unit}{ld:g}" + ("" if kind == "qps" else " users") for ld in again)
        render.line(f"({listed} listed more than once: the same simulation, one row here; "
                    "--format json keeps each listing)")
    render.line("(Pareto: no other load of that option has both more tok/s/user and more "
                "tok/s/GPU)")
    if r.keeps_schedule_up_to:
        parts = [f"{OPTION_NAMES.get(o, o)} " + (f"up to QPS {v:g}" if v is not None
                                                 else "at none of these loads")
                 for o, v in r.keeps_schedule_up_to.items()]
        render.line("Users keep their schedule (fewer than half the sends wait for a reply): "
                    + ", ".join(parts) + ".")
    if kind == "qps":
        for p in r.points:
            if p.late_share >= LATE_SHARE:
                render.line(f"- {OPTION_NAMES.get(p.option, p.option)} at QPS {p.load:g}: "
                            f"replies outlast the {r_gap(r, p):.2f} s turn gap, so users "
                            f"wait for them ({p.late_share:.0%} of sends): served "
                            f"{p.served_rps:.2f} requests/s.")
    unsettled = [p for p in r.points if p.spread > SPREAD_NOTE]
    for p in unsettled:
        render.line(f"- {OPTION_NAMES.get(p.option, p.option)} at {p.load:g}: near "
                    f"saturation the schedule did not settle; tok/s/user varied "
                    f"{p.spread:.0%} over the last of {p.iterations} re-planned runs.")
    render.line(f"- Same workload on a real server: {r.aiperf_command}")
    import sys

    sys.stdout.flush()  # the answer stays above the assumptions on a shared screen
    if render.verbose():
        for a in r.assumptions:
            render.info(f"Assumption: {a['assumption']} [{a['source']}]")
    elif r.assumptions:
        render.info(f"{len(r.assumptions)} assumptions behind this answer: -v lists them "
                    "with their sources (xmemplan -v size ...; --format json carries them)")
    from xmemplan.cli.size import ANSWER_AGAIN_AFTER

    if render.lines_written() > ANSWER_AGAIN_AFTER:  # the answer has scrolled: again, last
        render.answer(r.answer)


def r_gap(r: SweepResult, p: Any) -> float:
    return r.num_users / p.load if p.load else 0.0


def plot(r: SweepResult, path: Path, inputs: list[Path] | None = None) -> None:
    """Interactivity (x) against throughput per GPU (y) per option, as AIPerf and
    InferenceMAX draw them: Pareto points solid and joined, the rest shaded."""
    from xmemplan.cli.views.plots import _pyplot, save_figure
    from xmemplan.sizing.pareto import OPTION_NAMES

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    colours = {"host-dram": "tab:blue", "xmem": "tab:orange", "hbm-only": "tab:grey"}
    for opt in dict.fromkeys(p.option for p in r.points):
        pts = [p for p in r.points if p.option == opt]
        c = colours.get(opt)
        front = sorted((p for p in pts if p.pareto), key=lambda p: p.interactivity)
        rest = [p for p in pts if not p.pareto]
        ax.plot([p.interactivity for p in front], [p.throughput_per_gpu for p in front],
                marker="o", color=c, label=f"{OPTION_NAMES.get(opt, opt)} (Pareto)")
        if rest:
            ax.scatter([p.interactivity for p in rest], [p.throughput_per_gpu for p in rest],
                       color=c, alpha=0.3, label=f"{OPTION_NAMES.get(opt, opt)} (dominated)")
        for p in pts:
            ax.annotate(f"{p.load:g}", (p.interactivity, p.throughput_per_gpu), fontsize=7,
                        textcoords="offset points", xytext=(4, 3))
    kind = r.points[0].load_kind if r.points else "qps"
    ax.set_xlabel("interactivity (output tokens/s per user)")
    ax.set_ylabel("throughput (output tokens/s per GPU)")
    ax.set_title(f"{r.model} on {r.gpus} x {r.gpu}; labels: "
                 f"{'QPS' if kind == 'qps' else 'users'}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        save_figure(fig, path, "--plot", inputs or [])
    finally:
        plt.close(fig)
