"""Fit the TTFT model's constants to measurements: the shipped fit and `xmemplan calibrate`.

Constants, in two groups fitted apart (each with the other held fixed, alternating until
both settle):

- load group, on full-hit (load-dominated, hit >= 90 % of the prompt) points and X-Mem/DRAM
  ratios: the fixed overhead t0 of each engine, a per-prompt-token host overhead where
  asked for, and the effective host-DRAM (and, for user data, X-Mem) bandwidth;
- compute group, on miss and partial-hit points: eta_linear, eta_attention (and a per-GPU
  eta_attention where asked for).

So a 20-30 ms intercept that long cold prefills hide in their kernels is not charged to
every request. Loss: sum of squared log(predicted / measured), so that a 10 % miss counts
the same at 30 ms and at 7 s. Gauss-Newton with damping on the log of each constant.

Public points: data/measurements/public.csv (one row per published figure, with its
source). Rows marked `held-out` (at least a third) are never fitted and are reported
apart. A test re-runs `fit()` and fails when `DEFAULT_CALIBRATION` drifts from it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan import units
from xmemplan.catalog import Catalog, load_catalog
from xmemplan.catalog.loader import data_dir
from xmemplan.errors import InputError
from xmemplan.sizing.model import (
    DEFAULT_CALIBRATION,
    SGLANG_HICACHE,
    VLLM_OFFLOAD,
    Calibration,
    Transfer,
    compute_seconds,
    effective_bandwidth,
    ttft,
)

K = 1024  # the benchmark scripts build prompts of k x 1024 tokens
FULL_HIT = 0.9  # hit / prompt at or above: a load-dominated point
MISS = 0.1  # at or below: a compute-dominated point

VLLM16 = VLLM_OFFLOAD  # vLLM >= 0.12 blocks (one definition, in model.py)
TRANSFERS: dict[str, Transfer] = {
    "sglang64": SGLANG_HICACHE,
    "vllm16": VLLM16,
    "vllm16-kernel": Transfer(page_tokens=16, layout="page_first", io="kernel"),
    "vllm128": Transfer(page_tokens=128, layout="page_first", io="dma"),
}
# engine -> (overlap rule, default transfer); an engine key may carry a setup suffix
# ("vllm-kvc": vLLM in another harness) and then gets its own t0.
ENGINE_RULES: dict[str, tuple[str, Transfer]] = {
    "sglang": ("layer", SGLANG_HICACHE),
    "vllm": ("sum", VLLM16),
}
# The shipped fit: engines with a per-token host overhead, GPUs with their own eta_attention.
PUBLIC_PER_TOKEN = ("vllm-kvc", "vllm")
PUBLIC_ETA_GPUS = ("h20",)
# Host loads in the shipped fit: the engine's copies run at the catalog's measured rate of one
# transfer at its block size (vLLM blog fig. 4); not fitted (see fit()).
PUBLIC_HOST_EFFICIENCY = 1.0
QUANTITIES = ("ttft_ms", "ratio", "ratio_max", "tpot_ms", "load_gbps")
# Kinds whose points pin the load group (t0, per-token, bandwidth shares, layer floor).
LOAD_KINDS = ("full-hit", "decode", "load")
COLUMNS = ("gpu", "model", "engine", "tier", "prompt_tokens", "hit_tokens", "concurrency",
           "ttft_ms")


@dataclass(frozen=True)
class Measurement:
    """One measured point and how to predict it."""

    id: str
    gpu: str
    model: str
    engine: str
    tier: str  # "a/b" for ratios: TTFT on a over TTFT on b
    prompt_tokens: float
    hit_tokens: float
    concurrency: int
    value: float
    quantity: str = "ttft_ms"  # ttft_ms | ratio | ratio_max | tpot_ms | load_gbps
    role: str = "fit"  # fit | held-out
    transfer: str = ""
    source: str = ""
    where: str = ""  # file:line, for messages

    @property
    def kind(self) -> str:
        """full-hit, miss, partial, decode or load (ratios count as full-hit: both sides
        load; tpot_ms is one decode step at batch 1: a 1-token forward pass; load_gbps is
        the engine's KV load rate with many requests in flight, GB/s, where per-request
        costs overlap the copies and only the copy path is left)."""
        if self.quantity == "tpot_ms":
            return "decode"
        if self.quantity == "load_gbps":
            return "load"
        if self.quantity != "ttft_ms":
            return "full-hit"
        h = self.hit_tokens / self.prompt_tokens
        return "full-hit" if h >= FULL_HIT else "miss" if h <= MISS else "partial"

    @property
    def base_engine(self) -> str:
        return self.engine.split("-")[0]


# --- reading --------------------------------------------------------------------------

# The largest figure a measurement may give (the flags' bounds, xmemplan.units): a prompt or
# hit of 1e30 tokens, a TTFT of a year, are broken rows, not measurements.
_MAX = {"prompt_tokens": float(units.MAX_PROMPT_TOKENS),
        "hit_tokens": float(units.MAX_PROMPT_TOKENS),
        "concurrency": float(units.MAX_CONCURRENCY), "ttft_ms": 86_400_000.0}


def _num(v: Any, what: str, path: Path, line: int | None, integer: bool = False) -> float:
    text = v if isinstance(v, str) else None
    if isinstance(v, int | float) and not isinstance(v, bool):
        x = float(v) if abs(v) < 1e300 else math.inf
    elif text is not None and len(text) <= 40:  # digits counted before any conversion
        try:
            x = float(text.replace("_", "").replace(",", ""))
        except ValueError:
            x = math.nan
    else:
        x = math.nan
    shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:30] + "..."
    if not math.isfinite(x) or x < 0 or (integer and x != int(x)):
        raise InputError(f"{shown} is not a valid {what}", path=path, line=line, field=what,
                         hint=f"write {what} as a {'whole ' if integer else ''}number")
    hi = _MAX.get(what)
    if hi is not None and x > hi:
        raise InputError(f"{shown} is more than the allowed {hi:,.0f}", path=path, line=line,
                         field=what)
    return x


def _row(d: dict[str, Any], path: Path, line: int | None, n: int) -> Measurement:
    missing = [c for c in COLUMNS if c not in d and not (c == "ttft_ms" and "value" in d)
               and c != "concurrency"]
    if missing:
        raise InputError(f"missing column '{missing[0]}'", path=path, line=line,
                         field=missing[0], hint="columns: " + ", ".join(COLUMNS))
    prompt = _num(d["prompt_tokens"], "prompt_tokens", path, line)
    hit = _num(d["hit_tokens"], "hit_tokens", path, line)
    if prompt < 1 or hit > prompt:
        raise InputError("hit_tokens must be between 0 and prompt_tokens (at least 1)",
                         path=path, line=line, field="hit_tokens")
    value = _num(d.get("ttft_ms", d.get("value")), "ttft_ms", path, line)
    if value <= 0:
        raise InputError("ttft_ms must be positive", path=path, line=line, field="ttft_ms")
    given = d.get("concurrency")
    conc = _num(1 if given is None or given == "" else given, "concurrency", path, line,
                integer=True)
    if conc < 1:  # it was read as 1
        raise InputError(f"concurrency {conc:g} is not a request count", path=path, line=line,
                         field="concurrency", hint="write the prefills in flight as a whole "
                         "number, at least 1 (blank: 1)")
    engine = str(d["engine"]).strip().lower()
    if engine.split("-")[0] not in ENGINE_RULES:
        raise InputError(f"unknown engine '{engine}'", path=path, line=line, field="engine",
                         hint="use sglang or vllm (a suffix such as vllm-myhost keeps a "
                         "separate fixed overhead)")
    transfer = str(d.get("transfer") or "")
    if transfer and transfer not in TRANSFERS:
        raise InputError(f"unknown transfer '{transfer}'", path=path, line=line,
                         field="transfer", hint="use " + ", ".join(TRANSFERS))
    quantity = str(d.get("quantity") or "ttft_ms")
    if quantity not in QUANTITIES:
        raise InputError(f"unknown quantity '{quantity}'", path=path, line=line,
                         field="quantity", hint="use " + ", ".join(QUANTITIES))
    role = str(d.get("role") or "fit")
    if role not in ("fit", "held-out"):
        raise InputError(f"unknown role '{role}'", path=path, line=line, field="role",
                         hint="use fit or held-out")
    return Measurement(
        id=str(d.get("id") or f"{path.name}:{line or n}"), gpu=str(d["gpu"]).strip(),
        model=str(d["model"]).strip(), engine=engine, tier=str(d["tier"]).strip(),
        prompt_tokens=prompt, hit_tokens=hit, concurrency=max(1, int(conc)), value=value,
        quantity=quantity, role=role, transfer=transfer, source=str(d.get("source") or ""),
        where=f"{path}:{line}" if line else str(path),
    )


def _from_validate(doc: dict[str, Any], path: Path) -> list[Measurement]:
    """Rows of a `xmemplan validate --format json` result (SGLang HiCache, one at a time)."""
    out = []
    unmeasured = 0
    requests = doc.get("requests") or []
    if not isinstance(requests, list):
        raise InputError("expected a list", path=path, field="requests")
    for i, r in enumerate(requests):
        if not isinstance(r, dict):
            raise InputError(f"expected an object, got {type(r).__name__}", path=path,
                             field=f"requests[{i}]")
        ttft = r.get("ttft_s")
        if not isinstance(ttft, int | float) or isinstance(ttft, bool):
            unmeasured += 1  # a CPU run measures loads only: no TTFT to fit
            continue
        out.append(_row({
            "id": f"{path.name} request {i + 1}", "gpu": doc.get("gpu"),
            "model": doc.get("model"), "engine": "sglang", "tier": doc.get("tier"),
            "prompt_tokens": r.get("prompt_tokens"), "hit_tokens": r.get("hit_tokens"),
            "concurrency": 1, "ttft_ms": float(ttft) * 1e3,
        }, path, None, i + 1))
    if not out:
        why = (f"none of its {unmeasured} requests has a measured TTFT (a run without a GPU "
               "measures load times only)" if unmeasured else "it has no requests")
        raise InputError(f"the validate result has no point to fit: {why}", path=path,
                         field="requests.ttft_s",
                         hint="run validate where torch sees a GPU (benchmarks/gpu_check.sh)")
    return out


def read_measurements(path: Path | str) -> list[Measurement]:
    """Points of a CSV (header row with the COLUMNS) or JSON file (a list of objects, an
    object with "points", or a `validate --format json` result)."""
    from xmemplan.jsonio import parse_json, read_text

    p = Path(path)
    text = read_text(p, "measurements file", hint="pass a CSV or JSON file")
    if p.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
        doc = parse_json(text, p)
        if isinstance(doc, dict) and "requests" in doc and "classes" in doc:
            return _from_validate(doc, p)
        rows = doc.get("points") if isinstance(doc, dict) else doc
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise InputError("expected a list of point objects (or {\"points\": [...]})",
                             path=p)
        return [_row(r, p, None, i + 1) for i, r in enumerate(rows)]
    # A field may be as long as the file (csv's own limit, 131,072 characters, raised an
    # uncaught csv.Error); the file itself is bounded by read_text.
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    reader = csv.DictReader(text.splitlines())
    try:
        if not reader.fieldnames:
            raise InputError("empty measurements file", path=p)
        out = [_row(r, p, i + 2, i + 1) for i, r in enumerate(reader)]
    except csv.Error as exc:
        raise InputError(f"not readable CSV ({exc})", path=p, line=reader.line_num) from None
    if not out:
        raise InputError("no data rows", path=p, line=2)
    return out


def public_path() -> Path:
    return data_dir() / "measurements" / "public.csv"


def public_points() -> list[Measurement]:
    return read_measurements(public_path())


# --- prediction -----------------------------------------------------------------------

def _engine_cal(params: dict[str, float], engine: str, base: Calibration) -> Calibration:
    c = base.for_engine(engine)
    ch: dict[str, Any] = {}
    if f"t0:{engine}" in params:
        ch["fixed_overhead_s"] = params[f"t0:{engine}"]
    ch["per_token_overhead_s"] = params.get(
        f"per_token:{engine}", base.per_token_overhead_by_engine.get(engine, 0.0))
    if "eta_linear" in params:  # a fitted eta_linear replaces the per-dtype values
        ch["eta_linear_by_dtype"] = {}
    for k, attr in (("eta_linear", "eta_linear"), ("eta_attention", "eta_attention"),
                    ("host_eff", "host_efficiency"),
                    ("xmem_bw", "xmem_bandwidth_bytes_per_s"),
                    ("hbm_eff", "hbm_efficiency"),
                    ("layer_s", "layer_latency_s")):
        if k in params:
            ch[attr] = params[k]
    if "host_eff" in params:  # the fitted share replaces any absolute host figure
        ch["host_bandwidth_bytes_per_s"] = None
    by_gpu = dict(base.eta_attention_by_gpu)
    for k, v in params.items():
        if k.startswith("eta_attention:"):
            by_gpu[k.split(":", 1)[1]] = v
    ch["eta_attention_by_gpu"] = by_gpu
    return replace(c, **ch)


def _ttft_ms(m: Measurement, tier: str, prompt: Any, hit: Any, cal: Calibration,
             cat: Catalog) -> Any:
    overlap, transfer = ENGINE_RULES[m.base_engine]
    if m.transfer:
        transfer = TRANSFERS[m.transfer]
    b = ttft(cat.model(m.model), cat.gpu(m.gpu), cat.tier(tier), prompt, hit,
             concurrency=m.concurrency, overlap=overlap, transfer=transfer, calibration=cal)
    return np.asarray(b.ttft_s) * 1e3


def predict(m: Measurement, params: dict[str, float], cat: Catalog,
            base: Calibration = DEFAULT_CALIBRATION) -> float:
    cal = _engine_cal(params, m.engine, base)
    if m.quantity == "tpot_ms":  # one decode step: a 1-token pass over S tokens of context
        return float(compute_seconds(cat.model(m.model), cat.gpu(m.gpu), m.prompt_tokens + 1,
                                     m.prompt_tokens, cal)) * 1e3
    if m.quantity == "ttft_ms":
        return float(_ttft_ms(m, m.tier, m.prompt_tokens, m.hit_tokens, cal, cat))
    if m.quantity == "load_gbps":  # the copy path alone: one GPU loading, large batches
        transfer = TRANSFERS[m.transfer] if m.transfer else ENGINE_RULES[m.base_engine][1]
        return float(effective_bandwidth(cat.model(m.model), cat.gpu(m.gpu), cat.tier(m.tier),
                                         transfer=transfer, calibration=cal)) / 1e9
    a, b = m.tier.split("/")
    if m.quantity == "ratio":
        return float(_ttft_ms(m, a, m.prompt_tokens, m.hit_tokens, cal, cat)
                     / _ttft_ms(m, b, m.prompt_tokens, m.hit_tokens, cal, cat))
    # ratio_max: the largest ratio over prompts of 1K..S with the same recomputed tail.
    tail = m.prompt_tokens - m.hit_tokens
    prompts = np.arange(1, int(m.prompt_tokens // K) + 1) * float(K)
    hits = np.maximum(prompts - tail, 0.0)
    return float(np.max(_ttft_ms(m, a, prompts, hits, cal, cat)
                        / _ttft_ms(m, b, prompts, hits, cal, cat)))


def v6_max_ratio(c: Calibration, cat: Catalog) -> float:
    """'Up to ~6.7x': the largest X-Mem/DRAM ratio of a 1K..90K SGLang single-request
    sweep on H100 (research V6), with calibration `c` (kept for callers of the old API)."""
    prompts = np.arange(1, 91) * float(K)
    m, g = cat.model("qwen3-30b-a3b-fp8"), cat.gpu("h100-sxm")
    hits = prompts - SGLANG_HICACHE.page_tokens
    dram = ttft(m, g, cat.tier("host-dram-pcie5"), prompts, hits, calibration=c)
    xmem = ttft(m, g, cat.tier("xmem"), prompts, hits, calibration=c)
    return float(np.max(np.asarray(dram.ttft_s) / np.asarray(xmem.ttft_s)))


# --- the fit --------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Which constants a data set can pin down: load group and compute group."""

    load: tuple[str, ...]
    compute: tuple[str, ...]


