"""`xmemplan plan`: traces to a run folder (command, profile, plan, charts, summary, report)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from xmemplan.cli.main import run

EXAMPLES = ROOT / "examples" / "traces"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    import io
    from contextlib import redirect_stdout

    out = tmp_path_factory.mktemp("plan") / "run"
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = run(["plan", str(EXAMPLES), "--ttft-slo", "500ms", "--rate", "2", "-o",
                    str(out)])
    assert code == 0
    return out, buf.getvalue()


def test_run_folder_holds_every_file(made: tuple[Path, str]) -> None:
    out, _ = made
    names = {p.name for p in out.iterdir()}
    assert {"command.txt", "profile.json", "hitrate.json", "plan.json", "summary.md",
            "report.html"} <= names
    if any(p.suffix == ".png" for p in out.iterdir()):  # the plot extra is installed
        assert {"ttft_vs_load.png", "hit_ratio_vs_capacity.png"} <= names


def test_first_line_is_the_answer(made: tuple[Path, str]) -> None:
    out, stdout = made
    plan = json.loads((out / "plan.json").read_text())
    assert " ".join(stdout.split()).startswith(" ".join(plan["answer"].split()))
    assert (out / "summary.md").read_text().startswith("# run: " + plan["answer"])
    # the options' percentiles pool the replications; the answer's is their mean: both
    # pages say which is which where there were several replications
    several = any(o["replications"] > 1 for o in plan["options"])
    for page in ("summary.md", "report.html"):
        text = (out / page).read_text().replace("&#39;", "'")
        said = "percentiles: every replication's requests pooled; line 1's p99" in text
        assert said == several, (page, several)


def test_command_txt_reproduces_and_hashes_inputs(made: tuple[Path, str]) -> None:
    out, _ = made
    text = (out / "command.txt").read_text()
    first = text.splitlines()[0]
    assert first.startswith("xmemplan plan ") and "--ttft-slo 500ms" in first
    files = sorted(p for p in EXAMPLES.rglob("*") if p.is_file())
    for f in files:
        assert hashlib.sha256(f.read_bytes()).hexdigest() in text, f
    assert re.search(r"xmemplan \d+\.\d+", text)


def test_sizing_defaults_recorded(made: tuple[Path, str]) -> None:
    """Global scope, a capacity curve and the model: what size needs (not hitrate's
    per-session default, which counts no hit shared across sessions)."""
    out, _ = made
    prof = json.loads((out / "profile.json").read_text())
    assert prof["source"]["scope"] == "global"
    assert prof["capacity_curve"] and prof["model"] == "qwen3-30b-a3b-fp8"
    from xmemplan.plan import load_plan

    plan = load_plan(out / "plan.json")  # what validate --plan reads
    assert plan.model == "qwen3-30b-a3b-fp8"


def test_report_is_self_contained(made: tuple[Path, str]) -> None:
    out, _ = made
    html = (out / "report.html").read_text()
    assert not re.search(r'(src|href)="(?!data:|#)', html)  # nothing loaded from anywhere
    assert "default-src 'none'" in html
    assert "<script" not in html
    plan = json.loads((out / "plan.json").read_text())
    from markupsafe import escape

    assert str(escape(plan["answer"])) in html
    for a in plan["assumptions"]:
        assert str(escape(a["source"])) in html


def test_refuses_a_folder_of_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    code = run(["plan", str(EXAMPLES), "--ttft-slo", "500ms", "-o", str(tmp_path)])
    assert code == 2
    assert "not an earlier run" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_size_warns_on_a_per_session_profile(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import unwrap

    prof = tmp_path / "p.json"
    assert run(["-q", "hitrate", str(EXAMPLES), "--capacity-curve", "auto", "--profile-out",
                str(prof)]) == 0  # hitrate's default scope: per session here
    assert json.loads(prof.read_text())["source"]["scope"] == "session"
    assert any("session scope" in a for a in json.loads(prof.read_text())["assumptions"])
    capsys.readouterr()
    assert run(["size", "--ttft-slo", "500ms", "--workload", str(prof), "--requests",
                "500"]) == 0
    err = unwrap(capsys.readouterr().err)
    assert "was made per session" in err and "--scope global" in err and "xmemplan plan" in err


def test_no_warning_on_plans_own_profile(made: tuple[Path, str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import unwrap

    out, _ = made
    assert run(["size", "--ttft-slo", "500ms", "--workload", str(out / "profile.json"),
                "--requests", "500"]) == 0
    assert "was made per session" not in unwrap(capsys.readouterr().err)


def test_profile_with_requests_outside_any_prefix_group_reads(made: tuple[Path, str]) -> None:
    """hitrate writes prefix_group -1 for a request in no group (docs/profile.md); the
    reader takes it (it had refused every negative value, so plan on the examples failed)."""
    from xmemplan.profile import load_profile

    out, _ = made
    doc = json.loads((out / "profile.json").read_text())
    groups = doc["requests_sample"].get("prefix_group")
    if groups is not None:
        assert min(groups) == -1  # the examples have requests in no group
    load_profile(out / "profile.json")


def test_report_without_charts_says_why(made: tuple[Path, str], tmp_path: Path) -> None:
    """Without matplotlib the folder has no PNG: the report is still whole and says why."""
    import shutil

    from xmemplan.cli.views.report import load_run, render_html

    out, _ = made
    copy = tmp_path / "run"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("*.png"))
    html = render_html(load_run(copy))
    assert "<figure" not in html
    assert "matplotlib is not installed" in html
    assert "Validated range and measured errors" in html


def test_think_without_users_is_refused(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--think is the think time of --users: alone it would change nothing (it used to be
    ignored), so it is an error, and no run folder is written."""
    code = run(["plan", str(EXAMPLES), "--ttft-slo", "500ms", "--think", "3s", "-o",
                str(tmp_path / "run")])
    assert code == 2
    assert "--think is the think time of --users" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_subagents_on_traces_without_them_warns(made: tuple[Path, str],
                                                capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    """--subagents on traces no format of which has sub-agents changed nothing: said."""
    trace = tmp_path / "t.jsonl"
    from xmemplan.traces import synth

    synth.write_tokens_jsonl(trace, synth.agent_sessions(n_sessions=3, turns=5, seed=4))
    code = run(["plan", str(trace), "--ttft-slo", "2s", "--requests", "200", "--subagents",
                "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "--subagents changed nothing" in " ".join(err.split())
