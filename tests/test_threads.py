"""xmemplan.threads, and that the answers computed in threads are the sequential ones:
`size`'s planner (replications side by side) and `size --gpus N`'s sweep (points side by
side) give the same results, simulation counts included, with 1 thread and with 2."""

from __future__ import annotations

import sys
import threading

import pytest

from xmemplan import threads
from xmemplan.sizing.planner import plan
from xmemplan.sizing.request import build_request


def test_map_ordered_keeps_the_input_order_and_uses_threads(monkeypatch):
    monkeypatch.setenv(threads.ENV, "3")
    names: set[str] = set()
    gate = threading.Barrier(3, timeout=10)  # only passes if 3 calls run at once

    def f(x: int) -> int:
        names.add(threading.current_thread().name)
        gate.wait()
        return x * x

    assert threads.map_ordered(f, [3, 1, 2]) == [9, 1, 4]
    assert len(names) == 3 and all(n.startswith("xmemplan") for n in names)


def test_one_thread_runs_in_the_callers_thread(monkeypatch):
    monkeypatch.setenv(threads.ENV, "1")
    assert threads.workers() == 1
    me = threading.current_thread().name
    assert threads.map_ordered(lambda _: threading.current_thread().name, [0, 1]) == [me, me]


@pytest.mark.parametrize("raw, want", [("2", 2), ("0", 1), ("x", 1), ("-3", 1)])
def test_the_environment_sets_the_thread_count(monkeypatch, raw, want):
    monkeypatch.setenv(threads.ENV, raw)
    assert threads.workers() == want


def test_the_first_failure_in_input_order_is_raised(monkeypatch):
    monkeypatch.setenv(threads.ENV, "2")

    def f(x: int) -> int:
        if x > 0:
            raise ValueError(f"bad {x}")
        return x

    with pytest.raises(ValueError, match="bad 1"):
        threads.map_ordered(f, [0, 1, 2])


@pytest.fixture
def eager_switch():
    """Switch threads every microsecond instead of every 5 ms, so that two replications'
    Python interleaves as much as it can (a shared attribute one sets and the other reads
    then shows in the answer)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _plan_dict(monkeypatch, n: str, **kw: object) -> dict:
    monkeypatch.setenv(threads.ENV, n)
    req, _ = build_request(ttft_slo="500ms", requests=1500, **kw)  # type: ignore[arg-type]
    res = plan(req, with_table=True, with_curve=False, with_router=False)
    d = res.to_dict()
    d.pop("provenance", None)
    return {"result": d, "replications": res.replications}


@pytest.mark.parametrize("kw", [{}, {"prompt_tokens": "20000:60000", "users": 16,
                                      "think": "1s"},
                                {"prompt_tokens": "20000:60000", "prefix_groups": 12}],
                         ids=["seed", "sessions", "routed"])
def test_the_planner_in_threads_gives_the_sequential_answer(monkeypatch, eager_switch, kw):
    # users in sessions with lognormal prompts: every replication's samples differ (the
    # seed scenario has one prompt length) and each turn's prefix is its session's last,
    # so a replication reading another's samples shows (Planner._order_idx did)
    one = _plan_dict(monkeypatch, "1", **kw)
    two = _plan_dict(monkeypatch, "2", **kw)
    assert one == two
    if not kw:  # the seed scenario's search keeps a second replication somewhere
        assert one["replications"]["max"] >= 2


def test_the_sweep_in_threads_gives_the_sequential_points(monkeypatch, capsys):
    from xmemplan.cli.main import run

    outs = []
    for n in ("1", "2"):
        monkeypatch.setenv(threads.ENV, n)
        assert run(["size", "--gpus", "1", "--format", "json", "--tier-capacity", "64GB"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and '"points"' in outs[0]
