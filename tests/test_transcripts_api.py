"""Transcripts against what the API saw: hidden prefix, token calibration, the API's cache
rules and the per-call reasons, on sessions generated with known answers
(tests/fixtures/text/generate.py: claude_api_session)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from xmemplan.hitrate import HitrateOptions, analyze
from xmemplan.hitrate.transcript_calls import analyze_calls
from xmemplan.text.encoder import get_encoder
from xmemplan.traces import claude_transcript as CT
from xmemplan.traces.base import ChainedList, ReadOptions, SkipLog
from xmemplan.traces.hidden_prefix import estimate, parse_mode, standin

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "text"))
import generate as G  # noqa: E402


def _usage(inp: int, read: int, create: int) -> dict:
    return G._usage(inp, read, create, 20)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _ours(tmp_path: Path, **kw) -> list[int]:
    """Our token count of each call's prompt (usage does not change it)."""
    p = _write(tmp_path / "probe.jsonl", G.claude_api_session(**kw))
    found = CT.calls(p, ReadOptions(), SkipLog(), get_encoder(None))
    return [c.tokens for c in found.calls]


def _session(tmp_path: Path, hidden: int, k: int, cached, **kw) -> Path:
    """A session whose API prompt is `hidden + k * ours` and whose cache read per call is
    `cached(i, api_prompts)`."""
    ours = _ours(tmp_path, **kw)
    api = [hidden + k * n for n in ours]

    def usage(i: int) -> dict:
        c = cached(i, api)
        return _usage(3, c, api[i] - c - 3)

    return _write(tmp_path / f"{G.SESSION}.jsonl", G.claude_api_session(usage=usage, **kw))


def _normal(i: int, api: list[int], hidden: int) -> int:
    return hidden if i == 0 else api[i - 1]


def test_known_hidden_prefix_and_token_ratio_are_recovered_exactly(tmp_path):
    p = _session(tmp_path, 20_000, 2, lambda i, api: _normal(i, api, 20_000), calls=6)
    found = CT.calls(p, ReadOptions(), SkipLog(), get_encoder(None))
    est = estimate(str(p), found.calls)
    assert est is not None and est.fitted
    assert round(est.hidden_tokens) == 20_000
    assert est.api_per_ours == pytest.approx(2.0)
    assert est.ratio == pytest.approx(0.5)
    assert est.spread[0] == pytest.approx(20_000) and est.spread[2] == pytest.approx(20_000)
    # Calibrated replay: the stand-in is the prefix in API tokens, prompts match the API's
    # (each message rounds once), and every call hits the whole previous prompt.
    res = analyze([p], HitrateOptions(hidden_prefix="auto", tokens="calibrated"))
    f = res.requests_frame()
    prompt, rep = f["prompt_tokens"].to_list(), f["reported_prompt_tokens"].to_list()
    assert all(abs(a - b) <= 8 for a, b in zip(prompt, rep))
    assert f["hit_tokens"].to_list()[1:] == prompt[:-1]
    plain = analyze([p], HitrateOptions())
    assert plain.summary["prompt_tokens"] * 2 + 6 * 20_000 == pytest.approx(
        res.summary["prompt_tokens"], abs=50)


def test_standin_is_shared_by_client_version_and_model_only():
    a, b = standin("2.1.83", "claude-opus-4-6", 100), standin("2.1.83", "claude-opus-4-6", 60)
    assert (a[:60] == b).all()  # a shorter stand-in is a prefix of a longer one
    assert not (standin("2.1.84", "claude-opus-4-6", 60) == b).any()
    assert a.min() >= 1 << 30 and a.max() < 1 << 31  # above any vocabulary, int32
    assert len(set(a.tolist())) > 95  # not a constant run
    assert parse_mode("none") is None and parse_mode("auto") == "auto"
    assert parse_mode("12000") == 12_000


def _reasons(p: Path) -> list[str]:
    rep = analyze_calls([p], HitrateOptions())
    assert rep is not None
    return [r["reason"] for r in rep.rows]


def test_ttl_gap_gives_the_ttl_reason(tmp_path):
    # Call 3 comes 10 minutes after call 2's request: every entry expired, the API read 0.
    p = _session(tmp_path, 9_000, 1,
                 lambda i, api: 0 if i == 3 else _normal(i, api, 9_000),
                 calls=5, gaps_s=[3, 3, 3, 600, 3])
    reasons = _reasons(p)
    assert reasons[3] == "ttl"
    assert "ttl" not in reasons[:3] + reasons[4:]


