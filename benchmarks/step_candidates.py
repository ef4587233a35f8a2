"""Run one of the slower checks under a step-pricing candidate of benchmarks/step_pricing.py,
with the constants shipping it would bring (docs/model.md section 6, "Step pricing tried").

    .venv/bin/python benchmarks/step_candidates.py VARIANT CHECK [CHECK's arguments]
    e.g. benchmarks/step_candidates.py add-tp rate_check.py
         benchmarks/step_candidates.py max loaded_check.py --sweep

VARIANT: a name of step_pricing.VARIANTS (shipped, max, max-moe, add-moe, add-tp). The
candidate's calibration: the shipped constants with the variant's floor rule, MoE term and
tensor-parallel all-reduces; where the variant changes what a single request costs at TP 1
(the floor rule, the MoE term) the single-request fit is redone on it
(`xmemplan.sizing.calibration.fit`), and in every case the engines' step overheads are
refit on data/measurements/loaded.csv's fit rows (`xmemplan.sizing.loaded.fit_all`), as
shipping the variant would. CHECK: a script of benchmarks/ (rate_check.py,
replicas_check.py, loaded_check.py, ...) or `mod:xmemplan.sizing.loaded` for the loaded
fit's own report; it runs with the candidate in place of the shipped constants (the module
attribute `xmemplan.sizing.model.DEFAULT_CALIBRATION`, which `calibration_for` reads at each
request). Nothing is written; the shipped constants are untouched.
"""

from __future__ import annotations

import runpy
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def candidate(name: str) -> tuple[Any, float | None]:
    """(the candidate's calibration, its single-request held-out median or None where the
    single-request fit is not redone)."""
    import step_pricing as SP

    from xmemplan.sizing import calibration as C
    from xmemplan.sizing import loaded as L
    from xmemplan.sizing import model as M

    v = SP.VARIANTS[name]
    moe_s, _ = SP.moe_intercept()
    base = replace(M.DEFAULT_CALIBRATION, floor_rule=v.rule,
                   moe_layer_latency_s=moe_s if v.moe else 0.0,
                   allreduce_latency_s=SP.ALLREDUCE_LATENCY_S if v.tp_comm else 0.0,
                   allreduce_bus_share=SP.ALLREDUCE_BUS_SHARE if v.tp_comm else 0.0)
    single: float | None = None
    cal = base
    if v.rule != M.DEFAULT_CALIBRATION.floor_rule or v.moe:
        res = C.fit(base=base)
        single = float(C.summary(C.fit_table(res.params, base=res.calibration))["held-out"])
        cal = res.calibration
    fixed = cal

    class Sim(L.Simulator):
        def setup(self, run: L.Run) -> Any:
            s = super().setup(run)
            return replace(s, calibration=fixed.for_engine(run.engine))

    steps = {f.engine: (f.constants["base_s"], f.constants["per_token_s"],
                        f.constants["per_seq_s"])
             for f in L.fit_all(L.public_points(), Sim())}
    return replace(cal, step_overheads_by_engine=steps), single


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    sys.path.insert(0, str(HERE))
    import step_pricing as SP

    from xmemplan.sizing import model as M

    name, check, *rest = sys.argv[1:]
    if name not in SP.VARIANTS:
        raise SystemExit(f"unknown variant {name!r}; use " + ", ".join(SP.VARIANTS))
    cal, single = candidate(name)
    steps = ", ".join(f"{e} {b * 1e3:.3f} ms + {s * 1e6:.1f} us"
                      for e, (b, _, s) in sorted(cal.step_overheads_by_engine.items()))
    print(f"# candidate {name}: floor {cal.layer_latency_s * 1e6:.0f} us a layer ({cal.floor_rule}), "
          f"step overheads {steps}; single-request held-out "
          + (f"{single:.1%}" if single is not None else "as shipped (not refit)"), flush=True)
    M.DEFAULT_CALIBRATION = cal
    sys.argv = [check, *rest]
    if check.startswith("mod:"):
        runpy.run_module(check[4:], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(str(HERE / check), run_name="__main__")


if __name__ == "__main__":
    main()
