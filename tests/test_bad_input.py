"""Every bad-input case of the hitrate issue: a clear error or a counted, reported skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_empty_file_and_empty_directory(cli, tmp_path):
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    r = cli("hitrate", empty_dir)
    assert r.code == ExitCode.INPUT and "directory holds no files" in r.err
    _write(tmp_path / "nothing", "empty.jsonl", "")
    r = cli("hitrate", empty_dir)
    assert r.code == ExitCode.INPUT and "no requests could be read" in r.err and "1 empty files" in r.err


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
    assert r.code == ExitCode.INPUT and "no requests could be read" in r.err and "1 lines skipped" in r.err


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
