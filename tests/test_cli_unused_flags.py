"""`size` flags whose effect depends on the workload or the shape (round 10): where they
change nothing the command says so on stderr (a warning naming the flag and why, JSON
`warnings`), not a refusal; and what the hostile probe found (a TP size no engine runs,
--gpus not a whole number of replicas, --host-tier hbm or any tier of the wrong kind for
its flag, the fixed answer's percentile).
validate's are in tests/test_validate.py, the capacity chart's in test_plots_marks.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_cli

from xmemplan.profile import save_profile

FIXED = ["size", "--prompt-tokens", "8k", "--hit-rate", "0.8", "--rate", "2",
         "--requests", "200"]


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")


_run = run_cli


# -- size: --router, --tier-scope, --prefix-groups on a fixed deployment ------------------

def test_router_on_one_replica_says_it_changes_nothing(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """--gpus 2 as one tp2 replica: every router sends every request to it."""
    code, out, err = _run(capsys, *FIXED, "--gpus", "2", "--tp", "2", "--prefix-groups", "4",
                          "--router", "round-robin", "--tier-scope", "host-dram=server")
    assert code == 0, err
    assert ("Warning: --router round-robin changes nothing on one replica (--gpus 2 as tp2 "
            "ep2 replicas of 2 GPUs): every request goes to it; routing decides from two "
            "replicas (4 GPUs) up") in err
    assert ("Warning: --tier-scope host-dram=server changes nothing on one replica") in err
    assert out.startswith("On 2 GPUs")  # the answer is still first, on stdout


def test_router_on_two_replicas_with_groups_is_not_warned(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, *FIXED, "--gpus", "4", "--tp", "2", "--prefix-groups", "4",
                        "--router", "round-robin", "-f", "json")
    assert code == 0, err
    assert "--router" not in err


def test_router_without_shared_prefixes_says_it_changes_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """No sessions, no prefix groups: one curve stands for every replica (the SLO search
    says so in its reasons; the fixed deployment, which prints none, warns)."""
    code, out, err = _run(capsys, *FIXED, "--gpus", "4", "--router", "random", "-f", "json")
    assert code == 0, err
    said = ("--router random changes nothing here: the workload does not say which "
            "requests share a prefix")
    assert f"Warning: {said}" in err
    assert any(w.startswith(said) for w in json.loads(out)["warnings"])


def test_prefix_groups_with_closed_loop_users_says_it_changes_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "size", "--prompt-tokens", "8k", "--hit-rate", "0.8",
                        "--users", "4", "--requests", "200", "--gpus", "2",
                        "--prefix-groups", "4")
    assert code == 0, err
    assert ("Warning: --prefix-groups changes nothing here: closed-loop users (--users) are "
            "not placed on per-replica caches") in err


@pytest.mark.parametrize("item,said", [
    ("host-dram=replica", "host-dram-pcie5's catalog share_scope is replica"),
    ("xmem=cluster", "xmem's catalog share_scope is rack with no share_gpus, one domain "
     "for the whole deployment as cluster is"),
])
def test_tier_scope_equal_to_the_catalogs_says_it_changes_nothing(
        capsys: pytest.CaptureFixture[str], item: str, said: str) -> None:
    code, _, err = _run(capsys, *FIXED, "--gpus", "4", "--prefix-groups", "4",
                        "--tier-scope", item)
    assert code == 0, err
    assert f"Warning: --tier-scope {item} changes nothing: {said}" in err


def test_tier_scope_grouping_the_replicas_as_the_catalog_says_it_changes_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """tp8 replicas on 8-GPU servers: a server's replicas are one replica."""
    code, _, err = _run(capsys, *FIXED, "--gpus", "16", "--tp", "8", "--prefix-groups", "4",
                        "--tier-scope", "host-dram=server")
    assert code == 0, err
    assert ("Warning: --tier-scope host-dram=server changes nothing on 2 replicas of tp8 ep8 "
            "(h100-sxm: 8 GPUs per server): host-dram-pcie5 is read by the same replicas as "
            "at its catalog scope replica") in err


def test_tier_scope_that_changes_the_split_is_not_warned(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, *FIXED, "--gpus", "4", "--prefix-groups", "4",
                        "--tier-scope", "host-dram=server", "-f", "json")
    assert code == 0, err
    assert "--tier-scope" not in err


