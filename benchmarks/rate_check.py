"""TTFT against Poisson request rate on public runs the project has never used (unseen).

    python benchmarks/rate_check.py [--seeds 5] [--csv data/measurements/rate.csv]

Each row of data/measurements/rate.csv is one published figure (TTFT p50 / p90 / p95 /
p99 / mean, median end-to-end latency in ms, output tokens/s) of one stage of a public
`vllm bench serve` (or `sglang.bench_serving`) rate sweep: Poisson arrivals (burstiness 1)
at `rate` requests/s, `requests` prompts of the run's lengths. The run is replayed through the engine
`xmemplan size` uses (`xmemplan.sizing.engine`, docs/size.md "The simulator") with the
deployment the source states and the shipped calibration (step overheads as `size` reads
them, live: a change to the step-time model shows up here). Nothing is fitted on these
points: every row is a check (docs/validation.md, "Loaded check", "TTFT against Poisson
rate (unseen)").

How a run is replayed:
- `same_prompts` 1: the sweep sends the same prompt set at every rate, one rate after the
  other on one server (the source says so). The stages are run in file order on one
  simulated server, each stage an hour after the previous one began (each is checked to
  have drained first), and request k of a stage shares its whole prompt with request k of
  the stage before: with `prefix_caching` 1 the engine's own block pool decides whether
  those blocks are still cached (vLLM: full 16-token blocks, the last token recomputed).
  `warmup` requests (the first prompts of the set) are sent at the first rate before it;
  `same_prompts` 0: every stage has fresh prompts;
- lengths: uniform in [1, `prompt_max`] / [1, `output_max`] where the client draws them so
  (sglang.bench_serving random at range ratio 0), else the source's means for every
  request (as `xmemplan.sizing.loaded` replays ShareGPT runs: the sources publish no
  percentiles of ShareGPT's lengths, so the TTFT tail a length spread adds is missing);
- arrivals: vllm bench serve's gamma gaps at burstiness 1 (exponential), the first
  request at the stage's start; throughput = output tokens over the span from the stage's
  first request to its last reply, as the client computes it;
- percentiles: numpy's linear percentile over the stage's requests, as both clients do.

Compared per point: TTFT (and end-to-end latency) within 30 %, throughput within 20 %
(issue 19's targets); each prediction is the median over `--seeds` replays. Prints the tally first, then the table;
exits 0 either way (a report, not a gate).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _util import add_async_flag, apply_async_flag, pipe_friendly, positive_int

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "measurements" / "rate.csv"
CATALOG = ROOT / "data" / "measurements" / "rate-models.toml"
TTFT_TOL, THROUGHPUT_TOL = 0.30, 0.20  # issue 19's targets
STAGE_GAP_S = 3600.0
QUANTITIES = {"ttft_p50_ms": 50.0, "ttft_p90_ms": 90.0, "ttft_p95_ms": 95.0,
              "ttft_p99_ms": 99.0, "ttft_mean_ms": -1.0, "e2e_p50_ms": -1.0,
              "out_tok_s": 0.0}
COLUMNS = ("id", "run", "engine", "model", "gpu", "tp", "kv_dtype", "mem_fraction",
           "batched_tokens", "max_num_seqs", "prefix_caching", "prompt_mean",
           "output_mean", "prompt_max", "output_max", "requests", "warmup", "same_prompts", "rate", "quantity",
           "value", "source")


@dataclass(frozen=True)
class Run:
    """One published sweep: the deployment and its load (rates in the order sent)."""

    name: str
    engine: str
    model: str
    gpu: str
    tp: int
    kv_dtype: str | None
    mem_fraction: float | None
    batched_tokens: int
    max_num_seqs: int
    prefix_caching: bool
    prompt_mean: float
    output_mean: float
    prompt_max: int  # > 0: lengths uniform in [1, max] (sglang.bench_serving random)
    output_max: int
    warmup: int
    same_prompts: bool
    stages: tuple[tuple[float, int], ...]  # (rate, requests) in the order sent

    @property
    def rates(self) -> tuple[float, ...]:
        return tuple(r for r, _ in self.stages)


@dataclass(frozen=True)
class Point:
    id: str
    run: str
    rate: float
    quantity: str
    value: float
    source: str


def _bad(path: Path, line: int, fld: str, msg: str) -> Exception:
    from xmemplan.errors import InputError

    return InputError(msg, path=path, line=line, field=fld)


def _num(d: dict[str, str], fld: str, path: Path, line: int, *, optional: bool = False
         ) -> float | None:
    s = (d.get(fld) or "").strip()
    if not s:
        if optional:
            return None
        raise _bad(path, line, fld, f"'{fld}' is missing")
    try:
        v = float(s)
    except ValueError:
        raise _bad(path, line, fld, f"'{fld}' is not a number: {s!r}") from None
    if not math.isfinite(v) or v < 0:
        raise _bad(path, line, fld, f"'{fld}' must be a finite number >= 0, got {s!r}")
    return v


def read(path: Path = DATA) -> tuple[dict[str, Run], list[Point]]:
    """The runs and points of a rate CSV (data/measurements/rate.csv's columns)."""
    from xmemplan.errors import InputError

    try:
        rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the file ({e})", path=path) from None
    if not rows:
        raise InputError("no rows", path=path, hint="columns: " + ", ".join(COLUMNS))
    runs: dict[str, dict[str, object]] = {}
    stages: dict[str, dict[float, int]] = defaultdict(dict)
    points: list[Point] = []
    for i, d in enumerate(rows):
        line = i + 2
        for c in COLUMNS:
            if c not in d:
                raise _bad(path, line, c, f"column '{c}' is missing")
        q = d["quantity"].strip()
        if q not in QUANTITIES:
            raise _bad(path, line, "quantity", f"unknown quantity '{q}' (use "
                       + ", ".join(QUANTITIES) + ")")
        eng = d["engine"].strip()
        if eng not in ("vllm", "sglang"):
            raise _bad(path, line, "engine", f"unknown engine '{eng}' (use vllm or sglang)")
        rate = _num(d, "rate", path, line)
        assert rate is not None
        if rate <= 0:
            raise _bad(path, line, "rate", "'rate' must be > 0 (a Poisson rate)")
        n = _num(d, "requests", path, line)
        assert n is not None
        if n < 1 or n != int(n):
            raise _bad(path, line, "requests", "'requests' must be a whole number >= 1")
        mf = _num(d, "mem_fraction", path, line, optional=True)
        spec: dict[str, object] = dict(
            engine=eng, model=d["model"].strip(), gpu=d["gpu"].strip(),
            tp=int(_num(d, "tp", path, line) or 1),
            kv_dtype=d["kv_dtype"].strip() or None, mem_fraction=mf,
            batched_tokens=int(_num(d, "batched_tokens", path, line, optional=True) or 0),
            max_num_seqs=int(_num(d, "max_num_seqs", path, line, optional=True) or 0),
            prefix_caching=d["prefix_caching"].strip() in ("1", "true", "yes"),
            prompt_mean=_num(d, "prompt_mean", path, line),
            output_mean=_num(d, "output_mean", path, line),
            prompt_max=int(_num(d, "prompt_max", path, line, optional=True) or 0),
            output_max=int(_num(d, "output_max", path, line, optional=True) or 0),
            warmup=int(_num(d, "warmup", path, line, optional=True) or 0),
            same_prompts=d["same_prompts"].strip() in ("1", "true", "yes"))
        name = d["run"].strip()
        if name in runs and runs[name] != spec:
            raise _bad(path, line, "run", f"run '{name}' has another deployment or load "
                       "on an earlier line")
        runs[name] = spec
        if stages[name].setdefault(rate, int(n)) != int(n):
            raise _bad(path, line, "requests", f"run '{name}' has another 'requests' at "
                       f"rate {rate:g} on an earlier line")
        points.append(Point(d["id"].strip(), name, rate, q,
                            float(_num(d, "value", path, line) or 0.0), d["source"]))
    return ({k: Run(name=k, stages=tuple(stages[k].items()), **v)  # type: ignore[arg-type]
             for k, v in runs.items()}, points)


def _setup(run: Run, catalog: Sequence[Path]):  # noqa: ANN202
    from xmemplan.sizing.request import build_request

    req, _ = build_request(
        ttft_slo="10s", prompt_tokens=str(round(run.prompt_mean)), hit_rate=0.0,
        rate=run.rates[0], model=run.model, gpu=run.gpu, engine=run.engine, tp=run.tp,
        kv_dtype=run.kv_dtype, mem_fraction=run.mem_fraction, catalog=catalog)
    return req.setup


def config(run: Run, catalog: Sequence[Path] = (CATALOG,)):  # noqa: ANN201
    """The engine Config `size` builds for the run's deployment (shipped step overheads),
    with the run's batch limits and prefix caching."""
    from xmemplan.sizing.simmodel import config_for

    s = _setup(run, catalog)
    s = dataclasses.replace(s, chunk_tokens=run.batched_tokens or s.chunk_tokens,
                            max_num_seqs=run.max_num_seqs or s.max_num_seqs)
    cfg = config_for(s, replicas=1, nodes=1, load_tier="host", policy=run.engine,
                     prompt_p50=run.prompt_mean, tier_write=False)
    return cfg.replace(prefix_caching=run.prefix_caching)


def simulate(run: Run, seed: int = 0, catalog: Sequence[Path] = (CATALOG,)
             ) -> dict[float, dict[str, float]]:
    """Per rate of the run: the figures of one replay (QUANTITIES' keys)."""
    from xmemplan.sizing.engine import run as run_engine
    from xmemplan.sizing.sim import Traffic
    from xmemplan.sizing.simmodel import requests_for

    cfg = config(run, catalog)
    rng = np.random.default_rng([seed, 19])
    stages = ([(run.rates[0], run.warmup)] if run.warmup else []) + list(run.stages)
    arr, pid, stage = [], [], []
    fresh = 0
    for k, (rate, n) in enumerate(stages):
        t = np.cumsum(rng.exponential(1.0 / rate, n))
        arr.append(k * STAGE_GAP_S + t - t[0])
        pid.append(np.arange(n) if run.same_prompts else np.arange(n) + fresh)
        fresh += n
        stage.append(np.full(n, k))
    arrival, prompt_id, st = np.concatenate(arr), np.concatenate(pid), np.concatenate(stage)
    n = len(arrival)
    prev = np.full(n, -1, np.int64)
    last: dict[int, int] = {}
    for i, p in enumerate(prompt_id.tolist()):  # the latest earlier send of this prompt
        prev[i] = last.get(p, -1)
        last[p] = i
    ids = int(prompt_id.max()) + 1  # one length per prompt (a re-sent prompt keeps it)
    lr = np.random.default_rng([seed, 23])
    plen = (lr.integers(1, run.prompt_max + 1, ids).astype(float) if run.prompt_max
            else np.full(ids, float(round(run.prompt_mean))))
    olen = (lr.integers(1, run.output_max + 1, ids) if run.output_max
            else np.full(ids, max(1, round(run.output_mean))))
    prompt, output = plen[prompt_id], olen[prompt_id].astype(np.int64)
    shared = np.where(prev >= 0, prompt, 0.0)
    tr = Traffic(arrival, prompt, output=output, prev=prev, think=np.zeros(n))
    er = requests_for(tr, shared=shared, tier_tokens=np.zeros(n), tier=-1,
                      block_tokens=cfg.block_tokens)
    r = run_engine(er, cfg)[0]
    out: dict[float, dict[str, float]] = {}
    first = 1 if run.warmup else 0
    for k, (rate, _) in enumerate(stages):
        sel = st == k
        if k + 1 < len(stages) and r.done[sel].max() >= (k + 1) * STAGE_GAP_S:
            raise SystemExit(f"{run.name}: the {rate:g} requests/s stage did not drain "
                             f"within {STAGE_GAP_S:g} s")
        if k < first:
            continue
        ttft = r.ttft[sel] * 1e3
        span = float(r.done[sel].max() - r.arrival[sel].min())
        f = {q: float(np.percentile(ttft, p)) for q, p in QUANTITIES.items() if p > 0}
        f["ttft_mean_ms"] = float(ttft.mean())
        f["e2e_p50_ms"] = float(np.median(r.done[sel] - r.arrival[sel])) * 1e3
        f["out_tok_s"] = float(output[sel].sum()) / span
        f["hbm_hit"] = float(r.hbm_hit[sel].sum() / prompt[sel].sum())
        f["tpot_p50_ms"] = float(np.nanmedian(r.tpot[sel])) * 1e3  # diagnostics
        f["preempt"] = float(np.asarray(r.preemptions)[sel].mean())
        out[rate] = f
    return out


@dataclass
class Row:
    point: Point
    predicted: float
    lo: float
    hi: float

    @property
    def error(self) -> float:
        return self.predicted / self.point.value - 1

    @property
    def bound(self) -> float:
        return THROUGHPUT_TOL if self.point.quantity == "out_tok_s" else TTFT_TOL

    @property
    def within(self) -> bool:
        return abs(self.error) <= self.bound


Simulate = Callable[[Run, int], dict[float, dict[str, float]]]


def rows_for(points: Sequence[Point], runs: dict[str, Run], seeds: int = 5,
             sim: Simulate | None = None) -> list[Row]:
    """Each point with its prediction: the median over `seeds` replays of its run (and
    the range over them)."""
    sim = sim or simulate
    got: dict[str, list[dict[float, dict[str, float]]]] = {}
    for name in dict.fromkeys(p.run for p in points):
        got[name] = [sim(runs[name], s) for s in range(seeds)]
    rows = []
    for p in points:
        v = [g[p.rate][p.quantity] for g in got[p.run]]
        rows.append(Row(p, float(np.median(v)), min(v), max(v)))
    return rows


def _tally(rows: Sequence[Row], pred: Callable[[Row], bool]) -> str:
    sel = [r for r in rows if pred(r)]
    return f"{sum(r.within for r in sel)}/{len(sel)}"


def table(rows: Sequence[Row], seeds: int) -> list[str]:
    """The report: the tally first (within the bounds), then one line per point."""
    def is_ttft(r: Row) -> bool:
        return r.point.quantity.startswith("ttft")

    ok = all(r.within for r in rows)
    ttft = [abs(r.error) for r in rows if is_ttft(r)]
    out = [f"{'PASS' if ok else 'FAIL'}: TTFT within {TTFT_TOL:.0%} at "
           f"{_tally(rows, is_ttft)} unseen points (p50 "
           f"{_tally(rows, lambda r: r.point.quantity == 'ttft_p50_ms')}); "
           f"tok/s {THROUGHPUT_TOL:.0%}: "
           f"{_tally(rows, lambda r: r.point.quantity == 'out_tok_s')}",
           (f"median |TTFT error| {float(np.median(ttft)):.0%}" if ttft else "no TTFT point")
           + (f"; e2e p50 within {TTFT_TOL:.0%} at "
              f"{_tally(rows, lambda r: r.point.quantity == 'e2e_p50_ms')}"
              if any(r.point.quantity == "e2e_p50_ms" for r in rows) else ""),
           f"{'run':16} {'req/s':>5} {'figure':9} {'measured':>8} {'pred':>8} "
           f"{'err':>5} {'over seeds':>12}"]
    for r in rows:
        p = r.point
        fig = ("tok/s" if p.quantity == "out_tok_s" else
               p.quantity.replace("_ms", "").replace("ttft_", "TTFT ").replace("_", " "))
        out.append(f"{p.run[:16]:16} {p.rate:5.2f} {fig:9} {p.value:8,.1f} "
                   f"{r.predicted:8,.1f} {r.error:+5.0%} {r.lo / p.value - 1:+5.0%}.."
                   f"{r.hi / p.value - 1:+5.0%}" + ("" if r.within else " outside"))
    out.append(f"(medians of {seeds} replays; nothing fitted on these points)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=positive_int, default=5, help="replays per run (median used)")
    ap.add_argument("--csv", type=Path, default=DATA)
    add_async_flag(ap)
    a = ap.parse_args()
    apply_async_flag(a)
    from xmemplan.errors import XmemplanError

    try:
        runs, points = read(a.csv)
        rows = rows_for(points, runs, a.seeds)
    except XmemplanError as e:
        raise SystemExit(f"rate_check: {e}") from None
    for line in table(rows, a.seeds):
        print(line)
    for name, run in runs.items():
        c = config(run)
        hit = simulate(run, 0)
        print(f"{name}: {run.engine} {run.model}, {run.gpu} TP{run.tp}: pool "
              f"{c.blocks * c.block_tokens:,} tokens")
        print(f"  step overheads {c.base_s * 1e3:.3g} ms + {c.per_token_s * 1e6:.3g} "
              f"us/token + {c.per_seq_s * 1e6:.3g} us/request")
        print("  prompt tokens hit in HBM by rate (seed 0): "
              + " ".join(f"{hit[r]['hbm_hit']:.0%}" for r in run.rates))

if __name__ == "__main__":
    pipe_friendly()
    main()
