"""The real Claude Code 2.1.83 transcripts in ../shared/traces/claude-code-transcripts.

Skipped when ../shared is absent. The expected figures are computed here from the raw files,
independently of the reader, except where noted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import shared_trace

from xmemplan.hitrate import HitrateOptions, analyze


def _usage_by_call(folder: Path) -> dict[str, dict]:
    """message.id -> usage of every assistant record in the session files (not progress)."""
    calls: dict[str, dict] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") == "assistant":
                calls[rec["message"]["id"]] = rec["message"]["usage"]
    return calls


@pytest.fixture(scope="module")
def folder() -> Path:
    return shared_trace("claude-code-transcripts")


@pytest.fixture(scope="module")
def merged(folder):
    return analyze([folder], HitrateOptions(subagents=True))


def test_every_api_call_once_with_its_reported_usage(folder, merged):
    calls = _usage_by_call(folder)
    assert merged.summary["requests"] == len(calls) == 50  # 6 main + 21 + 23 sub-agent calls
    assert merged.files_by_format == {"claude-transcript": 3}
    assert merged.skips.total == 0
    cached = sum(u["cache_read_input_tokens"] for u in calls.values())
    prompt = sum(u["input_tokens"] + u["cache_read_input_tokens"]
                 + u["cache_creation_input_tokens"] for u in calls.values())
    rep = merged.reported
    assert rep is not None and rep["requests"] == 50
    # agent_progress records in the main file repeat sub-agent usage: not counted again.
    assert rep["reported_token_hit_ratio"] == pytest.approx(cached / prompt)
    f = merged.requests_frame()
    assert f["reported_prompt_tokens"].sum() == prompt


def test_main_session_alone_and_the_excluded_subagents(folder):
    res = analyze([folder], HitrateOptions())
    assert res.summary["requests"] == 6 and res.summary["sessions"] == 1
    assert any("44 sub-agent requests not included" in n for n in res.notes)
    # Two of the four sub-agents have no sidechain file here: 13 + 25 calls, reported.
    assert any("38 sub-agent requests appear only as progress records" in n for n in res.notes)


def test_reconstructed_prompts_lack_only_the_unseen_system_prefix(merged):
    """Transcripts omit the system prompt and tools: every prompt is shorter than the API's
    by at least that prefix (about 25k tokens in the main session, 13k in sub-agents)."""
    f = merged.requests_frame()
    gap = f["reported_prompt_tokens"] - f["prompt_tokens"]
    assert gap.min() > 10_000
    # Yet the conversation itself is there: the largest prompts are tens of thousands.
    assert f["prompt_tokens"].max() > 50_000
    # Growth between consecutive calls of one context is counted alike on both sides.
    s = merged.summary
    assert 0.8 < s["rounds_ge1_token_hit_ratio"] < merged.reported["reported_token_hit_ratio"]


def test_same_input_same_output(folder, merged):
    again = analyze([folder], HitrateOptions(subagents=True))
    assert again.summary["token_hit_ratio"] == merged.summary["token_hit_ratio"]
    assert again.summary["prompt_tokens"] == merged.summary["prompt_tokens"]


# --- what the server saw (issue 15): hidden prefix, calibration, reasons -------------------


@pytest.fixture(scope="module")
def per_file(folder):
    from xmemplan.hitrate.transcript_calls import analyze_calls

    opts = HitrateOptions(subagents=True, hidden_prefix="auto", tokens="calibrated")
    return {p.name: analyze_calls([p], opts) for p in sorted(folder.glob("*.jsonl"))}


def test_hidden_prefix_is_measured_per_conversation_and_nearly_constant(folder, per_file):
    main = [json.loads(x) for x in next(folder.glob("02f3*.jsonl")).read_text().splitlines()]
    prompts = [sum(r["message"]["usage"][k] for k in (
        "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        for r in main if r.get("type") == "assistant"]
    sizes = {}
    for name, rep in per_file.items():
        (est,) = rep.estimates.values()
        assert est.fitted and est.calls == rep.files[0]["calls"]
        lo, _, hi = est.spread
        assert est.hidden_tokens == pytest.approx(lo)
        assert hi - lo < 0.15 * est.hidden_tokens  # nearly constant within a conversation
        assert 0.7 < est.ratio < 1.1  # qwen2.5 counts fewer tokens than Claude's tokenizer
        sizes[name[:5]] = est.hidden_tokens
    # Opus main session ~25k (system prompt + all tools); Haiku Explore sub-agents ~13k.
    assert 20_000 < sizes["02f30"] < min(prompts)
    assert 10_000 < sizes["agent"] < 16_000


def test_reasons_account_for_the_per_call_difference(per_file):
    for rep in per_file.values():
        (f,) = rep.files
        assert f["explained_share"] >= 0.9
        diff = sum(abs(r["api_cached_tokens"] - r["hit_tokens_plain"]) for r in rep.rows)
        parts = sum(sum(r[k] for k in r if k.startswith("d_")) + r["unexplained_tokens"]
                    for r in rep.rows)
        # The parts sum to the signed difference, call by call.
        for r in rep.rows:
            total = sum(r[k] for k in r if k.startswith("d_")) + r["unexplained_tokens"]
            assert total == pytest.approx(r["api_cached_tokens"] - r["hit_tokens_plain"])
        assert parts <= diff + 1e-6


def test_the_api_read_content_no_recorded_call_carried(folder, per_file):
    """Even with every earlier recorded prompt cached, in the API's own token counts, the API
    reads more: most calls read their whole prompt, newest tool results included."""
    calls = _usage_by_call(folder)
    whole = sum(u["input_tokens"] + u["cache_creation_input_tokens"] <= 5
                for u in calls.values())
    assert whole == 34
    for rep in per_file.values():
        (f,) = rep.files
        assert f["ceiling"] < f["api"] - 0.02
        assert f["reason_tokens"]["unrecorded"] > 10_000


def test_hidden_prefix_replay_agrees_with_the_per_call_report(folder, per_file):
    for p in sorted(folder.glob("*.jsonl")):
        res = analyze([p], HitrateOptions(subagents=True, hidden_prefix="auto"))
        (f,) = per_file[p.name].files
        assert res.summary["requests"] == f["calls"]
        plain = analyze([p], HitrateOptions(subagents=True))
        assert plain.reported is not None and res.reported is not None
        assert plain.reported["reconstructed_token_hit_ratio"] == pytest.approx(f["plain"])
        # per_file is calibrated; the replay above is in our tokens: close, not equal.
        assert res.reported["reconstructed_token_hit_ratio"] == pytest.approx(
            f["hidden"], abs=0.002)
        assert res.reported["reconstructed_token_hit_ratio"] > f["plain"]
