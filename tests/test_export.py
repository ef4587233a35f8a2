"""`xmemplan export --to aiperf`: mooncake_trace rows whose hash_ids keep shared prefixes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import shared_trace, unwrap

from xmemplan.cli.main import run
from xmemplan.errors import ExitCode
from xmemplan.export.aiperf import chained_block_ids, export_aiperf

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def aiperf_cache_hit_rate(rows: list[list[int]]) -> float:
    """AIPerf's analyze-trace `cache_hit_rate` (research/serving-sim.md 4.2): the mean over
    requests of (leading ids already seen) / len(ids), one global set, file order."""
    seen: set[int] = set()
    rates = []
    for ids in rows:
        if not ids:
            continue
        lead = 0
        while lead < len(ids) and ids[lead] in seen:
            lead += 1
        rates.append(lead / len(ids))
        seen.update(ids)
    return sum(rates) / len(rates)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_shared_prefixes_share_ids_and_partial_blocks_do_not():
    intern: dict = {}
    a = np.array([11, 12, 13, 14], dtype=np.int64)  # 4 source blocks of 4 tokens
    b = np.array([11, 12, 99], dtype=np.int64)
    ids_a = chained_block_ids(a, 4, 16, 8, intern, 0)
    ids_b = chained_block_ids(b, 4, 12, 8, intern, 1)
    assert len(ids_a) == 2 and len(ids_b) == math.ceil(12 / 8)
    assert ids_a[0] == ids_b[0]  # tokens 0-7 are the same keys: one id
    assert ids_a[1] != ids_b[1]  # diverged (and b's last block is partial)
    # The same 12 tokens again: same ids, including the partial last block.
    assert chained_block_ids(b, 4, 12, 8, intern, 2) == ids_b
    # A full block never reuses a partial block's id (AIPerf refuses an id at two sizes).
    c = np.array([11, 12, 99, 5], dtype=np.int64)
    assert chained_block_ids(c, 4, 16, 8, intern, 3)[1] != ids_b[1]
    # Tokens the source has no key for (its partial last page) are never shared.
    d = np.array([11], dtype=np.int64)
    assert chained_block_ids(d, 4, 10, 4, intern, 4)[1:] != chained_block_ids(
        d, 4, 10, 4, intern, 5)[1:]


def test_mooncake_round_trip_keeps_the_hit_rate(tmp_path):
    src = tmp_path / "mini.jsonl"
    rows: list[dict[str, Any]] = [
        {"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1, 2]},
        {"timestamp": 10, "input_length": 1500, "output_length": 5, "hash_ids": [0, 1, 3]},
        {"timestamp": 20, "input_length": 600, "output_length": 5, "hash_ids": [0, 4]},
        {"timestamp": 30, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1, 2]},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    res = export_aiperf([src], out, block_tokens=512)
    got = read_rows(out)
    assert res.rows == 4 and [r["input_length"] for r in got] == [1200, 1500, 600, 1200]
    assert [r["timestamp"] for r in got] == [0, 10, 20, 30]
    assert [r["session_id"] for r in got] == ["xm000000", "xm000001", "xm000002", "xm000003"]
    assert [r["extra"]["xmemplan_row"] for r in got] == [0, 1, 2, 3]
    assert aiperf_cache_hit_rate([r["hash_ids"] for r in got]) == pytest.approx(
        aiperf_cache_hit_rate([r["hash_ids"] for r in rows]))
    assert got[3]["hash_ids"] == got[0]["hash_ids"]
    assert got[1]["hash_ids"][:2] == got[0]["hash_ids"][:2] != got[1]["hash_ids"]


def test_mooncake_conversation_trace_keeps_aiperfs_figures(tmp_path):
    src = shared_trace("mooncake-fast25", "conversation_trace.jsonl")
    out = tmp_path / "conv.jsonl"
    export_aiperf([src], out, block_tokens=512)
    orig = [json.loads(line) for line in src.read_text().splitlines()]
    got = read_rows(out)
    assert len(got) == len(orig) == 12031
    # aiperf analyze-trace gives 0.384258 on the original (research/traces.md); the export
    # must give the same, and the same number of distinct prefixes.
    assert aiperf_cache_hit_rate([r["hash_ids"] for r in got]) == pytest.approx(0.384258,
                                                                               abs=5e-7)
    assert len({i for r in got for i in r["hash_ids"]}) == len(
        {i for r in orig for i in r["hash_ids"]})


def test_token_traces_at_a_chosen_block_size(tmp_path):
    out = tmp_path / "ex.jsonl"
    res = export_aiperf([EXAMPLES], out, block_tokens=64, spacing_ms=100)
    got = read_rows(out)
    assert res.rows == len(got) == 128 and res.files == 5
    assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / 64) for r in got)
    assert [r["timestamp"] for r in got] == [100.0 * i for i in range(128)]
    assert len({r["session_id"] for r in got}) == 128
    # Later rounds of a session resend the conversation: most rows hit.
    assert aiperf_cache_hit_rate([r["hash_ids"] for r in got]) > 0.5


def test_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "x.jsonl"
    code = run(["export", str(EXAMPLES), "--to", "aiperf", "-o", str(out), "--limit", "10"])
    got = capsys.readouterr().out
    assert code == ExitCode.OK
    assert got.startswith(f"wrote 10 requests to {out} (mooncake_trace, 512-token blocks:")
    assert len(read_rows(out)) == 10
    assert run(["export", str(EXAMPLES), "--to", "genai", "-o", str(out)]) == ExitCode.USAGE
    assert "unknown export target 'genai'" in capsys.readouterr().err
    assert run(["export", str(EXAMPLES), "--to", "aiperf", "-o", str(out), "--spacing",
                "0ms"]) == ExitCode.USAGE


@pytest.mark.parametrize(("extra", "says"), [
    (["--osl", "5"], "--osl applies to the synthetic workload"),
    (["--isl", "3"], "--synthetic-input-tokens-mean (--isl) applies to the synthetic workload"),
    (["--num-users", "3"], "--num-users applies to the synthetic workload"),
    (["--spacing", "120ms", "--speedup", "2"], "--spacing replaces the trace's timestamps, so "
     "--speedup would change nothing"),
])
def test_a_flag_traces_do_not_read_is_refused(tmp_path, capsys, monkeypatch, extra, says):
    """With traces, the synthetic workload's flags and --speedup under --spacing change
    nothing: an error naming the flag (they used to be ignored, exit 0), and no file."""
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "x.jsonl"
    code = run(["export", str(EXAMPLES), "--to", "aiperf", "-o", str(out), *extra])
    assert code == ExitCode.USAGE
    assert f"Error: {says}" in unwrap(capsys.readouterr().err)
    assert not out.exists()
