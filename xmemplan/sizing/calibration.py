"""Fit the model's free constants to published measurements (research/perf-model.md s. 5).

Global constants (properties of GPUs and links): eta_linear, eta_attention (H100/H200, and
the default for other GPUs), an H20-specific eta_attention (its tensor cores are throttled,
so attention gets closer to peak), and the effective host-DRAM bandwidth. Per published
setup (engine build and host CPU): the fixed overhead t0, and for V13 a per-prompt-token
host overhead (its GPU-hit TTFT grows from 42 to 111 ms with nothing to load). The shipped
t0 of an engine is the median over its setups.

Loss: sum of squared log(predicted / measured) over the fit points, so that a 10 % miss
counts the same at 30 ms and at 7 s. Gauss-Newton with damping, on the log of each
constant (keeps them positive). Held-out points are predicted with the shipped defaults
(`DEFAULT_CALIBRATION`) and are never fitted. A test re-runs `fit()` and fails when the
shipped defaults drift from it; `docs/model.md` shows `fit_table()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from xmemplan.catalog import Catalog, load_catalog
from xmemplan.sizing.model import (
    DEFAULT_CALIBRATION,
    SGLANG_HICACHE,
    Calibration,
    Transfer,
    ttft,
)

K = 1024  # the benchmark scripts build prompts of k x 1024 tokens
GLOBALS = ("eta_linear", "eta_attention", "eta_attention_h20", "host_bandwidth_bytes_per_s")
# setup -> engine; each setup's t0 is fitted. SETUP_PER_TOKEN: setups with a per-token term.
SETUPS = {"V1": "vllm", "V10": "vllm", "V13": "vllm", "V5": "sglang"}
SETUP_PER_TOKEN = ("V13",)
ENGINE_OF = {**SETUPS, "V11": "vllm", "V6": "sglang", "V12": "vllm"}


@dataclass(frozen=True)
class Point:
    """One published measurement and how to predict it."""

    id: str
    setup: str
    quantity: str  # what `measured` is, with unit: "TTFT ms", "tokens/s", "ratio"
    measured: float
    role: str  # "fit" or "held-out"
    source: str
    predict: Callable[[Calibration, Catalog], float]

    @property
    def setup_key(self) -> str:
        return self.id.split()[0]


@dataclass(frozen=True)
class FitResult:
    calibration: Calibration
    setup_fixed_overhead_s: dict[str, float] = field(default_factory=dict)
    setup_per_token_overhead_s: dict[str, float] = field(default_factory=dict)
    fit_points: int = 0
    constants: int = 0

    def for_point(self, p: Point) -> Calibration:
        """Fit points use their setup's own overheads; held-out points the shipped ones."""
        c = self.calibration.for_engine(ENGINE_OF.get(p.setup_key, "sglang"))
        if p.role == "fit":
            key = p.setup_key
            if key in self.setup_fixed_overhead_s:
                c = replace(c, fixed_overhead_s=self.setup_fixed_overhead_s[key])
            c = replace(c, per_token_overhead_s=self.setup_per_token_overhead_s.get(key, 0.0))
        return c


def _ms(model: str, gpu: str, tier: str, prompt: float, hit: float, overlap: str,
        transfer: Transfer) -> Callable[[Calibration, Catalog], float]:
    def f(c: Calibration, cat: Catalog) -> float:
        b = ttft(cat.model(model), cat.gpu(gpu), cat.tier(tier), prompt, hit,
                 overlap=overlap, transfer=transfer, calibration=c)
        return float(b.ttft_s) * 1e3

    return f


VLLM = Transfer(page_tokens=16, layout="page_first", io="dma")  # vLLM >= 0.12 block layout
VLLM_BLOCK128 = Transfer(page_tokens=128, layout="page_first", io="dma")


def _v11(hit_ratio: float) -> Callable[[Calibration, Catalog], float]:
    # 10,000 x 512-token prefills, throughput-bound: the fixed overhead is amortized over
    # the batch; load and compute add per request (vLLM loads before scheduling).
    def f(c: Calibration, cat: Catalog) -> float:
        b = ttft(cat.model("llama-3.1-8b"), cat.gpu("h100-sxm"), cat.tier("host-dram-pcie5"),
                 512, np.floor(512 * hit_ratio / 16) * 16, overlap="sum", transfer=VLLM,
                 calibration=c)
        return 512.0 / float(b.single_s - b.fixed_s)

    return f


