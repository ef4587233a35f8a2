"""Turn `size` options (strings with units, names) into a `SizeRequest`, checking each.

Every assumption the plan rests on is recorded with where it came from (flag, profile,
catalog, default) and printed by the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from xmemplan import units
from xmemplan.catalog import load_catalog
from xmemplan.catalog.specs import ModelSpec, TierSpec
from xmemplan.defaults import SEED_GPU
from xmemplan.errors import InputError, UsageError
from xmemplan.sizing import model as M
from xmemplan.sizing import routing as RT
from xmemplan.sizing import workload as wl
from xmemplan.sizing.deployment import ENGINES as ENGINES  # re-exported (home: deployment)
from xmemplan.sizing.deployment import hicache_said as hicache_said
from xmemplan.sizing.deployment import replica_shape as replica_shape
from xmemplan.sizing.deployment import resolve_tiers
from xmemplan.sizing.planner import Prices, SizeRequest, describe_load
from xmemplan.sizing.simmodel import (
    HBM_USABLE,
    PREFETCH_DEFAULT,
)

# The seed traffic: the Netpreme blog's AIPerf agentic run (research/perf-model.md V8:
# "QPS 2.5-5.0", 100 output tokens), at its high-load end, with the seed prompts.
SEED_RATE_RPS = 5.0
SEED_OUTPUT_TOKENS = 100
# Bounds of the work one `size` run may ask for (issue 10, class 3). The planner runs about
# 40-60 simulations; a simulation costs about 1 us per request plus ~4 ns per decode step
# (steps are summed one by one inside a run), so requests x output tokens is capped.
MAX_REQUESTS = 200_000  # p99 from 180,000 kept requests: far past what percentiles need
MAX_DECODE_STEPS = 50_000_000  # requests x output tokens per simulation (~10 s in all)
# requests x --max-gpus: events scale with requests and routing with log(replicas), but
# replica state and searches with the count (200,000 x 10,000, overloaded: ~20 s in all)
MAX_REQUEST_GPUS = 2_000_000_000
KV_DTYPES = ("bf16", "fp16", "fp8")
ATTENTION_DTYPES = ("bf16", "fp8")
BLOG = "lm-sys blog 2026-06-27-netpreme-xmem.md (AIPerf agentic run, research V8)"


def build_request(
    *, ttft_slo: str, workload: Path | None = None, prompt_tokens: str | None = None,
    hit_rate: float | None = None, model: str | None = None, gpu: str = SEED_GPU,
    rate: float | None = None, users: int | None = None, think: str = "5s",
    output_tokens: int | str | None = None, working_set: str | None = None,
    engine: str = "sglang", overlap: str | None = None, page_tokens: int | None = None,
    slo_at: str = "p99", slo_on: str = "warm", host_tier: str = "host-dram-pcie5",
    xmem_tier: str = "xmem", catalog: Sequence[Path] = (), requests: int = 4000,
    seed: int = 0, max_gpus: int = 1024, tp: int | None = None, ep: int | None = None,
    dp_attention: bool = False, kv_dtype: str | None = None, attention_dtype: str = "bf16",
    mem_fraction: float | str | None = None, router: str = RT.DEFAULT_ROUTER,
    prefix_groups: int | None = None, tier_scope: Sequence[str] = (),
    cost: str | None = None, xmem_path: str = "direct", prefetch_policy: str | None = None,
) -> tuple[SizeRequest, list[str]]:
    """The request and notes to show (which workload, what was overridden)."""
    slo = units.parse_duration(ttft_slo, "--ttft-slo", lo_open=True)
    hicache = hicache_said(engine, xmem_path, prefetch_policy)
    if engine not in ENGINES:
        raise UsageError(f"unknown engine '{engine}'", "use sglang or vllm")
    default_overlap, transfer, mixed = ENGINES[engine]
    if overlap is not None and overlap not in ("sum", "layer", "max"):
        raise UsageError(f"unknown overlap '{overlap}'", "use sum, layer or max")
    if page_tokens is not None:
        units.check_int(page_tokens, "--page-tokens", 1, units.MAX_PAGE_TOKENS)
        transfer = replace(transfer, page_tokens=page_tokens)
    if rate is not None:
        rate = units.parse_rate(rate, "--rate")
    if users is not None:
        units.check_int(users, "--users", 1, units.MAX_CONCURRENCY)
    if rate is not None and users is not None:
        raise UsageError("give --rate or --users, not both")
    think_s = units.parse_duration(think, "--think")
    out_p90 = None
    if output_tokens is not None:
        output_tokens, out_p90 = _spread(output_tokens, "--output-tokens")
        units.check_int(output_tokens, "--output-tokens", 1, units.MAX_PROMPT_TOKENS)
    if slo_at not in ("p50", "p90", "p99"):
        raise UsageError(f"unknown percentile '{slo_at}'", "use p50, p90 or p99")
    if slo_on not in ("warm", "all"):
        raise UsageError(f"unknown request set '{slo_on}'", "use warm or all")
    units.check_int(requests, "--requests", 200, MAX_REQUESTS)
    units.check_int(max_gpus, "--max-gpus", 1, units.MAX_GPUS)
    if requests * max_gpus > MAX_REQUEST_GPUS:
        raise UsageError(
            f"--requests {requests:,} x --max-gpus {max_gpus:,} = {requests * max_gpus:,} "
            f"request-replica steps per simulation, more than {MAX_REQUEST_GPUS:,}",
            f"allowed: --max-gpus up to {MAX_REQUEST_GPUS // requests:,} at --requests "
            f"{requests:,}, or fewer --requests")
    if tp is not None:
        units.check_int(tp, "--tp", 1, min(1024, max_gpus))
    if ep is not None:
        units.check_int(ep, "--ep", 1, min(1024, max_gpus))
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise UsageError(f"--kv-dtype '{kv_dtype}' is not a KV cache dtype",
                         "use bf16, fp16 or fp8")
    if attention_dtype not in ATTENTION_DTYPES:
        raise UsageError(f"--attention-dtype '{attention_dtype}' is not an attention dtype",
                         "use bf16 or fp8")
    units.check_int(seed, "--seed", 0, 2**63 - 1)
    if hit_rate is not None:
        hit_rate = units.parse_fraction(hit_rate, "--hit-rate")
    frac = (HBM_USABLE if mem_fraction is None
            else units.parse_fraction(mem_fraction, "--mem-fraction", lo_open=True))
    try:
        router_name = RT.canonical(router)
    except KeyError:
        raise UsageError(f"unknown router '{router}'",
                         "use " + ", ".join(RT.ROUTERS) + " (docs/size.md, 'Routing')"
                         ) from None
    if prefix_groups is not None:
        units.check_int(prefix_groups, "--prefix-groups", 1, MAX_REQUESTS)
    scopes = _tier_scopes(tier_scope)
    prompt = prompt_p90 = None
    if prompt_tokens is not None:
        prompt, prompt_p90 = _spread(prompt_tokens, "--prompt-tokens")
        if prompt_p90 is not None and workload is not None:
            raise UsageError("--prompt-tokens P50:P90 draws the prompts of a workload from "
                             "flags; with --workload give one length (or none)",
                             "drop --workload, or write --prompt-tokens as one length")

    prices = parse_cost(cost) if cost is not None else None
    cat = load_catalog(catalog)
    if prices is not None and prices.gpu_by_name:
        named = []
        for k, v in prices.gpu_by_name:  # GPU names or aliases, as the catalog spells them
            try:
                named.append((cat.gpu(k).name, v))
            except UsageError as e:
                raise UsageError(f"--cost {k}: neither gpu, xmem-node, host-dram nor a GPU "
                                 f"of the catalog ({e.message})", e.hint) from None
        prices = replace(prices, gpu_by_name=tuple(named))
    notes: list[str] = []
    said: list[tuple[str, str]] = []
    seed_run = workload is None and prompt is None and hit_rate is None and model is None
    if workload is not None:
        from xmemplan.profile import load_profile

        prof = load_profile(workload)
        work = wl.from_profile(prof)
        if prof.cache_model in ("vllm", "sglang") and prof.cache_model != engine:
            notes.append(
                f"the profile's capacity curve is {prof.cache_model}'s cache "
                f"(hitrate --cache-model {prof.cache_model}) but --engine is {engine}: its HBM, "
                f"DRAM and X-Mem split follows {prof.cache_model}'s eviction; rerun hitrate "
                f"with --cache-model {engine} for this engine's"
            )
        if work.capacity_curve and prof.cache_model is not None:
            said.append((f"cache model {prof.cache_model}: its hit ratio vs capacity where "
                         "requests are not placed on replicas, its replays of each replica "
                         "and tier where they are", "profile (cache_model)"))
        if prompt is not None or hit_rate is not None:
            work = _override(work, prompt, hit_rate)
        model_name = model or work.model or wl.SEED_MODEL
        said.append((f"workload: {work.description}", "profile"))
    elif seed_run:
        work = wl.from_flags(wl.SEED_PROMPT_TOKENS, wl.SEED_HIT_RATE, "seed")
        model_name = wl.SEED_MODEL
        work = replace(work, description=(
            f"seed scenario: {wl.SEED_PROMPT_TOKENS:,}-token prompts, hit rate "
            f"{wl.SEED_HIT_RATE}"))
        said.append((f"{wl.SEED_PROMPT_TOKENS:,}-token prompts, hit rate {wl.SEED_HIT_RATE}, "
                     f"{wl.SEED_MODEL} on {gpu}", "default: " + BLOG))
    else:
        n_prompt = prompt if prompt is not None else wl.SEED_PROMPT_TOKENS
        h = hit_rate if hit_rate is not None else wl.SEED_HIT_RATE
        model_name = model or wl.SEED_MODEL
        if prompt_p90 is None:
            work = wl.from_flags(n_prompt, h, f"{n_prompt:,}-token prompts, hit rate {h:g}")
            said.append((f"prompt {n_prompt:,} tokens",
                         "flag" if prompt is not None else "default (seed)"))
        else:
            work = wl.from_flags(n_prompt, h, f"prompts p50 {n_prompt:,} / p90 "
                                 f"{prompt_p90:,} tokens, hit rate {h:g}", prompt_p90)
            said.append((f"prompt lengths lognormal through p50 {n_prompt:,} and p90 "
                         f"{prompt_p90:,} tokens ({wl.SPREAD_SAMPLES} quantiles)", "flag"))
        said.append((f"hit rate {h:g}", "flag" if hit_rate is not None else "default (seed)"))
    m = cat.model(model_name)
    said.append((f"model {m.name} ({m.weight_dtype} weights)", "flag" if model else "profile"
                 if workload is not None and work.model else "default (seed)"))
    if kv_dtype is not None:
        m = M.with_kv_dtype(m, kv_dtype)
    said.append((f"KV cache in {_kv_dtype_name(m)}: {m.kv_bytes_per_token:,} bytes per token",
                 "flag (--kv-dtype)" if kv_dtype is not None
                 else f"catalog (model {m.name}, kv_dtype_bytes)"))
    g = cat.gpu(gpu)
    said.append((f"GPU {g.name}", "flag" if gpu != SEED_GPU else "default (seed)"))
    if work.kv_bytes_per_token and work.kv_bytes_per_token != m.kv_bytes_per_token:
        notes.append(
            f"the profile was written for {work.kv_bytes_per_token:,} KV bytes per token; "
            f"{m.name} has {m.kv_bytes_per_token:,}"
            + (" with --kv-dtype " + kv_dtype if kv_dtype is not None else "")
            + " (that figure is used; token counts and hit ratios are unchanged)")
    flag_prompt = (prompt_p90 or prompt) if prompt is not None else (
        int(work.prompt_tokens[0]) if workload is None else None)
    if flag_prompt is not None and m.max_context and flag_prompt > m.max_context:
        raise UsageError(f"--prompt-tokens {flag_prompt:,}{'' if prompt else ' (the default)'}"
                         f" is longer than {m.name}'s {m.max_context:,}-token context",
                         f"allowed: 1 to {m.max_context:,} for this model")
    work = wl.drop_over_context(work, m.max_context)
    if work.excluded_over_context:
        over = work.excluded_over_context
        verb = "is" if over == 1 else "are"
        notes.append(f"{units.count(over, 'sampled request')} {verb} longer than "
                     f"{m.name}'s {m.max_context:,}-token context and {verb} left out")
    ws_tokens = None
    if working_set is not None:
        if units.is_byte_quantity(working_set):
            ws_bytes = units.parse_bytes(working_set, "--working-set")
            if ws_bytes <= 0:
                raise UsageError(f"--working-set '{working_set}' is not positive")
            ws_tokens = ws_bytes / m.kv_bytes_per_token
        else:
            ws_tokens = float(units.parse_count(working_set, "--working-set", lo=1,
                                                hi=int(units.MAX_CACHE_TOKENS)))
        said.append((f"KV working set {ws_tokens:,.0f} tokens", "flag"))
    elif work.working_set_tokens is not None:
        said.append((f"KV working set {work.working_set_tokens:,.0f} tokens in the trace, "
                     "scaled by the load factor", "profile (working_set.peak)"))
    else:
        said.append(("KV working set unknown: host DRAM and X-Mem assumed to hold every "
                     "hit, HBM none (HBM only = every request cold); nodes for capacity = 1",
                     "default (no profile, no --working-set)"))

    # the load
    if users is not None:
        load = wl.Arrivals("users", users=users, think_s=think_s)
        said.append((describe_load(load), "flag"))
    elif rate is not None or seed_run or work.rate_rps is None:
        r = rate if rate is not None else SEED_RATE_RPS
        src = "flag" if rate is not None else "default: " + BLOG + ", QPS 5.0"
        if work.session is not None and work.timestamp_s is not None and work.rate_rps:
            load = wl.Arrivals("trace", rate_rps=r, trace_rate_rps=work.rate_rps)
        else:
            load = wl.Arrivals("poisson", rate_rps=r)
        said.append((describe_load(load), src))
    else:
        if work.session is not None and work.timestamp_s is not None:
            # the trace's own arrivals, at its own rate
            load = wl.Arrivals("trace", rate_rps=work.rate_rps, trace_rate_rps=work.rate_rps)
        else:
            load = wl.Arrivals("poisson", rate_rps=work.rate_rps)
        said.append((f"{describe_load(load)} (the trace's own rate; --rate or --users scales "
                     "it)", "profile (arrival.rate_rps)"))
        if work.session is None:
            said.append(("per-request timestamps and sessions are not in this profile: "
                         "Poisson arrivals instead of the trace's own", "profile (schema)"))
    out = int(output_tokens) if output_tokens is not None else SEED_OUTPUT_TOKENS
    if out_p90 is not None:
        # output lengths lognormal through both percentiles, one per sample (prompts
        # repeated when the flags gave one length), paired by a rotated order
        n_s = max(len(work.prompt_tokens), wl.SPREAD_SAMPLES)
        reps = -(-n_s // len(work.prompt_tokens))
        pr = np.tile(work.prompt_tokens, reps)[:n_s]
        hits = np.tile(work.hit_tokens, reps)[:n_s]
        outs = wl.lognormal_quantiles(out, out_p90, n_s, shift=n_s // 3)
        work = replace(work, prompt_tokens=pr, hit_tokens=hits,
                       output_tokens=outs.astype(np.int64))
        _check_output_tokens(out_p90, requests, m, work)
        said.append((f"output lengths lognormal through p50 {out:,} and p90 {out_p90:,} "
                     "tokens", "flag"))
    elif output_tokens is not None:
        _check_output_tokens(out, requests, m, work)
    elif work.output_tokens is not None and \
            float(work.output_tokens.mean()) * requests > MAX_DECODE_STEPS:
        # The bound the flag has (_check_output_tokens), for the profile's own figures.
        raise InputError(
            f"the profile's sampled requests average {work.output_tokens.mean():,.0f} output "
            f"tokens: x --requests {requests:,} is more than {MAX_DECODE_STEPS:,} decode "
            "steps per simulated run", path=workload, field="requests_sample.output_tokens",
            hint="pass --output-tokens N to replace them, or lower --requests")
    if work.output_tokens is None:
        said.append((f"{out} output tokens per request (decode steps interleaved)",
                     "flag" if output_tokens is not None else "default: " + BLOG))
    cal = M.calibration_for(cat, engine)
    if tp is not None and not dp_attention and m.q_heads % tp:
        # vLLM and SGLang split the attention heads over the TP ranks and refuse this
        raise UsageError(f"--tp {tp} does not divide {m.name}'s {m.q_heads:,} attention "
                         "heads: vLLM and SGLang refuse it (heads are split over the TP "
                         "ranks)", "use a TP size that divides "
                         f"{m.q_heads:,}, or add --dp-attention")
    shape = replica_shape(m, g, float(np.max(work.prompt_tokens)), tp=tp, ep=ep,
                          dp_attention=dp_attention, max_gpus=max_gpus, mem_fraction=frac)
    said.append((f"the engine takes {frac:.0%} of each GPU's HBM for weights + KV",
                 "flag (--mem-fraction)" if mem_fraction is not None else
                 "default: SGLang --mem-fraction-static / vLLM --gpu-memory-utilization 0.9"))
    given = [f for f, v in (("--tp", tp), ("--ep", ep)) if v is not None]
    said.append((f"replica shape {shape.label} ({units.count(shape.gpus, 'GPU')} per "
                  "replica)",
                 "flag (" + ", ".join(given) + ")" if given else
                 "default: smallest that holds weights + KV of the longest prompt"
                 + (", --dp-attention" if dp_attention else "")))
    if dp_attention and shape.tp == 1:
        notes.append("--dp-attention changes nothing at tp1 (the smallest shape that fits): "
                     "attention is data-parallel only over 2 or more ranks")
    host, xmem_t = resolve_tiers(cat, g, host_tier, xmem_tier)
    said.append((f"engine {engine}: overlap {overlap or default_overlap}, "
                 f"{transfer.page_tokens}-token pages, {transfer.layout}, {transfer.io} copies, "
                 f"{'decodes ride in prefill batches' if mixed else 'prefill first'}",
                 "flag" if overlap or page_tokens else f"default (engine {engine})"))
    said.append((f"fixed overhead {cal.fixed_overhead_s * 1e3:.1f} ms per batch that starts "
                 f"a request; efficiencies linear {cal.eta_lin(m.weight_dtype):.3f} "
                 f"({m.weight_dtype} GEMMs), attention {cal.eta_attn(g):.3f}",
                 "calibration (docs/model.md)"))
    said.append((f"attention in {attention_dtype}: {g.peak_flops(attention_dtype) / 1e12:,.0f} "
                 f"TFLOPS peak on {g.name}", "flag (--attention-dtype)"
                 if attention_dtype != "bf16" else "default (--attention-dtype bf16)"))
    if attention_dtype not in g.flops:
        notes.append(f"{g.name} has no {attention_dtype} peak in the catalog: attention is "
                     "priced at its BF16 peak")
    host, xmem_t = (_scoped(t, scopes, said) for t in (host, xmem_t))
    known = {n for t in (host, xmem_t) for n in (t.name, *t.aliases, t.kind)}
    for name in scopes:
        if name not in known:
            raise UsageError(f"--tier-scope {name}: not a tier this plan loads from",
                             f"name {host.name} (host DRAM) or {xmem_t.name} (X-Mem), or "
                             "an alias of them; HBM is always its replica's")
    for t in (host, xmem_t):
        for n in M.notes(g, t):
            said.append((n, f"catalog ({Path(t.origin).name or 'catalog'}, tier {t.name}: "
                         "nothing published backs it)"))
    said.append((f"TTFT SLO {slo * 1e3:g} ms at {slo_at} of "
                 f"{'warm requests (hit >= half the prompt)' if slo_on == 'warm' else 'all'}",
                 "flag" if slo_at != "p99" or slo_on != "warm" else "flag (--ttft-slo), "
                 "default percentile p99 of warm requests"))
    said.append((f"router {router_name}: {RT.DESCRIPTIONS[router_name]}",
                 "flag (--router)" if router_name != RT.DEFAULT_ROUTER
                 else "default (--router session: today's session-sticky placement)"))
    if prefix_groups is not None:
        if workload is not None and work.group is not None:
            raise UsageError("--prefix-groups: the profile already names its prefix groups",
                             "drop --prefix-groups")
        said.append((f"each request's hit prefix is one of {prefix_groups:,} shared "
                     "prefixes, drawn uniformly", "flag (--prefix-groups)"))
    said.extend(hicache)
    said.append((f"{requests:,} simulated requests, seed {seed}, first tenth left out",
                 "default" if requests == 4000 and seed == 0 else "flag"))
    req = SizeRequest(
        slo_s=slo, model=m, gpu=g, hbm=cat.tier("hbm"), host=host,
        xmem=xmem_t, workload=work, load=load, engine=engine,
        overlap=overlap or default_overlap, transfer=transfer, calibration=cal, shape=shape,
        slo_percentile=float(slo_at[1:]), slo_on=slo_on, output_tokens=out,
        requests=requests, seed=seed, working_set_tokens=ws_tokens, max_gpus=max_gpus,
        mixed=mixed, auto_shape=tp is None and ep is None, assumptions=tuple(said),
        attention_dtype=attention_dtype, dp_attention=dp_attention, mem_fraction=frac,
        router=router_name, prefix_groups=prefix_groups or 0,
        prices=prices, xmem_path=xmem_path,
        prefetch_policy=prefetch_policy or PREFETCH_DEFAULT,
        inputs=tuple(str(p) for p in (
            *([workload] if workload is not None else []), *catalog,
            *([cost] if cost is not None and cost.endswith(".toml") else []))),
    )
    if prices is not None:
        prices.gpu_price(g.name)  # a price for this GPU, or a clear error now
        per = "per hour" if prices.basis == "hour" else "per unit"
        said.append((f"prices {per}: GPU {prices.money(prices.gpu_price(g.name))}, X-Mem "
                     f"node {prices.money(prices.xmem_node)}"
                     + (f", host DRAM per GPU {prices.money(prices.host_dram)}"
                        if prices.host_dram else ""), prices.source))
    if req.xmem.node_bandwidth_bytes_per_s is None:
        raise UsageError(f"tier '{req.xmem.name}' has no node_bandwidth",
                         "pass an X-Mem-like tier to --xmem-tier")
    return req, notes


SCOPES = ("replica", "server", "rack", "cluster")


def _tier_scopes(items: Sequence[str]) -> dict[str, str]:
    """--tier-scope TIER=SCOPE items as {tier name or alias: scope}."""
    out: dict[str, str] = {}
    for it in items:
        name, sep, scope = it.partition("=")
        if not sep or not name or scope not in SCOPES:
            raise UsageError(f"--tier-scope '{it}' is not TIER=SCOPE",
                             "write it like host-dram=server; scopes: " + ", ".join(SCOPES))
        key = name.strip().lower()
        if key in out:  # the last one would win, the first be ignored
            raise UsageError(f"--tier-scope names tier {key} twice ({key}={out[key]}, {it})",
                             "give each tier one scope")
        out[key] = scope
    return out


def _scoped(t: TierSpec, scopes: dict[str, str], said: list[tuple[str, str]]) -> TierSpec:
    """`t` with its --tier-scope override, and the scope it is read at in the assumptions."""
    names = {t.name, *t.aliases, t.kind}
    hit = [s for n, s in scopes.items() if n in names]
    if len(hit) > 1:  # two names (aliases) of one tier
        both = ", ".join(f"{n}={s}" for n, s in scopes.items() if n in names)
        raise UsageError(f"--tier-scope names tier {t.name} twice ({both})",
                         "give each tier one scope")
    if hit:
        t = replace(t, share_scope=hit[-1])  # type: ignore[arg-type]
    src = ("flag (--tier-scope)" if hit else
           f"catalog (tier {t.name}, share_scope: {t.source_of('share_scope')})")
    said.append((f"{t.name} is read by {_scope_words(t)}", src))
    return t


def _scope_words(t: TierSpec) -> str:
    if t.share_scope == "replica":
        return "its own replica (one engine instance)"
    if t.share_scope == "server":
        return "every replica of its server"
    if t.share_scope == "rack":
        return (f"every replica of a rack of {t.share_gpus:,} GPUs" if t.share_gpus
                else "every replica of the deployment (one rack)")
    return "every replica of the cluster"
COST_KEYS = ("gpu", "xmem-node", "host-dram")


def parse_cost(text: str) -> Prices:
    """`--cost gpu=2.5/h,xmem-node=40/h[,host-dram=0.2/h][,h200=3.5/h]` (per hour: every
    price ends in /h) or the same without /h (per unit, e.g. purchase prices), or a TOML
    file with a `[cost]` table of the same keys (a catalog overlay: `basis = "hour"` or
    "unit"). A GPU's catalog name prices that GPU (several GPUs compared in one run)."""
    path = Path(text)
    if text.endswith(".toml"):
        import tomllib

        from xmemplan.errors import InputError

        try:
            doc = tomllib.loads(path.read_text())
        except OSError as e:
            raise UsageError(f"--cost: cannot read '{text}' ({e.strerror})") from None
        except tomllib.TOMLDecodeError as e:
            raise InputError(f"not TOML ({e})", path=path) from None
        table = doc.get("cost")
        if not isinstance(table, dict):
            raise InputError("no [cost] table", path=path, field="cost",
                             hint="write [cost] with gpu = 2.5 and xmem-node = 40")
        basis = table.get("basis", "hour")
        if basis not in ("hour", "unit"):
            raise InputError(f"{basis!r} is not a basis", path=path, field="cost.basis",
                             hint="hour or unit")
        items = {}
        for k, v in table.items():
            if k == "basis":
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                    or v < 0:
                raise InputError(f"{v!r} is not a price", path=path, field=f"cost.{k}",
                                 hint="a number, 0 or more")
            items[k] = float(v)
        return _prices(items, basis, f"catalog overlay ({path.name}, [cost])")
    items, bases = {}, set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        k, eq, v = part.partition("=")
        k = k.strip().lower()
        if not eq or not k:
            raise UsageError(f"--cost '{part}' is not KEY=PRICE",
                             "write it like gpu=2.5/h,xmem-node=40/h")
        v = v.strip()
        per_hour = v.lower().endswith(("/h", "/hr", "/hour"))
        bases.add("hour" if per_hour else "unit")
        num = v.split("/")[0].strip().lstrip("$")
        items[k] = units.parse_number(num, f"--cost {k}", lo=0.0)
    if len(bases) > 1:
        raise UsageError("--cost mixes prices per hour (/h) and per unit",
                         "give every price per hour (2.5/h) or every one per unit")
    return _prices(items, bases.pop() if bases else "hour", "flag (--cost)")


