"""The workload profile: what `hitrate --profile-out` writes and `size --workload` reads.

One JSON document, versioned; `docs/profile.md` documents every field. Writers fill what
they know and leave the rest null; readers check `schema` and `schema_version` first.

    {
      "schema": "xmemplan.profile", "schema_version": 2,
      "source": {"paths": [...], "formats": {"claude-blocks": 44}, "scope": "session"},
      "requests": 2801, "sessions": 44,
      "model": "qwen3-30b-a3b" | null, "kv_bytes_per_token": 98304 | null,
      "prompt_tokens": {"mean", "p50", "p90", "p99", "max", "histogram": {"edges", "counts"}},
      "hit_ratio": {"token_hit_ratio", "mean_request_hit_ratio", "rounds_ge1_token_hit_ratio",
                    "rounds_ge1_mean", "rounds_ge1_median", "rounds_ge1_p10",
                    "histogram": {"edges", "counts"}},
      "requests_sample": {"prompt_tokens": [...], "hit_tokens": [...],   # <= 10,000 requests
                          "session": [...], "timestamp_s": [...], "output_tokens": [...]},
      "arrival": {"duration_s", "rate_rps", "concurrency_mean", "concurrency_p99"} | null,
      "working_set": {"peak_tokens", "p99_tokens", "peak_bytes", "p99_bytes"} | null,
      "cache_model": "lru" | "vllm" | "sglang" | null,   # the finite cache of the curve/tiers
      "capacity_curve": [{"capacity_tokens", "token_hit_ratio"}, ...] | null,
      "tiers": [{"name", "capacity_tokens", "hit_tokens", "bytes_to_gpu"}, ...] | null
    }

Version 2 adds `session`, `timestamp_s` and `output_tokens` to `requests_sample` (whole
sessions); version 1 files are still read. Both also carry `generator`, `capacities`,
`reuse`, `cache_per_session`, `distinct_tokens`, and more figures inside the objects above
(docs/profile.md lists them all).
Fields are only ever added within a version; readers ignore what they do not know.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.errors import InputError
from xmemplan.jsonio import read_json, to_json, write_output
from xmemplan.units import MAX_DURATION_S, MAX_PAGE_TOKENS, MAX_PROMPT_TOKENS, MAX_RATE

if TYPE_CHECKING:
    from xmemplan.hitrate.pipeline import HitrateResult

SCHEMA = "xmemplan.profile"
SCHEMA_VERSION = 2
READS_VERSIONS = (1, 2)  # every version load_profile still reads


@dataclass(frozen=True)
class Profile:
    """A workload profile as read back: the typed fields `size` and `validate` use.

    `load_profile` is the one reader: it checks the schema and every field below for type
    and range, naming the file and the field on error. `doc` keeps the whole document for
    the fields no reader needs typed (by_round, reuse, generator, ...).
    """

    path: Path | None
    doc: dict[str, Any]
    requests: int
    sessions: int | None
    scope: str | None
    model: str | None
    kv_bytes_per_token: int | None
    token_hit_ratio: float | None
    rounds_ge1_token_hit_ratio: float | None
    prompt_mean: float | None
    prompt_p50: float | None
    prompt_p90: float | None
    prompt_p99: float | None
    prompt_max: float | None
    prompt_hist_edges: tuple[float, ...]
    prompt_hist_counts: tuple[float, ...]
    sample_prompt: np.ndarray  # float64, requests_sample.prompt_tokens (may be empty)
    sample_hit: np.ndarray  # float64, aligned with sample_prompt
    sample_session: np.ndarray | None  # v2: session index per sampled request
    sample_timestamp: np.ndarray | None  # v2: seconds since the sample's first request
    sample_output: np.ndarray | None  # v2: output tokens per sampled request
    rate_rps: float | None
    working_set_tokens: float | None  # peak (or p99) tokens, from bytes when only bytes
    capacity_curve: tuple[tuple[float, float], ...]  # (capacity tokens, token hit ratio)
    cache_model: str | None = None  # the finite cache the curve and tiers come from
    # v2, optional: shared-prefix group per sampled request (-1: none) and the tokens of
    # the group's prefix in its prompt (docs/profile.md, "Prefix groups")
    sample_group: np.ndarray | None = None
    sample_group_tokens: np.ndarray | None = None
    # engine cache models: the page they replayed and whether decoded tokens were cached
    cache_page_tokens: int | None = None
    cache_with_outputs: bool | None = None


def _field(doc: dict[str, Any], dotted: str) -> Any:
    cur: Any = doc
    for k in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return cur


def _number(path: Path | None, doc: dict[str, Any], dotted: str, lo: float = 0.0,
            hi: float = math.inf) -> float | None:
    """`dotted` as a float in [lo, hi], None when absent; InputError naming it otherwise."""
    v = _field(doc, dotted)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InputError(f"not a finite number ({v!r})", path=path, field=dotted)
    if not lo <= v <= hi:
        raise InputError(f"{v!r} is outside the allowed range [{lo:g}, {hi:g}]", path=path,
                         field=dotted)
    return float(v)


# Fields whose -1 means "none" (docs/profile.md): -1 is their only negative value.
_MINUS_ONE_IS_NONE = ("requests_sample.prefix_group",)


def _numbers(path: Path | None, doc: dict[str, Any], dotted: str) -> np.ndarray:
    v = _field(doc, dotted)
    if v is None:
        return np.empty(0, dtype=np.float64)
    if not isinstance(v, list) or any(
        isinstance(x, bool) or not isinstance(x, int | float) for x in v
    ):
        raise InputError("expected a list of numbers", path=path, field=dotted)
    a = np.asarray(v, dtype=np.float64)
    lo = -1.0 if dotted in _MINUS_ONE_IS_NONE else 0.0
    if a.size and (not np.all(np.isfinite(a)) or a.min() < lo):
        raise InputError("a value is negative or not finite", path=path, field=dotted)
    hi = _SAMPLE_MAX.get(dotted)
    if hi is not None and a.size and a.max() > hi:
        k = int(np.argmax(a > hi))
        raise InputError(f"value {k} ({a[k]:.6g}) is above the allowed {hi:.6g}", path=path,
                         field=f"{dotted}[{k}]")
    return a


MAX_TOKENS = 1e12  # a working set or capacity beyond this is a broken file
# Physical bounds, the same as the flags' (xmemplan.units): one prompt or one reply, the
# arrival rate of a whole deployment, a trace's time span.
MAX_PROMPT = float(MAX_PROMPT_TOKENS)
MAX_SPAN_S = MAX_DURATION_S * 100  # sampled timestamps: a century (writer and reader)
_SAMPLE_MAX = {"requests_sample.prompt_tokens": MAX_PROMPT,
               "requests_sample.hit_tokens": MAX_PROMPT,
               "requests_sample.output_tokens": MAX_PROMPT,
               "requests_sample.prefix_group_tokens": MAX_PROMPT,
               "requests_sample.timestamp_s": MAX_SPAN_S}


def profile_from_doc(doc: dict[str, Any], path: Path | None = None) -> Profile:
    """Check `doc` (a parsed profile) and return its typed view; see `load_profile`."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(
            f"not an xmemplan workload profile (schema is not '{SCHEMA}')", path=path,
            field="schema", hint="write one with 'xmemplan hitrate TRACES --profile-out FILE'",
        )
    version = doc.get("schema_version")
    if version not in READS_VERSIONS:
        raise InputError(
            f"profile schema version {version!r}; this xmemplan reads versions "
            f"{', '.join(map(str, READS_VERSIONS))}",
            path=path, field="schema_version",
            hint="regenerate it with this version's 'xmemplan hitrate --profile-out'",
        )
    for key in ("requests", "prompt_tokens", "hit_ratio"):
        if key not in doc:
            raise InputError("missing field", path=path, field=key)
    requests = _number(path, doc, "requests", 0, MAX_TOKENS)
    sessions = _number(path, doc, "sessions", 0, MAX_TOKENS)
    prompts = _numbers(path, doc, "requests_sample.prompt_tokens")
    hits = _numbers(path, doc, "requests_sample.hit_tokens")
    if prompts.size != hits.size:
        raise InputError("prompt_tokens and hit_tokens differ in length", path=path,
                         field="requests_sample")
    if prompts.size and np.any((hits > prompts) & (prompts > 0)):
        raise InputError("a hit_tokens value is above its prompt_tokens", path=path,
                         field="requests_sample.hit_tokens")
    optional: dict[str, np.ndarray | None] = {}
    for name in ("session", "timestamp_s", "output_tokens", "prefix_group",
                 "prefix_group_tokens"):
        dotted = f"requests_sample.{name}"
        a = _numbers(path, doc, dotted) if _field(doc, dotted) is not None else None
        if a is not None and a.size != prompts.size:
            raise InputError(f"{a.size} values for {prompts.size} sampled requests",
                             path=path, field=dotted)
        optional[name] = a
    pg, pgt = optional["prefix_group"], optional["prefix_group_tokens"]
    if (pg is None) != (pgt is None):
        raise InputError("prefix_group and prefix_group_tokens come together", path=path,
                         field="requests_sample.prefix_group"
                         if pg is None else "requests_sample.prefix_group_tokens")
    if pgt is not None and prompts.size and np.any(pgt > prompts):
        k = int(np.argmax(pgt > prompts))
        raise InputError(f"request {k}: {pgt[k]:,.0f} group tokens in a {prompts[k]:,.0f}-"
                         "token prompt", path=path,
                         field="requests_sample.prefix_group_tokens")
    if pgt is not None and np.any(pgt < 0):
        raise InputError("a negative value", path=path,
                         field="requests_sample.prefix_group_tokens")
    edges = _numbers(path, doc, "prompt_tokens.histogram.edges")
    counts = _numbers(path, doc, "prompt_tokens.histogram.counts")
    ws = _number(path, doc, "working_set.peak_tokens", 0, MAX_TOKENS)
    if ws is None:
        ws = _number(path, doc, "working_set.p99_tokens", 0, MAX_TOKENS)
    kvb = _number(path, doc, "kv_bytes_per_token", 1, 1e9)
    if ws is None:
        ws_bytes = _number(path, doc, "working_set.peak_bytes", 0, MAX_TOKENS * 1e9)
        if ws_bytes is not None and kvb:
            ws = ws_bytes / kvb
    curve: list[tuple[float, float]] = []
    raw_curve = doc.get("capacity_curve")
    if raw_curve is not None and not isinstance(raw_curve, list):
        raise InputError("expected a list", path=path, field="capacity_curve")
    for k, point in enumerate(raw_curve or []):
        where = f"capacity_curve[{k}]"
        if not isinstance(point, dict):
            raise InputError("expected an object", path=path, field=where)
        c = _number(path, point, "capacity_tokens", 0, MAX_TOKENS)
        r = _number(path, point, "token_hit_ratio", 0, 1)
        if c is not None and r is not None:
            curve.append((c, r))
    source = doc.get("source")
    scope = source.get("scope") if isinstance(source, dict) else None
    model = doc.get("model")
    cache_model = doc.get("cache_model")
    if cache_model is not None and cache_model not in ("lru", "vllm", "sglang"):
        raise InputError(f"unknown cache model {cache_model!r}", path=path, field="cache_model",
                         hint="lru, vllm or sglang (or null)")
    if cache_model is None and raw_curve:
        cache_model = "lru"  # profiles written before the field existed
    cpage = _number(path, doc, "cache_page_tokens", 1, MAX_PAGE_TOKENS)
    if cpage is not None and cpage != int(cpage):
        raise InputError(f"not a whole number ({cpage!r})", path=path,
                         field="cache_page_tokens")
    cout = doc.get("cache_with_outputs")
    if cout is not None and not isinstance(cout, bool):
        raise InputError(f"expected true, false or null, not {cout!r}", path=path,
                         field="cache_with_outputs")
    return Profile(
        path=path,
        doc=doc,
        requests=int(requests or 0),
        sessions=None if sessions is None else int(sessions),
        scope=scope if isinstance(scope, str) else None,
        model=model if isinstance(model, str) else None,
        kv_bytes_per_token=None if kvb is None else int(kvb),
        token_hit_ratio=_number(path, doc, "hit_ratio.token_hit_ratio", 0, 1),
        rounds_ge1_token_hit_ratio=_number(path, doc, "hit_ratio.rounds_ge1_token_hit_ratio",
                                           0, 1),
        prompt_mean=_number(path, doc, "prompt_tokens.mean", 0, MAX_PROMPT),
        prompt_p50=_number(path, doc, "prompt_tokens.p50", 0, MAX_PROMPT),
        prompt_p90=_number(path, doc, "prompt_tokens.p90", 0, MAX_PROMPT),
        prompt_p99=_number(path, doc, "prompt_tokens.p99", 0, MAX_PROMPT),
        prompt_max=_number(path, doc, "prompt_tokens.max", 0, MAX_PROMPT),
        prompt_hist_edges=tuple(edges.tolist()),
        prompt_hist_counts=tuple(counts.tolist()),
        sample_prompt=prompts,
        sample_hit=hits,
        sample_session=optional["session"],
        sample_timestamp=optional["timestamp_s"],
        sample_output=optional["output_tokens"],
        sample_group=None if pg is None else pg.astype(np.int64),
        sample_group_tokens=pgt,
        rate_rps=_number(path, doc, "arrival.rate_rps", 0, MAX_RATE),
        working_set_tokens=ws,
        capacity_curve=tuple(sorted(curve)),
        cache_model=cache_model,
        cache_page_tokens=None if cpage is None else int(cpage),
        cache_with_outputs=cout,
    )