def _ratio(model: str, gpu: str, prompt: float, hit: float, overlap: str,
           transfer: Transfer) -> Callable[[Calibration, Catalog], float]:
    def f(c: Calibration, cat: Catalog) -> float:
        m, g = cat.model(model), cat.gpu(gpu)
        dram = ttft(m, g, cat.tier("host-dram-pcie5"), prompt, hit, overlap=overlap,
                    transfer=transfer, calibration=c)
        xmem = ttft(m, g, cat.tier("xmem"), prompt, hit, overlap=overlap,
                    transfer=transfer, calibration=c)
        return float(dram.ttft_s / xmem.ttft_s)

    return f


def v6_max_ratio(c: Calibration, cat: Catalog) -> float:
    """'Up to ~6.7x': the largest X-Mem/DRAM ratio over a 1K..90K single-request sweep."""
    prompts = np.arange(1, 91) * K
    m, g = cat.model("qwen3-30b-a3b-fp8"), cat.gpu("h100-sxm")
    hits = prompts - SGLANG_HICACHE.page_tokens
    dram = ttft(m, g, cat.tier("host-dram-pcie5"), prompts, hits, calibration=c)
    xmem = ttft(m, g, cat.tier("xmem"), prompts, hits, calibration=c)
    return float(np.max(dram.ttft_s / xmem.ttft_s))


VLLM_BLOG = "vLLM blog 2026-01-08 kv-offloading-connector"
V1_SRC = "netpreme/vllm_xmem assets/ttft_plot.png (read from plot)"
V13_SRC = "gitea.gahow.org/gahow/agentic-kvc v2/ README, exp_a"


def points() -> list[Point]:
    """The published points: 'fit' ones set the constants, 'held-out' ones check them."""
    pts: list[Point] = []
    for k, ms in ((1, 32), (10, 187), (20, 495)):
        pts.append(Point(
            f"V1 {k}K miss", "H200, Qwen3-30B-A3B BF16, vLLM fork, single request, recompute",
            "TTFT ms", ms, "fit", V1_SRC,
            _ms("qwen3-30b-a3b", "h200-sxm", "hbm", k * K, 0, "sum", VLLM_BLOCK128)))
    for k, comp, load in ((10, 260, 40), (50, 2290, 160), (100, 6850, 310)):
        pts.append(Point(
            f"V10 {k}K miss", "H100, Llama-3.1-8B, vLLM, single request, recompute",
            "TTFT ms", comp, "fit", VLLM_BLOG + " fig. 1",
            _ms("llama-3.1-8b", "h100-sxm", "hbm", k * K, 0, "sum", VLLM)))
        pts.append(Point(
            f"V10 {k}K CPU hit", "H100, Llama-3.1-8B, vLLM OffloadingConnector, 100 % hit",
            "TTFT ms", load, "fit", VLLM_BLOG + " fig. 1",
            _ms("llama-3.1-8b", "h100-sxm", "host-dram-pcie5", k * K, k * K - 1, "sum", VLLM)))
    for h, tps in ((0.0, 42e3), (0.5, 73e3), (0.8, 158e3), (0.9, 218e3), (1.0, 389e3)):
        pts.append(Point(
            f"V11 {h:.0%} hit", "H100, Llama-3.1-8B, vLLM, 10,000 x 512-token prefills",
            "tokens/s", tps, "fit", VLLM_BLOG + " fig. 2", _v11(h)))
    v13 = "H20, Qwen3-Coder-30B-A3B (96 KiB), vLLM 0.18.1, single request"
    for k, gpu_ms, cpu_ms, miss_ms in ((1, 42, 57, 78), (64, 111, 272, 15200)):
        S = k * K
        pts.append(Point(f"V13 {k}K miss", v13, "TTFT ms", miss_ms, "fit", V13_SRC,
                         _ms("qwen3-30b-a3b", "h20", "hbm", S, 0, "sum", VLLM)))
        pts.append(Point(f"V13 {k}K CPU hit", v13, "TTFT ms", cpu_ms, "fit", V13_SRC,
                         _ms("qwen3-30b-a3b", "h20", "host-dram-pcie5", S, S - 1, "sum", VLLM)))
        pts.append(Point(f"V13 {k}K GPU hit", v13, "TTFT ms", gpu_ms, "fit", V13_SRC,
                         _ms("qwen3-30b-a3b", "h20", "hbm", S, S - 1, "sum", VLLM)))
    S = 80 * K
    pts.append(Point(
        "V5 80K X-Mem/DRAM", "H100, Qwen3-30B-A3B-FP8, SGLang HiCache page 64 layer_first "
        "kernel IO, ~100 % hit", "ratio", 4.6, "fit", "netpreme/sglang_xmem README.md",
        _ratio("qwen3-30b-a3b-fp8", "h100-sxm", S, S - 64, "layer", SGLANG_HICACHE)))
    # Held out: never fitted, predicted with the shipped defaults.
    pts.append(Point(
        "V6 max X-Mem/DRAM", "H100-class, Qwen3-30B-A3B-FP8, SGLang, single request 1K-90K",
        "ratio", 6.7, "held-out", "lm-sys/lm-sys.github.io blog/2026-06-27-netpreme-xmem.md",
        v6_max_ratio))
    S = 100 * K
    for io, ms in (("dma", 119), ("kernel", 107)):
        pts.append(Point(
            f"V12 100K {io}", f"H100, Llama-3.2-1B, vLLM, 0.5 MB blocks, {io} copies, ~100 % hit",
            "TTFT ms", ms, "held-out", VLLM_BLOG + " fig. 5",
            _ms("llama-3.2-1b", "h100-sxm", "host-dram-pcie5", S, S - 1, "sum",
                Transfer(page_tokens=16, layout="page_first", io=io))))  # type: ignore[arg-type]
    return pts