def test_tier_scope_in_the_slo_search_without_shared_prefixes_is_warned(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The search's reasons say only that routing changes no hit: the scope is warned (and
    the warning, computed with no --gpus, stopped the search with an internal error)."""
    code, out, err = _run(capsys, "size", "--ttft-slo", "1s", "--prompt-tokens", "8k",
                          "--hit-rate", "0.8", "--requests", "200", "--max-gpus", "8",
                          "--tier-scope", "host-dram=server", "--router", "random")
    assert code == 0, err
    assert ("Warning: --tier-scope host-dram=server changes nothing here: a tier's scope "
            "splits it over the replicas' own caches, and the workload does not say which "
            "requests share a prefix") in err
    assert "--router random changes nothing" not in err  # the answer's reason says it
    assert "Routing does not change these hits" in out.replace("\n", " ")


def test_closed_loop_users_reason_is_said_for_a_profile_with_sessions(tmp_path: Path) -> None:
    """The SLO search's "Routing does not change these hits" reason: a profile whose
    sessions are in the sample is not "a workload that does not say which requests share a
    prefix"; under --users it is not placed because the users are closed-loop."""
    from xmemplan.sizing.planner import _routing
    from xmemplan.sizing.request import build_request

    p = tmp_path / "profile.json"
    save_profile(p, {
        "source": {"paths": ["x"], "formats": {"tokens": 1}, "scope": "global"},
        "requests": 4, "sessions": 2, "model": "qwen3-30b-a3b",
        "kv_bytes_per_token": 98_304,
        "prompt_tokens": {"mean": 3000, "p50": 3000, "p90": 4000, "p99": 4000, "max": 4000},
        "hit_ratio": {"token_hit_ratio": 0.5},
        "requests_sample": {"prompt_tokens": [2000, 3000, 2000, 4000],
                            "hit_tokens": [0, 2000, 0, 2000], "session": [0, 0, 1, 1],
                            "timestamp_s": [0.0, 10.0, 1.0, 12.0]},
        "arrival": {"rate_rps": 0.2, "concurrency_mean": 1.0}})
    req, _ = build_request(ttft_slo="1s", workload=p, users=2)
    res = SimpleNamespace(answer="A.", reasons=[], options=[], router=None)
    _routing(req, res, compare=False)  # type: ignore[arg-type]
    assert res.reasons[0].startswith("Routing does not change these hits: closed-loop users "
                                     "are not placed on per-replica caches")


def test_tp_that_does_not_divide_the_heads_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--tp 3 on a 32-head model ran (a deployment vLLM and SGLang refuse to start)."""
    code, out, err = _run(capsys, "size", "--ttft-slo", "1s", "--tp", "3")
    assert code == 2
    assert ("Error: --tp 3 does not divide qwen3-30b-a3b-fp8's 32 attention heads: vLLM and "
            "SGLang refuse it") in err
    assert out == ""


@pytest.mark.parametrize("second,said", [
    ("host-dram-pcie5=rack", "host-dram-pcie5 twice (host-dram=server, "
     "host-dram-pcie5=rack)"),
    ("host-dram=rack", "host-dram twice (host-dram=server, host-dram=rack)"),
])
def test_one_tier_scoped_twice_is_refused(capsys: pytest.CaptureFixture[str], second: str,
                                          said: str) -> None:
    """The last scope used to win and the first be ignored."""
    code, out, err = _run(capsys, "size", "--ttft-slo", "1s", "--tier-scope",
                          "host-dram=server", "--tier-scope", second)
    assert code == 2
    assert f"Error: --tier-scope names tier {said}" in err
    assert out == ""


def test_fixed_answer_gives_the_slo_at_percentile(capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    """--slo-at p50 without --ttft-slo: the answer said 'TTFT p50' and gave each option's
    p99."""
    code, out, err = _run(capsys, *FIXED, "--gpus", "2", "--slo-at", "p50", "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    want = ", ".join(f"{o['option']} {o['ttft_p50_ms']:,.0f} ms" for o in doc["options"])
    assert doc["answer"].endswith(f"warm TTFT p50: {want}."), doc["answer"]
    assert all(o["ttft_p50_ms"] < o["ttft_p99_ms"] for o in doc["options"])


def test_fixed_gpus_not_whole_replicas_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--gpus 3 as tp2 replicas ran one replica on 2 GPUs and priced 3."""
    code, out, err = _run(capsys, *FIXED, "--gpus", "3", "--tp", "2")
    assert code == 2
    assert ("Error: --gpus 3 is not a whole number of tp2 ep2 replicas (2 GPUs each). Give a "
            "multiple of 2, like 2 or 4.") in err
    assert out == ""