def load_profile(path: Path) -> Profile:
    """Read and check a profile; errors name the file and the field."""
    return profile_from_doc(read_json(path), Path(path))


def save_profile(path: Path, doc: dict[str, Any], inputs: Sequence[Path] = ()) -> None:
    """Write `doc` with the schema header; NaN and infinities become null (JSON has none).
    `inputs`: what the run read (the writer refuses to write over or among them)."""
    out = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **doc}
    write_output(path, to_json(out) + "\n", "--profile-out", inputs)


SAMPLE_MAX = 10_000
HIT_EDGES = [i / 20 for i in range(21)]  # per-request hit ratio histogram: 20 bins of 0.05


def _prompt_stats(prompt: np.ndarray) -> dict[str, Any]:
    if prompt.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None,
                "histogram": {"edges": [], "counts": []}}
    top = max(int(prompt.max()), 1)
    # Powers of two from 1 token up to the longest prompt (a few dozen bins at most).
    edges = [0] + [2**k for k in range(0, top.bit_length() + 1)]
    counts, _ = np.histogram(prompt, bins=edges)
    return {
        "mean": float(prompt.mean()),
        "p50": float(np.percentile(prompt, 50)),
        "p90": float(np.percentile(prompt, 90)),
        "p99": float(np.percentile(prompt, 99)),
        "max": int(prompt.max()),
        "histogram": {"edges": edges, "counts": counts.tolist()},
    }


