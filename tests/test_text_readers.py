"""Each text format read end to end from the project's fixtures (tests/fixtures/text)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.errors import ExitCode
from xmemplan.hitrate import HitrateOptions, analyze
from xmemplan.text.encoder import ChunkEncoder
from xmemplan.text.tokenizer import get_tokenizer
from xmemplan.traces import claude_transcript, netpreme, request_log
from xmemplan.traces.base import ReadOptions, SkipLog
from xmemplan.traces.registry import discover

FIXTURES = Path(__file__).parent / "fixtures" / "text"
CLAUDE = FIXTURES / "claude"
MAIN = CLAUDE / "5d0c1e2a-0000-4000-8000-00000000a001.jsonl"
AGENT = next(CLAUDE.rglob("agent-*.jsonl"))
NETPREME = FIXTURES / "netpreme"
ANTHROPIC = FIXTURES / "request_log" / "anthropic.jsonl"
OPENAI = FIXTURES / "request_log" / "openai.jsonl"


class Recording(ChunkEncoder):
    """Records the (role, text) of every chunk it tokenizes."""

    def __init__(self) -> None:
        super().__init__(get_tokenizer(), cache=False)
        self.seen: list[tuple[str, str]] = []

    def chunk(self, role: str, text: str) -> np.ndarray:
        self.seen.append((role, text))
        return super().chunk(role, text)


def _rows(batch):
    offs = batch.key_offsets
    return [batch.keys[offs[i]:offs[i + 1]] for i in range(len(batch))]


def _read(reader, path: Path, options: ReadOptions | None = None, enc=None):
    enc = enc or ChunkEncoder(get_tokenizer())
    skips = SkipLog()
    batches = list(reader.read_with(path, options or ReadOptions(), skips, enc))
    return batches, skips


def test_litter_in_a_folder_of_traces_is_skipped_and_counted(tmp_path):
    """__pycache__ folders, .DS_Store and hidden folders beside the traces: the same files
    are read as in a clean folder, nothing more is 'in no known format' (a .pyc was, and
    failed --strict; this test's sniffing twin failed whenever the fixtures had a
    __pycache__), and the skips are counted in notes."""
    import shutil

    clean = tmp_path / "clean"
    shutil.copytree(FIXTURES, clean, ignore=_ignore_stray)
    littered = tmp_path / "littered"
    shutil.copytree(FIXTURES, littered, ignore=_ignore_stray)
    _litter(littered)

    def read(root: Path):
        found = discover([root], strict=True)
        return ({p.relative_to(root).as_posix(): r.NAME for p, r in found.files},
                sorted(p.relative_to(root).as_posix() for p in found.unrecognized),
                found)

    files, unknown, _ = read(clean)
    l_files, l_unknown, found = read(littered)
    assert l_files == files and l_unknown == unknown == ["generate.py"]
    assert found.skips.total == 0 and not found.empty
    assert "2 hidden files or folders (names starting with '.') were not read" in found.notes
    assert "2 __pycache__ folders (Python's bytecode cache) were not read" in found.notes


def test_strict_hitrate_reads_past_a_pycache(cli, tmp_path):
    """--strict stops at a file in no known format: a __pycache__ beside the traces was
    one (exit 3)."""
    import shutil

    shutil.copytree(CLAUDE, tmp_path / "claude", ignore=_ignore_stray)
    (tmp_path / "claude" / "__pycache__").mkdir()
    (tmp_path / "claude" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\xa7\r\r\n" * 9)
    r = cli("hitrate", tmp_path / "claude", "--strict", "-f", "json")
    assert r.code == ExitCode.OK, r.err
    assert "1 __pycache__ folder (Python's bytecode cache) was not read" in r.err
    assert json.loads(r.out)["unrecognized_files"] == []


def test_fixtures_are_what_the_generator_writes(tmp_path):
    """The committed fixtures equal a fresh run of generate.py (they cannot drift)."""
    gen = FIXTURES / "generate.py"
    copy = tmp_path / "generate.py"
    copy.write_text(gen.read_text())
    subprocess.run([sys.executable, str(copy)], check=True, cwd=tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    made.remove(Path("generate.py"))
    kept = sorted(
        p.relative_to(FIXTURES) for p in FIXTURES.rglob("*")
        if p.is_file() and p.name != "generate.py" and not _stray(p.relative_to(FIXTURES))
    )
    assert made == kept
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (FIXTURES / rel).read_bytes(), rel


def _stray(rel: Path) -> bool:
    """What a checkout or a run may leave among the fixtures that the generator does not
    write: Python's bytecode cache, and hidden files and folders (.DS_Store, .~lock...)."""
    return any(part == "__pycache__" or part.startswith(".") for part in rel.parts)


