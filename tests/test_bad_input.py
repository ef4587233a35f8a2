"""Every bad-input case of the hitrate issue: a clear error or a counted, reported skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import unwrap

from xmemplan.errors import ExitCode

GOOD_TOKENS = '{"session_id": "s", "timestamp": 0, "input_ids": [1, 2, 3]}\n'
GOOD_MOONCAKE = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'


def _write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


CASES = [
    # (name, file content after one good line, expected reason fragment, field)
    ("malformed", GOOD_TOKENS + '{"session_id": "s", "input_ids": [1,\n' + GOOD_TOKENS,
     "malformed JSON", None),
    ("wrong_type", GOOD_TOKENS + '{"session_id": "s", "input_ids": "1 2 3"}\n', "expected a list",
     "input_ids"),
    ("float_ids", GOOD_TOKENS + '{"session_id": "s", "input_ids": [1.5, 2]}\n', "64-bit integers",
     "input_ids"),
    ("missing", GOOD_TOKENS + '{"session_id": "s"}\n', "missing field", "input_ids"),
    ("not_object", GOOD_TOKENS + "[1, 2, 3]\n", "expected a JSON object", None),
    ("truncated", GOOD_TOKENS + '{"session_id": "s", "input_ids": [1, 2', "truncated", None),
]


@pytest.mark.parametrize("name,content,reason,field", CASES, ids=[c[0] for c in CASES])
def test_token_file_problems_are_counted_then_strict_fails(cli, tmp_path, name, content, reason,
                                                           field):
    p = _write(tmp_path, f"{name}.jsonl", content)
    r = cli("hitrate", p, "-f", "json")
    assert r.code == ExitCode.OK, r.err
    doc = json.loads(r.out)
    assert doc["skipped"]["lines"] == 1
    (key,) = doc["skipped"]["by_reason"]
    assert reason in key and (field is None or field in key)
    assert reason in r.err and f"{p.name}:" in r.err  # reported on stderr with file:line
    strict = cli("hitrate", p, "--strict")
    assert strict.code == ExitCode.INPUT
    assert strict.err.startswith("Error: ") and p.name in strict.err and "Traceback" not in strict.err
    if field:
        assert f"field '{field}'" in strict.err


def test_non_utf8_bytes(cli, tmp_path):
    p = _write(tmp_path, "latin.jsonl", GOOD_TOKENS.encode() + b'{"session_id": "caf\xe9"}\n')
    r = cli("hitrate", p, "-f", "json")
    assert r.code == ExitCode.OK
    assert "line is not UTF-8 text" in json.loads(r.out)["skipped"]["by_reason"]
    assert cli("hitrate", p, "--strict").code == ExitCode.INPUT


@pytest.mark.parametrize(
    "row,reason",
    [
        ('{"timestamp": 0, "input_length": -5, "hash_ids": []}', "outside"),
        ('{"timestamp": 0, "input_length": 900000000000, "hash_ids": [1]}', "outside"),
        ('{"timestamp": 0, "input_length": 2000, "hash_ids": [1, 2]}', "expected ceil(2000/512) = 4"),
        ('{"timestamp": 0, "input_length": "600", "hash_ids": [1, 2]}', "expected an integer"),
    ],
)
def test_mooncake_lengths(cli, tmp_path, row, reason):
    p = _write(tmp_path, "m.jsonl", GOOD_MOONCAKE + row + "\n")
    r = cli("hitrate", p, "-f", "json")
    assert r.code == ExitCode.OK
    assert any(reason in k for k in json.loads(r.out)["skipped"]["by_reason"])
    assert cli("hitrate", p, "--strict").code == ExitCode.INPUT


def test_claude_blocks_inconsistent_hashes_and_broken_file(cli, tmp_path):
    good = {"id": "x", "block_size": 64, "hash_id_scope": "local",
            "requests": [{"t": 0, "type": "n", "in": 130, "out": 1, "hash_ids": [1, 2]},
                         {"t": 1, "type": "n", "in": 200, "out": 1, "hash_ids": [1, 2]}]}
    _write(tmp_path, "a.json", json.dumps(good))
    broken = json.dumps({**good, "id": "y"})[:-40]  # cut short
    _write(tmp_path, "b.json", broken)
    r = cli("hitrate", tmp_path, "-f", "json", "-t", "claude-blocks")
    assert r.code == ExitCode.OK
    reasons = json.loads(r.out)["skipped"]["by_reason"]
    assert any("expected 200 // 64 = 3 full blocks" in k for k in reasons)
    assert any("truncated" in k for k in reasons)
    assert json.loads(r.out)["requests"] == 1
    # the truncated file is one skipped file; the bad request of a.json (a JSON document,
    # so it has no line number) is one skipped record, not a skipped file
    skipped = json.loads(r.out)["skipped"]
    assert skipped["files"] == 1 and skipped["lines"] == 1
    text = cli("hitrate", tmp_path, "-t", "claude-blocks")
    assert "1 line skipped, 1 file skipped" in unwrap(text.err)


def test_empty_file_and_empty_directory(cli, tmp_path):
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    r = cli("hitrate", empty_dir)
    assert r.code == ExitCode.INPUT and "directory holds no files" in r.err
    _write(tmp_path / "nothing", "empty.jsonl", "")
    r = cli("hitrate", empty_dir)
    assert r.code == ExitCode.INPUT and "no requests could be read" in r.err and "1 empty file" in r.err


def test_missing_path_and_unknown_names(cli, tmp_path):
    r = cli("hitrate", tmp_path / "nope")
    assert r.code == ExitCode.INPUT and "no such file or directory" in r.err
    p = _write(tmp_path, "t.jsonl", GOOD_TOKENS)
    r = cli("hitrate", p, "-t", "vllm")
    assert r.code == ExitCode.USAGE and "Choose one of" in r.err and "mooncake" in r.err
    r = cli("hitrate", p, "-f", "yaml")
    assert r.code == ExitCode.USAGE and "table, json, csv" in r.err
    r = cli("hitrate", p, "--scope", "rack")
    assert r.code == ExitCode.USAGE
    r = cli("hitrate", p, "--page-size", "0")
    assert r.code == ExitCode.USAGE
    r = cli("hitrate", p, "--out", tmp_path / "x.xlsx")
    assert r.code == ExitCode.USAGE and ".parquet or .csv" in r.err


def test_unrecognized_file_reported_and_strict_fails(cli, tmp_path):
    _write(tmp_path, "t.jsonl", GOOD_TOKENS)
    _write(tmp_path, "readme.txt", "hello\n")
    r = cli("hitrate", tmp_path)
    assert r.code == ExitCode.OK and "readme.txt: matches no known trace format" in r.err
    assert cli("hitrate", tmp_path, "--strict").code == ExitCode.INPUT


def test_all_lines_bad_is_an_error(cli, tmp_path):
    p = _write(tmp_path, "t.jsonl", '{"session_id": "s", "input_ids": "x"}\n')
    r = cli("hitrate", p, "-t", "tokens")
    assert r.code == ExitCode.INPUT and "no requests could be read" in r.err and "1 line skipped" in r.err


def test_internal_errors_hide_traceback_unless_debug(cli, tmp_path, monkeypatch):
    import xmemplan.hitrate as H

    def boom(*a, **k):
        raise RuntimeError("kaput")

    monkeypatch.setattr(H, "analyze", boom)
    p = _write(tmp_path, "t.jsonl", GOOD_TOKENS)
    r = cli("hitrate", p)
    assert r.code == 1 and "internal error (RuntimeError: kaput)" in r.err and "--debug" in r.err
    with pytest.raises(RuntimeError):
        cli("--debug", "hitrate", p)


# --- Inputs that silently changed the figures (issue 10, class 6): the right figure -------

CORPUS = Path(__file__).resolve().parent / "corpus"


def _json(cli, *args) -> dict:
    r = cli(*args, "-f", "json")
    assert r.code == ExitCode.OK, r.err
    return json.loads(r.out)


def test_same_file_named_twice_is_read_once(cli, tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes((CORPUS / "tokens" / "plain.jsonl").read_bytes())
    once = _json(cli, "hitrate", p)
    for args in ((p, p), (tmp_path, p), (p, tmp_path / "." / "t.jsonl")):
        twice = _json(cli, "hitrate", *args)
        assert twice["requests"] == once["requests"] == 6
        assert twice["token_hit_ratio"] == once["token_hit_ratio"]
        assert any("read once" in n for n in twice["notes"])


def test_block_traces_with_the_same_id_share_no_cache(cli):
    # Two files, one session each with the same `id`, 3 requests of 69, 133, 197 tokens whose
    # block ids are [0], [0, 1], [0, 1, 2]: each file alone hits 64 + 128 = 192 of 399.
    # A cache shared through the id would add 64 + 128 + 192 false hits for the second file.
    doc = _json(cli, "hitrate", CORPUS / "blocks" / "a", CORPUS / "blocks" / "b",
                "--scope", "global")
    assert doc["requests"] == 6 and doc["prompt_tokens"] == 798
    assert doc["token_hit_ratio"] == pytest.approx(384 / 798)


def test_mooncake_files_of_the_same_name_keep_their_requests_apart(cli):
    doc = _json(cli, "hitrate", CORPUS / "mooncake" / "a", CORPUS / "mooncake" / "b")
    assert doc["requests"] == 3 and doc["sessions"] == 3  # was 2: conv#1 merged


@pytest.mark.parametrize("name,field", [("mooncake_null_hash.jsonl", "hash_ids"),
                                        ("nulls_ids.jsonl", "input_ids")])
def test_a_null_id_list_never_takes_a_nested_list(cli, name, field):
    # Line 2's list is null; a nested field holds the same ids as line 1, which would make
    # line 2 a full hit (ratio 0.5 over the two lines) if it were taken.
    doc = _json(cli, "hitrate", CORPUS / "bad" / name, "--scope", "global")
    assert doc["requests"] == 1 and doc["token_hit_ratio"] == 0.0
    assert doc["skipped"]["by_reason"] == {f"missing field ({field})": 1}


def test_unreadable_timestamps_keep_file_order(cli):
    # Prompts of 10, 30, 20, 40 identical tokens, times 0, "noon", null, 3. In file order the
    # hits are 0, 10, 20, 30 = 60 of 100. Moving the null one to the end (and dropping the
    # "noon" one) gave 0, 10, 20 = 30 of 70.
    doc = _json(cli, "hitrate", CORPUS / "bad" / "timestamps.jsonl")
    assert doc["requests"] == 4 and doc["token_hit_ratio"] == pytest.approx(0.6)
    assert sum(doc["warnings"].values()) == 2 and doc["skipped"]["lines"] == 0
    strict = cli("hitrate", CORPUS / "bad" / "timestamps.jsonl", "--strict")
    assert strict.code == ExitCode.INPUT and "timestamps.jsonl:2" in strict.err


def test_requests_before_the_first_timestamp_stay_first(cli, tmp_path):
    rows = [(None, 10), (None, 20), (5, 30)]
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"session_id": "s", "timestamp": t, "input_ids": [1] * n})
                         + "\n" for t, n in rows))
    doc = _json(cli, "hitrate", p)
    assert doc["token_hit_ratio"] == pytest.approx((0 + 10 + 20) / 60)
    assert sum(doc["warnings"].values()) == 1


def test_scope_session_without_sessions_says_why_it_is_zero(cli):
    r = cli("hitrate", CORPUS / "mooncake", "--scope", "session", "-f", "json")
    assert r.code == ExitCode.OK and json.loads(r.out)["token_hit_ratio"] == 0.0
    assert "carry no session ids" in r.err and "--scope global" in r.err
    auto = _json(cli, "hitrate", CORPUS / "mooncake")
    assert auto["token_hit_ratio"] > 0 and not any("session ids" in n for n in auto["notes"])


def test_notes_print_when_zero_requests_are_read(cli):
    r = cli("hitrate", CORPUS / "blocks" / "subagent_only.json")
    assert r.code == ExitCode.INPUT
    assert "2 sub-agent requests not included" in r.err and "subagent_only.json" in r.err
    assert _json(cli, "hitrate", CORPUS / "blocks" / "subagent_only.json",
                 "--subagents")["requests"] == 2


def test_numpy_warnings_stay_off_stderr(tmp_path):
    """A numpy RuntimeWarning raised during a run (forced here: a mean of an empty slice in
    the summary) reaches stderr only with --debug."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, xmemplan.hitrate.metrics as m\n"
        "orig = m.summarize\n"
        "def noisy(*a, **k):\n"
        "    np.mean(np.array([]))\n"
        "    return orig(*a, **k)\n"
        "m.summarize = noisy\n"
        "from xmemplan.cli.main import run\n"
        "sys.exit(run(sys.argv[1:]))\n"
    )
    trace = CORPUS / "tokens" / "plain.jsonl"
    for debug, expect in (([], False), (["--debug"], True)):
        r = subprocess.run([sys.executable, "-c", code, *debug, "hitrate", str(trace)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert ("RuntimeWarning" in r.stderr) is expect, r.stderr
