"""`validate --aiperf DIR`: judge the planner against AIPerf's per-request TTFT records.

Inputs: the artifact directory of `aiperf profile` (its `profile_export.jsonl`, one record
per request: `metadata.conversation_id`, `metrics.time_to_first_token.value` in ms; format
in research/serving-sim.md 4.4) and the mooncake_trace file it replayed, as written by
`xmemplan export --to aiperf` (rows with their own `session_id`, `block_tokens`).

Each record is matched to its row by `conversation_id` == the row's `session_id`. The hit of
each row is xmemplan's: the radix matcher over the rows' hash_ids in file order (one global
cache, no eviction), whole blocks x block_tokens, at most the prompt. The prediction is
`xmemplan.sizing.model.ttft` for (input_length, hit) on the given model, GPU and tier with
the SGLang calibration (the same function `size` uses, one request alone). Measured TTFT is
AIPerf's: client send to first content token, so it includes HTTP and queueing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.errors import InputError
from xmemplan.units import MAX_PAGE_TOKENS, MAX_PROMPT_TOKENS

CLASS_EDGE = 0.5  # hit ratio separating cold from warm, as in the page replay
RECORD_FILES = ("profile_export.jsonl",)
MAX_TTFT_MS = 86_400_000.0  # a day: a TTFT beyond it is a broken record


@dataclass(frozen=True)
class AiperfOptions:
    directory: Path
    trace: Path
    model: str
    gpu: str
    tier: str = "host-dram-pcie5"
    tolerance: float = 0.15
    catalog_files: tuple[str, ...] = ()
    overlap: str = "layer"
    engine: str = "sglang"


@dataclass
class AiperfRow:
    session_id: str
    prompt_tokens: int
    hit_tokens: int
    ttft_ms: float
    predicted_ttft_ms: float
    client_isl: int | None
    klass: str


@dataclass
class AiperfClass:
    name: str
    requests: int
    ttft_p50_ms: float
    predicted_ttft_p50_ms: float
    error_p50: float
    ttft_p90_ms: float
    predicted_ttft_p90_ms: float
    error_p90: float


@dataclass
class AiperfResult:
    preamble: list[str]
    model: str
    gpu: str
    tier: str
    records: int
    failed_records: int
    tolerance: float
    error: float
    passed: bool
    classes: list[AiperfClass]
    requests: list[AiperfRow]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their line numbers. Read through read_text (a
    FIFO or a device is refused before it is opened; not UTF-8 is named); orjson bounds
    the nesting (1,024 levels, no recursion here) and only the fields used are read, each
    type-checked."""
    import orjson

    from xmemplan.jsonio import read_text

    out = []
    text = read_text(path, "JSONL file")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({str(exc).split(':')[0]})", path=path,
                             line=n) from None
        if not isinstance(obj, dict):
            raise InputError("expected a JSON object", path=path, line=n)
        out.append((n, obj))
    return out


def records_file(directory: Path) -> Path:
    """The per-request export of an AIPerf run (a directory, or the .jsonl itself)."""
    if directory.is_file():
        return directory
    if not directory.is_dir():
        raise InputError("no such AIPerf artifact directory", path=directory)
    for name in RECORD_FILES:
        if (directory / name).is_file():
            return directory / name
    found = sorted(p for p in directory.glob("*.jsonl")
                   if not p.name.endswith("_raw.jsonl") and p.is_file())  # no FIFO: it blocks
    if not found:
        raise InputError("no profile_export.jsonl here", path=directory,
                         hint="run 'aiperf profile' with --export-level records (its default)")
    return found[0]


@dataclass(frozen=True)
class TraceRow:
    session_id: str
    prompt_tokens: int
    hash_ids: np.ndarray
    block_tokens: int


def read_trace(path: Path) -> list[TraceRow]:
    rows = []
    for n, obj in _json_lines(path):
        for key in ("input_length", "hash_ids", "session_id"):
            if key not in obj:
                raise InputError(f"missing '{key}'", path=path, line=n, field=key,
                                 hint="write the trace with 'xmemplan export --to aiperf'")
        ids, length = obj["hash_ids"], obj["input_length"]
        if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
            raise InputError("hash_ids must be a list of integers", path=path, line=n,
                             field="hash_ids")
        if isinstance(length, bool) or not isinstance(length, int) or \
                not 1 <= length <= MAX_PROMPT_TOKENS:
            raise InputError(f"input_length must be a whole number in [1, "
                             f"{MAX_PROMPT_TOKENS:,}]", path=path, line=n, field="input_length")
        block = obj.get("block_tokens", 512)
        if isinstance(block, bool) or not isinstance(block, int) or \
                not 1 <= block <= MAX_PAGE_TOKENS:
            raise InputError("block_tokens must be a positive integer", path=path, line=n,
                             field="block_tokens")
        rows.append(TraceRow(str(obj["session_id"]), length, np.asarray(ids, np.int64), block))
    if not rows:
        raise InputError("the trace has no rows", path=path)
    return rows


def trace_hits(rows: list[TraceRow]) -> np.ndarray:
    """Hit tokens per row: leading blocks already seen (one cache, file order)."""
    from xmemplan.prefix.matcher import match

    keys = np.concatenate([r.hash_ids for r in rows])
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r.hash_ids) for r in rows])
    resets = np.zeros(len(rows), dtype=np.bool_)
    resets[0] = True
    blocks = np.asarray(match(keys, offsets, resets))
    return np.array([min(int(b) * r.block_tokens, r.prompt_tokens)
                     for b, r in zip(blocks, rows)], dtype=np.int64)