def _ignore_stray(_folder: str, names: list[str]) -> list[str]:
    """shutil.copytree's ignore: a copy of the fixtures without what `_stray` names."""
    return [n for n in names if _stray(Path(n))]


def _litter(folder: Path) -> None:
    """What an import, Finder or an editor leaves in a folder of traces."""
    (folder / "__pycache__").mkdir(exist_ok=True)
    (folder / "__pycache__" / "generate.cpython-311.pyc").write_bytes(b"\xa7\r\r\n" + bytes(64))
    (folder / "claude" / "__pycache__").mkdir(exist_ok=True)
    (folder / "claude" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\x00\x01junk")
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(32))
    (folder / ".hidden").mkdir(exist_ok=True)
    (folder / ".hidden" / "old.jsonl").write_text('{"not": "a trace"}\n')


def test_sniffing_picks_each_text_format():
    found = discover([FIXTURES])
    by = {p.relative_to(FIXTURES).as_posix(): r.NAME for p, r in found.files}
    assert not found.unrecognized or all(p.name == "generate.py" for p in found.unrecognized)
    assert by[MAIN.relative_to(FIXTURES).as_posix()] == "claude-transcript"
    assert by[AGENT.relative_to(FIXTURES).as_posix()] == "claude-transcript"
    assert by["request_log/anthropic.jsonl"] == "request-log"
    assert by["request_log/openai.jsonl"] == "request-log"
    for rel, name in by.items():
        if rel.startswith("netpreme/"):  # the transcript copy in a run folder is claimed too
            assert name == "netpreme", rel


# --- Claude Code transcripts -------------------------------------------------------------


def test_claude_transcript_requests_usage_and_prefixes():
    (batch,), skips = _read(claude_transcript, MAIN)
    assert skips.total == 0
    # 7 API calls: msg_A is two records (deduplicated), the sub-agent's are excluded.
    assert len(batch) == 7
    assert batch.extras == {}  # the main file holds no sidechain records
    lines = [json.loads(x) for x in MAIN.read_text().splitlines()]
    usages: dict[str, dict] = {}
    for rec in lines:
        if rec.get("type") == "assistant" and not rec.get("isSidechain"):
            usages[rec["message"]["id"]] = rec["message"]["usage"]
    expect_cached = [u["cache_read_input_tokens"] for u in usages.values()]
    expect_prompt = [
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        for u in usages.values()
    ]
    assert batch.reported_cached_tokens.tolist() == expect_cached
    assert batch.reported_prompt_tokens.tolist() == expect_prompt
    assert batch.output_tokens.tolist() == [u["output_tokens"] for u in usages.values()]
    rows = _rows(batch)
    # Before the compaction every prompt extends the previous one token for token.
    for prev, cur in zip(rows[:5], rows[1:6]):
        assert cur.shape[0] > prev.shape[0]
        assert np.array_equal(cur[: prev.shape[0]], prev)
    # After it, the prompt starts over from the summary.
    assert not np.array_equal(rows[6][: rows[5].shape[0]], rows[5])
    assert rows[6].shape[0] < rows[5].shape[0] // 4
    assert np.all(np.diff(batch.timestamp_s) > 0)


