"""benchmarks/rate_check.py: TTFT against Poisson rate on unseen public runs."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import ModuleType

import pytest

from xmemplan.errors import InputError


def _module() -> ModuleType:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import rate_check

    return rate_check


def test_every_row_is_read_with_its_run_and_rates_in_file_order() -> None:
    rc = _module()
    runs, points = rc.read()
    assert points and all(p.run in runs for p in points)
    for run in runs.values():
        assert len(run.rates) == len(set(run.rates))
        assert all(n >= 1 for _, n in run.stages)
        assert run.prompt_mean > 0 and run.output_mean > 0
    assert {p.quantity for p in points} <= set(rc.QUANTITIES)


def test_the_table_runs_on_one_point_and_a_far_measurement_is_reported_outside() -> None:
    rc = _module()
    runs, points = rc.read()
    p = next(q for q in points if q.quantity == "ttft_p50_ms")
    [row] = rc.rows_for([p], runs, seeds=1)  # the real engine, one replay of the run
    assert row.predicted > 0 and row.lo == row.hi == row.predicted
    far = dataclasses.replace(p, value=row.predicted * 10)  # a fake measurement
    near = dataclasses.replace(p, value=row.predicted * 1.1)
    rows = rc.rows_for([far, near], runs, seeds=1)
    assert [r.within for r in rows] == [False, True]
    text = rc.table(rows, 1)
    assert text[0].startswith("FAIL: TTFT within 30% at 1/2 unseen points")
    assert "outside" in text[3] and "outside" not in text[4]
    assert all(len(line) <= 80 for line in text)


def test_the_prompt_set_resent_at_each_rate_hits_the_engines_cache() -> None:
    rc = _module()
    runs, _ = rc.read()
    run = next(r for r in runs.values() if r.same_prompts and r.prefix_caching)
    got = rc.simulate(run, 0)
    first, later = got[run.rates[0]]["hbm_hit"], got[run.rates[-1]]["hbm_hit"]
    assert first < 0.2 < 0.8 < later  # cold set, then full blocks from the engine's pool
    cold = rc.simulate(dataclasses.replace(run, prefix_caching=False), 0)
    assert cold[run.rates[-1]]["hbm_hit"] == 0.0


def test_a_bad_row_names_the_file_line_and_field(tmp_path: Path) -> None:
    rc = _module()
    text = rc.DATA.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "rate.csv"
    bad.write_text("\n".join([text[0], text[1].replace(",ttft_p50_ms,", ",ttft_p42_ms,")]))
    with pytest.raises(InputError) as e:
        rc.read(bad)
    assert e.value.line == 2 and e.value.field == "quantity"