def test_host_tier_hbm_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--host-tier hbm ran, the 'host-dram' option then offloading to more HBM."""
    code, out, err = _run(capsys, *FIXED, "--gpus", "2", "--host-tier", "hbm")
    assert code == 2
    assert "Error: --host-tier hbm is the GPU's own memory (HBM), which every option has" in err
    assert out == ""


HOST_TIERS = "host-dram-pcie5, host-dram-c2c, rdma-cx7 or nvme-gen5"


@pytest.mark.parametrize("flag,name,said,hint", [
    ("--host-tier", "xmem", "--host-tier xmem is an X-Mem tier (xmem, kind xmem), which the "
     "xmem option loads from: host DRAM would be compared with X-Mem itself",
     f"Name a host tier: {HOST_TIERS} (xmemplan catalog tiers); an X-Mem tier goes to "
     "--xmem-tier."),
    ("--host-tier", "mpu", "--host-tier mpu is an X-Mem tier (xmem, kind xmem)", None),
    ("--host-tier", "hbm", "--host-tier hbm is the GPU's own memory (HBM), which every option "
     "has", f"Name a tier the GPUs load from: {HOST_TIERS} (xmemplan catalog tiers)."),
    ("--xmem-tier", "host-dram", "--xmem-tier host-dram is host-dram-pcie5, a tier of kind "
     "host, not an X-Mem memory node", "Name an X-Mem tier: xmem (xmemplan catalog tiers); a host "
     "tier goes to --host-tier."),
    ("--xmem-tier", "nvme-gen5", "--xmem-tier nvme-gen5 is nvme-gen5, a tier of kind nvme, "
     "not an X-Mem memory node", None),
    ("--xmem-tier", "hbm", "--xmem-tier hbm is the GPU's own memory (HBM), which every "
     "option has", "Name an X-Mem tier: xmem (xmemplan catalog tiers)."),
])
@pytest.mark.parametrize("mode", ["search", "fixed", "sweep"])
def test_a_tier_of_the_wrong_kind_is_refused(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, stubbed: None,
                                             flag: str, name: str, said: str,
                                             hint: str | None, mode: str) -> None:
    """An X-Mem tier as --host-tier compared X-Mem with itself, and a host tier as
    --xmem-tier sized host DRAM as X-Mem nodes: both ran (exit 0), in the SLO search, on a
    fixed deployment and in the --gpus sweep. The simulations are stubbed: a refusal
    comes before them, an accepted run stops at them with exit 0."""
    from conftest import _accept

    monkeypatch.setattr("xmemplan.sizing.planner.evaluate", _accept)
    monkeypatch.setattr("xmemplan.sizing.pareto.sweep", _accept)
    args = {"search": ["size", "--ttft-slo", "500ms", "--prompt-tokens", "8k",
                       "--hit-rate", "0.8", "--rate", "2"],
            "fixed": [*FIXED, "--gpus", "2"], "sweep": ["size", "--gpus", "2"]}[mode]
    code, out, err = _run(capsys, *args, flag, name)
    assert code == 2, err
    assert f"Error: {said}" in err
    if hint is not None:
        assert hint in err
    assert out == ""


@pytest.mark.parametrize("flags", [[], ["--host-tier", "rdma-cx7", "--xmem-tier", "x-mem"],
                                   ["--host-tier", "nvme"]])
def test_tiers_of_their_kind_are_accepted(capsys: pytest.CaptureFixture[str], stubbed: None,
                                          flags: list[str]) -> None:
    code, _, err = _run(capsys, "size", "--ttft-slo", "500ms", *flags)
    assert code == 0 and err.strip() == "Error: accepted.", err  # the stub: flags taken


def test_fixed_cost_is_in_the_table_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    """--cost on a fixed deployment was carried in JSON only: the table and CSV were the
    same as without it."""
    args = [*FIXED, "--gpus", "2", "--cost", "gpu=2.5/h,xmem-node=40/h"]
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    assert "│ cost        │  $5.00/h │   $5.00/h │ $45.00/h │" in out
    code, out, err = _run(capsys, *args, "-f", "csv")
    assert code == 0, err
    head, *rows = out.splitlines()
    assert head.endswith(",cost") and [r.rsplit(",", 1)[1] for r in rows] == ["5.0", "5.0",
                                                                              "45.0"]


def test_plot_with_a_comparison_is_refused(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    """--gpu a,b (or --engine sglang,vllm) with --plot sized each and drew nothing."""
    png = tmp_path / "t.png"
    code, out, err = _run(capsys, "size", "--ttft-slo", "1s", "--gpu", "h100-sxm,h200",
                          "--plot", str(png))
    assert code == 2
    assert ("Error: --plot draws one sizing's TTFT against load, and --gpu/--engine with "
            "commas compare several in one table") in err
    assert out == "" and not png.exists()
