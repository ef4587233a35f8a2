"""The plan: what `xmemplan size --format json` writes and `validate --plan` reads.

A versioned JSON document (`schema: "xmemplan.plan"`). `size` writes the whole result, with
this header; `load_plan` is the one reader and checks the fields `validate` uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmemplan.errors import InputError
from xmemplan.jsonio import read_json

SCHEMA = "xmemplan.plan"
SCHEMA_VERSION = 1
READS_VERSIONS = (1,)


def header() -> dict[str, Any]:
    """The keys every plan document starts with."""
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION}


@dataclass(frozen=True)
class Plan:
    """The fields of a plan that `validate` replays and checks."""

    path: Path | None
    model: str
    gpu: str
    prompt_tokens_p50: float
    hit_ratio: float
    concurrency: int | None
    recommended_nodes: int | None
    kv_dtype_bytes: int | None = None  # 1: FP8 KV (size --kv-dtype fp8); None: the model's
    shape: str | None = None  # deployment shape label (tp1, tp4 ep4, ...)
    claims: PlanClaims | None = None  # what validate replays (None: a plan without them)


@dataclass(frozen=True)
class PlanClaims:
    """The decision a plan makes, as `size` wrote it (`claims` in the document)."""

    option: str  # hbm-only | host-dram | xmem
    gpus: int
    nodes: int  # X-Mem nodes bought (0 unless option is xmem)
    tp: int
    dp_attention: bool
    tier: str | None
    load_bandwidth_per_gpu_bytes_per_s: float | None  # at gpus / nodes GPUs per node

    @property
    def gpus_per_node(self) -> int | None:
        return -(-self.gpus // self.nodes) if self.nodes else None


def plan_from_doc(doc: Any, path: Path | None = None) -> Plan:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(
            f"not an xmemplan plan (schema is not '{SCHEMA}')", path=path, field="schema",
            hint="write one with 'xmemplan size --format json > plan.json'",
        )
    if doc.get("schema_version") not in READS_VERSIONS:
        raise InputError(
            f"plan schema version {doc.get('schema_version')!r}; this xmemplan reads "
            f"{', '.join(map(str, READS_VERSIONS))}", path=path, field="schema_version",
            hint="write it again with this version's 'xmemplan size --format json'",
        )
    for name in ("model", "gpu"):
        if not isinstance(doc.get(name), str) or not doc[name]:
            raise InputError("missing or not a name", path=path, field=name)

    def number(name: str, lo: float, hi: float) -> float:
        v = doc.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InputError(f"missing or not a finite number ({v!r})", path=path, field=name)
        if not lo <= v <= hi:
            raise InputError(f"{v!r} is outside the allowed range [{lo:g}, {hi:g}]",
                             path=path, field=name)
        return float(v)

    conc = doc.get("concurrency")
    nodes = doc.get("recommended_nodes")
    kvb = doc.get("kv_dtype_bytes")
    if kvb is not None and (isinstance(kvb, bool) or kvb not in (1, 2)):
        raise InputError(f"{kvb!r} is not a KV element size", path=path,
                         field="kv_dtype_bytes", hint="1 (fp8) or 2 (bf16/fp16)")
    shape = doc.get("shape")
    claims = _claims(doc.get("claims"), path)
    return Plan(
        path=path,
        model=doc["model"],
        gpu=doc["gpu"],
        prompt_tokens_p50=number("prompt_tokens_p50", 1, 1e9),
        hit_ratio=number("hit_ratio", 0, 1),
        concurrency=conc if isinstance(conc, int) and not isinstance(conc, bool) and conc > 0
        else None,
        recommended_nodes=nodes if isinstance(nodes, int) and not isinstance(nodes, bool)
        else None,
        kv_dtype_bytes=kvb,
        shape=shape if isinstance(shape, str) and shape else None,
        claims=claims,
    )


def _claims(c: Any, path: Path | None) -> PlanClaims | None:
    """The `claims` object, checked field by field (absent: None, an older plan)."""
    if c is None:
        return None
    if not isinstance(c, dict):
        raise InputError("not an object", path=path, field="claims")

    def integer(name: str, lo: int) -> int:
        v = c.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise InputError(f"{v!r} is not a whole number of {lo} or more", path=path,
                             field=f"claims.{name}")
        return v

    option = c.get("option")
    if option not in ("hbm-only", "host-dram", "xmem"):
        raise InputError(f"{option!r} is not an option", path=path, field="claims.option",
                         hint="hbm-only, host-dram or xmem")
    bw = c.get("load_bandwidth_per_gpu_bytes_per_s")
    if bw is not None and (isinstance(bw, bool) or not isinstance(bw, int | float)
                           or not math.isfinite(bw) or bw <= 0):
        raise InputError(f"{bw!r} is not a positive bandwidth", path=path,
                         field="claims.load_bandwidth_per_gpu_bytes_per_s")
    tier = c.get("tier")
    return PlanClaims(option=option, gpus=integer("gpus", 1), nodes=integer("nodes", 0),
                      tp=integer("tp", 1), dp_attention=bool(c.get("dp_attention")),
                      tier=tier if isinstance(tier, str) and tier else None,
                      load_bandwidth_per_gpu_bytes_per_s=None if bw is None else float(bw))


def load_plan(path: Path) -> Plan:
    return plan_from_doc(read_json(path), Path(path))