def _unpack(theta: np.ndarray) -> FitResult:
    v = np.exp(theta)
    g = dict(zip(GLOBALS, v[: len(GLOBALS)], strict=True))
    t0 = dict(zip(SETUPS, v[len(GLOBALS): len(GLOBALS) + len(SETUPS)], strict=True))
    per_tok = dict(zip(SETUP_PER_TOKEN, v[len(GLOBALS) + len(SETUPS):], strict=True))
    by_engine = {
        e: float(np.median([t0[s] for s, eng in SETUPS.items() if eng == e]))
        for e in sorted(set(SETUPS.values()))
    }
    cal = replace(
        DEFAULT_CALIBRATION,
        eta_linear=float(g["eta_linear"]),
        eta_attention=float(g["eta_attention"]),
        eta_attention_by_gpu={"h20": float(g["eta_attention_h20"])},
        host_bandwidth_bytes_per_s=float(g["host_bandwidth_bytes_per_s"]),
        per_token_overhead_s=0.0,
        fixed_overhead_s=by_engine["sglang"],
        fixed_overhead_by_engine=by_engine,
    )
    return FitResult(
        cal, {k: float(x) for k, x in t0.items()}, {k: float(x) for k, x in per_tok.items()},
    )


def _start() -> np.ndarray:
    c = DEFAULT_CALIBRATION
    return np.log([
        c.eta_linear, c.eta_attention, c.eta_attention_by_gpu.get("h20", c.eta_attention),
        c.host_bandwidth_bytes_per_s or 50e9,
        *[c.fixed_overhead_by_engine.get(e, c.fixed_overhead_s) for e in SETUPS.values()],
        *[1e-6 for _ in SETUP_PER_TOKEN],
    ])


def _residuals(theta: np.ndarray, pts: list[Point], cat: Catalog) -> np.ndarray:
    res = _unpack(theta)
    return np.array([np.log(p.predict(res.for_point(p), cat) / p.measured) for p in pts])


