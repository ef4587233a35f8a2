"""Loaded runs from benchmark artifacts for `xmemplan calibrate --loaded`: an AIPerf artifact
folder (read as `validate --aiperf` reads it), a `vllm bench serve` result JSON or a CSV
(xmemplan.sizing.loaded)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from xmemplan.errors import InputError
from xmemplan.sizing.loaded import MAX_REQUESTS, Deployment, Point, Run, bad_field, need_model
from xmemplan.sizing.loaded import read_loaded as _read_file


def read_aiperf(path: Path, dep: Deployment) -> list[Point]:
    """Points from an AIPerf artifact folder (its per-request profile_export.jsonl, as
    `validate --aiperf` reads it): each request's send time (metadata.request_start_ns),
    input and output lengths, TTFT and request latency; the run is replayed with those
    send times and lengths. Figures: TTFT p50/p90, TPOT p50 ((latency - TTFT) /
    (output - 1)), output tokens/s and requests/s from the first send to the last end."""
    from xmemplan.validate.aiperf import _json_lines, _metric, _object, records_file

    model, gpu = need_model(dep, path)
    f = records_file(path)
    starts, ttft, lat, isl, osl = [], [], [], [], []
    for n, rec in _json_lines(f):
        if rec.get("error") is not None:
            continue
        meta = _object(rec, "metadata", f, n)
        _object(rec, "metrics", f, n)
        t0 = meta.get("request_start_ns")
        if isinstance(t0, bool) or not isinstance(t0, int | float):
            raise bad_field(f, n, "metadata.request_start_ns", "missing or not a number",
                       "pass AIPerf's profile_export.jsonl (--export-level records)")
        vals = {k: _metric(rec, k) for k in ("time_to_first_token", "request_latency",
                                             "input_sequence_length",
                                             "output_sequence_length")}
        for k, v in vals.items():
            if v is None or v < 0 or (k != "time_to_first_token" and v == 0):
                raise bad_field(f, n, f"metrics.{k}", "missing, not a number or out of range",
                           "pass AIPerf's profile_export.jsonl (--export-level records)")
        starts.append(float(t0) / 1e9)
        ttft.append(vals["time_to_first_token"])
        lat.append(vals["request_latency"])
        isl.append(int(vals["input_sequence_length"] or 1))
        osl.append(int(vals["output_sequence_length"] or 1))
    if len(starts) < 2:
        raise InputError(f"{len(starts)} successful request record(s): a loaded run needs "
                         "more", path=f)
    if len(starts) > MAX_REQUESTS:
        raise InputError(f"{len(starts):,} requests, more than {MAX_REQUESTS:,} per run",
                         path=f)
    o = np.argsort(starts, kind="stable")
    st = np.asarray(starts)[o] - min(starts)
    tt, la = np.asarray(ttft, float)[o], np.asarray(lat, float)[o]
    ii, oo = np.asarray(isl)[o], np.asarray(osl)[o]
    run = Run(engine=dep.engine, model=model, gpu=gpu, tp=dep.tp,
              dp_attention=dep.dp_attention, kv_dtype=dep.kv_dtype,
              mem_fraction=dep.mem_fraction, prompt_tokens=int(np.median(ii)),
              output_tokens=int(np.median(oo)), requests=len(st),
              prompts=tuple(int(x) for x in ii), outputs=tuple(int(x) for x in oo),
              arrivals=tuple(float(x) for x in st))
    span = float(np.max(st + la / 1e3))
    multi = oo > 1
    tpot = (la[multi] - tt[multi]) / (oo[multi] - 1)
    figs = [("ttft_p50_ms", float(np.percentile(tt, 50))),
            ("ttft_p90_ms", float(np.percentile(tt, 90))),
            ("out_tok_s", float(oo.sum()) / span if span > 0 else math.nan)]
    if tpot.size:
        figs.insert(2, ("tpot_p50_ms", float(np.median(tpot))))
    name = path.name or str(path)
    return [Point(id=f"{name}:{q}", run=run, quantity=q, value=v, source=f"{f}",
                  where=str(f)) for q, v in figs if math.isfinite(v) and v > 0]


def read_loaded(path: Path | str, dep: Deployment | None = None) -> list[Point]:
    """Points from an AIPerf artifact folder (or its profile_export.jsonl), a
    `vllm bench serve` result JSON or a loaded-run CSV, by what the path is."""
    p = Path(path)
    dep = dep or Deployment()
    if p.is_dir() or p.suffix == ".jsonl":
        return read_aiperf(p, dep)
    return _read_file(p, dep)
