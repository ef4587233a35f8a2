"""Finite KV tiers: hit ratios of LRU caches of given sizes, capacity curves, tier attribution.

    from xmemplan.hitrate import HitrateOptions, analyze, build_spec
    spec = build_spec(capacity="3M,10M", tiers="HBM=60GB,DRAM=1TB", model="qwen3-30b-a3b")
    result = analyze([Path("trace.jsonl")], HitrateOptions(capacity=spec))
    result.capacity.capacities[0]["token_hit_ratio"]

Policy (docs/capacity.md): an LRU at page granularity with prefix semantics, the one of
`xmemplan.prefix.lru` (leaf-first, like SGLang's radix cache). A page is one key of a block
trace, or `--page-size` tokens of a token-id trace (a partial last page is never cached). A
capacity weighs each page at its full page size. Under `--scope session` every session has
its own cache of that capacity; under `--scope global` one cache holds everything.

All capacities, the curve and the tiers come from ONE pass over the trace (stack depths, see
`xmemplan.prefix.lru_kernels`), and every figure is exact, not an approximation.

Cache models (`cache_model`, `hitrate --cache-model`): `lru` (the default, above), `vllm`
(vLLM's block pool and free-block queue) and `sglang` (SGLang's radix cache: whole-leaf LRU
eviction, spare room), from `xmemplan.prefix.engine_cache`. The engine models follow their
engine's rules (no partial last page, hits capped at prompt - 1, decoded tokens inserted from
the trace's output lengths) and are not stack algorithms: one replay per capacity.

Tiers are inclusive (SGLang HiCache write-through): tier k holds everything tiers 1..k-1 hold,
so a tier of capacity C_k serves the hit pages that an LRU of C_k holds and an LRU of C_(k-1)
does not. Tiers named HBM or GPU are the GPU's own memory: hits there move no bytes; hits in
any other tier move their KV bytes to the GPU.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.errors import UsageError
from xmemplan.hitrate.metrics import METRIC_LABELS
from xmemplan.units import (
    MAX_CACHE_TOKENS,
    format_bytes,
    format_count,
    is_byte_quantity,
    parse_bytes,
    parse_count,
)

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import Replayed
    from xmemplan.hitrate.workingset import Series

GPU_TIER_NAMES = ("hbm", "gpu")
CACHE_MODELS = ("lru", "vllm", "sglang")  # finite caches; "lru" is the default
POLICY = {"lru": "lru-leaf-first", "vllm": "vllm-block-pool", "sglang": "sglang-radix-lru"}
MODEL_TITLE = {"lru": "LRU", "vllm": "vLLM block pool", "sglang": "SGLang radix cache"}
# The default (--capacity-curve auto) grid: 1-2-5 steps from 1k to 1T tokens, trimmed to the
# trace afterwards (from one page to the first point that holds every distinct page).
AUTO_CURVE = [m * 10**e for e in range(3, 13) for m in (1, 2, 5)]


@dataclass(frozen=True)
class Capacity:
    """One cache size: as the user wrote it, in tokens, and in bytes when a model is known."""

    label: str
    tokens: int
    bytes: float | None = None


@dataclass(frozen=True)
class Tier:
    name: str
    capacity: Capacity

    @property
    def on_gpu(self) -> bool:
        return self.name.strip().lower() in GPU_TIER_NAMES


@dataclass
class CapacitySpec:
    """What to compute; `points` are all capacities (tokens) the one pass answers."""

    capacities: list[Capacity] = field(default_factory=list)
    curve: list[Capacity] = field(default_factory=list)
    curve_auto: bool = False
    tiers: list[Tier] = field(default_factory=list)
    model: str | None = None
    kv_bytes_per_token: int | None = None
    idle_s: float | None = None
    page_size: int = 1
    cache_model: str = "lru"  # one of CACHE_MODELS
    with_outputs: bool = True  # engine models: insert decoded tokens (trace output lengths)

    @property
    def points(self) -> np.ndarray:
        caps = [c.tokens for c in self.capacities + self.curve] + [
            t.capacity.tokens for t in self.tiers
        ]
        return np.array(sorted(set(caps)), dtype=np.int64)

    def column(self, tokens: int) -> int:
        return int(np.searchsorted(self.points, tokens))


def kv_bytes_per_token(model: str) -> int:
    """KV bytes per token of a catalog model (`xmemplan catalog` lists them)."""
    from xmemplan.catalog import load_catalog

    return int(load_catalog().model(model).kv_bytes_per_token)


def parse_capacity(text: str, bpt: int | None, what: str = "capacity") -> Capacity:
    """`3M` (tokens) or `80GB` (bytes, converted with `bpt` KV bytes per token)."""
    text = text.strip()
    example = "like --capacity 3M (tokens) or --capacity 80GB --model NAME (bytes)"
    if not text:
        raise UsageError(f"empty {what}", f"write it {example}")
    if text.startswith("-"):
        raise UsageError(f"{what} '{text}' is negative", f"write a positive size, {example}")
    if is_byte_quantity(text):
        if bpt is None:
            raise UsageError(
                f"{what} '{text}' is in bytes, and bytes need a model to become tokens",
                "add --model NAME (see 'xmemplan catalog'), or give tokens like 3M",
            )
        size = parse_bytes(text, what)
        tokens = int(size // bpt)
        if tokens > MAX_CACHE_TOKENS:
            raise UsageError(
                f"{what} '{text}' is {tokens:,} tokens of KV, more than any cache holds",
                f"allowed: up to {format_count(MAX_CACHE_TOKENS)} tokens "
                f"({format_bytes(MAX_CACHE_TOKENS * bpt)} at {bpt:,} bytes per token)",
            )
        if tokens <= 0:
            raise UsageError(
                f"{what} '{text}' holds no token of KV ({format_bytes(bpt)} per token)",
                f"use at least {format_bytes(bpt)}",
            )
        return Capacity(text, tokens, size)
    if re.fullmatch(r"(0+\.?0*|0*\.0+)\s*[A-Za-z]*", text):
        raise UsageError(f"{what} '{text}' is zero", f"write a positive size, {example}")
    tokens = parse_count(text, what, lo=1, hi=MAX_CACHE_TOKENS)
    return Capacity(text, tokens, None if bpt is None else float(tokens) * bpt)


def _curve(text: str, bpt: int | None) -> tuple[list[Capacity], bool]:
    text = text.strip()
    if text.lower() == "auto":
        return [_tokens_capacity(t, bpt) for t in AUTO_CURVE], True
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise UsageError(
                f"cannot read --capacity-curve '{text}'",
                "write LOW:HIGH:POINTS like 1M:100M:20, a list like 1M,3M,10M, or auto",
            )
        lo = parse_capacity(parts[0], bpt, "--capacity-curve start")
        hi = parse_capacity(parts[1], bpt, "--capacity-curve end")
        n = int(parts[2].strip()) if re.fullmatch(r"\s*[0-9]{1,5}\s*", parts[2]) else 0
        if n < 2 or n > 1000:
            raise UsageError(
                f"--capacity-curve points '{parts[2]}' is not a number from 2 to 1000",
                "write LOW:HIGH:POINTS like 1M:100M:20",
            )
        if hi.tokens <= lo.tokens:
            raise UsageError(
                f"--capacity-curve end '{parts[1]}' is not above its start '{parts[0]}'",
                "write LOW:HIGH:POINTS like 1M:100M:20",
            )
        grid = np.unique(np.geomspace(lo.tokens, hi.tokens, n).round().astype(np.int64))
        return [_tokens_capacity(int(t), bpt) for t in grid], False
    return [parse_capacity(p, bpt, "--capacity-curve point") for p in text.split(",")], False


def _tokens_capacity(tokens: int, bpt: int | None) -> Capacity:
    return Capacity(format_count(tokens), tokens, None if bpt is None else float(tokens) * bpt)


def _tiers(text: str, bpt: int | None) -> list[Tier]:
    tiers: list[Tier] = []
    for part in text.split(","):
        name, sep, size = part.partition("=")
        if not sep or not name.strip() or not size.strip():
            raise UsageError(
                f"--tiers: cannot read tier '{part.strip()}'",
                "write --tiers NAME=SIZE,... fastest first, like HBM=60GB,DRAM=1TB,XMEM=24TB",
            )
        tier = Tier(name.strip(), parse_capacity(size, bpt, f"--tiers {name.strip()} size"))
        if tiers and tier.capacity.tokens <= tiers[-1].capacity.tokens:
            raise UsageError(
                f"--tiers: tier {tier.name} ({tier.capacity.label}) is not larger than tier "
                f"{tiers[-1].name} ({tiers[-1].capacity.label})",
                "tiers are inclusive (each holds everything the tiers before it hold): list "
                "them fastest first, each larger than the one before",
            )
        if any(t.name.lower() == tier.name.lower() for t in tiers):
            raise UsageError(f"--tiers: tier {tier.name} is listed twice",
                             "give each tier one size")
        tiers.append(tier)
    if not tiers:
        raise UsageError("--tiers is empty", "write it like HBM=60GB,DRAM=1TB,XMEM=24TB")
    return tiers


def build_spec(
    capacity: str | None = None,
    curve: str | None = None,
    tiers: str | None = None,
    model: str | None = None,
    idle: str | None = None,
    page_size: int = 1,
    want_curve: bool = False,
    kv_bytes: int | None = None,
    cache_model: str = "lru",
    with_outputs: bool = True,
) -> CapacitySpec:
    """Parse the command-line values into a spec (UsageError for anything unusable).

    `want_curve` adds the auto curve when none is given (a profile or plots need one);
    `kv_bytes` overrides the catalog's KV bytes per token of `model`.
    """
    from xmemplan.units import MAX_PAGE_TOKENS, check_int, parse_duration

    check_int(page_size, "--page-size", 1, MAX_PAGE_TOKENS, "tokens")
    bpt = kv_bytes if kv_bytes is not None else (kv_bytes_per_token(model) if model else None)
    if cache_model not in CACHE_MODELS:
        raise UsageError(f"unknown cache model '{cache_model}'",
                         f"use one of {', '.join(CACHE_MODELS)}")
    spec = CapacitySpec(model=model, kv_bytes_per_token=bpt, page_size=page_size,
                        cache_model=cache_model, with_outputs=with_outputs)
    if capacity is not None:
        spec.capacities = [parse_capacity(p, bpt, "--capacity") for p in capacity.split(",")]
        _each_once(spec.capacities, "--capacity", bpt)
    if curve is not None:
        spec.curve, spec.curve_auto = _curve(curve, bpt)
        if not spec.curve_auto and ":" not in curve:  # a list (LOW:HIGH:POINTS is unique)
            _each_once(spec.curve, "--capacity-curve", bpt)
    elif want_curve:
        spec.curve, spec.curve_auto = _curve("auto", bpt)
    if tiers is not None:
        spec.tiers = _tiers(tiers, bpt)
    if idle is not None:
        spec.idle_s = parse_duration(idle, "--idle", lo_open=True)
    for c in spec.capacities + [t.capacity for t in spec.tiers]:
        _check_page(c, page_size)
    return spec


def _each_once(caps: list[Capacity], flag: str, bpt: int | None) -> None:
    """UsageError when two sizes of one list are the same cache (the same tokens: 1k and
    1000, or 1GB and 1000MB; 1GB and 1GiB are two): each would get its own column (or
    curve row) of the same figures, as `--tiers` and `--gpu` refuse a name given twice."""
    first: dict[int, Capacity] = {}
    for c in caps:
        first.setdefault(c.tokens, c)
    for c in caps:
        was = first[c.tokens]
        if was is c:
            continue
        per = "" if c.bytes is None or bpt is None else f" at {bpt:,} KV bytes per token"
        what = (f"{flag} {c.label} is given twice" if was.label == c.label else
                f"{flag} {was.label} and {c.label} are the same size "
                f"({c.tokens:,} tokens{per})")
        raise UsageError(f"{what}: the same cache would be replayed and shown twice",
                         f"give each size once: {flag} "
                         + ",".join(x.label for x in first.values()))


def _check_page(c: Capacity, page_tokens: int) -> None:
    if c.tokens < page_tokens:
        raise UsageError(
            f"capacity {c.label} ({c.tokens:,} tokens) is smaller than one page "
            f"({page_tokens:,} tokens)",
            f"use at least {page_tokens:,} tokens",
        )


# --- The replay of one batch (called from xmemplan.hitrate.replay) ---------------------------


@dataclass
class CapacityPart:
    """One batch's per-request results, aligned with its rows of `Replayed`."""

    hit_tokens: np.ndarray  # int64 (n, J): hit tokens at spec.points[j]
    infinite_hit_tokens: np.ndarray  # int64 (n,): hit tokens of the infinite cache
    page_tokens: np.ndarray  # int64 (n,): tokens per page of each request
    gap_s: np.ndarray  # float64 (n,): seconds since the deepest hit page was last used
    gap_tokens: np.ndarray  # float64 (G,): hit tokens by reuse gap (infinite cache)
    distinct_tokens: int
    rejected: np.ndarray | None = None  # bool (n, J), engine models: KV alone over the pool