def test_claude_parallel_tool_results_are_all_in_the_next_prompt():
    enc = Recording()
    _read(claude_transcript, MAIN, enc=enc)
    users = [text for role, text in enc.seen if role == "user"]
    both = [t for t in users if "1 failed" in t and "./calc.py:10:def f3" in t]
    assert both, "the two sibling tool results should form one user message"
    assert all("signature" not in t and "EoQDsigA1" not in t for _, t in enc.seen)
    assert not any("Conversation compacted" in t for _, t in enc.seen)  # system: not model input
    assert any("continued from a previous conversation" in t for _, t in enc.seen)


def test_claude_subagents_merge_into_the_parent_session():
    opts = HitrateOptions(subagents=True)
    res = analyze([CLAUDE], opts)
    assert res.summary["requests"] == 9 and res.summary["sessions"] == 1
    # Usage in the main file's agent_progress records is not counted a second time.
    rep = res.reported
    assert rep is not None and rep["requests"] == 9
    without = analyze([CLAUDE], HitrateOptions())
    assert without.summary["requests"] == 7
    assert any("2 sub-agent requests not included" in n for n in without.notes)


def test_claude_reported_and_reconstructed_side_by_side(cli):
    r = cli("hitrate", CLAUDE, "-f", "json")
    assert r.code == ExitCode.OK, r.err
    doc = json.loads(r.out)
    rep = doc["reported"]
    assert rep["requests"] == 7 and rep["sessions"][0]["requests"] == 7
    assert rep["reported_token_hit_ratio"] > 0.9  # the API also caches the unseen system prompt
    assert rep["reconstructed_token_hit_ratio"] == pytest.approx(doc["token_hit_ratio"])
    assert rep["difference"] == pytest.approx(
        rep["reconstructed_token_hit_ratio"] - rep["reported_token_hit_ratio"]
    )
    table = cli("hitrate", CLAUDE)
    assert "Reported by the API/engine vs reconstructed" in table.out
    rows = dict(line.split(",", 1) for line in cli("hitrate", CLAUDE, "-f", "csv").out.split())
    assert float(rows["reported.reported_token_hit_ratio"]) == pytest.approx(
        rep["reported_token_hit_ratio"])
    assert float(rows["reported.difference"]) == pytest.approx(rep["difference"])


def test_claude_hits_equal_the_previous_prompt():
    res = analyze([MAIN], HitrateOptions())
    f = res.requests_frame()
    prompt, hit = f["prompt_tokens"].to_list(), f["hit_tokens"].to_list()
    assert hit[0] == 0
    assert hit[1:6] == prompt[0:5]  # infinite cache: everything sent before is a hit
    assert hit[6] < 5  # after compaction only the chat marker of the first message matches


# --- Netpreme runs -----------------------------------------------------------------------


def test_netpreme_runs_engine_ratio_and_companions():
    res = analyze([NETPREME], HitrateOptions())
    assert res.unrecognized == [] and res.skips.total == 0
    assert res.summary["sessions"] == 2 and res.summary["requests"] == 7  # transcript copy not read
    f = res.requests_frame()
    assert set(f["session_id"]) == {"django__django-11099", "sympy__sympy-20590"}
    rep = res.reported
    assert rep is not None and rep["requests"] == 4  # only the run with engine_metrics.jsonl
    run = next(NETPREME.rglob("engine_metrics.jsonl"))
    rows = [json.loads(x) for x in run.read_text().splitlines()]
    engine = sum(r["isl"] - r["isl_new"] for r in rows) / sum(r["isl"] for r in rows)
    assert rep["reported_token_hit_ratio"] == pytest.approx(engine)
    # Each turn's prompt extends the previous one (chunks parsed and rendered).
    (batch,), _ = _read(netpreme, next(NETPREME.rglob("django*/turn_traces.jsonl")))
    rows_ = _rows(batch)
    for prev, cur in zip(rows_, rows_[1:]):
        assert np.array_equal(cur[: prev.shape[0]], prev)
    assert batch.timestamp_s.tolist() == sorted(batch.timestamp_s.tolist())