def _tier_kind(cat: Catalog, name: str) -> str:
    return str(cat.tier(name).kind) if "/" not in name else "ratio"


def plan_constants(points: Sequence[Measurement], cat: Catalog, *,
                   per_token: Iterable[str] = (), eta_gpus: Iterable[str] = (),
                   fit_xmem: bool = True, fit_hbm: bool = False,
                   fit_host: bool = True) -> Plan:
    """The constants to fit, or InputError naming what the data lacks for each."""
    missing: list[str] = []
    load: list[str] = []
    full = [p for p in points if p.kind == "full-hit"]
    engines = sorted({p.engine for p in points if p.kind != "decode"})
    for e in engines:
        fe = [p for p in full if p.engine == e]
        if fe:
            load.append(f"t0:{e}")
        else:
            missing.append(f"t0 of engine {e}: no full-hit point (hit >= {FULL_HIT:.0%} of "
                           f"the prompt) for {e}")
    for e in per_token:
        if e in engines:
            load.append(f"per_token:{e}")
    host_lengths = {p.prompt_tokens for p in full if p.quantity == "ttft_ms"
                    and _tier_kind(cat, p.tier) == "host"}
    rates = [p for p in points if p.kind == "load"]
    host_rates = [p for p in rates if _tier_kind(cat, p.tier) == "host"]
    if (host_lengths or host_rates) and fit_host:
        load.append("host_eff")
    xmem_lengths = {p.prompt_tokens for p in full if p.quantity == "ttft_ms"
                    and _tier_kind(cat, p.tier) == "xmem"}
    if (xmem_lengths or any(_tier_kind(cat, p.tier) == "xmem" for p in rates)) and fit_xmem:
        load.append("xmem_bw")
    n_bw = ("host_eff" in load) + ("xmem_bw" in load)
    decode = [p for p in points if p.kind == "decode"]
    if decode:
        load.append("layer_s")
    lengths = {p.prompt_tokens for p in full}
    n_full_constants = len([x for x in load if x.startswith(("t0:", "per_token:"))]) + n_bw
    if full and len(full) + len(rates) < n_full_constants + (1 if n_bw else 0):
        missing.append(
            f"{n_full_constants} load constants ({', '.join(load)}) from {len(full)} "
            f"full-hit points and {len(rates)} load rates: add full-hit points at more "
            "prompt lengths")
    elif n_bw and len(lengths) < 2 and not rates:
        missing.append("t0 and bandwidth from full-hit points at one prompt length only: "
                       "add full-hit points at a second prompt length (e.g. 1K and 64K)")
    compute: list[str] = []
    slow = [p for p in points if p.kind not in LOAD_KINDS]
    if slow:
        slow_lengths = {p.prompt_tokens for p in slow}
        if len(slow) < 2 or len(slow_lengths) < 2:
            missing.append("eta_linear and eta_attention: miss or partial-hit points at two "
                           "or more prompt lengths (one short, one long: 1K and 32K)")
        else:
            compute += ["eta_linear", "eta_attention"]
            if fit_hbm:
                compute.append("hbm_eff")
            for g in eta_gpus:
                if sum(1 for p in slow if p.gpu == g) >= 1:
                    compute.append(f"eta_attention:{g}")
    if missing:
        raise InputError(
            "the fit is underdetermined: " + "; ".join(missing),
            path=Path(points[0].where.split(":")[0]) if points else None,
            hint="add the points named, or calibrate fewer constants",
        )
    return Plan(tuple(load), tuple(compute))