def test_lookback_past_the_last_breakpoint_gives_the_breakpoint_reason(tmp_path):
    # Call 2 makes 25 parallel tool calls: call 3's last written prefix (call 2's prompt) is
    # 26 blocks back, beyond the API's 20-block lookback; only the system prefix is read.
    p = _session(tmp_path, 9_000, 1,
                 lambda i, api: 9_000 if i == 3 else _normal(i, api, 9_000),
                 calls=5, parallel={3: 25})
    reasons = _reasons(p)
    assert reasons[3] == "breakpoint"
    rep = analyze_calls([p], HitrateOptions())
    assert rep is not None and rep.rows[3]["hit_tokens_anthropic"] == 9_000


def test_mid_conversation_edit_gives_the_edit_reason(tmp_path):
    # The user rewinds before call 3: its prompt branches after call 1's prompt, and the
    # API reads up to the last breakpoint before the branch: call 1's prompt.
    p = _session(tmp_path, 9_000, 1,
                 lambda i, api: api[1] if i == 3 else _normal(i, api, 9_000),
                 calls=5, rewind_at=3)
    reasons = _reasons(p)
    assert reasons[3] == "edit"
    assert "edit" not in reasons[:3]


def test_unrecorded_content_is_named_and_the_rest_is_explained(tmp_path):
    # The API read the whole prompt of call 2, new content included: no earlier recorded
    # call carried it.
    p = _session(tmp_path, 9_000, 1,
                 lambda i, api: api[2] - 3 if i == 2 else _normal(i, api, 9_000), calls=4)
    rep = analyze_calls([p], HitrateOptions())
    assert rep is not None
    assert [r["reason"] for r in rep.rows][2] == "unrecorded"
    assert rep.explained_share > 0.99


def test_cli_flags_say_what_was_added(tmp_path, cli):
    p = _session(tmp_path, 9_000, 1, lambda i, api: _normal(i, api, 9_000), calls=4)
    out = tmp_path / "calls.csv"
    r = cli("hitrate", p, "--hidden-prefix", "auto", "--cache-model", "anthropic",
            "--out", out)
    assert r.code == 0, r.err
    assert "Hidden prefix: a stand-in of 9,000 tokens" in r.err + r.out
    # the conversation is named whole (its session id), never cut to '...' or short: in the
    # reported-vs-reconstructed, hidden-prefix and per-file tables alike
    assert r.out.count(p.stem) >= 3 and "…" not in r.out, r.out
    import polars as pl

    f = pl.read_csv(out)
    assert f["hidden_prefix_tokens"].to_list() == [9_000] * 4
    assert f["hit_tokens_anthropic"].to_list()[1:] == f["reported_cached_tokens"].to_list()[1:]
    csv = cli("hitrate", p, "--hidden-prefix", "auto", "-f", "csv")
    assert csv.code == 0 and "a stand-in of 9,000 tokens was put before each of 4 calls" in csv.err
    bad = cli("hitrate", p, "--hidden-prefix", "lots")
    assert bad.code == 2
    assert cli("hitrate", p, "--cache-model", "lru").code == 2


def test_the_answer_comes_before_what_the_per_call_report_adds(tmp_path):
    """Answer first in a terminal: stdout and stderr in the order written (unbuffered),
    the hit ratio is the first line; the stand-in and --out lines come after it."""
    import os
    import subprocess
    import sys

    p = _session(tmp_path, 9_000, 1, lambda i, api: _normal(i, api, 9_000), calls=4)
    r = subprocess.run(
        [sys.executable, "-u", "-m", "xmemplan", "hitrate", str(p), "--hidden-prefix", "auto",
         "--cache-model", "anthropic", "--out", str(tmp_path / "c.csv")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
        env=dict(os.environ, COLUMNS="100", NO_COLOR="1"))
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0].startswith("Token hit ratio"), r.stdout
    text = "\n".join(lines)
    assert text.index("Token hit ratio") < text.index("Hidden prefix: a stand-in")
    assert text.index("Token hit ratio") < text.index("Wrote 4 requests")