def replay_capacity(
    keys: np.ndarray,
    offsets: np.ndarray,
    resets: np.ndarray,
    block_tokens: np.ndarray,
    prompt: np.ndarray,
    timestamps: np.ndarray,
    page_size: int,
    spec: CapacitySpec,
    outputs: np.ndarray | None = None,
) -> CapacityPart:
    """Hits of one replay-ordered batch at every capacity of `spec` (LRU: in one pass)."""
    from xmemplan.prefix.lru import lru_match, token_pages

    page = np.asarray(block_tokens, dtype=np.int64).copy()
    token_rows = page == 1
    if page_size > 1 and token_rows.any():
        pk, poff = token_pages(keys, offsets, page_size)
        if token_rows.all():
            keys, offsets = pk, poff
        else:
            keys, offsets = _pick_rows(keys, offsets, pk, poff, token_rows)
        page[token_rows] = page_size
    engine = spec.cache_model != "lru"
    points = np.empty(0, dtype=np.int64) if engine else spec.points
    # engine models: the same pass gives the infinite figures and the page ids they replay
    want = _engine_ids(page, prompt, outputs, spec) if engine else None
    res = lru_match(keys, offsets, resets, page, points, prompt, timestamps, engine_ids=want)
    prompt = np.asarray(prompt)
    inf = np.minimum(res.matched * page, prompt)
    rejected = None
    if engine:
        assert want is not None
        hit, rejected = _engine_hits(keys, offsets, resets, want[1], prompt, want[0], spec,
                                     res.engine_ids)
    else:
        hit = np.minimum(res.hits * page[:, None], prompt[:, None])
    return CapacityPart(hit, inf, page, res.gap_s, res.gap_tokens, res.distinct_tokens,
                        rejected)