def _ratio_hist(ratios: np.ndarray) -> dict[str, Any]:
    counts, _ = np.histogram(np.clip(ratios, 0.0, 1.0), bins=HIT_EDGES)
    return {"edges": HIT_EDGES, "counts": counts.tolist()}


def _whole_sessions(codes: np.ndarray, limit: int) -> np.ndarray:
    """Row indices of whole sessions, evenly spaced over the sessions, at most `limit` rows
    (one session longer than `limit` is cut to its first `limit` requests)."""
    n = codes.size
    if n <= limit:
        return np.arange(n, dtype=np.int64)
    counts = np.bincount(codes)
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    chosen: list[np.ndarray] = []
    total = 0
    n_sessions = counts.size
    # Visit sessions in a stride that spreads the picks over the whole trace.
    stride = max(1, int(round(n / limit)))
    visit = [k for off in range(stride) for k in range(off, n_sessions, stride)]
    for k in visit:
        c = int(counts[k])
        if c == 0:
            continue
        if total + c > limit:
            if total == 0:
                chosen.append(order[starts[k]:starts[k] + limit])
                total = limit
            continue
        chosen.append(order[starts[k]:starts[k] + c])
        total += c
        if total >= limit:
            break
    return np.sort(np.concatenate(chosen)) if chosen else np.empty(0, dtype=np.int64)


