"""Turn `size` options (strings with units, names) into a `SizeRequest`, checking each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from xmemplan import units
from xmemplan.catalog import load_catalog
from xmemplan.defaults import SEED_GPU
from xmemplan.errors import UsageError
from xmemplan.sizing import workload as wl
from xmemplan.sizing.model import DEFAULT_CALIBRATION, SGLANG_HICACHE, Transfer
from xmemplan.sizing.planner import SizeRequest

ENGINES = {
    # SGLang HiCache: per-layer load events, page 64 layer_first, kernel IO (the Netpreme fork).
    "sglang": ("layer", SGLANG_HICACHE),
    # vLLM OffloadingConnector: the request waits for its load; contiguous 16-token blocks.
    "vllm": ("sum", Transfer(page_tokens=16, layout="page_first", io="dma")),
}


def build_request(
    *, ttft_slo: str, workload: Path | None = None, prompt_tokens: str | None = None,
    hit_rate: float | None = None, model: str | None = None, gpu: str = SEED_GPU,
    concurrency: int = 8, rate: float | None = None, gpus: int = 8,
    working_set: str | None = None, engine: str = "sglang", overlap: str | None = None,
    page_tokens: int | None = None, slo_at: str = "p99", host_tier: str = "host-dram-pcie5",
    xmem_tier: str = "xmem", catalog: Sequence[Path] = (),
) -> tuple[SizeRequest, list[str]]:
    """The request and notes to show (which workload, what was overridden)."""
    slo = units.parse_duration(ttft_slo, "--ttft-slo")
    if slo <= 0:
        raise UsageError("--ttft-slo must be positive")
    if engine not in ENGINES:
        raise UsageError(f"unknown engine '{engine}'", "use sglang or vllm")
    default_overlap, transfer = ENGINES[engine]
    if overlap is not None and overlap not in ("sum", "layer", "max"):
        raise UsageError(f"unknown overlap '{overlap}'", "use sum, layer or max")
    if page_tokens is not None:
        if page_tokens < 1:
            raise UsageError("--page-tokens must be at least 1")
        transfer = replace(transfer, page_tokens=page_tokens)
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if gpus < 1:
        raise UsageError("--gpus must be at least 1")
    if rate is not None and rate < 0:
        raise UsageError("--rate must be 0 or more requests per second")
    if slo_at not in ("p50", "p90", "p99"):
        raise UsageError(f"unknown percentile '{slo_at}'", "use p50, p90 or p99")
    if hit_rate is not None:
        wl.check_hit_rate(hit_rate)
    prompt = None
    if prompt_tokens is not None:
        prompt = units.parse_count(prompt_tokens, "--prompt-tokens")
        if prompt <= 0:
            raise UsageError("--prompt-tokens must be at least 1", "write it like '64Ki'")

    cat = load_catalog(catalog)
    notes: list[str] = []
    if workload is not None:
        from xmemplan.profile import load_profile

        work = wl.from_profile(load_profile(workload))
        if prompt is not None or hit_rate is not None:
            work = _override(work, prompt, hit_rate)
        model_name = model or work.model or wl.SEED_MODEL
        label = work.description
    elif prompt is None and hit_rate is None and model is None:
        work = wl.from_flags(wl.SEED_PROMPT_TOKENS, wl.SEED_HIT_RATE, "seed")
        model_name = wl.SEED_MODEL
        label = (f"default seed scenario (Netpreme blog): {wl.SEED_MODEL} on {gpu}, "
                 f"{wl.SEED_PROMPT_TOKENS:,}-token prompts, hit rate {wl.SEED_HIT_RATE}, "
                 f"{concurrency} prefills in flight per GPU")
        work = replace(work, description=label)
    else:
        n_prompt = prompt if prompt is not None else wl.SEED_PROMPT_TOKENS
        h = hit_rate if hit_rate is not None else wl.SEED_HIT_RATE
        model_name = model or wl.SEED_MODEL
        label = (f"flags: {n_prompt:,}-token prompts, hit rate {h:g}"
                 + ("" if prompt is not None else " (prompt length: seed default)")
                 + ("" if hit_rate is not None else " (hit rate: seed default)"))
        work = wl.from_flags(n_prompt, h, label)
    m = cat.model(model_name)
    if work.kv_bytes_per_token and work.kv_bytes_per_token != m.kv_bytes_per_token:
        notes.append(
            f"the profile was written for {work.kv_bytes_per_token:,} KV bytes per token; "
            f"{m.name} has {m.kv_bytes_per_token:,} (the catalog's figure is used)")
    ws_tokens = None
    if working_set is not None:
        if units.is_byte_quantity(working_set):
            ws_tokens = units.parse_bytes(working_set, "--working-set") / m.kv_bytes_per_token
        else:
            ws_tokens = float(units.parse_count(working_set, "--working-set"))
    req = SizeRequest(
        slo_s=slo, model=m, gpu=cat.gpu(gpu), hbm=cat.tier("hbm"), host=cat.tier(host_tier),
        xmem=cat.tier(xmem_tier), workload=work, concurrency=concurrency, gpus=gpus,
        rate_rps=rate if rate is not None else work.rate_rps, working_set_tokens=ws_tokens,
        engine=engine, overlap=overlap or default_overlap, transfer=transfer,
        calibration=DEFAULT_CALIBRATION.for_engine(engine),
        slo_percentile=float(slo_at[1:]),
    )
    if req.xmem.node_bandwidth_bytes_per_s is None:
        raise UsageError(f"tier '{req.xmem.name}' has no node_bandwidth",
                         "pass an X-Mem-like tier to --xmem-tier")
    return req, notes


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