def _engine_ids(page: np.ndarray, prompt: np.ndarray, outputs: np.ndarray | None,
                spec: CapacitySpec) -> tuple[np.ndarray, int, int]:
    """(KV tokens per request, the page, the never-hit id) the LRU pass writes the engine
    model's page ids for (`lru_match(engine_ids=...)`)."""
    from xmemplan.prefix.engine_cache import kv_tokens
    from xmemplan.prefix.engine_kernels import NEVER

    lo, hi = (int(page.min()), int(page.max())) if page.size else (1, 1)
    if lo != hi:  # (min/max, not np.unique: a sort of every request costs 0.2 ms a replay)
        pages = np.unique(page)
        raise UsageError(
            f"--cache-model {spec.cache_model}: one cache holds pages of "
            f"{', '.join(str(int(p)) for p in pages)} tokens",
            "an engine has one block size: replay traces of one page size together",
        )
    p = lo
    out = None if outputs is None else np.where(np.asarray(outputs) >= 0, outputs, 0)
    kv = kv_tokens(prompt, out, spec.with_outputs)
    return kv, p, NEVER if spec.cache_model == "vllm" else 0


def _engine_hits(
    keys: np.ndarray, offsets: np.ndarray, resets: np.ndarray, page: int,
    prompt: np.ndarray, kv: np.ndarray, spec: CapacitySpec,
    page_ids: tuple[np.ndarray, np.ndarray, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Hit tokens and rejections of the vllm / sglang model at every point, in tokens."""
    from xmemplan.prefix.engine_cache import engine_replay

    n = len(prompt)
    if n == 0:
        z = np.zeros((0, spec.points.size), dtype=np.int64)
        return z, z.astype(bool)
    rep = engine_replay(spec.cache_model, keys, offsets, resets, prompt, kv, page,
                        spec.points, page_ids=page_ids)
    return rep.hits, rep.rejected


def _pick_rows(
    keys_a: np.ndarray, off_a: np.ndarray, keys_b: np.ndarray, off_b: np.ndarray, use_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Row r from (keys_b, off_b) where use_b[r], else from (keys_a, off_a)."""
    starts = np.where(use_b, off_b[:-1], off_a[:-1])
    lengths = np.where(use_b, np.diff(off_b), np.diff(off_a))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    src = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    from_b = np.repeat(use_b, lengths)
    out = np.empty(offsets[-1], dtype=np.int64)
    out[from_b] = keys_b[src[from_b]]
    out[~from_b] = keys_a[src[~from_b]]
    return out, offsets


def capacity_hits(replayed: Replayed, spec: CapacitySpec, tokens: int) -> np.ndarray:
    """Per-request hit tokens at capacity `tokens` (one of spec.points), in replay order."""
    j = spec.column(tokens)
    if j >= spec.points.size or spec.points[j] != tokens:
        raise ValueError(f"{tokens} tokens is not a capacity of this spec")
    parts = replayed.capacity
    if not parts:
        return np.empty(0, dtype=np.int64)
    return np.concatenate([p.hit_tokens[:, j] for p in parts])


# --- Summaries -------------------------------------------------------------------------------

TABLE_ROWS = (
    METRIC_LABELS[0],
    ("share_of_infinite", "share of infinite-cache hit"),
    *METRIC_LABELS[1:],
)

CURVE_KEYS = ("token_hit_ratio", "mean_request_hit_ratio", "rounds_ge1_token_hit_ratio")


@dataclass
class CapacityResult:
    """What the capacity pass found; `to_json()` is what `--format json` prints."""

    capacities: list[dict[str, Any]]
    curve: list[dict[str, Any]] | None
    tiers: list[dict[str, Any]] | None
    reuse: dict[str, Any]
    working_set: dict[str, Any] | None
    distinct_tokens: int
    per_session_cache: bool
    model: str | None
    kv_bytes_per_token: int | None
    infinite_token_hit_ratio: float
    notes: list[str] = field(default_factory=list)
    cache_model: str = "lru"
    with_outputs: bool | None = None  # engine models only
    page_tokens: int | None = None  # engine models: the block / page size they replayed
    working_series: Series | None = None  # for plots (not in JSON)
    spec: CapacitySpec | None = None

    def request_columns(self, replayed: Replayed) -> dict[str, np.ndarray]:
        """Per-request hit tokens at each `--capacity`, for the `--out` table."""
        if self.spec is None:
            return {}
        name = self.spec.cache_model
        return {
            f"hit_tokens_{name}_{c.label}": capacity_hits(replayed, self.spec, c.tokens)
            for c in self.spec.capacities
        }

    def csv_rows(self) -> list[tuple[str, Any]]:
        """`metric,value` rows for `--format csv`, e.g. `capacity[3M].token_hit_ratio`."""
        rows: list[tuple[str, Any]] = []
        for c in self.capacities:
            rows += [(f"capacity[{c['capacity']}].{k}", c[k]) for k, _ in TABLE_ROWS]
        for c in self.curve or []:
            rows += [(f"curve[{c['capacity_tokens']}].{k}", c[k]) for k in CURVE_KEYS]
        for t in self.tiers or []:
            rows += [(f"tier[{t['name']}].{k}", t[k]) for k in ("hit_tokens", "bytes_to_gpu")]
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": POLICY[self.cache_model],
            "cache_model": self.cache_model,
            "with_outputs": self.with_outputs,
            "cache_per_session": self.per_session_cache,
            "model": self.model,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "distinct_tokens": self.distinct_tokens,
            "infinite_token_hit_ratio": self.infinite_token_hit_ratio,
            "capacities": self.capacities,
            "curve": self.curve,
            "tiers": self.tiers,
            "reuse": self.reuse,
            "working_set": self.working_set,
            "notes": self.notes,
        }


def summarize_capacity(
    replayed: Replayed, session_codes: np.ndarray, spec: CapacitySpec, scope: str
) -> CapacityResult:
    """Turn the per-batch parts of a replay into the capacity, curve, tier and reuse figures."""
    from xmemplan.hitrate.metrics import summarize
    from xmemplan.hitrate.workingset import reuse_summary, working_set
    from xmemplan.prefix.lru import GAP_EDGES_S
    from xmemplan.traces import schema as S

    parts: list[CapacityPart] = replayed.capacity
    n = len(replayed.session_id)
    points = spec.points
    if parts:
        hits = np.concatenate([p.hit_tokens for p in parts])
        page = np.concatenate([p.page_tokens for p in parts])
        gap_s = np.concatenate([p.gap_s for p in parts])
        gap_tokens = np.sum([p.gap_tokens for p in parts], axis=0)
        distinct = max(p.distinct_tokens for p in parts)
    else:
        hits = np.zeros((n, points.size), dtype=np.int64)
        page = np.ones(n, dtype=np.int64)
        gap_s = np.full(n, np.nan)
        gap_tokens = np.zeros(GAP_EDGES_S.size - 1)
        distinct = 0
    if hits.shape[0] != n:
        raise RuntimeError("capacity results are not aligned with the replayed requests")
    largest_page = int(page.max()) if page.size else 1
    for c in spec.capacities + [t.capacity for t in spec.tiers]:
        _check_page(c, largest_page)
    index = replayed.column(S.REQUEST_INDEX)
    prompt = replayed.column(S.PROMPT_TOKENS)
    inf_hit = replayed.column(S.HIT_TOKENS)
    total = float(prompt.sum())
    inf_ratio = float(inf_hit.sum()) / total if total > 0 else math.nan
    bpt = spec.kv_bytes_per_token

    def summary_at(c: Capacity) -> dict[str, Any]:
        s = summarize(session_codes, index, prompt, hits[:, spec.column(c.tokens)])
        return {
            "capacity": c.label,
            "capacity_tokens": c.tokens,
            "capacity_bytes": c.bytes,
            **s,
            "share_of_infinite": s["token_hit_ratio"] / inf_ratio if inf_ratio > 0 else None,
        }

    capacities = [summary_at(c) for c in spec.capacities]
    curve = None
    if spec.curve:
        chosen = spec.curve
        if spec.curve_auto:
            chosen = _trim_auto(spec.curve, largest_page, distinct)
        curve = []
        for c in chosen:
            h = hits[:, spec.column(c.tokens)]
            s = summarize(session_codes, index, prompt, h)
            curve.append(
                {
                    "capacity_tokens": c.tokens,
                    "capacity_bytes": c.bytes,
                    **{k: s[k] for k in CURVE_KEYS},
                    "share_of_infinite": (
                        s["token_hit_ratio"] / inf_ratio if inf_ratio > 0 else None
                    ),
                }
            )
    tiers = _tier_rows(spec, hits, prompt, inf_hit, bpt) if spec.tiers else None
    notes = _engine_notes(spec, parts, replayed.column(S.OUTPUT_TOKENS)) if parts else []
    per_session = scope == "session"
    if per_session:
        notes.append(
            "capacities apply to each session's own cache (--scope session); "
            "use --scope global for one cache shared by all sessions"
        )
    ws, series = working_set(
        replayed.session_id,
        replayed.column(S.TIMESTAMP_S),
        prompt,
        replayed.column(S.OUTPUT_TOKENS),
        spec.idle_s,
        bpt,
    )
    reuse = reuse_summary(gap_s, inf_hit, GAP_EDGES_S, gap_tokens)
    if ws is None:
        notes.append("the trace has no timestamps: no working set, arrival rate or reuse gaps")
    elif spec.idle_s is None and ws["sessions"] == ws["requests_with_time"]:
        notes.append(
            "every session has a single request, so without --idle it is live for an instant "
            "only: add --idle (e.g. 5m) for a meaningful working set"
        )
    return CapacityResult(
        capacities=capacities,
        curve=curve,
        tiers=tiers,
        reuse=reuse,
        working_set=ws,
        distinct_tokens=int(distinct),
        per_session_cache=per_session,
        model=spec.model,
        kv_bytes_per_token=bpt,
        infinite_token_hit_ratio=inf_ratio,
        notes=notes,
        working_series=series,
        spec=spec,
        cache_model=spec.cache_model,
        with_outputs=spec.with_outputs if spec.cache_model != "lru" else None,
        page_tokens=largest_page if spec.cache_model != "lru" else None,
    )


def _engine_notes(spec: CapacitySpec, parts: list[CapacityPart], outputs: np.ndarray
                  ) -> list[str]:
    """What an engine model's figures rest on: outputs used, requests over the pool."""
    if spec.cache_model == "lru":
        return []
    name = MODEL_TITLE[spec.cache_model]
    notes = []
    known = int((outputs >= 0).sum())
    if spec.with_outputs:
        notes.append(
            f"{name}: decoded tokens are cached too, from the output lengths of "
            f"{known:,} of {len(outputs):,} requests (the rest: none); --prefill-only "
            "leaves them out"
        )
    else:
        notes.append(f"{name}: prefill only (--prefill-only): decoded tokens are not cached")
    rej = [p.rejected for p in parts if p.rejected is not None]
    if rej:
        per_point = np.concatenate(rej).sum(axis=0)
        for c in spec.capacities + [t.capacity for t in spec.tiers]:
            k = int(per_point[spec.column(c.tokens)])
            if k:
                notes.append(
                    f"{name} at {c.label}: {k:,} requests need more KV than the whole cache "
                    "and count as misses (an engine refuses them)"
                )
    if spec.tiers:
        notes.append(
            f"{name} is not a stack algorithm: each tier's tokens are the difference of "
            "whole-cache replays at its cumulative size"
        )
    return notes


def _trim_auto(curve: list[Capacity], page: int, distinct: int) -> list[Capacity]:
    """The auto grid from the last point below one page to the first that holds everything."""
    tokens = [c.tokens for c in curve]
    lo = max(0, int(np.searchsorted(tokens, page, side="right")) - 1)
    hi = min(len(curve) - 1, int(np.searchsorted(tokens, max(distinct, 1), side="left")))
    return curve[lo : hi + 1]


def _tier_rows(
    spec: CapacitySpec,
    hits: np.ndarray,
    prompt: np.ndarray,
    inf_hit: np.ndarray,
    bpt: int | None,
) -> list[dict[str, Any]]:
    total = float(prompt.sum())
    rows = []
    below = np.zeros(len(prompt), dtype=np.int64)
    for t in spec.tiers:
        cum = hits[:, spec.column(t.capacity.tokens)]
        served = int((cum - below).sum())
        rows.append(
            {
                "name": t.name,
                "capacity": t.capacity.label,
                "capacity_tokens": t.capacity.tokens,
                "capacity_bytes": t.capacity.bytes,
                "on_gpu": t.on_gpu,
                "hit_tokens": served,
                "token_share": served / total if total > 0 else math.nan,
                "cumulative_token_hit_ratio": float(cum.sum()) / total if total > 0 else math.nan,
                "bytes_to_gpu": 0 if t.on_gpu else (served * bpt if bpt is not None else None),
            }
        )
        below = cum
    missed = int(total - below.sum())
    rows.append(
        {
            "name": "miss (prefill)",
            "capacity": None,
            "capacity_tokens": None,
            "capacity_bytes": None,
            "on_gpu": None,
            "hit_tokens": missed,
            "token_share": missed / total if total > 0 else math.nan,
            "cumulative_token_hit_ratio": None,
            "bytes_to_gpu": None,
            "lost_to_capacity_tokens": int(inf_hit.sum() - below.sum()),
        }
    )
    return rows