def build_profile(result: HitrateResult, paths: Sequence[Path | str]) -> dict[str, Any]:
    """The profile document of a `hitrate` result; see docs/profile.md."""
    from xmemplan import __version__
    from xmemplan.hitrate.workingset import arrival
    from xmemplan.traces import schema as S

    s = result.summary
    r = result.replayed
    prompt = r.column(S.PROMPT_TOKENS)
    hit = r.column(S.HIT_TOKENS)
    index = r.column(S.REQUEST_INDEX)
    valid = prompt > 0
    ratio = np.where(valid, hit / np.maximum(prompt, 1), np.nan)
    later = valid & (index >= 1)
    cap = result.capacity

    # A deterministic sample of whole sessions (evenly spaced), so that each sampled
    # session keeps its own arrivals and think times for the simulator (schema v2).
    _, codes = np.unique(np.asarray(r.session_id, dtype=object), return_inverse=True)
    codes = codes.astype(np.int64).reshape(-1)
    take = _whole_sessions(codes, SAMPLE_MAX)
    sample: dict[str, Any] = {
        "prompt_tokens": prompt[take].tolist(),
        "hit_tokens": hit[take].tolist(),
        "session": np.unique(codes[take], return_inverse=True)[1].reshape(-1).tolist(),
    }
    fpb = r.fingerprint()
    if fpb is not None and len(fpb[0]) == len(prompt):
        from xmemplan.prefix.groups import groups

        grp, gtok = groups(fpb[0], codes, prompt, fpb[1])
        g = grp[take]
        if (g >= 0).any():  # sessions that start alike: what a router can use
            dense = np.full(len(g), -1, np.int64)
            dense[g >= 0] = np.unique(g[g >= 0], return_inverse=True)[1].reshape(-1)
            sample["prefix_group"] = dense.tolist()
            sample["prefix_group_tokens"] = np.where(g < 0, 0, gtok[take]).tolist()
    ts = r.column(S.TIMESTAMP_S)[take]
    rel = ts - ts.min() if ts.size and np.all(np.isfinite(ts)) else None
    # What the reader accepts, and no more: 1e308 - (-1e308) is not finite, a span of 1e305 s
    # is not a trace's; either is left out (size then draws Poisson arrivals, and says so).
    if rel is not None and np.all(np.isfinite(rel)) and float(rel.max()) <= MAX_SPAN_S:
        sample["timestamp_s"] = rel.tolist()
    out_tokens = r.column(S.OUTPUT_TOKENS)[take]
    if out_tokens.size and np.all(out_tokens >= 0):
        sample["output_tokens"] = out_tokens.tolist()

    arr = arrival(r.column(S.TIMESTAMP_S))
    ws = cap.working_set if cap is not None else None
    if arr is not None:
        arr["concurrency"] = "live sessions (working-set definition, docs/profile.md)"
        arr["concurrency_mean"] = ws["sessions_mean"] if ws else None
        arr["concurrency_p99"] = ws["sessions_p99"] if ws else None
        arr["concurrency_peak"] = ws["sessions_peak"] if ws else None
    later_r = ratio[later]
    from xmemplan.provenance import provenance

    return {
        "generator": {"tool": "xmemplan hitrate", "version": __version__},
        "provenance": provenance(list(paths)),
        "source": {
            "paths": [str(p) for p in paths],
            "formats": result.files_by_format,
            "scope": result.scope,
            "page_size": result.page_size,
        },
        "requests": s["requests"],
        "sessions": s["sessions"],
        "model": cap.model if cap is not None else None,
        "kv_bytes_per_token": cap.kv_bytes_per_token if cap is not None else None,
        "prompt_tokens": _prompt_stats(prompt[valid].astype(np.float64)),
        "hit_ratio": {
            "token_hit_ratio": s["token_hit_ratio"],
            "mean_request_hit_ratio": s["mean_request_hit_ratio"],
            "rounds_ge1_token_hit_ratio": s["rounds_ge1_token_hit_ratio"],
            "rounds_ge1_mean": s["rounds_ge1_mean"],
            "rounds_ge1_median": s["rounds_ge1_median"],
            "rounds_ge1_p10": float(np.percentile(later_r, 10)) if later_r.size else None,
            "rounds_ge1_share_ge_95": s["rounds_ge1_share_ge_95"],
            "session_token_hit_mean": s["session_token_hit_mean"],
            "session_token_hit_median": s["session_token_hit_median"],
            "histogram": _ratio_hist(later_r),
            "histogram_all": _ratio_hist(ratio[valid]),
            "by_round": s["by_round"],
        },
        "requests_sample": sample,
        "arrival": arr,
        "working_set": ws,
        "cache_model": cap.cache_model if cap is not None else None,
        "cache_with_outputs": cap.with_outputs if cap is not None else None,
        "cache_page_tokens": cap.page_tokens if cap is not None else None,
        "capacity_curve": cap.curve if cap is not None else None,
        "capacities": cap.capacities if cap is not None else None,
        "tiers": cap.tiers if cap is not None else None,
        "reuse": cap.reuse if cap is not None else None,
        "cache_per_session": cap.per_session_cache if cap is not None else None,
        "distinct_tokens": cap.distinct_tokens if cap is not None else None,
        "assumptions": _assumptions(result),
    }


def _assumptions(result: HitrateResult) -> list[str]:
    """What the profile's hit ratios assume, in words (`size` shows the scope's warning)."""
    cap = result.capacity
    scope = {"global": "global scope: one cache shared by every session, requests in time "
                       "order (as one server's cache)",
             "session": "session scope: one cache per session, no hit shared across sessions "
                        "(size warns: make sizing profiles at --scope global)"}
    out = [scope.get(result.scope, f"scope {result.scope}")]
    if cap is None or not cap.curve:
        out.append("no capacity curve: every capacity gets the infinite cache's hit ratio")
    else:
        lo, hi = cap.curve[0]["capacity_tokens"], cap.curve[-1]["capacity_tokens"]
        out.append(f"capacity curve: {cap.cache_model} cache"
                   f"{' per session' if cap.per_session_cache else ''} at {len(cap.curve)} "
                   f"capacities, {lo:,.0f} to {hi:,.0f} tokens"
                   + (f", KV bytes of {cap.model}" if cap.model else ", no model (tokens only)"))
    if result.page_size > 1:
        out.append(f"hits counted in whole pages of {result.page_size} tokens")
    out += [n for n in result.notes if "not included" in n]  # e.g. sub-agents left out
    return out
