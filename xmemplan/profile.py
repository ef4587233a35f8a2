"""The workload profile: what `hitrate --profile-out` writes and `size --workload` reads.

One JSON document, versioned; `docs/profile.md` documents every field. Writers fill what
they know and leave the rest null; readers check `schema` and `schema_version` first.

    {
      "schema": "xmemplan.profile", "schema_version": 1,
      "source": {"paths": [...], "formats": {"claude-blocks": 44}, "scope": "session"},
      "requests": 2801, "sessions": 44,
      "model": "qwen3-30b-a3b" | null, "kv_bytes_per_token": 98304 | null,
      "prompt_tokens": {"mean", "p50", "p90", "p99", "max", "histogram": {"edges", "counts"}},
      "hit_ratio": {"token_hit_ratio", "mean_request_hit_ratio", "rounds_ge1_token_hit_ratio",
                    "rounds_ge1_mean", "rounds_ge1_median", "rounds_ge1_p10",
                    "histogram": {"edges", "counts"}},
      "requests_sample": {"prompt_tokens": [...], "hit_tokens": [...]},   # <= 10,000 pairs
      "arrival": {"duration_s", "rate_rps", "concurrency_mean", "concurrency_p99"} | null,
      "working_set": {"peak_tokens", "p99_tokens", "peak_bytes", "p99_bytes"} | null,
      "capacity_curve": [{"capacity_tokens", "token_hit_ratio"}, ...] | null,
      "tiers": [{"name", "capacity_tokens", "hit_tokens", "bytes_to_gpu"}, ...] | null
    }

Version 1 also carries `generator`, `capacities`, `reuse`, `cache_per_session`,
`distinct_tokens`, and more figures inside the objects above (docs/profile.md lists them all).
Fields are only ever added within a version; readers ignore what they do not know.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.errors import InputError, UsageError

SCHEMA = "xmemplan.profile"
SCHEMA_VERSION = 1


def read_json(path: Path) -> Any:
    """A JSON document from `path`; InputError naming the file if it cannot be read."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError("no such file", path=path) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a JSON document ({exc})", path=path) from exc


def load_profile(path: Path) -> dict[str, Any]:
    """Read and check a profile; errors name the file and the field."""
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(
            f"not an xmemplan workload profile (schema is not '{SCHEMA}')", path=path,
            field="schema", hint="write one with 'xmemplan hitrate TRACES --profile-out FILE'",
        )
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            f"profile schema version {version!r}; this xmemplan reads version {SCHEMA_VERSION}",
            path=path, field="schema_version",
            hint="regenerate it with this version's 'xmemplan hitrate --profile-out'",
        )
    for key in ("requests", "prompt_tokens", "hit_ratio"):
        if key not in doc:
            raise InputError("missing field", path=path, field=key)
    return doc


def save_profile(path: Path, doc: dict[str, Any]) -> None:
    """Write `doc` with the schema header; NaN and infinities become null (JSON has none)."""
    from xmemplan.render import to_json

    out = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **doc}
    try:
        Path(path).write_text(to_json(out) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"cannot write the profile to '{path}' ({exc.strerror or exc})",
            "pass --profile-out a path in a writable directory",
        ) from exc


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


def build_profile(result: Any, paths: list[Any]) -> dict[str, Any]:
    """The profile of a `hitrate` result (xmemplan.hitrate.HitrateResult); see docs/profile.md."""
    from xmemplan import __version__
    from xmemplan.traces import schema as S
    from xmemplan.workingset import arrival

    s = result.summary
    r = result.replayed
    prompt = r.column(S.PROMPT_TOKENS)
    hit = r.column(S.HIT_TOKENS)
    index = r.column(S.REQUEST_INDEX)
    valid = prompt > 0
    ratio = np.where(valid, hit / np.maximum(prompt, 1), np.nan)
    later = valid & (index >= 1)
    cap = result.capacity

    # An even, deterministic sample of requests in replay order (every k-th).
    n = prompt.size
    take = np.unique(np.linspace(0, n - 1, min(n, SAMPLE_MAX)).round().astype(np.int64))
    take = take if n else np.empty(0, dtype=np.int64)

    arr = arrival(r.column(S.TIMESTAMP_S))
    ws = cap.working_set if cap is not None else None
    if arr is not None:
        arr["concurrency"] = "live sessions (working-set definition, docs/profile.md)"
        arr["concurrency_mean"] = ws["sessions_mean"] if ws else None
        arr["concurrency_p99"] = ws["sessions_p99"] if ws else None
        arr["concurrency_peak"] = ws["sessions_peak"] if ws else None
    later_r = ratio[later]
    return {
        "generator": {"tool": "xmemplan hitrate", "version": __version__},
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
        "requests_sample": {
            "prompt_tokens": prompt[take].tolist(),
            "hit_tokens": hit[take].tolist(),
        },
        "arrival": arr,
        "working_set": ws,
        "capacity_curve": cap.curve if cap is not None else None,
        "capacities": cap.capacities if cap is not None else None,
        "tiers": cap.tiers if cap is not None else None,
        "reuse": cap.reuse if cap is not None else None,
        "cache_per_session": cap.per_session_cache if cap is not None else None,
        "distinct_tokens": cap.distinct_tokens if cap is not None else None,
    }