def _prices(items: dict[str, float], basis: str, source: str) -> Prices:
    if "xmem-node" not in items:
        raise UsageError("--cost gives no xmem-node price",
                         "add xmem-node=PRICE (per hour with /h)")
    named = tuple((k, v) for k, v in items.items() if k not in COST_KEYS)
    return Prices(gpu=items.get("gpu"), xmem_node=items["xmem-node"],
                  host_dram=items.get("host-dram", 0.0), basis=basis, gpu_by_name=named,
                  source=source)


def _kv_dtype_name(m: ModelSpec) -> str:
    return {1: "fp8", 2: "bf16", 4: "fp32"}.get(m.kv_dtype_bytes, f"{m.kv_dtype_bytes} B")


def _spread(text: str | int, flag: str) -> tuple[int, int | None]:
    """`P50` or `P50:P90` token counts (64k, 20k:60k)."""
    if isinstance(text, int):
        return text, None
    parts = str(text).split(":")
    if len(parts) > 2:
        raise UsageError(f"{flag} '{text}': one length or P50:P90", "write it like 20k:60k")
    p50 = units.parse_tokens(parts[0], flag)
    if len(parts) == 1:
        return p50, None
    p90 = units.parse_tokens(parts[1], flag + " (p90)")
    if p90 < p50:
        raise UsageError(f"{flag} '{text}': the p90 is below the p50",
                         "write the median first, like 20k:60k")
    return p50, p90