def test_netpreme_chunks_render_like_request_logs():
    """The same conversation tokenizes the same from isl_text and from a request body."""
    (batch,), _ = _read(netpreme, next(NETPREME.rglob("django*/turn_traces.jsonl")))
    first = json.loads(next(NETPREME.rglob("django*/turn_traces.jsonl")).read_text()
                       .splitlines()[0])
    parts = netpreme._CHUNK.split(first["isl_text"])  # the system text holds newlines
    body = {"system": parts[0][len("SYSTEM:"):], "tools": json.loads(parts[1][len("TOOLS:"):]),
            "messages": [json.loads(p[len("MSG:"):]) for p in parts[2:]]}
    enc = ChunkEncoder(get_tokenizer())
    keys = ChunkEncoder.join(request_log._prompt(body, enc))
    assert np.array_equal(keys, _rows(batch)[0])


# --- Request logs ------------------------------------------------------------------------


def test_anthropic_log_noise_is_stripped():
    enc = Recording()
    (batch,), skips = _read(request_log, ANTHROPIC, enc=enc)
    assert skips.total == 0 and len(batch) == 6
    assert sorted(set(batch.session_id)) == ["conv-1", "conv-2"]
    for _, text in enc.seen:
        assert "cch=" not in text and "billing-header" not in text
        assert "cache_control" not in text and "sig0" not in text
    res = analyze([ANTHROPIC], HitrateOptions())
    f = res.requests_frame()
    for sid in ("conv-1", "conv-2"):
        s = f.filter(f["session_id"] == sid)
        prompt, hit = s["prompt_tokens"].to_list(), s["hit_tokens"].to_list()
        # A moving cache_control and a new billing nonce every request must not break reuse.
        assert hit[1:] == prompt[:-1]
    assert res.reported is not None and res.reported["requests"] == 6


def test_anthropic_log_without_stripping_would_miss(monkeypatch):
    """Control: with the noise left in, the same log loses its hits (the test can fail)."""
    from xmemplan.text import chat_template as render

    monkeypatch.setattr(render, "strip_noise", lambda v: v)
    monkeypatch.setattr(render, "BILLING_HEADER", __import__("re").compile("(?!)"))
    res = analyze([ANTHROPIC], HitrateOptions())
    f = res.requests_frame()
    s = f.filter(f["session_id"] == "conv-1")
    assert s["hit_tokens"].to_list()[1] < s["prompt_tokens"].to_list()[0]


def test_openai_log_with_session_and_timestamp_fields(cli, tmp_path):
    out = tmp_path / "requests.csv"
    r = cli("hitrate", OPENAI, "--session-field", "meta.conv", "--timestamp-field", "t_ms",
            "-f", "json", "-o", out)
    assert r.code == ExitCode.OK, r.err
    assert json.loads(r.out)["sessions"] == 1 and "oa-1" in out.read_text()
    res = analyze([OPENAI], HitrateOptions(session_field="meta.conv", timestamp_field="t_ms"))
    f = res.requests_frame()
    assert f["session_id"].to_list() == ["oa-1"] * 3
    assert f["timestamp_s"].to_list() == [1774467800.0, 1774467802.0, 1774467804.0]  # ms -> s
    prompt, hit = f["prompt_tokens"].to_list(), f["hit_tokens"].to_list()
    assert hit[1:] == prompt[:-1]
    rep = res.reported
    rows = [json.loads(x) for x in OPENAI.read_text().splitlines()]
    assert rep is not None and rep["reported_token_hit_ratio"] == pytest.approx(
        sum(x["usage"]["prompt_tokens_details"]["cached_tokens"] for x in rows)
        / sum(x["usage"]["prompt_tokens"] for x in rows)
    )
    default = analyze([OPENAI], HitrateOptions())
    assert set(default.requests_frame()["session_id"]) == {"openai"}  # no known field: the file


