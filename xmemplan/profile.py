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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xmemplan.errors import InputError

SCHEMA = "xmemplan.profile"
SCHEMA_VERSION = 1


def load_profile(path: Path) -> dict[str, Any]:
    """Read and check a profile; errors name the file and the field."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError("no such file", path=path) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a JSON document ({exc})", path=path) from exc
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
    out = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **doc}
    Path(path).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
