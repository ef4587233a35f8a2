"""Fit the simulated engine's step overheads to loaded measurements (docs/model.md section 6).

A loaded run is a benchmark of one deployment under load: prompts and outputs of given mean
lengths, sent at a Poisson rate (`rate`), all at once (`rate` inf) or by `concurrency`
closed-loop clients (vllm bench serve / sglang.bench_serving `--max-concurrency`). Each
point is one figure of a run (TTFT p50/p90, TPOT p50, output tokens/s, requests/s).

Its prediction is the engine's own: the run is replayed through `xmemplan.sizing.engine`
(the same simulator `size` runs, its step-time function `steptime.py` included), with the
engine's three overheads per step (base_s), per scheduled token (per_token_s) and per
scheduled request (per_seq_s). The fit is a least squares on log(predicted / measured) over
the `fit` points of one engine (Gauss-Newton, finite-difference Jacobian of the simulated
figures, constants kept >= 0). Leave-one-out: from the fitted constants, one Gauss-Newton
step on the other fitted points (the refit linearised at the optimum), then the left-out
point re-simulated. `held-out` points are never fitted and are reported apart.

Public runs: data/measurements/loaded.csv (every row with its source).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.catalog.loader import data_dir
from xmemplan.errors import InputError

ENGINES = ("vllm", "sglang")
QUANTITIES = ("ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "e2e_p50_ms", "out_tok_s",
              "req_s")
# fit: sets the constants; held-out: every third non-excluded row per engine (a rule), never
# fitted; check: a row the rule left in the fit, taken out of it for a stated reason and
# scored apart (the online server's TTFT: docs/model.md section 6); excluded: recorded only
ROLES = ("fit", "held-out", "check", "excluded")
SCORED = ("fit", "held-out", "check")
CONSTANTS = ("base_s", "per_token_s", "per_seq_s")
# finite-difference steps (seconds): a fraction of a typical decode step's overheads
STEPS = {"base_s": 2e-4, "per_token_s": 2e-7, "per_seq_s": 2e-6}
# typical sizes: the other starts of the least squares (a millisecond per step, 0.1 us
# per token, 100 us per request)
START = {"base_s": 1e-3, "per_token_s": 1e-7, "per_seq_s": 1e-4}
MAX_REQUESTS = 20_000  # per simulated run
COLUMNS = ("id", "engine", "model", "gpu", "tp", "prompt_tokens", "output_tokens",
           "requests", "rate", "quantity", "value")


@dataclass(frozen=True)
class Run:
    """One benchmark run: the deployment and its load."""

    engine: str
    model: str
    gpu: str
    tp: int = 1
    dp_attention: bool = False
    kv_dtype: str | None = None
    mem_fraction: float | None = None
    prompt_tokens: int = 1024
    output_tokens: int = 128
    requests: int = 1000
    rate: float = math.inf  # requests/s (Poisson); inf: all at t = 0 or closed loop
    concurrency: int = 0  # > 0: that many closed-loop clients
    burstiness: float = 1.0  # gamma-distributed gaps of this shape (vllm bench serve)
    # per-request lengths and send times (s) as recorded (an AIPerf run); None: the means
    # > 0: lengths drawn uniform in [1, max] (sglang.bench_serving random, range ratio 0)
    prompt_max: int = 0
    output_max: int = 0
    prompts: tuple[int, ...] | None = None
    outputs: tuple[int, ...] | None = None
    arrivals: tuple[float, ...] | None = None
    # the engine's async scheduling (docs/size.md "The simulator"); None: as `size` ships
    # it; False for engine versions before it (vLLM V0, SGLang before v0.4)
    async_schedule: bool | None = None


@dataclass(frozen=True)
class Point:
    """One measured figure of a run."""

    id: str
    run: Run
    quantity: str
    value: float
    role: str = "fit"
    source: str = ""
    where: str = ""


@dataclass
class Overheads:
    base_s: float = 0.0
    per_token_s: float = 0.0
    per_seq_s: float = 0.0

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.base_s, self.per_token_s, self.per_seq_s)


# --- reading -------------------------------------------------------------------------------

def bad_field(path: Path, line: int | None, fld: str, msg: str, hint: str | None = None
         ) -> InputError:
    return InputError(msg, path=path, line=line, field=fld, hint=hint)


def _num(raw: Any, fld: str, path: Path, line: int | None, *, lo: float = 0.0,
         lo_open: bool = True, integer: bool = False, inf_ok: bool = False) -> float:
    s = str(raw).strip() if raw is not None else ""
    if s == "":
        raise bad_field(path, line, fld, f"'{fld}' is missing")
    try:
        v = float(s)
    except ValueError:
        raise bad_field(path, line, fld, f"'{fld}' is not a number: {s!r}") from None
    if math.isnan(v) or (math.isinf(v) and not (inf_ok and v > 0)):
        raise bad_field(path, line, fld, f"'{fld}' must be a finite number, got {s!r}")
    if v < lo or (lo_open and v == lo):
        raise bad_field(path, line, fld, f"'{fld}' must be {'>' if lo_open else '>='} {lo:g}, "
                   f"got {s!r}")
    if integer and math.isfinite(v) and v != int(v):
        raise bad_field(path, line, fld, f"'{fld}' must be a whole number, got {s!r}")
    return v


def _opt_int(raw: Any, fld: str, path: Path, line: int | None) -> int:
    if raw in (None, ""):
        return 0
    return int(_num(raw, fld, path, line, integer=True))


def point_from_row(d: dict[str, Any], path: Path, line: int | None) -> Point:
    """A point from one CSV row (columns as data/measurements/loaded.csv)."""
    for c in COLUMNS:
        if c not in d or d[c] is None:
            raise bad_field(path, line, c, f"column '{c}' is missing",
                       "columns: " + ", ".join(COLUMNS) + " (docs/model.md section 6)")
    eng = str(d["engine"]).strip().lower()
    if eng not in ENGINES:
        raise bad_field(path, line, "engine", f"unknown engine '{d['engine']}'",
                        "use vllm or sglang")
    q = str(d["quantity"]).strip()
    if q not in QUANTITIES:
        raise bad_field(path, line, "quantity", f"unknown quantity '{q}'",
                   "use " + ", ".join(QUANTITIES))
    role = str(d.get("role") or "fit").strip()
    if role not in ROLES:
        raise bad_field(path, line, "role", f"unknown role '{role}'", "use " + ", ".join(ROLES))
    mf = d.get("mem_fraction")
    kv = str(d.get("kv_dtype") or "").strip() or None
    asy = str(d.get("async_schedule") or "").strip().lower()
    if asy not in ("", "0", "1"):
        raise bad_field(path, line, "async_schedule", f"'async_schedule' must be 0, 1 or "
                        f"empty, got {asy!r}", "empty: as size ships it")
    conc = d.get("concurrency")
    run = Run(
        engine=eng, model=str(d["model"]).strip(), gpu=str(d["gpu"]).strip(),
        tp=int(_num(d["tp"], "tp", path, line, integer=True)),
        dp_attention=str(d.get("dp_attention") or "0").strip().lower() in ("1", "true", "yes"),
        kv_dtype=kv,
        mem_fraction=None if mf in (None, "") else _num(mf, "mem_fraction", path, line),
        prompt_tokens=int(round(_num(d["prompt_tokens"], "prompt_tokens", path, line))),
        output_tokens=int(round(_num(d["output_tokens"], "output_tokens", path, line))),
        requests=int(_num(d["requests"], "requests", path, line, integer=True)),
        rate=_num(d["rate"], "rate", path, line, inf_ok=True),
        prompt_max=_opt_int(d.get("prompt_max"), "prompt_max", path, line),
        output_max=_opt_int(d.get("output_max"), "output_max", path, line),
        concurrency=0 if conc in (None, "") else int(_num(conc, "concurrency", path, line,
                                                             lo_open=False, integer=True)),
        async_schedule=None if asy == "" else asy == "1")
    if mf not in (None, "") and run.mem_fraction is not None and run.mem_fraction > 1:
        raise bad_field(path, line, "mem_fraction", f"'mem_fraction' must be at most 1, got {mf!r}")
    if run.requests > MAX_REQUESTS:
        raise bad_field(path, line, "requests", f"'requests' {run.requests:,} is more than "
                   f"{MAX_REQUESTS:,} per run")
    if run.concurrency and math.isfinite(run.rate):
        raise bad_field(path, line, "concurrency", "give a rate or a concurrency, not both",
                   "rate inf with concurrency N: N closed-loop clients")
    return Point(id=str(d["id"]).strip() or f"{path.name}:{line}", run=run, quantity=q,
                 value=_num(d["value"], "value", path, line), role=role,
                 source=str(d.get("source") or ""), where=f"{path}:{line}")


def read_points(path: Path | str) -> list[Point]:
    """Points from a CSV file (data/measurements/loaded.csv's columns)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the file ({e})", path=p) from None
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise InputError("no rows", path=p, hint="columns: " + ", ".join(COLUMNS))
    return [point_from_row(d, p, i + 2) for i, d in enumerate(rows)]


@dataclass(frozen=True)
class Deployment:
    """What a benchmark result file does not say: the engine, model, GPU and TP degree
    it ran on (`xmemplan calibrate --loaded` flags)."""

    engine: str = "vllm"
    model: str | None = None
    gpu: str | None = None
    tp: int = 1
    dp_attention: bool = False
    kv_dtype: str | None = None
    mem_fraction: float | None = None


def need_model(d: Deployment, path: Path) -> tuple[str, str]:
    if not d.model or not d.gpu:
        raise InputError("a benchmark result does not name the model and GPU it ran on",
                         path=path, hint="give --model and --gpu (catalog names) with --loaded")
    return d.model, d.gpu


def _json_num(doc: dict[str, Any], key: str, path: Path, *, required: bool = True,
              lo: float = 0.0, lo_open: bool = True, inf_ok: bool = False) -> float | None:
    if key not in doc or doc[key] is None:
        if required:
            raise bad_field(path, None, key, f"field '{key}' is missing",
                       "pass the JSON `vllm bench serve --save-result` writes")
        return None
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise bad_field(path, None, key, f"field '{key}' is not a number: {v!r}")
    return _num(v, key, path, None, lo=lo, lo_open=lo_open, inf_ok=inf_ok)


VLLM_FIELDS = (("median_ttft_ms", "ttft_p50_ms"), ("p90_ttft_ms", "ttft_p90_ms"),
               ("median_tpot_ms", "tpot_p50_ms"), ("output_throughput", "out_tok_s"))


def read_vllm_bench(path: Path, dep: Deployment) -> list[Point]:
    """Points from a `vllm bench serve --save-result` JSON: its traffic (num_prompts,
    request_rate, burstiness, max_concurrency), mean lengths (total_input_tokens,
    total_output_tokens over completed) and its median TTFT, p90 TTFT (where the
    percentiles asked for it), median TPOT and output throughput."""
    from xmemplan.jsonio import read_text

    text = read_text(path, "vllm bench serve result")
    try:
        import orjson

        doc = orjson.loads(text)
    except Exception as e:  # noqa: BLE001 (orjson's error type, any malformed input)
        raise InputError(f"not valid JSON ({str(e).split(':')[0]})", path=path) from None
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object (a vllm bench serve result)", path=path)
    model, gpu = need_model(dep, path)
    done = _json_num(doc, "completed", path)
    tin = _json_num(doc, "total_input_tokens", path)
    tout = _json_num(doc, "total_output_tokens", path)
    assert done is not None and tin is not None and tout is not None
    if done != int(done) or done > MAX_REQUESTS:
        raise bad_field(path, None, "completed", f"'completed' must be a whole number up to "
                   f"{MAX_REQUESTS:,}, got {doc['completed']!r}")
    rate = _json_num(doc, "request_rate", path, inf_ok=True)
    burst = _json_num(doc, "burstiness", path, required=False) or 1.0
    conc = doc.get("max_concurrency")
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
        raise bad_field(path, None, "max_concurrency",
                   f"'max_concurrency' must be null or a positive integer, got {conc!r}")
    assert rate is not None
    run = Run(engine=dep.engine, model=model, gpu=gpu, tp=dep.tp,
              dp_attention=dep.dp_attention, kv_dtype=dep.kv_dtype,
              mem_fraction=dep.mem_fraction, prompt_tokens=max(1, round(tin / done)),
              output_tokens=max(1, round(tout / done)), requests=int(done),
              rate=rate if not conc else math.inf, concurrency=int(conc or 0),
              burstiness=burst)
    pts = []
    for key, q in VLLM_FIELDS:
        v = _json_num(doc, key, path, required=False)
        if v is not None:
            pts.append(Point(id=f"{path.stem}:{q}", run=run, quantity=q, value=v,
                             source=f"{path} {key}", where=str(path)))
    if not pts:
        raise bad_field(path, None, "median_ttft_ms", "no measured figure (median_ttft_ms, "
                   "median_tpot_ms, output_throughput) in the file")
    return pts


def read_loaded(path: Path | str, dep: Deployment | None = None) -> list[Point]:
    """Points from a loaded-run CSV or a `vllm bench serve` result JSON (an AIPerf
    artifact folder: xmemplan.validate.loadedruns.read_loaded)."""
    p = Path(path)
    dep = dep or Deployment()
    if not p.exists():
        raise InputError("no such file or directory", path=p)
    if p.suffix.lower() == ".json":
        return read_vllm_bench(p, dep)
    return read_points(p)


def public_path() -> Path:
    return data_dir() / "measurements" / "loaded.csv"


def public_points() -> list[Point]:
    return read_points(public_path())


# --- simulating ----------------------------------------------------------------------------

@dataclass
class Simulator:
    """Replays runs through the engine; caches each (run, overheads) result."""

    catalog: Sequence[Path] = ()
    seed: int = 0
    cache: dict[tuple[Run, tuple[float, float, float]], dict[str, float]] = field(
        default_factory=dict)
    setups: dict[Run, Any] = field(default_factory=dict)
    calls: int = 0

    def setup(self, run: Run) -> Any:
        if run not in self.setups:
            from xmemplan.sizing.request import build_request

            req, _ = build_request(
                ttft_slo="10s", prompt_tokens=str(run.prompt_tokens), hit_rate=0.0, rate=1.0,
                model=run.model, gpu=run.gpu, engine=run.engine, tp=run.tp,
                dp_attention=run.dp_attention, kv_dtype=run.kv_dtype,
                mem_fraction=run.mem_fraction, catalog=self.catalog)
            self.setups[run] = req.setup
        return self.setups[run]

    def figures(self, run: Run, ov: tuple[float, float, float]) -> dict[str, float]:
        key = (run, (float(ov[0]), float(ov[1]), float(ov[2])))
        if key not in self.cache:
            self.cache[key] = simulate(run, self.setup(run), key[1], seed=self.seed)
            self.calls += 1
        return self.cache[key]

    def predict(self, p: Point, ov: tuple[float, float, float]) -> float:
        return self.figures(p.run, ov)[p.quantity]


def config(run: Run, setup: Any, ov: tuple[float, float, float]) -> Any:
    """The engine Config `size` would build for this deployment, with overheads `ov`."""
    from xmemplan.sizing.simmodel import config_for

    cfg = config_for(setup, replicas=1, nodes=1, load_tier="host", policy=run.engine,
                     prompt_p50=float(run.prompt_tokens), tier_write=False, overheads=ov)
    if run.async_schedule is not None:
        cfg = cfg.replace(async_schedule=run.async_schedule)
    return cfg.replace(prefix_caching=False)  # benchmark prompts share no prefix


def replay(run: Run, setup: Any, ov: tuple[float, float, float], *, seed: int = 0) -> Any:
    """The engine's Result for the run (arrivals: recorded, Poisson/gamma at `rate`, all at
    t = 0, or `concurrency` closed-loop clients that send again when a reply ends)."""
    from xmemplan.sizing.engine import run as run_engine
    from xmemplan.sizing.sim import Traffic
    from xmemplan.sizing.simmodel import requests_for

    n = run.requests
    rng = np.random.default_rng(seed)
    prompt = (np.asarray(run.prompts, float) if run.prompts is not None
              else rng.integers(1, run.prompt_max + 1, n).astype(float) if run.prompt_max
              else np.full(n, float(run.prompt_tokens)))
    output = (np.asarray(run.outputs, np.int64) if run.outputs is not None
              else rng.integers(1, run.output_max + 1, n).astype(np.int64) if run.output_max
              else np.full(n, int(run.output_tokens), np.int64))
    prev = think = None
    if run.arrivals is not None and run.concurrency <= 0:
        arrival = np.asarray(run.arrivals, float)
    elif run.concurrency > 0:
        arrival = np.zeros(n)
        prev = np.arange(n, dtype=np.int64) - run.concurrency
        prev[prev < 0] = -1
        think = np.zeros(n)
    elif math.isinf(run.rate):
        arrival = np.zeros(n)
    else:
        b = run.burstiness  # vllm bench serve: gamma gaps, shape b, mean 1 / rate
        arrival = np.cumsum(rng.gamma(b, 1.0 / (run.rate * b), n))
        arrival -= arrival[0]
    cfg = config(run, setup, ov)
    tr = Traffic(arrival, prompt, output=output, prev=prev, think=think)
    er = requests_for(tr, shared=np.zeros(n), tier_tokens=np.zeros(n), tier=-1,
                      block_tokens=cfg.block_tokens)
    return run_engine(er, cfg)[0]


def simulate(run: Run, setup: Any, ov: tuple[float, float, float], *, seed: int = 0
             ) -> dict[str, float]:
    """The run's figures as the engine gives them (all requests counted, as the benchmark
    clients do): TTFT p50/p90 and TPOT p50 in ms, output tokens/s and requests/s over the
    span from the first arrival to the last completion."""
    r = replay(run, setup, ov, seed=seed)
    output = r.requests.output
    n = len(output)
    ttft = r.ttft * 1e3
    tpot = r.tpot * 1e3
    span = float(np.max(r.done) - np.min(r.arrival))
    tpot_ok = tpot[np.isfinite(tpot)]
    return {"ttft_p50_ms": float(np.percentile(ttft, 50)),
            "ttft_p90_ms": float(np.percentile(ttft, 90)),
            "tpot_p50_ms": float(np.median(tpot_ok)) if tpot_ok.size else math.nan,
            "out_tok_s": float(output.sum()) / span if span > 0 else math.nan,
            "req_s": n / span if span > 0 else math.nan,
            "e2e_p50_ms": float(np.median(r.done - r.arrival)) * 1e3,
            "preemptions_per_request": r.preemptions_per_request(),
            "kv_usage": r.kv_usage()}


# --- fitting -------------------------------------------------------------------------------

@dataclass
class Fit:
    engine: str
    constants: dict[str, float]
    fitted: list[str]  # the constants the points pinned (others kept at their start)
    points: list[Point]
    predicted: dict[str, float]
    loo: dict[str, float]
    notes: list[str]
    simulations: int = 0

    def errors(self, role: str | None = None) -> list[tuple[Point, float, float]]:
        """(point, error, LOO error) of the scored points (not `excluded`)."""
        out = []
        for p in self.points:
            if p.role == "excluded" or (role is not None and p.role != role):
                continue
            e = self.predicted[p.id] / p.value - 1
            lo = self.loo.get(p.id, math.nan)
            out.append((p, e, lo / p.value - 1 if math.isfinite(lo) else math.nan))
        return out


def _residuals(pts: Sequence[Point], sim: Simulator, ov: tuple[float, float, float]
               ) -> np.ndarray:
    return np.array([math.log(max(sim.predict(p, ov), 1e-12) / p.value) for p in pts])


def _vec(names: Sequence[str], x: np.ndarray, base: tuple[float, float, float]
         ) -> tuple[float, float, float]:
    v = list(base)
    for n, xi in zip(names, x, strict=True):
        v[CONSTANTS.index(n)] = max(0.0, float(xi))
    return (v[0], v[1], v[2])


def _jacobian(pts: Sequence[Point], sim: Simulator, names: Sequence[str], x: np.ndarray,
              base: tuple[float, float, float], r0: np.ndarray, scale: float = 1.0
              ) -> np.ndarray:
    J = np.zeros((len(pts), len(names)))
    for k, n in enumerate(names):
        dx = x.copy()
        h = STEPS[n] * scale
        dx[k] += h
        J[:, k] = (_residuals(pts, sim, _vec(names, dx, base)) - r0) / h
    return J


def _gn_step(J: np.ndarray, r: np.ndarray, lam: float) -> np.ndarray:
    scale = np.sqrt((J * J).sum(axis=0)) + 1e-30
    Js = J / scale
    A = Js.T @ Js + lam * np.eye(J.shape[1])
    return np.asarray(-np.linalg.solve(A, Js.T @ r) / scale)


def _pinned(J: np.ndarray, names: list[str]) -> list[str]:
    """The constants the points pin (J's columns are `names`): drop a constant with no
    effect, then, while the design is near-singular, the one with the largest share in the
    smallest singular direction."""
    names, cols = list(names), list(range(len(names)))
    while names:
        sub = J[:, cols]
        norms = np.sqrt((sub * sub).sum(axis=0))
        if np.any(norms < 1e-9):
            k = int(np.argmin(norms))
        else:
            sv, vt = np.linalg.svd(sub / norms, full_matrices=False)[1:]
            if sv[-1] / sv[0] > 1e-3:
                return names
            k = int(np.argmax(np.abs(vt[-1])))
        names.pop(k)
        cols.pop(k)
    return names


def _ss(pts: Sequence[Point], sim: Simulator, names: Sequence[str], x: np.ndarray,
        base: tuple[float, float, float]) -> float:
    r = _residuals(pts, sim, _vec(names, x, base))
    return float(r @ r)


def t0_cap(pts: Sequence[Point], sim: Simulator) -> float:
    """The smallest single-request t0 (fixed overhead) among the points' replays: the most
    a step's base and per-request overheads may add up to."""
    return min((sim.setup(p.run).calibration.fixed_overhead_s for p in pts),
               default=math.inf)


def _search(pts: Sequence[Point], sim: Simulator, names: Sequence[str],
            base: tuple[float, float, float], *, progress: Callable[[str], None] | None,
            engine: str, iterations: int, cap: float = math.inf) -> np.ndarray:
    """The least squares: the simulated figures move in jumps (whole steps, and queues
    past saturation), so a derivative-free search. A coarse grid (each constant at 0, 0.3,
    1 and 3 times its typical size START), then a compass search from the best point
    (each constant up and down by a step, the step halved when neither helps, down to 1 %
    of START), constants >= 0, and per step + per request (what one request alone pays in
    its step) at most `cap`."""
    scale = np.array([START[n] for n in names])

    def ok(c: np.ndarray) -> bool:
        v = _vec(names, c * scale, base)
        return v[0] + v[2] <= cap * (1 + 1e-9)

    grid = np.array(np.meshgrid(*[[0.0, 0.3, 1.0, 3.0]] * len(names))).reshape(
        len(names), -1).T
    # the grid holds all zeros, which every cap >= 0 admits
    cands = [c for c in (np.array([base[CONSTANTS.index(n)] for n in names]) / scale, *grid)
             if ok(c)]
    best = min(((_ss(pts, sim, names, c * scale, base), k, c) for k, c in enumerate(cands)),
               key=lambda t: (t[0], t[1]))
    f, x = best[0], best[2].copy()
    step = 0.5
    for it in range(iterations * 4):
        moved = False
        for j in range(len(names)):
            for sgn in (1.0, -1.0):
                y = x.copy()
                y[j] = max(0.0, y[j] + sgn * step)
                if y[j] == x[j] or not ok(y):
                    continue
                fy = _ss(pts, sim, names, y * scale, base)
                if fy < f - 1e-12:
                    x, f, moved = y, fy, True
                    break
        if progress:
            progress(f"{engine}: search {it + 1}, step {step:g}, sum of squares {f:.6f}")
        if not moved:
            if step <= 0.01:
                break
            step = max(step / 2, 0.01)  # the last steps are 1 % of START, as documented
    return np.asarray(x * scale)


def fit(points: Sequence[Point], engine: str, sim: Simulator, *,
        start: Overheads | None = None, iterations: int = 20,
        constants: Sequence[str] = ("base_s", "per_seq_s"),
        progress: Callable[[str], None] | None = None, t0_bounded: bool = False) -> Fit:
    """Fit the overheads of `engine` on its `fit` points; predict every point of it.
    `t0_bounded`: keep per step + per request within the single-request t0 of the replays
    (`t0_cap`), so that one request alone still costs model.ttft, whose t0 was fitted on
    single requests (the shipped fit: both fits are on public data; a user's own loaded
    runs are fitted without it)."""
    pts = [p for p in points if p.run.engine == engine]
    fitp = [p for p in pts if p.role == "fit"]
    base = (start or Overheads()).as_tuple()
    notes: list[str] = []
    names = [c for c in CONSTANTS if c in constants]
    x = np.array([base[CONSTANTS.index(n)] for n in names], dtype=float)
    if len(fitp) <= 1:
        notes.append(f"{engine}: {len(fitp)} fitted point(s): constants not fitted")
        names = []
    else:
        r0 = _residuals(fitp, sim, base)
        J = _jacobian(fitp, sim, names, x, base, r0)
        keep = _pinned(J, names)
        for n in names:
            if n not in keep:
                notes.append(f"{engine}: {n} not pinned by the points (kept at "
                             f"{base[CONSTANTS.index(n)]:g} s)")
        names = keep[: max(0, len(fitp) - 1)]
        x = _search(fitp, sim, names, base, progress=progress, engine=engine,
                    iterations=iterations,
                    cap=t0_cap(fitp, sim) if t0_bounded else math.inf)
    ov = _vec(names, x, base)
    pred = {p.id: sim.predict(p, ov) for p in pts}
    loo: dict[str, float] = {}
    if names and len(fitp) > len(names):
        cur = _residuals(fitp, sim, ov)
        J = _jacobian(fitp, sim, names, x, base, cur)
        for i, p in enumerate(fitp):
            m = np.arange(len(fitp)) != i
            step = _gn_step(J[m], cur[m], 1e-9)
            loo[p.id] = sim.predict(p, _vec(names, np.maximum(0.0, x + step), base))
    elif names:
        notes.append(f"{engine}: leave-one-out needs more points than constants")
    return Fit(engine=engine, constants=dict(zip(CONSTANTS, ov, strict=True)), fitted=names,
               points=pts, predicted=pred, loo=loo, notes=notes, simulations=sim.calls)


def median_abs(xs: Sequence[float]) -> float:
    v = sorted(abs(x) for x in xs if math.isfinite(x))
    return float(np.median(v)) if v else math.nan


def summary(f: Fit) -> dict[str, Any]:
    """Medians and the done-when tallies (throughput within 20 %, TTFT within 30 %)."""
    out: dict[str, Any] = {}
    for role in SCORED:
        rows = f.errors(role)
        thr = [e for p, e, _ in rows if p.quantity in ("out_tok_s", "req_s")]
        ttft = [e for p, e, _ in rows if p.quantity.startswith("ttft")]
        out[role] = {
            "points": len(rows), "median_abs_error": median_abs([e for _, e, _ in rows]),
            "median_abs_loo_error": median_abs([lo for *_, lo in rows]),
            "throughput_within_20pct": f"{sum(abs(e) <= 0.2 for e in thr)}/{len(thr)}",
            "ttft_within_30pct": f"{sum(abs(e) <= 0.3 for e in ttft)}/{len(ttft)}"}
    return out


def fit_all(points: Sequence[Point], sim: Simulator | None = None, *,
            constants: Sequence[str] = ("base_s", "per_seq_s"),
            progress: Callable[[str], None] | None = None,
            t0_bounded: bool = False) -> list[Fit]:
    """One fit per engine present in `points` (vllm first)."""
    sim = sim or Simulator()
    return [fit(points, e, sim, constants=constants, progress=progress,
                t0_bounded=t0_bounded)
            for e in ENGINES if any(p.run.engine == e for p in points)]


def shipped_fit() -> list[Fit]:
    """The fit of the shipped constants: the public fit rows, from zero overheads, a
    step's overheads within the single-request t0 (fit's `t0_bounded`)."""
    return fit_all(public_points(), t0_bounded=True)


def _fmt(q: str, v: float) -> str:
    return f"{v:,.0f}" if q in ("out_tok_s",) else f"{v:,.2f}"


def report_lines(fits: Sequence[Fit]) -> list[str]:
    """The per-engine constants and per-point table (fit, held-out, excluded apart)."""
    out = []
    for f in fits:
        c = f.constants
        s = summary(f)
        out.append(f"{f.engine}: base {c['base_s'] * 1e3:.3f} ms/step, per token "
                   f"{c['per_token_s'] * 1e6:.3f} us, per request {c['per_seq_s'] * 1e6:.1f} us"
                   f" (fitted: {', '.join(f.fitted) or 'none'})")
        for role in SCORED:
            r = s[role]
            if r["points"]:
                out.append(f"  {role}: {r['points']} points, median |error| "
                           f"{r['median_abs_error']:.1%}" + (
                               f", leave-one-out {r['median_abs_loo_error']:.1%}"
                               if math.isfinite(r["median_abs_loo_error"]) else "")
                           + f"; throughput within 20 %: {r['throughput_within_20pct']}, "
                           f"TTFT within 30 %: {r['ttft_within_30pct']}")
        out.append(f"  {'point':18} {'role':9} {'quantity':12} {'measured':>9} "
                   f"{'predicted':>9} {'error':>7} {'LOO':>7}")
        for p in f.points:
            pr = f.predicted[p.id]
            lo = f.loo.get(p.id, math.nan)
            lo_s = f"{lo / p.value - 1:+7.1%}" if math.isfinite(lo) else f"{'-':>7}"
            out.append(f"  {p.id[:18]:18} {p.role:9} {p.quantity:12} "
                       f"{_fmt(p.quantity, p.value):>9} {_fmt(p.quantity, pr):>9} "
                       f"{pr / p.value - 1:+7.1%} {lo_s}")
        out += [f"  note: {n}" for n in f.notes]
    return out


def main() -> None:  # pragma: no cover (the report script)
    """`python -m xmemplan.sizing.loaded`: the shipped fit on data/measurements/loaded.csv."""
    fits = shipped_fit()
    for line in report_lines(fits):
        print(line)
    print("excluded rows are recorded, never fitted nor counted in the medians "
          "(data/measurements/README.md)")


if __name__ == "__main__":  # pragma: no cover
    main()