def _start(name: str, base: Calibration) -> float:
    if name.startswith("t0:"):
        return max(1e-3, base.fixed_overhead_by_engine.get(name[3:], base.fixed_overhead_s))
    if name.startswith("per_token:"):
        return 1e-6
    if name.startswith("eta_attention:"):
        return base.eta_attention_by_gpu.get(name.split(":")[1], base.eta_attention)
    return float({
        "host_eff": base.host_efficiency or 0.9,
        "layer_s": base.layer_latency_s or 1e-4,
        "xmem_bw": base.xmem_bandwidth_bytes_per_s or 350e9,
        "eta_linear": base.eta_linear, "eta_attention": base.eta_attention,
        "hbm_eff": base.hbm_efficiency,
    }[name])


def _gauss_newton(names: Sequence[str], start: np.ndarray,
                  residuals: Callable[[np.ndarray], np.ndarray],
                  iterations: int = 60) -> np.ndarray:
    theta = np.log(start)
    lam = 1e-3
    r = residuals(theta)
    cost = float(r @ r)
    for _ in range(iterations):
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            d = np.zeros_like(theta)
            d[j] = 1e-6
            jac[:, j] = (residuals(theta + d) - r) / 1e-6
        a = jac.T @ jac
        step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -jac.T @ r)
        step = np.clip(step, -1.0, 1.0)
        with np.errstate(all="ignore"):
            r_new = residuals(theta + step)
        new_cost = float(r_new @ r_new) if np.all(np.isfinite(r_new)) else np.inf
        if new_cost < cost:
            theta, r, lam = theta + step, r_new, lam / 3
            done = cost - new_cost < 1e-15
            cost = new_cost
            if done:
                break
        else:
            lam *= 10
            if lam > 1e12:
                break
    return np.exp(theta)


