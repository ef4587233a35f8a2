"""validate builds only what it replays: the seed scenario is trimmed to --max-requests
before any request is built, --max-requests holds even for one long session, and the
sessions kept have the keys they had when every session was built."""

from __future__ import annotations

import numpy as np
import pytest

from xmemplan.errors import UsageError
from xmemplan.validate.options import MAX_BUILT_PAGES, ValidateOptions
from xmemplan.validate.workload import (
    Request,
    built_pages,
    replayed_shape,
    scale_to_budget,
    synthetic,
)


def _all_sessions(opts: ValidateOptions) -> list[Request]:
    """Every session of the scenario, built in full (what validate did before trimming)."""
    rng = np.random.default_rng(opts.seed)
    out = []
    for s in range(opts.sessions):
        full = opts.prompt_tokens + (opts.rounds - 1) * opts.growth_tokens
        keys = rng.integers(1, 2**62, full // opts.page_tokens, dtype=np.int64)
        for r in range(opts.rounds):
            prompt = opts.prompt_tokens + r * opts.growth_tokens
            out.append(Request(s, r, prompt, keys[: prompt // opts.page_tokens].copy()))
    return out


def test_trimmed_sessions_keep_their_keys():
    opts = ValidateOptions(sessions=5, rounds=4, max_requests=9, prompt_tokens=1024,
                           growth_tokens=256)
    got = synthetic(opts)
    assert replayed_shape(opts) == (2, 4)
    assert got.asked == 20 and len(got) == 8
    full = [r for r in _all_sessions(opts) if r.session < 2]
    assert [(r.session, r.round, r.prompt_tokens) for r in got] == [
        (r.session, r.round, r.prompt_tokens) for r in full]
    for a, b in zip(got, full, strict=True):
        assert np.array_equal(a.keys, b.keys)


def test_untrimmed_scenario_is_unchanged():
    opts = ValidateOptions()  # 2 sessions x 4 rounds, --max-requests 12
    got = synthetic(opts)
    full = _all_sessions(opts)
    assert len(got) == len(full) == 8
    assert all(np.array_equal(a.keys, b.keys) for a, b in zip(got, full, strict=True))
    _, notes = scale_to_budget(got, 6 << 20, opts.page_tokens, opts.max_bytes,
                               opts.max_requests)
    assert not any("--max-requests" in n for n in notes)


def test_huge_scenario_builds_only_max_requests():
    opts = ValidateOptions(sessions=100_000, rounds=1_000, max_requests=12)
    got = synthetic(opts)
    assert len(got) == 12 and {r.session for r in got} == {0}
    assert [r.round for r in got] == list(range(12))
    reqs, notes = scale_to_budget(got, 6 << 20, opts.page_tokens, opts.max_bytes, 12)
    assert sum(r.measured for r in reqs) == 12
    assert "replayed 12 of 100,000,000 requests (--max-requests)" in notes


def test_max_requests_holds_inside_one_long_session():
    reqs = [Request(0, r, 64 * (r + 1), np.arange(r + 1, dtype=np.int64)) for r in range(10)]
    kept, notes = scale_to_budget(reqs, 1, 64, 1e9, 3)
    assert [r.round for r in kept] == [0, 1, 2]
    assert notes == ["replayed 3 of 10 requests (--max-requests)"]


def test_one_page_per_request_over_budget_drops_sessions():
    reqs = [Request(s, 0, 64, np.array([s + 1], dtype=np.int64)) for s in range(10)]
    kept, notes = scale_to_budget(reqs, 100, 64, 350.0, 10)
    assert len(kept) == 3  # 3 pages of 100 bytes fit 350
    assert sum(len(r.keys) for r in kept) * 100 <= 350
    assert any("replayed 3 of 10 requests" in n for n in notes)


def test_built_pages_counts_what_synthetic_holds():
    opts = ValidateOptions(sessions=3, rounds=5, max_requests=10, prompt_tokens=640,
                           growth_tokens=128, page_tokens=64)
    got = synthetic(opts)
    held = sum(len(r.keys) for r in got)  # per-round copies
    drawn = 2 * ((640 + 4 * 128) // 64)  # one draw per session kept
    assert built_pages(opts) == held + drawn


@pytest.mark.parametrize("args,flag", [
    (["--sessions", "1000001"], "--sessions"),
    (["--rounds", "10001"], "--rounds"),
    (["--max-requests", "10001"], "--max-requests"),
    (["--repeats", "101"], "--repeats"),
    (["--prompt-tokens", "0"], "--prompt-tokens"),
    (["--growth-tokens", "100M", "--rounds", "3"], "--growth-tokens"),
])
def test_flags_name_their_range(args, flag):
    from xmemplan.cli.validate import _check_sizes

    f = {"sessions": 2, "rounds": 4, "max_requests": 12, "repeats": 3,
         "prompt_tokens": "4096", "growth_tokens": "1024"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        key = k[2:].replace("-", "_")
        f[key] = int(v) if isinstance(f[key], int) else v
    with pytest.raises(UsageError) as e:
        _check_sizes(f)
    text = e.value.render()
    assert flag in text and ("Allowed" in text or "Lower" in text), text


def test_too_many_page_keys_is_refused():
    from xmemplan.cli.validate import _check_built

    opts = ValidateOptions(sessions=10_000, rounds=1, max_requests=10_000,
                           prompt_tokens=10_000_000, page_tokens=64)
    assert built_pages(opts) > MAX_BUILT_PAGES
    with pytest.raises(UsageError) as e:
        _check_built(opts)
    assert "3,125,000,000 KV page keys" in e.value.render()
    assert "--max-requests" in e.value.render()


def test_arena_too_small_for_a_page_is_a_usage_error():
    """An arena with no room for one page in each bank: a usage error naming validate's
    flags (it was 1, 'internal'). validate itself no longer builds one: `validate
    --max-bytes 1GB --readers 64` reached it through the calibration backend (2 slots over 4
    banks), which now holds whole pages in every bank and runs
    (tests/test_cli_unused_flags.py::test_validate_small_max_bytes_calibrates)."""
    from xmemplan.backends.media import ArenaMedium

    with pytest.raises(UsageError) as e:
        ArenaMedium("emulate", capacity_bytes=3 * 4096, slot_bytes=4096, banks=4)
    assert "holds no" in e.value.render() and "--max-bytes" in e.value.render()