def fit(catalog: Catalog | None = None, iterations: int = 100) -> FitResult:
    """Least squares in log space on the 'fit' points."""
    cat = catalog or load_catalog()
    pts = [p for p in points() if p.role == "fit"]
    theta = _start()
    lam = 1e-3
    r = _residuals(theta, pts, cat)
    cost = float(r @ r)
    for _ in range(iterations):
        jac = np.empty((len(pts), len(theta)))
        for j in range(len(theta)):
            d = np.zeros_like(theta)
            d[j] = 1e-6
            jac[:, j] = (_residuals(theta + d, pts, cat) - r) / 1e-6
        a = jac.T @ jac
        step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -jac.T @ r)
        step = np.clip(step, -1.0, 1.0)  # at most a factor e per iteration
        with np.errstate(all="ignore"):
            try:
                r_new = _residuals(theta + step, pts, cat)
            except ZeroDivisionError:
                r_new = np.full_like(r, np.inf)
        new_cost = float(r_new @ r_new) if np.all(np.isfinite(r_new)) else np.inf
        if new_cost < cost:
            theta, r, lam = theta + step, r_new, lam / 3
            done = cost - new_cost < 1e-14
            cost = new_cost
            if done:
                break
        else:
            lam *= 10
    return replace(_unpack(theta), fit_points=len(pts), constants=len(theta))


@dataclass(frozen=True)
class FitRow:
    id: str
    setup: str
    quantity: str
    measured: float
    predicted: float
    role: str
    source: str

    @property
    def error(self) -> float:
        """Relative error (predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured


def fit_table(result: FitResult | None = None, catalog: Catalog | None = None) -> list[FitRow]:
    """Every point predicted: fit points with `result`, held-out ones with the defaults."""
    cat = catalog or load_catalog()
    res = result or shipped_result()
    rows = []
    for p in points():
        c = res.for_point(p) if p.role == "fit" else DEFAULT_CALIBRATION.for_engine(
            ENGINE_OF[p.setup_key])
        rows.append(FitRow(p.id, p.setup, p.quantity, p.measured, p.predict(c, cat), p.role,
                           p.source))
    return rows


# The per-setup constants of the shipped fit (the engine defaults are in DEFAULT_CALIBRATION).
SHIPPED_SETUP_FIXED_OVERHEAD_S: dict[str, float] = {
    "V1": 0.0233, "V10": 0.0121, "V13": 0.0437, "V5": 0.0243,
}
SHIPPED_SETUP_PER_TOKEN_OVERHEAD_S: dict[str, float] = {"V13": 1.05e-6}


def shipped_result() -> FitResult:
    return FitResult(DEFAULT_CALIBRATION, dict(SHIPPED_SETUP_FIXED_OVERHEAD_S),
                     dict(SHIPPED_SETUP_PER_TOKEN_OVERHEAD_S))


def _fmt(quantity: str, v: float) -> str:
    if quantity == "ratio":
        return f"{v:.2f}x"
    if quantity == "tokens/s":
        return f"{v / 1e3:,.1f}k"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def fit_markdown(result: FitResult | None = None) -> str:
    """The fit table of docs/model.md (a test checks the doc carries this exact text)."""
    rows = fit_table(result)
    lines = [
        "| point | setup | quantity | measured | predicted | error | role |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.id} | {r.setup} | {r.quantity} | {_fmt(r.quantity, r.measured)} | "
            f"{_fmt(r.quantity, r.predicted)} | {r.error:+.1%} | {r.role} |")
    return "\n".join(lines)


def constants_markdown(result: FitResult | None = None) -> str:
    res = result or shipped_result()
    c = res.calibration
    lines = [
        "| constant | value |",
        "|---|---:|",
        f"| eta_linear (share of the weight dtype's dense peak) | {c.eta_linear:.3f} |",
        f"| eta_attention (share of BF16 peak; H100, H200, default) | {c.eta_attention:.3f} |",
        f"| eta_attention on H20 | {c.eta_attention_by_gpu.get('h20', c.eta_attention):.3f} |",
        f"| host DRAM effective bandwidth, large transfers | "
        f"{(c.host_bandwidth_bytes_per_s or 0) / 1e9:.1f} GB/s |",
    ]
    for s, t0 in res.setup_fixed_overhead_s.items():
        lines.append(f"| t0 of setup {s} ({SETUPS[s]}) | {t0 * 1e3:.1f} ms |")
    for s, v in res.setup_per_token_overhead_s.items():
        lines.append(f"| per-token host overhead of setup {s} | {v * 1e6:.2f} us/token |")
    for e, t0 in c.fixed_overhead_by_engine.items():
        lines.append(f"| shipped t0, engine {e} | {t0 * 1e3:.1f} ms |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m xmemplan.sizing.calibration: refit and print
    res = fit()
    print(res)
    print(constants_markdown(res))
    print()
    print(fit_markdown())
