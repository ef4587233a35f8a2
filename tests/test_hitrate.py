"""Readers + replay + metrics on generated traces, checked against independent computations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xmemplan.hitrate import HitrateOptions, analyze
from xmemplan.hitrate.metrics import summarize
from xmemplan.prefix.reference import reference_match
from xmemplan.traces import synth


def _blocks(tokens: np.ndarray, block: int, partial: bool,
            ids: dict[tuple[int, ...], int]) -> list[int]:
    """Each block's key: the number `ids` gives its path (the tokens up to its end), a
    new number for a path not seen before (path identity, as integer keys)."""
    n = len(tokens) // block + (1 if partial and len(tokens) % block else 0)
    return [ids.setdefault(tuple(tokens[: (i + 1) * block].tolist()), len(ids))
            for i in range(n)]


def _expected_session_hits(sessions, block: int, partial: bool) -> dict[tuple[str, int], int]:
    out = {}
    ids: dict[tuple[int, ...], int] = {}
    for s in sessions:
        keys = [_blocks(p, block, partial, ids) for p in s.prompts]
        matched = reference_match(keys, [True] + [False] * (len(keys) - 1))
        for i, (m, p) in enumerate(zip(matched, s.prompts)):
            out[(s.session_id, i)] = min(m * block, len(p))
    return out


def _hits_by_request(result) -> dict[tuple[str, int], int]:
    frame = result.requests_frame()
    return {
        (r["session_id"], r["request_index"]): r["hit_tokens"]
        for r in frame.iter_rows(named=True)
    }


@pytest.fixture(scope="module")
def sessions():
    return synth.agent_sessions(n_sessions=5, turns=10, seed=3, compact_every=4)


def test_token_traces_session_scope(tmp_path: Path, sessions):
    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions)
    result = analyze([tmp_path / "t.jsonl"], HitrateOptions(scope="session"))
    assert result.files_by_format == {"tokens": 1}
    assert _hits_by_request(result) == _expected_session_hits(sessions, 1, False)
    assert result.summary["requests"] == 50 and result.summary["sessions"] == 5


@pytest.mark.parametrize("page", [16, 64])
def test_page_size_rounds_token_hits_down(tmp_path: Path, sessions, page):
    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions)
    base = _hits_by_request(analyze([tmp_path / "t.jsonl"], HitrateOptions(scope="session")))
    paged = _hits_by_request(
        analyze([tmp_path / "t.jsonl"], HitrateOptions(scope="session", page_size=page))
    )
    assert paged == {k: v // page * page for k, v in base.items()}
    assert sum(paged.values()) < sum(base.values())


def test_claude_blocks_match_token_content(tmp_path: Path, sessions):
    synth.write_claude_blocks(tmp_path / "cb", sessions)
    result = analyze([tmp_path / "cb"], HitrateOptions(scope="session"))
    assert result.files_by_format == {"claude-blocks": 5}
    assert _hits_by_request(result) == _expected_session_hits(sessions, 64, False)


def test_claude_blocks_local_ids_never_match_across_sessions(tmp_path: Path, sessions):
    # Ids restart at 1 in every file: a shared cache must not match them across sessions.
    synth.write_claude_blocks(tmp_path / "cb", sessions)
    per_session = analyze([tmp_path / "cb"], HitrateOptions(scope="session"))
    shared = analyze([tmp_path / "cb"], HitrateOptions(scope="global"))
    assert shared.summary["hit_tokens"] == per_session.summary["hit_tokens"]
    assert shared.summary["by_round"][0]["token_hit_ratio"] == 0.0


def test_subagents_join_their_session_by_absolute_time(tmp_path: Path, sessions):
    synth.write_claude_blocks(tmp_path / "cb", sessions, subagents=2, seed=1)
    without = analyze([tmp_path / "cb"], HitrateOptions())
    with_sub = analyze([tmp_path / "cb"], HitrateOptions(subagents=True))
    assert with_sub.summary["requests"] == without.summary["requests"] + 5 * 2 * 3
    assert any("sub-agent" in n for n in without.notes)
    frame = with_sub.requests_frame()
    for sid in {s.session_id for s in sessions}:
        ts = frame.filter(frame["session_id"] == sid)["timestamp_s"].to_list()
        assert ts == sorted(ts)
    # A sub-agent reuses the first half of the session's first prompt: it hits the cache.
    assert with_sub.summary["hit_tokens"] > without.summary["hit_tokens"]


def test_mooncake_global_scope_counts_partial_last_block(tmp_path: Path, sessions):
    prompts = synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    result = analyze([tmp_path / "m.jsonl"])
    assert result.scope == "global"  # Mooncake has no sessions
    ids: dict[tuple[int, ...], int] = {}
    keys = [_blocks(p, 512, True, ids) for p in prompts]
    matched = reference_match(keys, [True] + [False] * (len(keys) - 1))
    want = sum(min(m * 512, len(p)) for m, p in zip(matched, prompts))
    assert result.summary["hit_tokens"] == want


def test_bailian_rebuilds_path_chained_keys(tmp_path: Path):
    rows = synth.bailian_rows(n_roots=6, depth=3, seed=2)
    synth.write_bailian(tmp_path / "b.jsonl", rows)
    result = analyze([tmp_path / "b.jsonl"], HitrateOptions(scope="global"))
    assert result.files_by_format == {"bailian": 1}
    # Independent: a block hits only if the whole path of block ids before it was seen.
    seen: set[tuple[int, ...]] = set()
    want = 0
    for r in rows:
        ids = r["hash_ids"]
        m = 0
        while m < len(ids) and tuple(ids[: m + 1]) in seen:
            m += 1
        want += min(m * 16, r["input_length"])
        seen.update(tuple(ids[: i + 1]) for i in range(len(ids)))
    assert result.summary["hit_tokens"] == want
    # Keyed per block, the shared boilerplate block at position 1 would be a false hit.
    naive_seen: set[tuple[int, int]] = set()
    naive = 0
    for r in rows:
        naive += sum(16 for i, b in enumerate(r["hash_ids"]) if (i, b) in naive_seen)
        naive_seen.update(enumerate(r["hash_ids"]))
    assert naive > want
    # Sessions are the parent_chat_id trees: one per root.
    assert result.summary["sessions"] == 6


def test_session_scope_orders_by_timestamp_inside_session(tmp_path: Path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        '{"session_id": "a", "timestamp": 5, "input_ids": [1, 2, 3, 4]}\n'
        '{"session_id": "a", "timestamp": 1, "input_ids": [1, 2]}\n'
        '{"session_id": "b", "timestamp": 2, "input_ids": [1, 2, 3]}\n'
    )
    frame = analyze([p]).requests_frame()
    rows = {(r["session_id"], r["request_index"]): r["hit_tokens"] for r in frame.iter_rows(named=True)}
    assert rows == {("a", 0): 0, ("a", 1): 2, ("b", 0): 0}
    glob = analyze([p], HitrateOptions(scope="global")).requests_frame()
    # global: time order a@1, b@2, a@5 -> b hits 2 of a's tokens, a@5 hits 3
    assert glob["hit_tokens"].to_list() == [0, 2, 3]


def test_metrics_definitions_by_hand():
    # session 0: prompts 10, 10 hits 0, 8;  session 1: prompt 20, 30, 40 hits 0, 29, 10
    codes = np.array([0, 0, 1, 1, 1])
    index = np.array([0, 1, 0, 1, 2])
    prompt = np.array([10, 10, 20, 30, 40])
    hit = np.array([0, 8, 0, 29, 10])
    m = summarize(codes, index, prompt, hit)
    assert m["sessions"] == 2 and m["requests"] == 5 and m["prompt_tokens"] == 110
    assert m["token_hit_ratio"] == pytest.approx(47 / 110)
    assert m["mean_request_hit_ratio"] == pytest.approx((0 + 0.8 + 0 + 29 / 30 + 0.25) / 5)
    assert m["rounds_ge1_token_hit_ratio"] == pytest.approx(47 / 80)
    assert m["rounds_ge1_mean"] == pytest.approx((0.8 + 29 / 30 + 0.25) / 3)
    assert m["rounds_ge1_median"] == pytest.approx(0.8)
    assert m["rounds_ge1_share_ge_95"] == pytest.approx(1 / 3)
    assert m["session_token_hit_mean"] == pytest.approx((8 / 20 + 39 / 90) / 2)
    assert m["session_token_hit_median"] == pytest.approx((8 / 20 + 39 / 90) / 2)
    buckets = {b["round"]: b for b in m["by_round"]}
    assert buckets["1"]["requests"] == 2 and buckets["2-4"]["requests"] == 1
    assert buckets["1"]["token_hit_ratio"] == pytest.approx(37 / 40)


def test_directory_mixing_formats_and_unknown_files(tmp_path: Path, sessions):
    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions[:2])
    synth.write_claude_blocks(tmp_path / "blocks", sessions[2:])
    (tmp_path / "notes.md").write_text("# not a trace\n")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    result = analyze([tmp_path])
    assert result.files_by_format == {"tokens": 1, "claude-blocks": 3}
    assert [Path(p).name for p in result.unrecognized] == ["notes.md"]
    assert [Path(p).name for p in result.empty] == ["empty.jsonl"]
    assert result.summary["sessions"] == 5


def test_parallel_workers_give_identical_results(tmp_path: Path):
    many = synth.agent_sessions(n_sessions=12, turns=6, seed=9)
    synth.write_claude_blocks(tmp_path / "cb", many)
    one = analyze([tmp_path / "cb"], HitrateOptions(workers=1))
    from xmemplan.hitrate import pipeline as H

    # Force the process pool even on small input.
    jobs = [(p, "claude-blocks", HitrateOptions(), "session") for p in sorted((tmp_path / "cb").iterdir())]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        parts = list(pool.map(H._read_job, jobs))
    hits = np.concatenate([p.replayed.column("hit_tokens") for p in parts])
    assert hits.tolist() == one.replayed.column("hit_tokens").tolist()


def test_parquet_token_traces_equal_jsonl(tmp_path: Path, sessions):
    import polars as pl

    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions)
    frame = pl.read_ndjson(tmp_path / "t.jsonl")
    frame.write_parquet(tmp_path / "t.parquet")
    a = analyze([tmp_path / "t.jsonl"])
    b = analyze([tmp_path / "t.parquet"])
    assert b.files_by_format == {"tokens": 1}
    assert _hits_by_request(a) == _hits_by_request(b)


def test_forcing_the_wrong_format_skips_and_counts_every_line(tmp_path: Path, sessions):
    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions[:1])
    result = analyze([tmp_path / "t.jsonl"], HitrateOptions(format_name="mooncake"))
    assert result.summary["requests"] == 0
    assert result.skips.total == len(sessions[0].prompts)
    assert all("input_length" in k for k in result.skips.counts)
