"""`size`'s per-replica caches and routers against public multi-replica measurements
(data/measurements/multi-replica.csv; docs/validation.md, "Multi-replica check").

    python benchmarks/replicas_check.py [--seeds 3] [--router-as MEASURED=OURS]

Each row of the CSV is one stage of a published run: a shared-prefix workload (G groups of
a prefix, P prompts per group) sent to R replicas under one scheduler. We replay the run as
its benchmark sent it and price it with `size`'s own model: the planner's placement (our
router with the run's scorer weights) and the planner's `simulate` (the engine's block
pool per replica, pinned routes, the group prefix one set of block keys shared by the
group's requests in flight). Compared per stage: TTFT p90 (bound 30 %), and per
scheduler the throughput ceiling, the largest stage QPS whose TTFT p90 stays under 2 s
(bound 20 %). Nothing here is fitted: every row is a check; the rows marked `held-out` (a
third) are reported apart as well, for the project's rule. Prints PASS/FAIL per row and in
total; exits 0 either way (a report, not a gate).

The run's protocol, from its own configuration (llm-d/llm-d-kv-cache-manager
benchmarking/37-capacity/README.md, inference-perf):
- one run per scheduler through every stage in order (a 25 s warm-up at 10 QPS, then 3
  QPS for 210 s, 4 for 180 s, ... 20 for 50 s), int(rate x duration) requests a stage;
  a stage ends when all its requests have finished (inference-perf
  loadgen/load_generator.py `run_stage`: "Wait until all requests are finished
  processing"), so no queue passes from one stage to the next, while the replicas'
  caches and the router's state do: we start each stage an hour after the previous one
  began and check that it had drained;
- `load: type: constant`: requests evenly spaced at the stage's rate
  (inference-perf loadgen ConstantLoadTimer);
- the prompts: G x P prompts (group prefix + question) generated once and shuffled once;
  a stage's request k sends prompt k mod G x P (inference-perf
  datagen/shared_prefix_datagen.py `load_lazy_data`: `data_index % len(prompts)`, the
  index being the request's number within its stage); `ignore_eos`, 1,000 output tokens
  each.
The schedulers, from the run's EndpointPickerConfig:
- precise-prefix-cache_load -> `llm-d-precise` (KV-event prefix scorer 2, kv-cache 1,
  active-request 1);
- estimate-prefix-cache_load -> `llm-d-prefix` (approximate prefix scorer 2, kv-cache 1,
  active-request 1; hashBlockSize 256 characters, maxPrefixBlocksToMatch 256,
  lruCapacityPerServer 2,200: a 16,384-token match cap and a 140,800-token index per
  replica at 4 characters a token);
- load -> `llm-d-prefix` with the prefix scorer at weight 0 (kv-cache 1, active-request 1);
- random -> `random` (random-picker).
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from xmemplan.sizing import routing as RT
from xmemplan.sizing.planner import Planner
from xmemplan.sizing.request import build_request

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements" / "multi-replica.csv"
KNEE_S = 2.0
TTFT_BOUND = 0.30
CEILING_BOUND = 0.20
CHARS_PER_TOKEN = 4  # GIE prefix plugin averageCharactersPerToken
FEEDBACK = 0
STAGE_GAP_S = 3600.0  # stage k starts at k x this (each stage drains first: checked)

# (rate, seconds) per stage, warm-up first (reported by no row); per benchmark
STAGES = {
    "llm-d-37-capacity": [(10.0, 25.0), (3.0, 210.0), (4.0, 180.0), (5.0, 120.0),
                          (6.0, 120.0), (8.0, 90.0), (10.0, 70.0), (12.0, 60.0),
                          (15.0, 50.0), (20.0, 50.0)],
}


def scheduler(measured: str) -> tuple[str, RT.RouterParams]:
    """Our router and its parameters for a scheduler of the 37-capacity run."""
    p = RT.RouterParams()
    if measured.startswith("precise"):
        return "llm-d-precise", replace(p, precise_prefix_weight=2.0, precise_queue_weight=0.0,
                                        precise_kv_weight=1.0, precise_active_weight=1.0)
    if measured.startswith("estimate"):
        return "llm-d-prefix", replace(
            p, llmd_prefix_weight=2.0, llmd_queue_weight=0.0, llmd_kv_weight=1.0,
            llmd_active_weight=1.0, llmd_cap_tokens=256 * 256 / CHARS_PER_TOKEN,
            llmd_view_tokens=2200 * 256 / CHARS_PER_TOKEN)
    if measured == "load":
        return "llm-d-prefix", replace(p, llmd_prefix_weight=0.0, llmd_queue_weight=0.0,
                                       llmd_kv_weight=1.0, llmd_active_weight=1.0)
    if measured == "random":
        return "random", p
    raise KeyError(measured)


class StagedPlanner(Planner):
    """The planner with the run's own requests: constant-rate stages, the shuffled prompt
    list sent in order (module docstring)."""

    run_stream: RT.Stream

    def stream(self, scale: float, k: int = 0) -> RT.Stream:
        return self.run_stream


def run_stream(row: dict[str, str], stages: list[tuple[float, float]], seed: int,
               hold_rates: tuple[float, float]) -> RT.Stream:
    G, P = int(row["groups"]), int(row["prompts_per_group"])
    prefix, question = float(row["prefix_tokens"]), float(row["question_tokens"])
    out = float(row["output_tokens"])
    arr: list[np.ndarray] = []
    idx: list[np.ndarray] = []
    for k, (rate, dur) in enumerate(stages):
        n = int(rate * dur)
        arr.append(k * STAGE_GAP_S + np.arange(n) / rate)
        idx.append(np.arange(n))
    arrival = np.concatenate(arr)
    n = len(arrival)
    order = np.random.default_rng(seed).permutation(G * P)  # prompt g x P + j
    prompt_id = order[np.concatenate(idx) % (G * P)]
    group = prompt_id // P
    prompt = np.full(n, prefix + question)
    per_tok, step = hold_rates
    # a re-sent prompt is its own session: all of it is reusable where it ran before
    hold = question * per_tok + out * step
    return RT.Stream(arrival, np.full(n, hold), prompt, np.full(n, out), prompt.copy(),
                     group.astype(np.int64), np.full(n, prefix), prompt_id.astype(np.int64))


def simulate(rows: list[dict[str, str]], seed: int
             ) -> dict[tuple[str, float], tuple[float, float, float]]:
    """Per (scheduler, stage QPS) of one replay of each scheduler's run: (TTFT p90 s,
    output tokens/s over the stage's span from its first request sent to its last
    finished, mean time per output token s)."""
    got: dict[tuple[str, float], tuple[float, float, float]] = {}
    by_sched: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_sched[row["router_measured"]].append(row)
    for measured, rs in by_sched.items():
        row = rs[0]
        stages = STAGES[row["benchmark"]]
        router, params = scheduler(measured)
        n = int(sum(int(r * d) for r, d in stages))
        prefix, question = int(row["prefix_tokens"]), int(row["question_tokens"])
        req, _ = build_request(
            ttft_slo="2s", prompt_tokens=str(prefix + question),
            hit_rate=prefix / (prefix + question), prefix_groups=int(row["groups"]),
            output_tokens=int(row["output_tokens"]), rate=stages[1][0], model=row["model"],
            gpu=row["gpu"], tp=int(row["tp"]), engine=row["engine"], router=router,
            requests=n, slo_on="all", slo_at="p90", seed=seed)
        req = replace(req, router_params=params)
        p = StagedPlanner(req)
        p.run_stream = run_stream(row, stages, seed, p.hold_rates())
        gpus = int(row["tp"]) * int(row["replicas"])
        tr = p.traffic("hbm-only", gpus, 0, 1.0)
        res = p.simulate("hbm-only", gpus, 0, tr)
        for _ in range(FEEDBACK):
            p.run_stream = replace(p.run_stream, hold=res.done - res.arrival)
            p.placements.clear()
            res = p.simulate("hbm-only", gpus, 0, tr)
        ttft = res.ttft
        stage = (p.run_stream.arrival // STAGE_GAP_S).astype(np.int64)
        for k, (rate, _) in enumerate(stages):
            sel = stage == k
            if k + 1 < len(stages) and res.done[sel].max() >= (k + 1) * STAGE_GAP_S:
                raise SystemExit(f"{measured}: stage {k} did not drain within "
                                 f"{STAGE_GAP_S:g} s")
            if k == 0:
                continue  # the warm-up
            span = float(res.done[sel].max() - p.run_stream.arrival[sel].min())
            out = float(res.requests.output[sel].sum())
            got[(measured, rate)] = (float(np.percentile(ttft[sel], 90)), out / span,
                                     float(np.nanmean(res.tpot[sel])))
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3,
                    help="replays (prompt shuffles) per scheduler; the median is compared")
    ap.add_argument("--feedback", type=int, default=0)
    a = ap.parse_args()
    global FEEDBACK
    FEEDBACK = a.feedback
    rows = list(csv.DictReader(DATA.open()))
    runs = [simulate(rows, s) for s in range(a.seeds)]
    by_router: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    tally = {"ttft": [0, 0], "tok": [0, 0]}  # [all, held-out] within the bound
    n_held = 0
    print(f"{'scheduler (measured -> ours)':<40}{'QPS':>4}{'TTFT p90 s':>11}{'ours':>8}"
          f"{'err':>6}{'out tok/s':>10}{'ours':>7}{'err':>6}{'ITL ms':>7}{'TPOT':>6}"
          f"  role")
    for row in rows:
        q = float(row["qps"])
        got = np.median(np.array([r[(row["router_measured"], q)] for r in runs]), axis=0)
        meas = float(row["ttft_p90_s"])
        mtok = float(row["output_tok_s"])
        e1, e2 = got[0] / meas - 1, got[1] / mtok - 1
        held = row["role"] == "held-out"
        n_held += held
        for key, err, bound in (("ttft", e1, TTFT_BOUND), ("tok", e2, CEILING_BOUND)):
            if abs(err) <= bound:
                tally[key][0] += 1
                tally[key][1] += held
        by_router[row["router_measured"]].append((q, meas, float(got[0])))
        name = f"{row['router_measured']} -> {scheduler(row['router_measured'])[0]}"
        print(f"{name:<40}{q:>4g}{meas:>11.3f}{got[0]:>8.3f}{e1:>+6.0%}{mtok:>10.0f}"
              f"{got[1]:>7.0f}{e2:>+6.0%}{float(row['itl_mean_s']) * 1e3:>7.0f}"
              f"{got[2] * 1e3:>6.0f}  {row['role']}")
    print(f"TTFT p90 within {TTFT_BOUND:.0%}: {tally['ttft'][0]} of {len(rows)} points "
          f"(held-out {tally['ttft'][1]} of {n_held}); output tokens/s within "
          f"{CEILING_BOUND:.0%}: {tally['tok'][0]} of {len(rows)} (held-out "
          f"{tally['tok'][1]} of {n_held}); median of {a.seeds} replays")
    print(f"Throughput ceiling (largest stage QPS with TTFT p90 <= {KNEE_S:g} s):")
    for r, pts in by_router.items():
        pts.sort()

        def knee(i: int) -> float:
            under = [q for q, *v in pts if v[i - 1] <= KNEE_S]
            return max(under) if under else 0.0

        m, o = knee(1), knee(2)
        top = pts[-1][0]
        ok = (m == o) or (m > 0 and abs(o / m - 1) <= CEILING_BOUND)
        mtxt = f">= {m:g}" if m == top else f"{m:g}"
        otxt = f">= {o:g}" if o == top else f"{o:g}"
        print(f"  {r:<28} measured {mtxt:>6}  ours {otxt:>6}  {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