def _metric(rec: dict[str, Any], name: str) -> float | None:
    metrics = rec.get("metrics")
    m = metrics.get(name) if isinstance(metrics, dict) else None
    v = m.get("value") if isinstance(m, dict) else None
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _object(rec: dict[str, Any], key: str, path: Path, line: int) -> dict[str, Any]:
    v = rec.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise InputError(f"expected an object, got {type(v).__name__}", path=path, line=line,
                         field=key, hint="pass AIPerf's profile_export.jsonl")
    return v


def judge(opts: AiperfOptions) -> AiperfResult:
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing.model import calibration_for, ttft
    from xmemplan.validate.verdict import rel_error

    cat = load_catalog(list(opts.catalog_files))
    model, gpu, tier = cat.model(opts.model), cat.gpu(opts.gpu), cat.tier(opts.tier)
    cal = calibration_for(cat, opts.engine)
    trace = read_trace(opts.trace)
    by_id = {r.session_id: i for i, r in enumerate(trace)}
    hits = trace_hits(trace)
    path = records_file(opts.directory)
    rows: list[AiperfRow] = []
    failed = unmatched = warmup = impossible = 0
    judged: list[tuple[int, float, float | None]] = []  # trace row, TTFT, client ISL
    for n, rec in _json_lines(path):
        meta = _object(rec, "metadata", path, n)
        _object(rec, "metrics", path, n)
        if meta.get("benchmark_phase", "profiling") != "profiling":
            warmup += 1
            continue
        if rec.get("error") or meta.get("was_cancelled"):
            failed += 1
            continue
        i = by_id.get(str(meta.get("conversation_id")))
        if i is None:
            unmatched += 1
            continue
        got = _metric(rec, "time_to_first_token")
        if got is None:
            raise InputError("record has no time_to_first_token value", path=path, line=n,
                             field="metrics.time_to_first_token",
                             hint="run 'aiperf profile' with --streaming")
        if not 0 < got <= MAX_TTFT_MS:  # a clock that went backwards, a broken record
            impossible += 1
            continue
        isl = _metric(rec, "input_sequence_length")
        judged.append((i, got, isl if isl is not None and 0 < isl <= MAX_PROMPT_TOKENS
                       else None))
    # One vectorized model call for every judged record (was one per record: 200,000
    # records took minutes).
    idx = np.array([i for i, _, _ in judged], dtype=np.int64)
    if len(idx):
        prompts = np.array([trace[i].prompt_tokens for i in idx], dtype=np.float64)
        pred_s = np.broadcast_to(np.asarray(
            ttft(model, gpu, tier, prompts, hits[idx].astype(np.float64),
                 overlap=opts.overlap, calibration=cal).single_s, dtype=np.float64),
            prompts.shape)
        for k, (i, got, isl) in enumerate(judged):
            row = trace[i]
            ratio = hits[i] / row.prompt_tokens
            rows.append(AiperfRow(row.session_id, row.prompt_tokens, int(hits[i]), got,
                                  float(pred_s[k]) * 1e3, int(isl) if isl is not None else None,
                                  "warm" if ratio >= CLASS_EDGE else "cold"))
    if not rows:
        raise InputError("no AIPerf record matches a row of the trace", path=path,
                         field="metadata.conversation_id",
                         hint=f"replay {opts.trace} itself with 'aiperf profile'")
    classes = []
    for name in ("cold", "warm", "all"):
        sel = rows if name == "all" else [r for r in rows if r.klass == name]
        if not sel:
            continue
        m = np.array([r.ttft_ms for r in sel])
        p = np.array([r.predicted_ttft_ms for r in sel])
        # Linear interpolation, as AIPerf's own percentiles (metric_dicts.py).
        m50, p50 = float(np.percentile(m, 50)), float(np.percentile(p, 50))
        m90, p90 = float(np.percentile(m, 90)), float(np.percentile(p, 90))
        classes.append(AiperfClass(name, len(sel), m50, p50, rel_error(m50, p50), m90, p90,
                                   rel_error(m90, p90)))
    errs = [c.error_p50 for c in classes if c.name != "all" and not math.isnan(c.error_p50)]
    error = max(errs, default=0.0)
    notes = []
    if failed:
        notes.append(f"{failed} records were failed or cancelled requests: not judged")
    if unmatched:
        notes.append(f"{unmatched} records name no row of the trace: not judged")
    if warmup:
        notes.append(f"{warmup} warm-up records skipped")
    if impossible:
        notes.append(f"{impossible} records have a TTFT that is not in (0, {MAX_TTFT_MS:,.0f}] "
                     "ms (negative, zero, over a day): not judged")
    drift = [abs(r.client_isl - r.prompt_tokens) / r.prompt_tokens for r in rows
             if r.client_isl is not None]
    if drift:
        notes.append(f"AIPerf's client token counts differ from input_length by "
                     f"{float(np.median(drift)):.1%} at the median (predictions use the "
                     "trace's input_length)")
    preamble = [
        f"validate --aiperf: {len(rows)} of {len(trace)} trace rows measured by AIPerf "
        f"({path})",
        f"predicted by: the planner, {model.name} on {gpu.name}, tier {tier.name}, one "
        f"request alone; hits from the trace's hash_ids (one cache, file order)",
        "verdict covers: TTFT as AIPerf measured it on a live server (p50 per class; "
        "queueing and HTTP included)",
    ]
    return AiperfResult(preamble, model.name, gpu.name, tier.name, len(rows), failed,
                        opts.tolerance, error, error <= opts.tolerance, classes, rows, notes)