def test_openai_tool_calls_are_rendered():
    enc = Recording()
    _read(request_log, OPENAI, enc=enc)
    calls = [t for r, t in enc.seen if r == "assistant"]
    assert calls and all('<tool_call>\n{"name":"python","arguments":{"code":' in t for t in calls)
    assert any(r == "tool" and t.startswith("<tool_response>") for r, t in enc.seen)
    assert any(r == "system" for r, _ in enc.seen)



def test_claude_progress_only_subagents_are_reported_not_read(tmp_path):
    """Without the sidechain file beside it, a sub-agent known only from agent_progress
    copies is counted in a note (the copies are lossy), never read as requests."""
    alone = tmp_path / MAIN.name
    alone.write_bytes(MAIN.read_bytes())
    res = analyze([alone], HitrateOptions(subagents=True))
    assert res.summary["requests"] == 7
    assert any("1 sub-agent requests appear only as progress records" in n for n in res.notes)
    with_file = analyze([CLAUDE], HitrateOptions(subagents=True))
    assert not any("progress records" in n for n in with_file.notes)


# --- Property: rendering keeps shared message prefixes as shared token prefixes ----------

_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], max_codepoint=0x2FFF), max_size=60
)
_block = st.one_of(
    _text.map(lambda t: {"type": "text", "text": t}),
    st.tuples(_text, _text).map(lambda p: {"type": "tool_use", "id": "t", "name": p[0] or "x",
                                            "input": {"arg": p[1]}}),
    _text.map(lambda t: {"type": "tool_result", "tool_use_id": "t", "content": t}),
    _text.map(lambda t: {"type": "thinking", "thinking": t, "signature": "sig" + t[:3]}),
)
_message = st.tuples(st.sampled_from(["user", "assistant"]),
                     st.one_of(_text, st.lists(_block, min_size=1, max_size=3)))


@settings(max_examples=40, deadline=None)
@given(st.lists(_message, min_size=2, max_size=8), st.integers(0, 10**6))
def test_growing_conversation_gives_growing_token_prefixes(messages, nonce):
    enc = ChunkEncoder(get_tokenizer())
    prev = None
    for k in range(1, len(messages) + 1):
        msgs = [{"role": r, "content": json.loads(json.dumps(c))} for r, c in messages[:k]]
        last = msgs[-1]
        if isinstance(last["content"], list):  # the moving cache_control marker
            last["content"][-1]["cache_control"] = {"type": "ephemeral"}
        body = {"system": f"x-anthropic-billing-header: cch={nonce + k};\nBe brief.",
                "messages": msgs}
        keys = ChunkEncoder.join(request_log._prompt(body, enc))
        if prev is not None:
            assert np.array_equal(keys[: prev.shape[0]], prev)
        prev = keys


def test_claude_attachment_and_unknown_records_pass_through_the_chain(tmp_path):
    base = {"isSidechain": False, "sessionId": "s-att", "timestamp": "2026-03-25T19:42:00Z"}
    rows = [
        {**base, "type": "user", "uuid": "u1", "parentUuid": None,
         "message": {"role": "user", "content": "question"}},
        {**base, "type": "attachment", "uuid": "t1", "parentUuid": "u1",
         "attachment": {"type": "file", "content": "CONTENTS OF notes.md"}},
        {**base, "type": "future-thing", "uuid": "x1", "parentUuid": "t1"},
        {**base, "type": "assistant", "uuid": "a1", "parentUuid": "x1",
         "message": {"id": "m1", "role": "assistant", "content": "answer",
                     "usage": {"input_tokens": 5, "cache_read_input_tokens": 0,
                               "cache_creation_input_tokens": 0, "output_tokens": 1}}},
    ]
    p = tmp_path / "s-att.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    enc = Recording()
    (batch,), skips = _read(claude_transcript, p, enc=enc)
    assert len(batch) == 1 and skips.total == 1  # the unknown type, counted
    assert enc.seen == [("user", "question\nCONTENTS OF notes.md")]