def test_csv_carries_the_per_call_report_as_the_json_does(tmp_path, cli):
    """`--format csv` has the per-file and per-conversation figures of the JSON, by name."""
    import csv as _csv
    import io

    p = _session(tmp_path, 9_000, 1, lambda i, api: _normal(i, api, 9_000), calls=4)
    args = ("hitrate", p, "--hidden-prefix", "auto", "--cache-model", "anthropic")
    doc = json.loads(cli(*args, "-f", "json").out)["transcripts"]
    r = cli(*args, "-f", "csv")
    assert r.code == 0, r.err
    rows = dict(_csv.reader(io.StringIO(r.out)))
    f = doc["files"][0]
    name = Path(f["file"]).stem
    for k in ("calls", "api", "plain", "hidden", "ceiling", "anthropic", "explained_share"):
        assert float(rows[f"transcripts.file[{name}].{k}"]) == pytest.approx(float(f[k]))
    for k, v in f["reason_tokens"].items():
        assert float(rows[f"transcripts.file[{name}].reason_tokens.{k}"]) == pytest.approx(v)
    e = doc["hidden_prefix"][0]
    assert int(rows[f"transcripts.hidden_prefix[{p.stem}].hidden_tokens"]) == \
        e["hidden_tokens"] == 9_000
    assert float(rows["transcripts.explained_share"]) == pytest.approx(doc["explained_share"])


# --- bad input in the transcript reader -----------------------------------------------------


def _rec(kind, uuid, parent, **kw):
    row = {"parentUuid": parent, "isSidechain": False, "sessionId": "s1", "type": kind,
           "uuid": uuid, "timestamp": "2026-03-25T19:42:00.000Z"}
    row.update(kw)
    return row


def _asst(uuid, parent, mid, read=5000):
    return _rec("assistant", uuid, parent, message={
        "id": mid, "role": "assistant", "model": "claude-opus-4-6",
        "content": [{"type": "text", "text": f"reply {uuid}"}],
        "usage": {"input_tokens": 3, "cache_read_input_tokens": read,
                  "cache_creation_input_tokens": 0, "output_tokens": 5}})


def _user(uuid, parent, text="question"):
    return _rec("user", uuid, parent, message={"role": "user", "content": text})


def _read(tmp_path, rows, name="t.jsonl", options=None):
    p = _write(tmp_path / name, rows)
    skips = SkipLog()
    found = CT.calls(p, options or ReadOptions(), skips, get_encoder(None))
    return found, skips


@pytest.mark.parametrize("bad", [7, ["u1"]])
def test_parent_uuid_not_a_string_is_counted(tmp_path, bad):
    found, skips = _read(tmp_path, [_user("u1", None), _asst("a1", "u1", "m1"),
                                    _user("u2", bad), _asst("a2", "u2", "m2")])
    assert len(found.calls) == 2
    assert any("parentUuid is a" in k for k in skips.counts)


def test_parent_loop_never_puts_a_reply_in_its_own_prompt(tmp_path):
    # u1 -> a1 and u1's parent is a1: following parents from a1 comes back to a1.
    found, skips = _read(tmp_path, [_user("u1", "a1", "loop question"), _asst("a1", "u1", "m1")])
    (call,) = found.calls
    assert len(call.parts) == 1  # the user message only
    assert any("loop" in k for k in skips.counts)


def test_two_calls_sharing_a_message_id_are_counted(tmp_path):
    found, skips = _read(tmp_path, [_user("u1", None), _asst("a1", "u1", "m1", read=5000),
                                    _user("u2", "a1"), _asst("a2", "u2", "m1", read=7000)])
    assert found.shared_ids == 1 and len(found.calls) == 1
    assert any("share message.id" in k for k in skips.counts)


def test_subagent_file_alone_is_read_and_beside_its_session_needs_the_flag(tmp_path, cli):
    rows = [dict(r, isSidechain=True, agentId="x1") for r in
            [_user("u1", None), _asst("a1", "u1", "m1")]]
    alone, _ = _read(tmp_path, rows, "agent-x1.jsonl")
    assert len(alone.calls) == 1
    _write(tmp_path / "s1.jsonl", [_user("v1", None), _asst("b1", "v1", "n1")])
    beside, _ = _read(tmp_path, rows, "agent-x1.jsonl")
    assert beside.calls == [] and beside.subagents_excluded == 1
    r = cli("hitrate", tmp_path / "agent-x1.jsonl")
    assert r.code == 3 and "add --subagents" in r.err.lower()
    assert "--trace-format" not in r.err


