"""Reference figures on the real traces in ../shared/traces (skipped when absent).

The figures were computed independently of xmemplan (issue 2); the infinite cache reproduces
them to the 6th decimal.
"""

from __future__ import annotations

import pytest
from conftest import shared_trace

from xmemplan.hitrate import HitrateOptions, analyze


def test_claude_code_weka_dev_set_session_scope():
    result = analyze([shared_trace("claude-code-weka")], HitrateOptions(scope="session"))
    s = result.summary
    assert s["requests"] == 2801 and s["prompt_tokens"] == 360_861_538 and s["sessions"] == 44
    expected = {
        "token_hit_ratio": 0.962582,
        "mean_request_hit_ratio": 0.954849,
        "rounds_ge1_mean": 0.970088,
        "rounds_ge1_median": 0.993525,
        "rounds_ge1_token_hit_ratio": 0.976570,
        "rounds_ge1_share_ge_95": 0.913674,
        "session_token_hit_mean": 0.925001,
        "session_token_hit_median": 0.956006,
    }
    for key, value in expected.items():
        assert s[key] == pytest.approx(value, abs=5e-7), key
    assert s["skipped"]["lines"] == 0 and s["skipped"]["files"] == 0 and not result.unrecognized


@pytest.mark.parametrize(
    "name,token,mean",
    [("conversation_trace.jsonl", 0.373624, 0.409385), ("synthetic_trace.jsonl", 0.651244, 0.431521)],
)
def test_mooncake_global(name, token, mean):
    result = analyze([shared_trace("mooncake-fast25", name)])
    assert result.scope == "global"
    assert result.summary["token_hit_ratio"] == pytest.approx(token, abs=5e-7)
    assert result.summary["mean_request_hit_ratio"] == pytest.approx(mean, abs=5e-7)
