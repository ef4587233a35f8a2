"""`xmemplan hitrate` output formats, files and the fast --help."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from xmemplan.traces import synth

SUMMARY_KEYS = [
    "sessions", "requests", "prompt_tokens", "token_hit_ratio", "mean_request_hit_ratio",
    "rounds_ge1_token_hit_ratio", "rounds_ge1_mean", "rounds_ge1_median",
    "rounds_ge1_share_ge_95", "session_token_hit_mean", "session_token_hit_median",
    "by_round", "skipped",
]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.jsonl"
    synth.write_tokens_jsonl(p, synth.agent_sessions(n_sessions=3, turns=5, seed=4))
    return p


def test_json_summary_has_every_named_metric(cli, trace):
    r = cli("hitrate", trace, "--format", "json")
    assert r.code == 0
    doc = json.loads(r.out)
    for key in SUMMARY_KEYS:
        assert key in doc, key
    assert doc["requests"] == 15 and doc["sessions"] == 3
    assert [b["round"] for b in doc["by_round"]] == ["0", "1", "2-4", "5-19", "20-99", "100+"]
    assert doc["by_round"][2]["requests"] == 9
    assert doc["scope"] == "session" and doc["files_by_format"] == {"tokens": 1}


def test_table_and_csv_agree_with_json(cli, trace):
    doc = json.loads(cli("hitrate", trace, "-f", "json").out)
    rows = dict(csv.reader(io.StringIO(cli("hitrate", trace, "-f", "csv").out)))
    assert float(rows["token_hit_ratio"]) == pytest.approx(doc["token_hit_ratio"])
    assert int(rows["requests"]) == 15
    table = cli("hitrate", trace)
    assert table.code == 0
    assert "Prefix-cache hit ratios" in table.out and "By round" in table.out
    assert f"{doc['token_hit_ratio']:.4f}" in table.out
    assert "scope: session" in table.err  # info on stderr, results on stdout


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_per_request_table_written(cli, trace, tmp_path, suffix):
    out = tmp_path / f"req{suffix}"
    r = cli("hitrate", trace, "--out", out, "-f", "json")
    assert r.code == 0 and out.exists()
    frame = pl.read_parquet(out) if suffix == ".parquet" else pl.read_csv(out)
    assert frame.columns[:6] == [
        "session_id", "request_index", "timestamp_s", "prompt_tokens", "hit_tokens", "hit_ratio"
    ]
    assert len(frame) == 15
    assert frame["hit_tokens"].sum() == json.loads(r.out)["hit_tokens"]


def test_format_name_in_format_flag_is_refused_with_the_right_flag(cli, tmp_path):
    # --format is the output; a trace format there used to switch the input silently.
    p = tmp_path / "m.jsonl"
    synth.write_mooncake(p, synth.agent_sessions(n_sessions=2, turns=3, seed=1))
    a = cli("hitrate", p, "--format", "mooncake")
    assert a.code == 2
    assert "--trace-format mooncake" in a.err
    assert cli("hitrate", p, "--trace-format", "mooncake").code == 0


def test_version_and_python_dash_m():
    out = subprocess.run(
        [sys.executable, "-m", "xmemplan", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("xmemplan ")


def test_cli_import_does_not_load_numba_or_polars():
    code = (
        "import sys\n"
        "import xmemplan.cli.main\n"
        "heavy = [m for m in ('numba', 'polars', 'torch', 'matplotlib') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_help_lists_commands(cli):
    r = cli("--help")
    assert r.code == 0
    for cmd in ("hitrate", "size", "validate", "catalog"):
        assert cmd in r.out
    r = cli("hitrate", "--help")
    assert r.code == 0 and "--scope" in r.out and "--page-size" in r.out


def test_first_line_counts_in_words(cli, tmp_path):
    """'1 request, 1 session', never '1 requests'; plurals otherwise."""
    one = tmp_path / "one.jsonl"
    one.write_text('{"session_id": "a", "timestamp": 0, "input_ids": [1, 2, 3]}\n')
    first = cli("hitrate", one).out.splitlines()[0]
    assert "(1 request, 1 session, infinite cache)" in first, first
    assert first.startswith("Token hit ratio 0.0000 "), first  # a ratio, not a bare '0'
    two = tmp_path / "two.jsonl"
    two.write_text('{"session_id": "a", "timestamp": 0, "input_ids": [1, 2]}\n'
                   '{"session_id": "b", "timestamp": 1, "input_ids": [1, 2, 3]}\n')
    assert "(2 requests, 2 sessions," in cli("hitrate", two).out.splitlines()[0]


def test_a_finite_cache_is_the_answer_and_repeats_add_up(cli, trace):
    """--capacity given: the first line answers at that capacity (the infinite cache in
    brackets); --capacity repeated adds sizes (as a comma list does), never drops one."""
    rep = cli("hitrate", trace, "--capacity", "100", "--capacity", "1M")
    comma = cli("hitrate", trace, "--capacity", "100,1M")
    assert rep.code == 0 and rep.out == comma.out
    first = " ".join(rep.out.split("Prefix-cache")[0].split())
    assert first.startswith("Token hit ratio ") and "with an LRU cache of 100 tokens / 1M" \
        " tokens (infinite cache: " in first, first
    doc = json.loads(cli("hitrate", trace, "--capacity", "100", "--capacity", "1M",
                         "-f", "json").out)
    assert [c["capacity"] for c in doc["capacity"]["capacities"]] == ["100", "1M"]


@pytest.mark.parametrize("value, text", [
    (2306.04, "2,306"), (1979.0, "1,979"), (360861538.0, "360,861,538"), (0.9626, "0.9626"),
    (51.2, "51.2"), (0.0004, "0.0004"), (2.5e16, "2.5e+16"), (float("nan"), "-"),
])
def test_table_floats_are_whole_with_separators(value, text):
    """Table cells: 2306.04 s prints as 2,306 (as ints do), small values keep 4 places."""
    from xmemplan.cli.views.render import fmt

    assert fmt(value) == text


def test_ray_address_without_the_ray_executor_is_refused(cli, trace):
    r = cli("hitrate", trace, "--ray-address", "head:6379")
    assert r.code == 2
    assert "Error: --ray-address applies to --executor ray" in r.err


@pytest.mark.parametrize(("flag", "value", "reads"), [
    ("--session-field", "sid", "request-log files"),
    ("--timestamp-field", "ts", "request-log files"),
    ("--tokenizer", "qwen2.5", "claude-transcript, netpreme or request-log files"),
    ("--subagents", None, "claude-transcript or claude-blocks files"),
    ("--tokens", "calibrated", "claude-transcript files"),
])
def test_a_format_flag_no_file_reads_is_warned(cli, trace, flag, value, reads):
    """A flag of a format the input does not hold changed nothing: the run says so (its
    result is the same as without it), instead of ignoring it in silence."""
    base = cli("hitrate", trace, "--format", "json")
    r = cli("hitrate", trace, "--format", "json", flag, *([value] if value else []))
    assert r.code == 0, r.err
    assert f"Warning: {flag} changed nothing: it applies to {reads}, and the files read are " \
           "tokens." in r.err
    assert json.loads(r.out)["token_hit_ratio"] == json.loads(base.out)["token_hit_ratio"]
    assert "changed nothing" not in base.err