# --- the incremental prompt chain against the whole-chain walk ---------------------------

_record = st.fixed_dictionaries({
    "type": st.sampled_from(["user", "user", "assistant", "assistant", "assistant",
                             "attachment", "system", "progress"]),
    # mostly the previous record; else an earlier one (a fork, or a tool result written
    # late), a later one (a loop), none, a uuid no record has, an int, a list
    "parent": st.sampled_from(["prev"] * 6 + ["back", "back", "fwd", "none", "gone", "int",
                                             "list"]),
    "back": st.integers(1, 8),
    "dup_uuid": st.integers(0, 12),  # 0: this record reuses an earlier uuid
    "mid": st.sampled_from(["new", "new", "new", "same", "old"]),  # streamed, shared ids
    "tools": st.integers(0, 3),
    "text": st.sampled_from(["a", "b", "c", ""]),
    "boundary": st.integers(0, 6),
    "read": st.integers(0, 3),
})


def _transcript_rows(specs: list[dict]) -> list[dict]:
    rows: list[dict] = []
    mids: list[str] = []
    tools: list[tuple[int, list[str]]] = []  # (record, tool_use ids) of assistant records
    for k, s in enumerate(specs):
        uuid = f"r{k // 2}" if s["dup_uuid"] == 0 and k else f"r{k}"
        kind = s["parent"]
        parent: object = None
        if kind == "prev" and rows:
            parent = rows[-1]["uuid"]
        elif kind == "back" and rows:
            parent = rows[max(0, len(rows) - s["back"])]["uuid"]
        elif kind == "fwd":
            parent = f"r{k + s['back']}"
        elif kind == "gone":
            parent = "gone"
        elif kind == "int":
            parent = 7
        elif kind == "list":
            parent = ["r1"]
        row = {"type": s["type"], "uuid": uuid, "parentUuid": parent, "sessionId": "s",
               "isSidechain": False, "timestamp": f"2026-03-25T10:{k // 60:02d}:{k % 60:02d}Z"}
        if s["type"] == "assistant":
            if s["mid"] == "same" and mids:
                mid = mids[-1]
            elif s["mid"] == "old" and mids:
                mid = mids[s["back"] % len(mids)]
            else:
                mid = f"m{k}"
            mids.append(mid)
            ids = [f"t{k}_{j}" for j in range(s["tools"])]
            tools.append((k, ids))
            row["message"] = {"id": mid, "role": "assistant", "model": "claude-opus-4-6",
                              "content": [{"type": "text", "text": s["text"]}] + [
                                  {"type": "tool_use", "id": t, "name": "Read", "input": {}}
                                  for t in ids],
                              "usage": {"input_tokens": 1, "cache_read_input_tokens": s["read"],
                                        "cache_creation_input_tokens": 0}}
        elif s["type"] == "user":
            answers: list[str] = []
            if tools and s["tools"]:
                # the results of an assistant record: the latest, or (written late) an
                # earlier one, which then becomes this record's parent as siblings are
                at, ids = tools[-1] if kind != "back" else tools[s["back"] % len(tools)]
                answers = ids[: s["tools"]]
                if kind in ("prev", "back") and answers:
                    row["parentUuid"] = rows[at]["uuid"]
            row["message"] = {"role": "user", "content": [{"type": "text", "text": s["text"]}] + [
                {"type": "tool_result", "tool_use_id": t, "content": f"out {t}"}
                for t in answers]}
        elif s["type"] == "attachment":
            row["attachment"] = {"content": s["text"] or "note"}
        elif s["type"] == "system" and s["boundary"] == 0:
            row["subtype"] = "compact_boundary"
        rows.append(row)
    return rows


