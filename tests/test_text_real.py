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
