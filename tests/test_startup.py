"""Start-up: a run loads only what it needs (no numba for a small chained block trace), and
the numpy matcher of prefix-chained keys gives the radix tree's figures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.prefix.chained import match_chained
from xmemplan.prefix.matcher import match


def _requests(paths: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    keys = np.array([k for p in paths for k in p], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in paths])]).astype(np.int64)
    return keys, offsets


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=8), min_size=1, max_size=25))
def test_chained_keys_match_like_the_radix_tree(blocks):
    """Keys made chained by naming each prefix (as Mooncake's ids are) give equal figures."""
    names: dict[tuple[int, ...], int] = {}
    paths = [[names.setdefault(tuple(b[: i + 1]), len(names)) for i in range(len(b))]
             for b in blocks]
    keys, offsets = _requests(paths)
    got = match_chained(keys, offsets)
    assert got is not None
    assert np.array_equal(got, match(keys, offsets, np.zeros(len(paths), dtype=bool)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=8), min_size=1, max_size=25))
def test_unchained_keys_are_refused_or_match_alike(paths):
    """Raw ids that repeat after other prefixes: None (the tree runs), never wrong figures."""
    keys, offsets = _requests(paths)
    got = match_chained(keys, offsets)
    if got is not None:
        assert np.array_equal(got, match(keys, offsets, np.zeros(len(paths), dtype=bool)))


def test_refuses_a_key_seen_after_two_prefixes():
    keys, offsets = _requests([[1, 2], [3, 2]])
    assert match_chained(keys, offsets) is None


def test_a_mooncake_run_loads_no_numba(tmp_path):
    rows = [
        json.dumps({"timestamp": i, "input_length": 1000, "output_length": 5,
                    "hash_ids": [1, i % 3 + 2]})
        for i in range(20)
    ]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("\n".join(rows) + "\n")
    code = (
        "import sys; from pathlib import Path; from xmemplan.hitrate import analyze;"
        f"r = analyze([Path({str(trace)!r})]);"
        "print(r.summary['requests'], r.summary['prompt_tokens'], 'numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["20", "20000", "False"]


def test_ray_executor_without_ray_says_what_to_install(monkeypatch, tmp_path):
    """`--executor ray` where Ray is not installed: NotAvailableError (exit 4) naming the
    extra, not a traceback; and no other run imports ray."""
    from pathlib import Path

    from xmemplan.errors import NotAvailableError
    from xmemplan.hitrate import HitrateOptions, analyze

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1,
                                 "hash_ids": [1]}) + "\n")
    try:
        analyze([Path(trace)], HitrateOptions(executor="ray"))
    except NotAvailableError as exc:
        assert "xmemplan[ray]" in str(exc.hint)
    else:
        raise AssertionError("no NotAvailableError")
    assert analyze([Path(trace)]).summary["requests"] == 1
