"""`hitrate --executor ray`: the same figures as a local run, on a local Ray with 2 CPUs.

Skipped when Ray is not installed, except in CI (the CI installs the `ray` extra, and a
missing Ray there must fail rather than skip).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from xmemplan.hitrate import HitrateOptions, analyze

if os.environ.get("CI"):
    import ray
else:
    ray = pytest.importorskip("ray")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
TRANSCRIPTS = SHARED / "claude-code-transcripts"
BLOCKS = SHARED / "claude-code-weka"
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


def _same(paths: list[Path], **kw) -> dict:
    local = analyze(paths, HitrateOptions(**kw))
    remote = analyze(paths, HitrateOptions(executor="ray", **kw))
    assert json.dumps(remote.summary, sort_keys=True) == json.dumps(local.summary, sort_keys=True)
    assert remote.replayed.session_id == local.replayed.session_id
    assert remote.reported == local.reported
    assert remote.skips.counts == local.skips.counts
    return local.summary


@pytest.mark.skipif(not TRANSCRIPTS.is_dir(), reason="shared Claude Code transcripts absent")
def test_ray_on_the_shared_claude_code_sessions_equals_local(local_ray):
    s = _same([TRANSCRIPTS], subagents=True)
    assert s["requests"] > 0
    _same([TRANSCRIPTS])


@pytest.mark.skipif(not BLOCKS.is_dir(), reason="shared Claude Code block traces absent")
def test_ray_on_block_traces_equals_local_in_both_scopes(local_ray):
    files = sorted(BLOCKS.glob("*.json"))[:12]
    _same(files, scope="session")
    _same(files, scope="global")


def test_ray_on_the_text_fixtures_equals_local(local_ray):
    """Request logs come back as interned batches and are replayed on the driver."""
    s = _same([FIXTURES / "text"], subagents=True)
    assert s["requests"] > 0
    _same([FIXTURES / "text"], scope="global", page_size=16)


def test_unknown_executor_is_a_usage_error():
    from xmemplan.errors import UsageError

    with pytest.raises(UsageError, match="executor"):
        analyze([FIXTURES / "text"], HitrateOptions(executor="dask"))