def fit_points(points: Sequence[Measurement], cat: Catalog, plan: Plan,
               base: Calibration = DEFAULT_CALIBRATION, rounds: int = 4) -> dict[str, float]:
    """Fit the plan's constants: load group on full-hit points, compute group on the rest,
    alternating (`rounds`) so that each sees the other's current values."""
    params = {n: _start(n, base) for n in (*plan.load, *plan.compute)}
    groups = [(plan.load, [p for p in points if p.kind in LOAD_KINDS]),
              (plan.compute, [p for p in points if p.kind not in LOAD_KINDS])]
    for _ in range(rounds):
        for names, pts in groups:
            if not names or not pts:
                continue

            def res(theta: np.ndarray, names: Sequence[str] = names,
                    pts: Sequence[Measurement] = pts) -> np.ndarray:
                trial = {**params, **dict(zip(names, np.exp(theta), strict=True))}
                return np.array([math.log(predict(p, trial, cat, base) / p.value)
                                 for p in pts])

            got = _gauss_newton(names, np.array([params[n] for n in names]), res)
            params.update(dict(zip(names, (float(x) for x in got), strict=True)))
    return params


def calibration_from(params: dict[str, float], base: Calibration = DEFAULT_CALIBRATION,
                     default_engine: str = "sglang") -> Calibration:
    """A Calibration carrying every engine's fitted t0 (and per-token overhead)."""
    t0 = dict(base.fixed_overhead_by_engine)
    t0.update({k[3:]: v for k, v in params.items() if k.startswith("t0:")})
    per_tok = dict(base.per_token_overhead_by_engine)
    per_tok.update({k[10:]: v for k, v in params.items() if k.startswith("per_token:")})
    cal = _engine_cal(params, default_engine, base)
    return replace(cal, fixed_overhead_by_engine=t0, per_token_overhead_by_engine=per_tok,
                   fixed_overhead_s=t0.get(default_engine, cal.fixed_overhead_s),
                   per_token_overhead_s=per_tok.get(default_engine, 0.0))