def _check_incremental(path: Path) -> list:
    """Every call's prompt built incrementally equals the walk of its whole chain; returns
    the calls (records per message of each, `blocks`)."""
    from xmemplan.text.encoder import get_encoder
    from xmemplan.traces.base import iter_json_lines
    from xmemplan.traces.claude_transcript import _Messages, _node, _Transcript, calls

    enc = get_encoder(None)

    def transcript(skips: SkipLog) -> _Transcript:
        data = path.read_bytes()
        nodes = [_node(i, line, obj, path, skips, path.stem)
                 for i, (line, obj) in enumerate(iter_json_lines(path, data, skips))]
        return _Transcript(path, nodes, enc, skips)

    fast_skips, walk_skips = SkipLog(), SkipLog()
    fast, walk = transcript(fast_skips), transcript(walk_skips)
    msgs = _Messages(fast, kinds=True)
    groups: dict[str, list] = {}
    for n in fast.nodes:
        if n.msg_id is not None:
            groups.setdefault(n.msg_id, []).append(n)
    for group in groups.values():
        first = group[0]
        members = frozenset(n.index for n in group)
        node, last, compacted = fast.prompt_node(first, members, msgs)
        want = walk.messages(first, members)
        assert [msgs.group[x] for x in msgs.path(node)] == want
        assert last == (want[-1] if want else ())
        assert compacted == walk.compacted
        assert msgs.tokens[node] == sum(walk._message(g).shape[0] for g in want)
    assert fast_skips.counts == walk_skips.counts
    # The calls keep each prompt as an earlier call's plus new messages: the same arrays.
    found = calls(path, ReadOptions(), SkipLog(), enc, kinds=True)
    for i, c in enumerate(found.calls):
        assert c.tokens == sum(p.shape[0] for p in c.parts) > 0
        assert len(c.blocks) == len(c.parts)
        assert c.base is None or any(c.base is b for b in found.calls[:i])
    return found.calls


@settings(max_examples=400, deadline=None)
@given(st.lists(_record, min_size=1, max_size=40))
def test_incremental_prompts_equal_the_whole_chain_walk(tmp_path_factory, specs):
    """Every call's prompt built from its parent's state (memoised per record) equals the
    walk of its whole chain (`_Transcript.messages`): forks, tool results written late,
    loops, dangling, int and list parents, compaction, message ids shared by two calls."""
    path = tmp_path_factory.mktemp("chain") / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _transcript_rows(specs)))
    _check_incremental(path)


def test_a_tool_result_written_after_a_call_joins_later_prompts_only(tmp_path):
    """r4 answers r1's tool but is written after the call r3: r3's prompt lacks it, the
    calls after it (r6 through r4, r9 through r2) carry it beside r2, as the API saw."""
    def rec(uuid, parent, kind, tools=(), answers=()):
        content = [{"type": "text", "text": uuid}]
        if kind == "assistant":
            content += [{"type": "tool_use", "id": t, "name": "Read", "input": {}}
                        for t in tools]
            msg = {"id": f"m{uuid}", "role": "assistant", "model": "claude-opus-4-6",
                   "content": content, "usage": {"input_tokens": 1}}
        else:
            content += [{"type": "tool_result", "tool_use_id": t, "content": "out"}
                        for t in answers]
            msg = {"role": "user", "content": content}
        return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s",
                "message": msg}

    rows = [rec("r0", None, "user"), rec("r1", "r0", "assistant", tools=["t1", "t2"]),
            rec("r2", "r1", "user", answers=["t1"]), rec("r3", "r2", "assistant"),
            rec("r4", "r1", "user", answers=["t2"]), rec("r5", "r4", "user"),
            rec("r6", "r5", "assistant"), rec("r7", "r3", "user"),
            rec("r8", "r7", "assistant"), rec("r9", "r8", "user"),
            rec("r10", "r9", "assistant")]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = _check_incremental(path)
    assert [c.blocks for c in got] == [[1], [1, 1, 1], [1, 1, 3], [1, 1, 2, 1, 1],
                                       [1, 1, 2, 1, 1, 1, 1]]