def test_fixed_hidden_prefix_and_calibration_alone(tmp_path):
    p = _session(tmp_path, 9_000, 2, lambda i, api: _normal(i, api, 9_000), calls=3)
    plain = analyze([p], HitrateOptions()).requests_frame()["prompt_tokens"].to_list()
    fixed = analyze([p], HitrateOptions(hidden_prefix="500")).requests_frame()
    assert fixed["prompt_tokens"].to_list() == [n + 500 for n in plain]
    assert fixed["hit_tokens"].to_list()[1:] == fixed["prompt_tokens"].to_list()[:-1]
    cal = analyze([p], HitrateOptions(tokens="calibrated")).requests_frame()
    assert all(abs(c - 2 * n) <= 8 for c, n in zip(cal["prompt_tokens"].to_list(), plain))


def test_standin_is_shared_across_sessions_under_global_scope(tmp_path):
    """Two sessions of the same client version and model: the second's first call hits the
    first's stand-in under --scope global, never under --scope session."""
    a = _session(tmp_path, 9_000, 1, lambda i, api: _normal(i, api, 9_000), calls=3)
    rows = [dict(r, sessionId="second-session") for r in json.loads(
        "[" + ",".join(a.read_text().splitlines()) + "]")]
    rows[0]["message"] = {"role": "user", "content": "Another task entirely."}
    (tmp_path / "second").mkdir()
    _write(tmp_path / "second" / "second-session.jsonl", rows)
    files = [a, tmp_path / "second" / "second-session.jsonl"]
    for scope, expect in (("global", 9_000), ("session", 0)):
        f = analyze(files, HitrateOptions(hidden_prefix="auto", scope=scope,
                                          tokens="calibrated")).requests_frame()
        second = f.filter(f["session_id"] == "second-session")
        first_hit = second.sort("timestamp_s")["hit_tokens"][0]
        # the stand-in, and at most the chat marker of the (different) first message
        assert expect <= first_hit <= expect + 4


def test_json_output_carries_the_per_file_comparison(tmp_path, cli):
    p = _session(tmp_path, 9_000, 1, lambda i, api: _normal(i, api, 9_000), calls=3)
    r = cli("hitrate", p, "--hidden-prefix", "auto", "--cache-model", "anthropic", "-f", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)["transcripts"]
    (f,) = doc["files"]
    assert f["calls"] == 3 and f["anthropic"] == pytest.approx(f["api"], abs=0.01)
    (h,) = doc["hidden_prefix"]
    assert h["hidden_tokens"] == 9_000 and h["spread_tokens"]["max"] == 9_000
    assert doc["cache_rules"]["min_cacheable"] == {"claude-opus-4-6": 4096}


def test_prompt_lists_name_the_prompt_they_extend_truthfully(tmp_path):
    """Reader and stand-in both build each call's list by extending an earlier call's and
    say so (`ChainedList.parent`): that earlier list's messages must be exactly the first
    items, the same objects, so that `shared_objects` may skip walking them."""
    from xmemplan.traces.hidden_prefix import prepare

    p = _write(tmp_path / f"{G.SESSION}.jsonl", G.claude_api_session(calls=6))
    found = CT.calls(p, ReadOptions(), SkipLog(), get_encoder(None)).calls
    assert len(found) == 6 and any(c.base is not None for c in found)
    for c in found:
        parts = c.parts
        assert isinstance(parts, ChainedList)
        assert parts.key == id(c)
        if c.base is not None:
            assert parts.parent == id(c.base)
            base = c.base.parts
            assert len(base) < len(parts) and all(x is y for x, y in zip(base, parts))
    prep = prepare(found, "auto", False)
    assert any(j is not None for j in prep.base)
    for i in range(len(found)):
        parts = prep.parts[i]
        assert isinstance(parts, ChainedList)
        j = prep.base[i]
        if j is not None:
            base = prep.parts[j]
            assert isinstance(base, ChainedList)
            assert parts.parent == base.key
            assert all(x is y for x, y in zip(base, parts)) and len(base) <= len(parts)