@dataclass(frozen=True)
class FitResult:
    params: dict[str, float]
    calibration: Calibration
    plan: Plan
    fit_points: int = 0
    held_out_points: int = 0

    @property
    def constants(self) -> int:
        return len(self.params)


def fit(catalog: Catalog | None = None, points: Sequence[Measurement] | None = None,
        base: Calibration | None = None) -> FitResult:
    """The shipped fit: the `fit` rows of data/measurements/public.csv (`base`: the
    constants not fitted, and the step-pricing rule, default the shipped ones)."""
    cat = catalog or load_catalog()
    allp = list(points) if points is not None else public_points()
    pts = [p for p in allp if p.role == "fit"]
    # host_efficiency is not fitted: it is 1, the engine copying at the measured rate of one
    # transfer of its block size (the curve in the catalog); what the engine adds on top is
    # its per-token host work, fitted per engine.
    plan = plan_constants(pts, cat, per_token=PUBLIC_PER_TOKEN, eta_gpus=PUBLIC_ETA_GPUS,
                          fit_xmem=False, fit_hbm=False, fit_host=False)
    # eta_linear is measured (data/measurements/device-h200.jsonl), not fitted.
    plan = Plan(plan.load, tuple(n for n in plan.compute if n != "eta_linear"))
    base = replace(base or DEFAULT_CALIBRATION, host_efficiency=PUBLIC_HOST_EFFICIENCY,
                   host_bandwidth_bytes_per_s=None)
    params = fit_points(pts, cat, plan, base)
    return FitResult(params, calibration_from(params, base), plan, len(pts),
                     len(allp) - len(pts))


