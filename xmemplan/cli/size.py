"""`xmemplan size --ttft-slo 500ms`: how many GPUs and X-Mem nodes meet a TTFT SLO at a load.

The first output line is the answer; then the options, the nodes x SLO x GPUs table, the
reasons, and every assumption with its source (stderr).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from xmemplan import units
from xmemplan.defaults import SEED_GPU

if TYPE_CHECKING:
    from xmemplan.sizing.planner import OptionResult, SizeResult

OUTPUT_FORMATS = ("table", "json", "csv")


def register(app: typer.Typer) -> None:
    app.command("size")(size)


# Options only the --gpus load sweep (the synthetic multi-turn workload) reads, and the
# options it does not read at all: either given in the other mode is refused, never ignored.
SWEEP_ONLY = ("user_centric_rate", "concurrency", "num_users", "session_turns_mean",
              "shared_system_prompt_length", "user_context_prompt_length",
              "synthetic_input_tokens_mean", "osl", "tier_capacity")
NOT_IN_SWEEP = ("users", "think", "output_tokens", "working_set", "overlap", "page_tokens",
                "tp", "ep", "dp_attention", "kv_dtype", "mem_fraction", "attention_dtype",
                "slo_at", "slo_on", "router", "prefix_groups", "tier_scope", "max_gpus",
                "cost")


def size(
    ctx: typer.Context,
    ttft_slo: str | None = typer.Option(
        None, "--ttft-slo", help="TTFT target with a unit: 500ms, 2s (needed without --gpus)."),
    workload: Path | None = typer.Option(
        None, "--workload", "-w", help="A profile from 'xmemplan hitrate --profile-out'."
    ),
    prompt_tokens: str | None = typer.Option(
        None, "--prompt-tokens", help="Prompt length: 64Ki (65,536) or 64k (64,000); "
        "P50:P90 (20k:60k) draws lengths lognormal through both."
    ),
    hit_rate: float | None = typer.Option(
        None, "--hit-rate", help="Share of prompt tokens served from cache, 0 to 1."
    ),
    model: str | None = typer.Option(None, "--model", "-m", help="Model name (see catalog)."),
    gpu: str = typer.Option(SEED_GPU, "--gpu", help="GPU name (see 'xmemplan catalog'); "
                            "several separated by commas are compared in one table."),
    rate: float | None = typer.Option(
        None, "--rate", help="Offered load: requests/s over the deployment (Poisson, or the "
        "trace's sessions compressed to it)."
    ),
    users: int | None = typer.Option(
        None, "--users", help="Offered load: closed-loop users (each waits --think)."
    ),
    think: str = typer.Option("5s", "--think", help="Mean think time of --users."),
    output_tokens: str | None = typer.Option(
        None, "--output-tokens", help="Output tokens per request: P50 or P50:P90 (lognormal "
        "through both; default 100)."
    ),
    working_set: str | None = typer.Option(
        None, "--working-set", help="KV working set to keep (bytes like 20TB, or tokens)."
    ),
    engine: str = typer.Option(
        "sglang", "--engine", help="sglang (HiCache: layer overlap, prefill first) or vllm "
        "(OffloadingConnector: load then compute, decodes in every batch); "
        "sglang,vllm compares both in one table."
    ),
    overlap: str | None = typer.Option(
        None, "--overlap", help="sum, layer or max (default: the engine's)."
    ),
    page_tokens: int | None = typer.Option(None, "--page-tokens", help="Tokens per KV page."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel GPUs per replica "
                                  "(default: the smallest shape that fits)."),
    ep: int | None = typer.Option(None, "--ep", help="Expert-parallel ranks of a MoE replica "
                                  "(default: = --tp; must divide it)."),
    dp_attention: bool = typer.Option(
        False, "--dp-attention", help="Data-parallel attention over the replica's ranks "
        "(SGLang --enable-dp-attention)."),
    kv_dtype: str | None = typer.Option(
        None, "--kv-dtype", help="KV cache dtype: bf16, fp16 or fp8 (default: the model's)."),
    mem_fraction: str | None = typer.Option(
        None, "--mem-fraction", help="Share of each GPU's HBM the engine takes for weights + "
        "KV: SGLang --mem-fraction-static, vLLM --gpu-memory-utilization (default 0.9)."),
    attention_dtype: str = typer.Option(
        "bf16", "--attention-dtype", help="Attention compute: bf16, or fp8 (FP8 attention "
        "at the GPU's FP8 peak)."),
    slo_at: str = typer.Option("p99", "--slo-at", help="Percentile of the SLO: p50/p90/p99."),
    slo_on: str = typer.Option("warm", "--slo-on", help="warm (hit >= half the prompt) or "
                               "all requests."),
    host_tier: str = typer.Option(
        "host-dram-pcie5", "--host-tier", help="The host-DRAM option's tier: a catalog tier "
        "of kind host, rdma or nvme (host-dram-pcie5, rdma-cx7, nvme-gen5, ...)."),
    xmem_tier: str = typer.Option("xmem", "--xmem-tier", help="The X-Mem option's tier: a "
                                  "catalog tier of kind xmem."),
    xmem_path: str = typer.Option(
        "direct", "--xmem-path", help="X-Mem under SGLang: direct (the Netpreme fork's "
        "GPU <-> X-Mem copy, loaded with the batch) or hicache-storage (our HiCache storage "
        "backend: X-Mem at L3, prefetched to host DRAM while the request waits, then "
        "loaded host -> GPU; docs/size.md 'HiCache L3 prefetch')."),
    prefetch_policy: str | None = typer.Option(
        None, "--hicache-storage-prefetch-policy", help="With --xmem-path hicache-storage: "
        "when a waiting request stops waiting for its L3 prefetch, as SGLang's flag: "
        "best_effort (at once, the rest recomputed), wait_complete (all of it), timeout "
        "(1 s + 0.25 s per 1,024 tokens; SGLang 0.5.23's default)."),
    catalog: list[Path] = typer.Option(
        [], "--catalog", help="TOML file adding or overriding catalog entries (repeatable)."
    ),
    router: str = typer.Option(
        "session", "--router", help="How requests are spread over replicas: session "
        "(default), round-robin, random, least-loaded, sglang-cache-aware (prefix-aware), "
        "llm-d-prefix, llm-d-precise or dynamo-kv (docs/size.md, 'Routing')."),
    prefix_groups: int | None = typer.Option(
        None, "--prefix-groups", help="The hit prefix of each request is one of N shared "
        "prefixes (system prompts, documents), drawn uniformly: replicas then cache them "
        "apart."),
    tier_scope: list[str] = typer.Option(
        [], "--tier-scope", help="Who reads a tier: TIER=replica|server|rack|cluster, e.g. "
        "host-dram=server for a per-server offload store (repeatable; default: catalog "
        "share_scope)."),
    requests: int = typer.Option(4000, "--requests", help="Requests simulated per "
                                 "replication."),
    seed: int = typer.Option(0, "--seed", help="Seed of the replications' draws (arrivals, "
                             "which requests keep their hits)."),
    max_gpus: int = typer.Option(1024, "--max-gpus", help="Largest GPU count searched."),
    cost: str | None = typer.Option(
        None, "--cost", help="Prices to compare in money: gpu=2.5/h,xmem-node=40/h (per "
        "hour; without /h per unit; a GPU's name prices that GPU), or a TOML file with a "
        "[cost] table. Without it options are compared in counts."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or csv."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Draw p99 TTFT against offered load per option to FILE.png "
        "(with --gpus: interactivity against throughput, Pareto points solid)."
    ),
    gpus: int | None = typer.Option(
        None, "--gpus", help="Load sweep on N GPUs: interactivity, throughput, TTFT and ITL "
        "per option and load, Pareto points marked (docs/size.md). With --workload, "
        "--prompt-tokens, --hit-rate or --rate: a fixed deployment of N GPUs at that load, "
        "each option's TTFT, throughput, KV usage and preemptions (no search)."),
    user_centric_rate: str | None = typer.Option(
        None, "--user-centric-rate", help="With --gpus: loads as AIPerf user-centric QPS, "
        "a list (default 3,3,3.5,4,4.5,5.5)."),
    concurrency: str | None = typer.Option(
        None, "--concurrency", help="With --gpus: loads as concurrent users, a list (each "
        "turn sent when its reply is done)."),
    num_users: int = typer.Option(15, "--num-users", help="With --gpus: users of "
                                  "--user-centric-rate."),
    session_turns_mean: int = typer.Option(20, "--session-turns-mean",
                                           help="With --gpus: turns per session."),
    shared_system_prompt_length: int = typer.Option(
        1000, "--shared-system-prompt-length", help="With --gpus: tokens shared by all users."),
    user_context_prompt_length: int = typer.Option(
        20000, "--user-context-prompt-length", help="With --gpus: tokens unique per user."),
    synthetic_input_tokens_mean: int = typer.Option(
        26, "--synthetic-input-tokens-mean", "--isl", help="With --gpus: new tokens per turn."),
    osl: int = typer.Option(100, "--osl", help="With --gpus: output tokens per turn."),
    tier_capacity: str | None = typer.Option(
        None, "--tier-capacity", help="With --gpus: KV tier size for host DRAM and X-Mem, "
        "e.g. 64GB (default: the catalog's)."),
) -> None:
    """How many GPUs and X-Mem nodes meet a TTFT SLO at an offered load (simulated)."""
    from xmemplan.cli.views import render
    from xmemplan.errors import UsageError
    if fmt not in OUTPUT_FORMATS:
        raise UsageError(f"unknown output format '{fmt}'", "use table, json or csv")
    from xmemplan.cli.firstrun import first_run_notice
    from xmemplan.cli.invocation import refuse_given, refuse_think_without_users

    first_run_notice()
    sweeping = gpus is not None and all(v is None for v in (workload, prompt_tokens,
                                                             hit_rate, rate))
    if sweeping:
        refuse_given(ctx, NOT_IN_SWEEP, "does not apply to the --gpus load sweep (the "
                     "synthetic multi-turn workload)", "drop it; or give --prompt-tokens, "
                     "--hit-rate, --rate or --workload with --gpus to evaluate a deployment, "
                     "which takes {flag}")
    else:
        refuse_given(ctx, SWEEP_ONLY, "applies only to the --gpus load sweep (the synthetic "
                     "multi-turn workload)", "drop it, or run the sweep: --gpus N without "
                     "--prompt-tokens, --hit-rate, --rate or --workload")
    refuse_think_without_users(ctx, users)
    if not sweeping:  # the --gpus sweep imports neither the planner nor the request builder
        from xmemplan.sizing.planner import FIXED_SLO_S, evaluate, plan
        from xmemplan.sizing.request import build_request
    if gpus is not None and not sweeping:
        # an ordinary workload on N GPUs: a fixed deployment at the offered load, no search
        if plot is not None:
            raise UsageError("--plot draws the SLO search or the --gpus load sweep",
                             "drop --plot, or drop --gpus to size for a TTFT SLO")
        # it used to be ignored (raised to --gpus)
        refuse_given(ctx, ("max_gpus",), f"bounds the SLO search, and --gpus {gpus:,} "
                     "evaluates that many GPUs", "drop --max-gpus, or drop --gpus to search "
                     "up to --max-gpus")
        req, notes = build_request(
            ttft_slo=ttft_slo or f"{FIXED_SLO_S:g}s", workload=workload,
            prompt_tokens=prompt_tokens, hit_rate=hit_rate, model=model, gpu=gpu, rate=rate,
            users=users, think=think, output_tokens=output_tokens, working_set=working_set,
            engine=engine, overlap=overlap, page_tokens=page_tokens, slo_at=slo_at,
            slo_on=slo_on, host_tier=host_tier, xmem_tier=xmem_tier, catalog=catalog,
            requests=requests, seed=seed, max_gpus=max(max_gpus, gpus), tp=tp, ep=ep,
            dp_attention=dp_attention, kv_dtype=kv_dtype, attention_dtype=attention_dtype,
            mem_fraction=mem_fraction, router=router, prefix_groups=prefix_groups,
            tier_scope=tier_scope, cost=cost, xmem_path=xmem_path,
            prefetch_policy=prefetch_policy)
        if workload is not None:
            notes += profile_warnings(workload)
        if gpus % req.shape.gpus:  # the rest would idle, counted in the cost, not the run
            n = gpus // req.shape.gpus * req.shape.gpus
            raise UsageError(
                f"--gpus {gpus:,} is not a whole number of {req.shape.label} replicas "
                f"({units.count(req.shape.gpus, 'GPU')} each)",
                f"give a multiple of {req.shape.gpus:,}, like {max(n, req.shape.gpus):,} or "
                f"{n + req.shape.gpus:,}" + ("" if tp is not None else
                                             ", or --tp for another replica shape"))
        notes += placement_warnings(ctx, req, tier_scope, catalog, host_tier, xmem_tier,
                                    gpus=gpus)
        with render.spinner(f"Simulating each option on {gpus:,} GPUs"):
            opts = evaluate(req, gpus)
        _report_fixed(req, opts, gpus, ttft_slo is not None, fmt, notes)
        return
    if gpus is not None:
        from xmemplan.sizing.synthetic import SyntheticWorkload

        _sweep(gpus=gpus, plot=plot, fmt=fmt, workload=workload, prompt_tokens=prompt_tokens,
               hit_rate=hit_rate, ttft_slo=ttft_slo, rates=user_centric_rate,
               concurrency=concurrency, synthetic=SyntheticWorkload(
                   shared_system_prompt_length=shared_system_prompt_length,
                   user_context_prompt_length=user_context_prompt_length,
                   synthetic_input_tokens_mean=synthetic_input_tokens_mean, osl=osl,
                   session_turns_mean=session_turns_mean, num_users=num_users),
               model=model, gpu=gpu, engine=engine, host_tier=host_tier, xmem_tier=xmem_tier,
               tier_capacity=tier_capacity, catalog=catalog,
               requests=requests, seed=seed, xmem_path=xmem_path,
               prefetch_policy=prefetch_policy)
        return
    if ttft_slo is None:
        raise UsageError("--ttft-slo is needed", "give a TTFT target like --ttft-slo 500ms, "
                         "or --gpus N for a load sweep")
    if plot is not None and ("," in gpu or "," in engine):  # it was drawn by neither path
        raise UsageError("--plot draws one sizing's TTFT against load, and --gpu/--engine "
                         "with commas compare several in one table",
                         "drop --plot, or size one GPU and engine with --plot")
    if plot is not None and plot.suffix.lower() != ".png":
        raise UsageError(f"cannot tell the type of '{plot}'", "end --plot with .png")
    if plot is not None:
        from xmemplan.cli.views.plots import _pyplot

        _pyplot()  # fail before the work when matplotlib is missing
        from xmemplan.jsonio import check_output

        check_output(plot, "--plot", [p for p in (workload, *catalog) if p is not None])
    if "," in gpu or "," in engine:
        kw = dict(
            ttft_slo=ttft_slo, workload=workload, prompt_tokens=prompt_tokens,
            hit_rate=hit_rate, model=model, rate=rate, users=users, think=think,
            output_tokens=output_tokens, working_set=working_set, overlap=overlap,
            page_tokens=page_tokens, slo_at=slo_at, slo_on=slo_on, host_tier=host_tier,
            xmem_tier=xmem_tier, catalog=catalog, requests=requests, seed=seed,
            max_gpus=max_gpus, tp=tp, ep=ep, dp_attention=dp_attention, kv_dtype=kv_dtype,
            attention_dtype=attention_dtype, mem_fraction=mem_fraction, router=router,
            prefix_groups=prefix_groups, tier_scope=tier_scope, cost=cost,
            xmem_path=xmem_path, prefetch_policy=prefetch_policy)
        _compare(gpu, engine, kw, fmt, workload, ctx)
        return
    req, notes = build_request(
        ttft_slo=ttft_slo, workload=workload, prompt_tokens=prompt_tokens, hit_rate=hit_rate,
        model=model, gpu=gpu, rate=rate, users=users, think=think,
        output_tokens=output_tokens, working_set=working_set, engine=engine,
        overlap=overlap, page_tokens=page_tokens, slo_at=slo_at, slo_on=slo_on,
        host_tier=host_tier, xmem_tier=xmem_tier, catalog=catalog, requests=requests,
        seed=seed, max_gpus=max_gpus, tp=tp, ep=ep, dp_attention=dp_attention,
        kv_dtype=kv_dtype, attention_dtype=attention_dtype, mem_fraction=mem_fraction,
        router=router, prefix_groups=prefix_groups, tier_scope=tier_scope,
        cost=cost, xmem_path=xmem_path, prefetch_policy=prefetch_policy,
    )
    if workload is not None:
        notes += profile_warnings(workload)
    # the answer's reasons say when routing changes no hit; the tier scope is said here
    notes += placement_warnings(ctx, req, tier_scope, catalog, host_tier, xmem_tier,
                                router=False)
    with render.spinner("Sizing: simulating each option's serving"):
        result = plan(req, with_curve=plot is not None or fmt == "json")
    _report(result, fmt, notes)
    if plot is not None:
        _plot(result, plot)  # checked against the inputs above
        render.info(f"Wrote {plot}")


def _compare(gpus: str, engines: str, kw: dict[str, Any], fmt: str,
             workload: Path | None, ctx: Any = None) -> None:
    """`--gpu a,b,c` and/or `--engine sglang,vllm`: each combination sized on its own (the
    cheapest over its shapes and tiers), then one table, the cheapest first; by price
    with --cost (each GPU priced: --cost h100-sxm=2.5/h,h200=3.5/h,...), else by GPUs then
    nodes, which compares counts of different GPUs and says so."""
    from xmemplan.cli.views import render
    from xmemplan.errors import UsageError
    from xmemplan.sizing.planner import plan
    from xmemplan.sizing.request import build_request

    gl = [g.strip() for g in gpus.split(",") if g.strip()]
    el = [e.strip() for e in engines.split(",") if e.strip()]
    if not gl or not el or len(set(gl)) != len(gl) or len(set(el)) != len(el):
        raise UsageError("--gpu and --engine take names separated by commas, each once",
                         "write it like --gpu h100-sxm,h200 --engine sglang,vllm")
    rows: list[tuple[tuple[float, ...], str, str, Any]] = []
    notes: list[str] = []
    with render.spinner(f"Sizing {len(gl) * len(el)} GPU x engine combinations"):
        for g in gl:
            for e in el:
                req, n = build_request(gpu=g, engine=e, **kw)
                if ctx is not None and not rows:  # the table carries no reasons: say it here
                    n = n + placement_warnings(ctx, req, kw["tier_scope"], kw["catalog"],
                                               kw["host_tier"], kw["xmem_tier"])
                notes += [x for x in n if x not in notes]
                r = plan(req, with_table=False, with_curve=fmt == "json", with_router=False)
                g_best = None if r.cheapest == "none" else r.option(r.cheapest).gpus
                key = ((math.inf,) if g_best is None else
                       ((r.cost,) if r.cost is not None else ())
                       + (float(g_best), float(r.recommended_nodes or 0)))
                rows.append((key, req.gpu.name, e, r))
    rows.sort(key=lambda x: x[0])
    best = rows[0][3]
    priced = best.cost is not None
    head = (f"Cheapest of {len(rows)} GPU x engine combinations: {rows[0][1]} with "
            f"{rows[0][2]}: {best.answer}")
    if fmt == "json":
        doc = best.to_dict()
        doc["answer"] = head
        doc["comparison"] = [{"gpu": g, "engine": e, "answer": r.answer, "cheapest": r.cheapest,
                              "gpus": None if r.cheapest == "none"
                              else r.option(r.cheapest).gpus,
                              "nodes": r.recommended_nodes, "shape": r.shape,
                              "cost": r.cost, "cost_basis": r.cost_basis,
                              "slo_value_ms": None if r.cheapest == "none" else
                              r.option(r.cheapest).point.slo_value_ms,
                              "compared": "price" if priced else "counts"}
                             for _, g, e, r in rows]
        render.emit_json({**doc, "warnings": notes})
        _warn(notes)
        return
    render.line(head)
    _warn(notes)
    table = []
    for _, g, e, r in rows:
        o = None if r.cheapest == "none" else r.option(r.cheapest)
        p = None if o is None else o.point
        table.append([g, e, r.cheapest, _n(None if o is None else o.gpus),
                      _n(r.recommended_nodes), r.shape,
                      "-" if p is None else f"{p.slo_value_ms:,.0f}",
                      "-" if p is None or not math.isfinite(p.ci_ms[1]) else
                      f"{max(0.0, p.ci_ms[0]):,.0f}-{p.ci_ms[1]:,.0f}",
                      *([] if not priced else ["-" if r.cost is None else f"{r.cost:,.2f}"])])
    pq = f"p{best.slo_percentile:g}"
    render.table(["GPU", "engine", "option", "GPUs", "nodes", "shape", f"{pq} ms", "95% CI",
                  *(["cost"] if priced else [])], table,
                 title="Each GPU x engine at its cheapest compliant configuration, cheapest "
                 "first")
    if not priced:
        render.line("- Compared in counts (fewer GPUs, then X-Mem nodes) across GPU types: "
                    "pass --cost with each GPU's price (h100-sxm=2.5/h,...,xmem-node=PRICE) "
                    "to compare in money.")


def _sweep(*, gpus: int, plot: Path | None, fmt: str, workload: Path | None,
           prompt_tokens: str | None, hit_rate: float | None, ttft_slo: str | None,
           rates: str | None, concurrency: str | None, synthetic: Any,
           **kw: Any) -> None:
    """`size --gpus N`: the load sweep of the synthetic multi-turn workload."""
    from xmemplan.cli import pareto
    from xmemplan.cli.views import render
    from xmemplan.errors import UsageError
    from xmemplan.sizing.pareto import sweep

    given = [f for f, v in (("--workload", workload), ("--prompt-tokens", prompt_tokens),
                            ("--hit-rate", hit_rate), ("--ttft-slo", ttft_slo)) if v is not None]
    if given:
        raise UsageError(f"--gpus sweeps the synthetic multi-turn workload; {given[0]} "
                         "does not apply to it",
                         "drop it, or drop --gpus to size a deployment for a TTFT SLO")
    if plot is not None and plot.suffix.lower() != ".png":
        raise UsageError(f"cannot tell the type of '{plot}'", "end --plot with .png")
    if plot is not None:
        from xmemplan.cli.views.plots import _pyplot
        from xmemplan.jsonio import check_output

        _pyplot()
        check_output(plot, "--plot", inputs=kw.get("catalog", []))
    req, said = pareto.build(gpus=gpus, workload=synthetic, rates=rates,
                             concurrency=concurrency, **kw)
    res = sweep(req, said)
    pareto.report(res, fmt)
    if plot is not None:
        pareto.plot(res, plot, inputs=kw.get("catalog", []))
        render.info(f"Wrote {plot}")


def placement_warnings(ctx: Any, req: Any, tier_scope: list[str], catalog: list[Path],
                       host_tier: str, xmem_tier: str, *, gpus: int | None = None,
                       router: bool = True) -> list[str]:
    """--router and --tier-scope where the data make them change nothing (a warning, not a
    refusal: whether they do depends on the workload and the shape). They act only on
    per-replica caches (the planner's `placed`: a trace's sessions in their own order or
    prefix groups, at an open-loop load), the router only with two replicas or more, the
    scope only where it groups the replicas otherwise than the tier's catalog scope. With
    `gpus` (a fixed deployment) at that count; `router` False where the answer's reasons
    say it for the router and --prefix-groups already ("Routing does not change these
    hits", the SLO search)."""
    from xmemplan.cli.invocation import given_flags
    from xmemplan.sizing.planner import Planner, tier_domains

    routed = bool(given_flags(ctx, ("router",))) and router
    items = list(tier_scope) if given_flags(ctx, ("tier_scope",)) else []
    grouped = bool(given_flags(ctx, ("prefix_groups",))) and router
    if not (routed or items or grouped):
        return []
    w = req.workload
    placed = Planner(req).placed
    if req.load.kind == "users" and (req.prefix_groups or w.group is not None
                                     or w.session is not None):
        why = ("closed-loop users (--users) are not placed on per-replica caches (their "
               "arrival times come from the simulation itself): one LRU curve at the "
               "deployment's capacity stands for every replica; --rate gives each replica "
               "its own caches")
    else:
        why = ("the workload does not say which requests share a prefix (no sessions "
               "replayed in their own order, no prefix groups): one LRU curve at the "
               "deployment's capacity stands for every replica; a profile with sessions or "
               "prefix groups, or --prefix-groups N, gives each replica its own caches")
    sh = req.shape
    replicas = max(1, (gpus or 0) // sh.gpus)
    one = ("" if gpus is None else f"one replica (--gpus {gpus:,} as {sh.label} replicas "
           f"of {units.count(sh.gpus, 'GPU')})")
    out: list[str] = []
    if routed and not placed:
        out.append(f"--router {req.router} changes nothing here: {why}")
    elif routed and gpus is not None and replicas == 1:
        out.append(f"--router {req.router} changes nothing on {one}: every request goes to "
                   f"it; routing decides from two replicas ({2 * sh.gpus:,} GPUs) up")
    if grouped and not placed:
        out.append(f"--prefix-groups changes nothing here: {why.split(': one LRU')[0]}")
    if not items:
        return out
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing import model as M
    from xmemplan.sizing.request import _tier_scopes

    cat = load_catalog(catalog)
    scopes = _tier_scopes(items)
    for t, t0 in ((req.host, M.host_tier_for(cat, req.gpu, host_tier)),
                  (req.xmem, cat.tier(xmem_tier))):
        names = {t.name, *t.aliases, t.kind}
        named = [f"{n}={sc}" for n, sc in scopes.items() if n in names]
        if not named:
            continue
        flag = f"--tier-scope {named[-1]}"
        same_always = t.share_scope == t0.share_scope or (
            {t.share_scope, t0.share_scope} == {"rack", "cluster"} and not t.share_gpus)
        if same_always:
            out.append(f"{flag} changes nothing: {t.name}'s catalog share_scope is "
                       f"{t0.share_scope}" + ("" if t.share_scope == t0.share_scope else
                                              " with no share_gpus, one domain for the "
                                              "whole deployment as cluster is"))
        elif not placed:
            out.append(f"{flag} changes nothing here: a tier's scope splits it over the "
                       f"replicas' own caches, and {why.split(': one LRU')[0]}")
        elif gpus is not None and replicas == 1:
            out.append(f"{flag} changes nothing on {one}: at every scope that replica "
                       f"reads the whole {t.name} tier")
        elif gpus is not None:
            args = (replicas, sh.gpus, req.gpu.gpus_per_server, t.share_gpus)
            if (tier_domains(t.share_scope, *args).tolist()
                    == tier_domains(t0.share_scope, *args).tolist()):
                out.append(f"{flag} changes nothing on {units.count(replicas, 'replica')} "
                           f"of {sh.label} ({req.gpu.name}: {req.gpu.gpus_per_server:,} "
                           f"GPUs per server): {t.name} is read by the same replicas as at "
                           f"its catalog scope {t0.share_scope}")
    return out


def profile_warnings(path: Path) -> list[str]:
    """What a profile made with hitrate's defaults leaves out of a sizing, and what to run
    instead: a per-session profile counts no hit shared across sessions (the system prompt
    and tools every session sends), which a server's one cache serves."""
    from xmemplan.profile import load_profile

    prof = load_profile(path)
    out = []
    if prof.scope == "session":
        out.append(
            f"the profile {path} was made per session (--scope session, hitrate's default "
            "for traces with sessions): each session had its own cache, so hits shared "
            "across sessions, which a server's one cache serves, are not counted. For "
            "sizing, make it at global scope: xmemplan hitrate TRACES --scope global "
            "--capacity-curve auto --model MODEL --profile-out PROFILE, or run xmemplan plan "
            "TRACES --ttft-slo SLO -o runs/NAME/, which does")
    if not prof.capacity_curve:
        out.append(f"the profile {path} has no capacity curve: hit ratios are the infinite "
                   "cache's at every capacity. Add --capacity-curve auto when making it")
    return out


def _n(v: Any) -> str:
    return "-" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:,.0f}"


def _warn(notes: list[str]) -> None:
    """Warnings go to stderr after the answer: stdout is flushed first, so that in a
    terminal (both streams on one screen) the first line is still the answer."""
    import sys

    from xmemplan.cli.views import render

    sys.stdout.flush()
    for note in notes:
        render.warn(note)


def _report(r: SizeResult, fmt: str, notes: list[str] | None = None) -> None:
    from xmemplan.cli.views import render

    notes = notes or []
    if fmt == "json":
        render.emit_json({**r.to_dict(), "warnings": notes})
        _warn(notes)
        return
    cols = ["option", "gpus", "nodes", "hit_ratio", "warm_p50_ms", "warm_p99_ms",
            "cold_p99_ms", "utilisation", "goodput_rps", "goodput_capped"]

    def row(o: OptionResult) -> list[Any]:
        p = o.point
        if p is None:
            return [o.option, None, o.nodes, None, None, None, None, None, None, False]
        w, c = p.ttft_ms.get("warm", {}), p.ttft_ms.get("cold", {})
        return [o.option, o.gpus, o.nodes, p.hit_ratio, w.get("p50"), w.get("p99"),
                c.get("p99"), p.utilisation, o.goodput_rps, o.goodput_capped]

    rows = [row(o) for o in r.options]
    if fmt == "csv":
        render.emit_csv(cols, rows)
        _warn(notes)
        return
    render.answer(r.answer)
    _warn(notes)
    if "binding:" in r.answer:  # the answer already names it
        render.line(f"Cheapest compliant option: {r.cheapest}.")
    else:
        render.line(f"Cheapest compliant option: {r.cheapest}. Binding constraint: "
                    f"{r.binding}.")
    render.line(f"Load: {r.load}. Workload: {r.workload}.")
    render.line(f"{r.model} on {r.gpu}, engine {r.engine} (overlap {r.overlap}); SLO "
                f"{r.ttft_slo_ms:g} ms at p{r.slo_percentile:g} of {r.slo_on} requests.")
    render.table(
        ["option", "GPUs", "nodes", "hit", "warm p50", "warm p99", "cold p99", "max r/s"],
        [[x[0], _n(x[1]), _n(x[2]), "-" if x[3] is None else f"{x[3]:.3f}", _n(x[4]),
          _n(x[5]), _n(x[6]), _rps(x[8], x[9])] for x in rows],
        title="Fewest GPUs meeting the SLO; TTFT in ms",
    )
    from xmemplan.sizing.planner import GOODPUT_CEILING

    capped = any(x[9] for x in rows)
    render.line("(max r/s: the load those GPUs sustain within the SLO"
                + (f"; >=: still within it at {GOODPUT_CEILING}x this load, where the search "
                   "stops" if capped else "") + ")")
    if any(o.point is not None and o.point.replications > 1 for o in r.options):
        # the table pools the replications' requests; line 1 judges the SLO on the mean
        # of each replication's percentile (with its interval), so the two differ a little
        from xmemplan.cli.views.report import pooled_note

        render.line(f"({pooled_note(r.slo_percentile)})")
    if r.table and not render.verbose():  # one line; -v prints the table
        render.line(_by_slo_line(r))
    elif r.table:
        render.table(
            ["SLO ms", "GPUs, host DRAM", "GPUs, X-Mem", "nodes, X-Mem", "GPUs saved"],
            [[f"{t['ttft_slo_ms']:,.0f}", _n(t["gpus_host_dram"]), _n(t["gpus_xmem"]),
              _n(t["xmem_nodes"]), _n(t["gpus_saved"])] for t in r.table],
            title=f"GPUs and X-Mem nodes by SLO, same load, {r.shape} replicas",
        )
    for reason in r.reasons:
        render.line(f"- {reason}")
    for o in r.options:
        if o.note:
            render.line(f"- {o.option}: {o.note}.")
    if r.excluded_over_context:
        render.line(f"- {r.excluded_over_context:,} requests longer than the model's context "
                    "are left out.")
    if render.verbose():
        for a in r.assumptions:
            render.info(f"Assumption: {a['assumption']} [{a['source']}]")
    elif r.assumptions:
        render.info(f"{len(r.assumptions)} assumptions behind this answer: -v lists them "
                    "with their sources (xmemplan -v size ...; --format json carries them)")
    if render.lines_written() > ANSWER_AGAIN_AFTER:  # the answer has scrolled: again, last
        render.answer(r.answer)


def _report_fixed(req: Any, opts: list[OptionResult], gpus: int, judged: bool, fmt: str,
                  notes: list[str]) -> None:
    """`size --gpus N` with an ordinary workload: each option on N GPUs at the load."""
    from xmemplan.cli.views import render
    from xmemplan.plan import header
    from xmemplan.sizing.planner import describe_load, hicache_json

    slo_ms = req.slo_s * 1e3
    pq = f"p{req.slo_percentile:g}"
    cls = req.slo_on

    def ttft(o: OptionResult) -> dict[str, float]:
        assert o.point is not None
        return o.point.ttft_ms.get(cls, o.point.ttft_ms.get("all", {}))

    load = describe_load(req.load)
    on = f"{gpus:,} GPU{'' if gpus == 1 else 's'}"
    if judged:
        meet = [o.option for o in opts if o.point is not None
                and o.point.verdict(slo_ms) == "meets"]
        answer = (f"On {on} at {load}: "
                  + (", ".join(meet) + (" meets" if len(meet) == 1 else " meet")
                     if meet else "no option meets")
                  + f" TTFT {slo_ms:,.0f} ms at {pq} of {cls} requests.")
    else:  # the --slo-at percentile it names (it printed the p99 under any --slo-at)
        answer = (f"On {on} at {load}, {cls} TTFT {pq}: " + ", ".join(
            f"{o.option} {ttft(o).get(pq, math.nan):,.0f} ms" for o in opts) + ".")
    rows: list[dict[str, Any]] = []
    for o in opts:
        p = o.point
        assert p is not None
        t = ttft(o)
        rows.append({
            "option": o.option, "gpus": o.gpus, "nodes": o.nodes, "shape": o.shape,
            "ttft_p50_ms": t.get("p50"), "ttft_p90_ms": t.get("p90"),
            "ttft_p99_ms": t.get("p99"), "ttft_ms": p.ttft_ms,
            "meets_slo": (p.verdict(slo_ms) == "meets") if judged else None,
            "verdict": p.verdict(slo_ms) if judged else None,
            "overloaded": p.overloaded, "hit_ratio": p.hit_ratio,
            "hbm_share_of_hits": p.hbm_share, "kv_full": p.kv_full,
            "preemptions_per_request": p.preemptions_per_request,
            "throughput_rps": p.throughput_rps, "throughput_tok_s": p.throughput_tok_s,
            "utilisation": p.utilisation, "replications": p.replications, "cost": o.cost,
            **({} if p.l3_recomputed is None else
               {"l3_prefetch_recomputed": p.l3_recomputed})})
    from xmemplan.sizing.planner import kv_full_note, multi_replica_note

    kv_note = kv_full_note((r["option"], on, r["kv_full"]) for r in rows)
    replica_note = multi_replica_note(gpus // req.shape.gpus)
    caveats = [n for n in (kv_note, replica_note) if n]
    if fmt == "json":
        hicache = hicache_json(req)
        render.emit_json({**header(), "answer": answer, "gpus": gpus, "load": load,
                          "ttft_slo_ms": slo_ms if judged else None, "slo_on": cls,
                          "slo_percentile": req.slo_percentile, "model": req.model.name,
                          "gpu": req.gpu.name, "engine": req.engine, "options": rows,
                          **({} if hicache is None else {"hicache": hicache}),
                          "warnings": notes + caveats})
        _warn(notes)
        return
    priced = req.prices is not None  # --cost: each option's price (it was in JSON only)
    cols = ["option", "gpus", "nodes", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
            "throughput_rps", "throughput_tok_s", "kv_full", "hbm_share_of_hits",
            "preemptions_per_request", "overloaded", *(["cost"] if priced else [])]
    if fmt == "csv":
        render.emit_csv(cols, [[r[c] for c in cols] for r in rows])
        _warn(notes)
        return
    render.answer(answer)
    _warn(notes)
    render.line(f"{req.model.name} on {req.gpu.name}, engine {req.engine}, replicas "
                f"{req.shape.label}; TTFT of {cls} requests, in ms.")
    render.table(
        ["option", "p50", "p90", "p99", "req/s", "tok/s", "KV full", "HBM hits",
         "preempt/req", *(["cost"] if priced else [])],
        [[r["option"] + (" *" if r["overloaded"] else ""), _n(r["ttft_p50_ms"]),
          _n(r["ttft_p90_ms"]), _n(r["ttft_p99_ms"]), f"{r['throughput_rps']:,.1f}",
          _n(r["throughput_tok_s"]), f"{r['kv_full']:.0%}",
          f"{r['hbm_share_of_hits']:.0%}", f"{r['preemptions_per_request']:.2f}",
          *([req.prices.money(r["cost"])] if priced else [])]
         for r in rows],
        title=f"A fixed deployment: {on}, no search",
    )
    if any(r["overloaded"] for r in rows):
        render.line("(*: overloaded at this load: the queue grows for as long as the run "
                    "lasts, so its TTFT only measures the run's length)")
    for c in caveats:
        render.line("- " + c)
    x = next(r for r in rows if r["option"] == "xmem")
    render.line(f"(HBM hits: share of cache hits served from HBM; X-Mem with "
                f"{x['nodes']:,} node{'' if x['nodes'] == 1 else 's'}, the fewest that hold the "
                "working set)")
    if x.get("l3_prefetch_recomputed") is not None:
        pol = req.prefetch_policy
        render.line(f"(X-Mem through the HiCache storage backend, L3: "
                    f"{x['l3_prefetch_recomputed']:.0%} of the prefix tokens its prefetches "
                    f"asked for had not arrived at admission and were computed; "
                    f"--hicache-storage-prefetch-policy {pol})")


ANSWER_AGAIN_AFTER = 25  # lines of results after which the answer is repeated at the end


def _by_slo_line(r: SizeResult) -> str:
    """The GPUs-by-SLO table in one line: 'SLO 200 ms: 9 / 8 GPUs (host DRAM / X-Mem) ...'."""
    def ms(v: float) -> str:
        return f"{v / 1e3:g} s" if v >= 1000 else f"{v:,.0f} ms"

    parts = [f"{ms(t['ttft_slo_ms'])} {_n(t['gpus_host_dram'])}/{_n(t['gpus_xmem'])}"
             for t in r.table]
    return ("GPUs by SLO (host DRAM/X-Mem, same load): " + ", ".join(parts)
            + "; -v for the table with nodes.")


def _rps(v: float | None, capped: bool) -> str:
    if v is None:
        return "-"
    return f">={v:,.0f}" if capped else f"{v:,.1f}"


def _plot(r: SizeResult, path: Path) -> None:
    """The chart `plan` draws too (cli/views/sizeplots.py): SLO labelled, offered load and
    the chosen configuration marked, log axis only when the values span decades."""
    from xmemplan.cli.views.sizeplots import ttft_vs_load

    ttft_vs_load(r.to_dict(), path, "--plot")
