"""Bad input in text traces: a counted, reported skip, or with --strict a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xmemplan.errors import ExitCode

SID = "0e0e0e0e-0000-4000-8000-000000000001"


def _rec(kind: str, uuid: str, parent: str | None, **extra) -> dict:
    row = {"parentUuid": parent, "isSidechain": False, "sessionId": SID, "type": kind,
           "uuid": uuid, "timestamp": f"2026-03-25T19:42:{len(uuid):02d}.000Z"}
    row.update(extra)
    return row


def _user(uuid: str, parent: str | None, text: str) -> dict:
    return _rec("user", uuid, parent, message={"role": "user", "content": text})


def _assistant(uuid: str, parent: str, mid: str, usage: object = "default") -> dict:
    msg: dict[str, object] = {"id": mid, "role": "assistant", "model": "claude-opus-4-6",
           "content": [{"type": "text", "text": f"reply {mid}"}]}
    if usage == "default":
        usage = {"input_tokens": 3, "cache_read_input_tokens": 5000,
                 "cache_creation_input_tokens": 10, "output_tokens": 7}
    if usage is not None:
        msg["usage"] = usage
    return _rec("assistant", uuid, parent, message=msg)


def _good() -> list[dict]:
    return [
        _user("u1", None, "first question"),
        _assistant("a1", "u1", "msg_1"),
        _user("u2", "a1", "second question"),
        _assistant("a2", "u2", "msg_2"),
    ]


def _lines(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _bad_usage(usage: object) -> bytes:
    return _lines(_good() + [_user("u3", "a2", "third"), _assistant("a3", "u3", "msg_3", usage)])


CASES = [
    # (id, file bytes, reason fragment, field or None)
    ("broken_json", _lines(_good()) + b'{"type": "user", "uuid": "u9", "message": {\n'
     + _lines([_user("u3", "a2", "x"), _assistant("a3", "u3", "msg_3")]),
     "malformed JSON", None),
    ("unknown_type", _lines(_good() + [_rec("hologram", "h1", "a2")]),
     "unknown record type 'hologram'", "type"),
    ("missing_message", _lines(_good() + [_rec("user", "u3", "a2")]),
     "user record without a message object", "message"),
    ("usage_absent", _bad_usage(None), "usage absent", "message.usage"),
    ("usage_negative", _bad_usage({"input_tokens": 3, "cache_read_input_tokens": -5,
                                   "cache_creation_input_tokens": 0}),
     "-5 is not a count", "message.usage.cache_read_input_tokens"),
    ("usage_field_absent", _bad_usage({"cache_read_input_tokens": 5}),
     "usage absent", "message.usage.input_tokens"),
    ("dangling_parent", _lines(_good() + [_user("u3", "nowhere", "orphan"),
                                          _assistant("a3", "u3", "msg_3")]),
     "parentUuid points to no record", "parentUuid"),
    ("not_utf8", _lines(_good()) + b'{"type": "user", "uuid": "u3", "message": "caf\xe9"}\n',
     "line is not UTF-8 text", None),
    ("truncated", _lines(_good()) + b'{"type": "assistant", "uuid": "a9", "mess',
     "truncated last line", None),
]


@pytest.mark.parametrize("name,data,reason,field", CASES, ids=[c[0] for c in CASES])
def test_transcript_problems_counted_then_strict_fails(cli, tmp_path, name, data, reason, field):
    p = tmp_path / f"{SID}.jsonl"
    p.write_bytes(data)
    r = cli("hitrate", p, "-f", "json")
    assert r.code == ExitCode.OK, r.err
    doc = json.loads(r.out)
    assert doc["files_by_format"] == {"claude-transcript": 1}
    assert doc["skipped"]["lines"] == 1, doc["skipped"]
    (key,) = doc["skipped"]["by_reason"]
    assert reason in key and (field is None or field in key)
    assert reason in r.err and p.name in r.err  # shown on stderr with the file
    assert doc["requests"] >= 2  # the good requests are still read
    strict = cli("hitrate", p, "--strict")
    assert strict.code == ExitCode.INPUT, strict.err
    assert strict.err.startswith("Error: ") and p.name in strict.err
    assert "Traceback" not in strict.err
    if field:
        assert f"field '{field}'" in strict.err


def test_usage_problem_keeps_the_request_without_api_figures(tmp_path):
    from xmemplan.hitrate import HitrateOptions, analyze

    p = tmp_path / f"{SID}.jsonl"
    p.write_bytes(_bad_usage(None))
    res = analyze([p], HitrateOptions())
    f = res.requests_frame()
    assert f.height == 3 and f["reported_cached_tokens"].null_count() == 1
    assert res.reported is not None and res.reported["requests"] == 2


def test_dangling_parent_prompt_starts_after_the_break(tmp_path):
    from xmemplan.hitrate import HitrateOptions, analyze

    p = tmp_path / f"{SID}.jsonl"
    p.write_bytes(_lines([_user("u3", "gone", "resumed session"),
                          _assistant("a3", "u3", "msg_3"),
                          _user("u4", "a3", "next"), _assistant("a4", "u4", "msg_4")]))
    res = analyze([p], HitrateOptions())
    assert res.summary["requests"] == 2
    assert res.skips.total == 1  # the missing link is counted once, not per request


def _netpreme_run(tmp_path: Path, traces: list[str], metrics: list[dict] | None) -> Path:
    run = tmp_path / "runs" / "task-1"
    run.mkdir(parents=True)
    (run / "turn_traces.jsonl").write_text("".join(t + "\n" for t in traces))
    if metrics is not None:
        (run / "engine_metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return run


def _turn(k: int) -> str:
    msgs = "\n".join(f"MSG:{json.dumps({'role': 'user', 'content': f'step {i}'})}"
                     for i in range(k + 1))
    return json.dumps({"request_time": 100.0 + k, "isl_text": "SYSTEM:be brief\n" + msgs,
                       "isl_new_text": "", "osl_text": "ok"})


NETPREME_CASES = [
    ("missing_isl_text", [_turn(0), json.dumps({"request_time": 1.0}), _turn(2)],
     [{"isl": 10, "isl_new": 10}] * 3, "missing or not a string", "isl_text"),
    ("isl_new_above_isl", [_turn(0), _turn(1)],
     [{"isl": 10, "isl_new": 10}, {"isl": 20, "isl_new": 25}], "exceeds isl", "isl_new"),
    ("negative_isl", [_turn(0), _turn(1)],
     [{"isl": 10, "isl_new": 10}, {"isl": -20, "isl_new": 5}], "not a token count", "isl"),
    ("row_count_mismatch", [_turn(0), _turn(1), _turn(2)],
     [{"isl": 10, "isl_new": 10}], "engine rows for 3 turns", None),
]


@pytest.mark.parametrize("name,traces,metrics,reason,field", NETPREME_CASES,
                         ids=[c[0] for c in NETPREME_CASES])
def test_netpreme_problems(cli, tmp_path, name, traces, metrics, reason, field):
    _netpreme_run(tmp_path, traces, metrics)
    r = cli("hitrate", tmp_path, "-f", "json")
    assert r.code == ExitCode.OK, r.err
    doc = json.loads(r.out)
    assert doc["skipped"]["lines"] + doc["skipped"]["files"] == 1, doc["skipped"]
    (key,) = doc["skipped"]["by_reason"]
    assert reason in key and (field is None or field in key)
    strict = cli("hitrate", tmp_path, "--strict")
    assert strict.code == ExitCode.INPUT and strict.err.startswith("Error: ")
    assert "Traceback" not in strict.err


REQUEST_LOG_CASES = [
    ("no_messages", {"session_id": "s", "request": {"model": "m", "prompt": "hi"}},
     "no request body with a messages list", "messages", []),
    ("empty_messages", {"session_id": "s", "messages": []}, "empty messages list", "messages",
     []),
    ("missing_session_field", {"messages": [{"role": "user", "content": "hi"}]},
     "missing or not a scalar", "conv", ["--session-field", "conv"]),
    ("bad_timestamp_field", {"conv": "c", "at": "yesterday",
                             "messages": [{"role": "user", "content": "hi"}]},
     "ISO 8601", "at", ["--session-field", "conv", "--timestamp-field", "at"]),
]


@pytest.mark.parametrize("name,row,reason,field,flags", REQUEST_LOG_CASES,
                         ids=[c[0] for c in REQUEST_LOG_CASES])
def test_request_log_problems(cli, tmp_path, name, row, reason, field, flags):
    good = {"conv": "c", "session_id": "s", "at": 5.0,
            "messages": [{"role": "user", "content": "hello"}]}
    p = tmp_path / "log.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n" + json.dumps(good) + "\n")
    r = cli("hitrate", p, "-f", "json", *flags)
    assert r.code == ExitCode.OK, r.err
    doc = json.loads(r.out)
    assert doc["requests"] == 2 and doc["skipped"]["lines"] == 1, doc["skipped"]
    (key,) = doc["skipped"]["by_reason"]
    assert reason in key and field in key
    strict = cli("hitrate", p, "--strict", *flags)
    assert strict.code == ExitCode.INPUT and f"field '{field}'" in strict.err