def _check_output_tokens(out: int, requests: int, m: ModelSpec, work: wl.Workload) -> None:
    """--output-tokens within the model's context (after the longest flag-given prompt) and
    requests x output tokens within MAX_DECODE_STEPS (the simulation's decode work)."""
    if m.max_context and work.session is None and len(np.unique(work.prompt_tokens)) == 1:
        room = m.max_context - int(work.prompt_tokens[0])
        if out > max(1, room):
            raise UsageError(
                f"--output-tokens {out:,}: the {int(work.prompt_tokens[0]):,}-token prompt "
                f"plus its output exceeds {m.name}'s {m.max_context:,}-token context",
                f"allowed: 1 to {max(1, room):,} with this prompt")
    if out * requests > MAX_DECODE_STEPS:
        raise UsageError(
            f"--output-tokens {out:,} x --requests {requests:,} = {out * requests:,} decode "
            f"steps per simulated run, more than {MAX_DECODE_STEPS:,}",
            f"allowed: --output-tokens up to {MAX_DECODE_STEPS // requests:,} at --requests "
            f"{requests:,} (--requests down to 200 allows more)")


def _override(work: wl.Workload, prompt: int | None, hit_rate: float | None) -> wl.Workload:
    """A profile with `--prompt-tokens` and/or `--hit-rate` replacing its figures.

    Each request keeps its own hit ratio, scaled so that the token hit ratio becomes
    `hit_rate`; `--prompt-tokens` gives every request that length.
    """
    ratio = work.hit_tokens / work.prompt_tokens
    if hit_rate is not None:
        ratio = ratio * (hit_rate / work.token_hit_ratio) if work.token_hit_ratio > 0 else (
            ratio * 0 + hit_rate)
    prompts = work.prompt_tokens if prompt is None else np.full_like(work.prompt_tokens, prompt)
    return replace(
        work, prompt_tokens=prompts, hit_tokens=np.floor(prompts * np.clip(ratio, 0.0, 1.0)),
        token_hit_ratio=work.token_hit_ratio if hit_rate is None else hit_rate,
        description=work.description + " (--prompt-tokens/--hit-rate override it)",
    )


