"""What a `validate` run is asked to do (the CLI builds this from its flags)."""

from __future__ import annotations

from dataclasses import dataclass

from xmemplan.defaults import SEED_GPU, SEED_MODEL


@dataclass(frozen=True)
class ValidateOptions:
    backend: str = "xmem"  # xmem | dram
    emulate: bool = False  # force the emulated tier
    real: bool = False  # insist on hardware
    calibrate: bool = False
    model: str = SEED_MODEL
    gpu: str = SEED_GPU
    tier: str | None = None  # default: xmem or host-dram-pcie5
    device: str | None = None  # emulated node: name in data/devices or a TOML file
    readers: int = 1  # simulated GPUs loading from one node at once (threads)
    page_tokens: int = 64
    layout: str = "page_first"  # host pool layout: page_first | layer_first
    overlap: str = "layer"
    tolerance: float = 0.15
    predict_bandwidth_bytes_per_s: float | None = None  # override (e.g. to test a mismatch)
    # Workload: synthetic sessions (the seed scenario), or pairs from a profile/plan/trace.
    sessions: int = 2
    rounds: int = 4
    prompt_tokens: int = 4096
    growth_tokens: int = 1024
    pairs: tuple[tuple[int, int], ...] = ()  # (prompt, hit) tokens, replaces sessions
    max_requests: int = 12
    repeats: int = 3  # reads of each request's hit pages; the fastest is its load time
    max_bytes: float = 4e9  # cap on the KV bytes moved (all readers together)
    capacity_bytes: float | None = None
    catalog_files: tuple[str, ...] = ()
    kv_dtype: str | None = None  # KV element type of the replayed pages (a plan's; None: model's)
    seed: int = 0
    source: str = "seed scenario"
    # a plan's claims (validate --plan): (claim, how it was replayed or "not checked: why"),
    # and the per-GPU load bandwidth the plan assumes at the sharing replayed (judged)
    plan_claims: tuple[tuple[str, str], ...] = ()
    claimed_bandwidth_bytes_per_s: float | None = None


# Limits of the flags that size the replay (inclusive), checked by the CLI with
# xmemplan.units.check_int. The replay moves real pages, so these are far below the
# planner's own limits (units.MAX_REQUESTS, MAX_SESSIONS).
MAX_ROUNDS = 10_000  # rounds per seed session: 10,000 x 1,024 growth is a 10M-token prompt
MAX_REPLAYED = 10_000  # --max-requests: each replayed request moves at least one KV page
MAX_REPEATS = 100  # --repeats: reads of each request (the fastest is kept)
# Page keys one reader may hold before the token counts are scaled (8 bytes each: 160 MB
# at the limit over all readers). `workload.built_pages` counts them.
MAX_BUILT_PAGES = 20_000_000
