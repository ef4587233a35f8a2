"""How the host DRAM vs X-Mem answer on the shared Claude Code sessions moves with the
router and the replica count (docs/size.md, "Tier scope and routing").

    xmemplan hitrate ../shared/traces/claude-code-weka/ --scope global \\
        --capacity-curve auto --model qwen3-30b-a3b-fp8 --profile-out cc.json
    python benchmarks/replicas_cc.py cc.json [--tp 2] [--slo 2s]

For each router and replica count (tp2 replicas by default): the prompt-token split of
host DRAM (per engine instance, the catalog's scope) and X-Mem (one node shared by every
replica), and each option's warm p99 TTFT; then the fewest GPUs each option needs for the
SLO per router (`size --router`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from xmemplan.sizing import routing as RT
from xmemplan.sizing.planner import Planner
from xmemplan.sizing.request import build_request

ROUTERS = ("session", "round-robin", "sglang-cache-aware", "dynamo-kv")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--slo", default="2s")
    ap.add_argument("--rate", type=float, default=2.0)
    a = ap.parse_args()
    base, _ = build_request(ttft_slo=a.slo, workload=a.profile, rate=a.rate, tp=a.tp)
    print(f"{'router':<19}{'replicas':>9}  {'host DRAM: HBM/tier/recompute':>30} {'p99':>7}"
          f"  {'X-Mem: HBM/tier/recompute':>26} {'p99':>7}")
    for r in ROUTERS:
        p = Planner(replace(base, router=r))
        for reps in (1, 2, 4, 8, 16):
            g = reps * a.tp
            h, x = p.run("host-dram", g), p.run("xmem", g, 1)
            assert h.split is not None and x.split is not None

            def sp(t: tuple[float, float, float]) -> str:
                return "/".join(f"{v:.2f}" for v in t)

            print(f"{r:<19}{reps:>9}  {sp(h.split):>30} {h.slo_value_ms:>7,.0f}"
                  f"  {sp(x.split):>26} {x.slo_value_ms:>7,.0f}")
    print(f"\nFewest GPUs for {a.slo} p99 (tp{a.tp}), per router:")
    for r in ROUTERS:
        p = Planner(replace(base, router=r))
        got = {o: p.fewest_gpus(o, 1 if o == "xmem" else 0) for o in
               ("hbm-only", "host-dram", "xmem")}
        print(f"  {r:<19} " + ", ".join(f"{o} {'-' if v is None else v}"
                                         for o, v in got.items()))
    print(f"(routers: {', '.join(RT.ROUTERS)})")


if __name__ == "__main__":
    main()