def shipped_params() -> dict[str, float]:
    """DEFAULT_CALIBRATION as fit parameters (for predicting held-out points)."""
    c = DEFAULT_CALIBRATION
    p: dict[str, float] = {f"t0:{e}": v for e, v in c.fixed_overhead_by_engine.items()}
    p.update({f"per_token:{e}": v for e, v in c.per_token_overhead_by_engine.items()})
    p.update(eta_attention=c.eta_attention, layer_s=c.layer_latency_s)
    p["host_eff"] = c.host_efficiency or 0.9
    p.update({f"eta_attention:{g}": v for g, v in c.eta_attention_by_gpu.items()})
    return p


@dataclass(frozen=True)
class FitRow:
    id: str
    kind: str
    quantity: str
    measured: float
    predicted: float
    role: str
    source: str
    loo: float = math.nan  # leave-one-out prediction (nan: not computed / not possible)

    @property
    def error(self) -> float:
        """Relative error (predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured

    @property
    def loo_error(self) -> float:
        return (self.loo - self.measured) / self.measured


def fit_table(params: dict[str, float] | None = None, catalog: Catalog | None = None,
              points: Sequence[Measurement] | None = None,
              base: Calibration = DEFAULT_CALIBRATION) -> list[FitRow]:
    """Every public point predicted with `params` (default: the shipped constants)."""
    cat = catalog or load_catalog()
    prm = params if params is not None else shipped_params()
    pts = list(points) if points is not None else public_points()
    return [FitRow(p.id, p.kind, p.quantity, p.value, predict(p, prm, cat, base), p.role,
                   p.source) for p in pts]


def leave_one_out(points: Sequence[Measurement], cat: Catalog, plan: Plan,
                  base: Calibration = DEFAULT_CALIBRATION,
                  params: dict[str, float] | None = None) -> list[float]:
    """For each point: its prediction by a fit on all the others, to first order.

    Linear in the points (one Jacobian per group, at the full fit `params`): the fit is
    least squares of log errors, so leaving point i out moves its own log error r_i to
    r_i / (1 - h_i), h_i its leverage in its group (the PRESS residual; exact for a model
    linear in the log constants). Points of leverage above LOO_REFIT_LEVERAGE are refitted
    (nan when the others cannot pin the constants): with few points, most are; with many,
    at most 10 per constant. On every other public point (13) it equals refitting; 200
    points take 0.43 s. Refitting once per point (`leave_one_out_refit`)
    grew quadratically: 100 points took over 30 s."""
    if params is None:
        params = fit_points(points, cat, plan, base)
    out = [math.nan] * len(points)
    groups = [(plan.load, [i for i, p in enumerate(points) if p.kind in LOAD_KINDS]),
              (plan.compute, [i for i, p in enumerate(points) if p.kind not in LOAD_KINDS])]
    for names, idx in groups:
        if not idx:
            continue
        pts = [points[i] for i in idx]

        def res(trial: dict[str, float], pts: Sequence[Measurement] = pts) -> np.ndarray:
            return np.array([math.log(predict(p, trial, cat, base) / p.value) for p in pts])

        r = res(params)
        lev = np.zeros(len(pts))
        if names:
            jac = np.empty((len(pts), len(names)))
            for j, n in enumerate(names):
                jac[:, j] = (res({**params, n: params[n] * math.exp(1e-6)}) - r) / 1e-6
            lev = np.einsum("ij,jk,ik->i", jac, np.linalg.pinv(jac.T @ jac), jac)
        for i, ri, hi in zip(idx, r, lev, strict=True):
            # First order is close where others share the point's weight; a point of high
            # leverage is refitted. Leverages sum to the constants fitted, so at most 10 per
            # constant are: the work stays linear in the points.
            out[i] = (_refit_one(points, i, cat, plan, base) if hi > LOO_REFIT_LEVERAGE
                      else points[i].value * math.exp(ri / (1 - hi)))
    return out


LOO_REFIT_LEVERAGE = 0.1  # at most 10 points per constant fitted are refitted


def _refit_one(points: Sequence[Measurement], i: int, cat: Catalog, plan: Plan,
               base: Calibration) -> float:
    """Point i predicted by a fit on the others; nan when they cannot pin the constants."""
    rest = [q for j, q in enumerate(points) if j != i]
    try:
        sub = plan_constants(rest, cat, per_token=[n[10:] for n in plan.load
                                                   if n.startswith("per_token:")],
                             eta_gpus=[n[14:] for n in plan.compute
                                       if n.startswith("eta_attention:")],
                             fit_xmem="xmem_bw" in plan.load,
                             fit_hbm="hbm_eff" in plan.compute,
                             fit_host="host_eff" in plan.load)
    except InputError:
        return math.nan
    if set(sub.load) | set(sub.compute) != set(plan.load) | set(plan.compute):
        return math.nan
    return predict(points[i], fit_points(rest, cat, sub, base, rounds=2), cat, base)


def leave_one_out_refit(points: Sequence[Measurement], cat: Catalog, plan: Plan,
                        base: Calibration = DEFAULT_CALIBRATION) -> list[float]:
    """Leave-one-out by refitting without each point (quadratic: for checking
    `leave_one_out` on small sets only)."""
    return [_refit_one(points, i, cat, plan, base) for i in range(len(points))]


# --- docs -----------------------------------------------------------------------------

def _fmt(quantity: str, v: float) -> str:
    if quantity.startswith("ratio"):
        return f"{v:.2f}x"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def fit_markdown(rows: Sequence[FitRow] | None = None) -> str:
    """The point table of docs/model.md (a test checks the doc carries this exact text)."""
    rows = list(rows) if rows is not None else fit_table()
    lines = ["| point | kind | quantity | measured | predicted | error | role |",
             "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.id} | {r.kind} | {r.quantity} | {_fmt(r.quantity, r.measured)} "
                     f"| {_fmt(r.quantity, r.predicted)} | {r.error:+.1%} | {r.role} |")
    return "\n".join(lines)


def _const_label(name: str) -> tuple[str, str]:
    if name.startswith("t0:"):
        return f"t0, engine {name[3:]} (full-hit points)", "ms"
    if name.startswith("per_token:"):
        return f"per-token host overhead, engine {name[10:]}", "us/token"
    if name.startswith("eta_attention:"):
        return f"eta_attention on {name.split(':')[1]}", ""
    return {"eta_linear": ("eta_linear (share of the weight dtype's dense peak)", ""),
            "eta_attention": ("eta_attention (share of BF16 peak; default)", ""),
            "host_eff": ("host DRAM load: x the one-transfer copy rate", ""),
            "layer_s": ("per-layer floor of every forward pass", "us"),
            "xmem_bw": ("X-Mem effective bandwidth, large transfers", "GB/s"),
            "hbm_eff": ("hbm_efficiency (share of HBM bandwidth reading weights and KV)",
                        "")}[name]


def format_constant(name: str, v: float) -> str:
    _, unit = _const_label(name)
    if unit == "ms":
        return f"{v * 1e3:.1f} ms"
    if unit == "us/token":
        return f"{v * 1e6:.2f} us/token"
    if unit == "us":
        return f"{v * 1e6:.1f} us"
    if unit == "GB/s":
        return f"{v / 1e9:.1f} GB/s"
    return f"{v:.3f}"


def constants_markdown(params: dict[str, float] | None = None) -> str:
    prm = params if params is not None else shipped_params()
    lines = ["| constant | value |", "|---|---:|"]
    for n in sorted(prm):
        lines.append(f"| {_const_label(n)[0]} | {format_constant(n, prm[n])} |")
    return "\n".join(lines)


def summary(rows: Sequence[FitRow]) -> dict[str, float]:
    """Median absolute errors by role and kind (nan where no row)."""
    def med(sel: list[FitRow]) -> float:
        return float(np.median([abs(r.error) for r in sel])) if sel else math.nan

    return {
        "fit": med([r for r in rows if r.role == "fit"]),
        "held-out": med([r for r in rows if r.role == "held-out"]),
        "held-out full-hit ttft": med([r for r in rows if r.role == "held-out"
                                       and r.kind == "full-hit" and r.quantity == "ttft_ms"]),
    }


if __name__ == "__main__":  # python -m xmemplan.sizing.calibration: refit and print
    res = fit()
    print({k: round(v, 6) if v < 1e6 else round(v / 1e9, 3) for k, v in res.params.items()})
    print(constants_markdown(res.params))
    print()
    print(fit_markdown(fit_table(res.params)))
