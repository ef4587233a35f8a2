"""`size --gpus N` with an ordinary workload: a fixed deployment at the offered load, each
option simulated on N GPUs by the planner's own path (no search)."""

from __future__ import annotations

import json

import pytest

from xmemplan.cli.main import run
from xmemplan.sizing.planner import Planner, evaluate, nodes_for_capacity, plan
from xmemplan.sizing.request import build_request

SEED = dict(prompt_tokens="20k", hit_rate=0.8, rate=2.0, requests=400)
FIELDS = ("kv_full", "hbm_share_of_hits", "preemptions_per_request", "throughput_rps",
          "throughput_tok_s")


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")


def _req(slo: str = "1s"):
    return build_request(ttft_slo=slo, **SEED)[0]  # type: ignore[arg-type]


def test_fixed_equals_the_planners_own_evaluation_at_that_count() -> None:
    req = _req()
    res = plan(req, with_table=False, with_curve=False)
    for o in res.options:
        assert o.gpus is not None and o.point is not None
        got = {f.option: f for f in evaluate(req, o.gpus, o.nodes)}[o.option].point
        assert got is not None
        want = o.point
        assert got.ttft_ms == want.ttft_ms
        assert got.replications == want.replications
        for field in ("kv_full", "hbm_share", "preemptions_per_request", "throughput_rps",
                      "throughput_tok_s", "hit_ratio"):
            assert getattr(got, field) == getattr(want, field), (o.option, field)
    # and the planner's run at any count, X-Mem at the capacity's nodes
    p = Planner(req)
    fixed = evaluate(req, 3)
    for f in fixed:
        n = nodes_for_capacity(p) if f.option == "xmem" else 0
        assert f.nodes == (n if f.option == "xmem" else None)
        assert f.point is not None
        assert f.point.ttft_ms == p.run(f.option, 3, n).ttft_ms


def test_more_gpus_never_worsen_p99_at_a_fixed_load() -> None:
    req = _req("3600s")
    last: dict[str, float] = {}
    for g in (1, 2, 4, 8):
        for o in evaluate(req, g):
            assert o.point is not None
            p99 = o.point.ttft_ms["warm"]["p99"]
            if o.option in last:
                assert p99 <= last[o.option] * 1.001, (o.option, g, p99, last[o.option])
            last[o.option] = p99


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(["size", "--gpus", "2", "--prompt-tokens", "20k", "--hit-rate", "0.8",
                "--rate", "2", "--requests", "400", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_fields_present_and_in_range(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["gpus"] == 2 and doc["ttft_slo_ms"] is None
    assert [o["option"] for o in doc["options"]] == ["hbm-only", "host-dram", "xmem"]
    for o in doc["options"]:
        for f in FIELDS:
            assert f in o, f
        assert 0.0 <= o["kv_full"] <= 1.0
        assert 0.0 <= o["hbm_share_of_hits"] <= 1.0
        assert o["preemptions_per_request"] >= 0.0
        # the load offered is 2 requests/s: nothing finishes faster than it arrives
        assert 0.0 < o["throughput_rps"] <= 2.0 * 1.1
        assert o["throughput_tok_s"] > o["throughput_rps"] * 20_000 * 0.5
        assert o["ttft_p50_ms"] <= o["ttft_p90_ms"] <= o["ttft_p99_ms"]
        assert o["gpus"] == 2
    for o in doc["options"]:  # the answer names each option's p99
        assert f"{o['option']} {o['ttft_p99_ms']:,.0f} ms" in doc["answer"]


def test_answer_first_names_the_options_meeting_the_slo(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--ttft-slo", "1s", "--format", "json")
    doc = json.loads(out)
    meets = [o["option"] for o in doc["options"] if o["meets_slo"]]
    assert meets and len(meets) < 3  # this load separates them at 2 GPUs
    code, out, _ = _cli(capsys, "--ttft-slo", "1s")
    assert code == 0
    first = " ".join(" ".join(out.splitlines()[:2]).split())
    assert first.startswith("On 2 GPUs at Poisson arrivals at 2 requests/s:")
    assert ", ".join(meets) in first and "TTFT 1,000 ms" in first
    for line in out.splitlines():
        assert len(line) <= 80, line


def test_plot_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "--plot", "x.png")
    assert code != 0 and "--plot" in err


def test_xmem_at_l3_carries_its_prefetch_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """--xmem-path hicache-storage: JSON's `hicache` names the path and SGLang's prefetch
    policy (its default, timeout, unless given), the X-Mem option its share of L3 tokens
    recomputed; best_effort recomputes more than wait_complete; the default JSON has
    neither key; the flags refuse vLLM and a policy without the L3 path (usage, exit 2)."""
    docs = {}
    for pol in (None, "best_effort", "wait_complete"):
        flags = ["--xmem-path", "hicache-storage", "--format", "json"]
        code, out, _ = _cli(capsys, *flags, *([] if pol is None else
                                            ["--hicache-storage-prefetch-policy", pol]))
        assert code == 0
        docs[pol] = json.loads(out)
    assert docs[None]["hicache"] == {"xmem_path": "hicache-storage",
                                     "hicache_storage_prefetch_policy": "timeout"}
    rec = {p: {o["option"]: o.get("l3_prefetch_recomputed") for o in d["options"]}
           for p, d in docs.items()}
    assert rec["wait_complete"] == {"hbm-only": None, "host-dram": None, "xmem": 0.0}
    assert rec["best_effort"]["xmem"] > 0.2
    code, out, _ = _cli(capsys, "--format", "json")
    assert code == 0 and "hicache" not in json.loads(out)
    assert "l3_prefetch_recomputed" not in out
    assert _cli(capsys, "--hicache-storage-prefetch-policy", "timeout")[0] == 2
    assert _cli(capsys, "--xmem-path", "hicache-storage", "--engine", "vllm")[0] == 2
    assert _cli(capsys, "--xmem-path", "l3")[0] == 2
