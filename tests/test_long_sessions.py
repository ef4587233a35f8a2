"""Text prompts kept as interned messages: token-exact against the token-level oracle, and
memory that grows with the distinct content, not with calls x prompt length."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.hitrate.pipeline import replay
from xmemplan.prefix.chunks import match_prompts
from xmemplan.prefix.matcher import match
from xmemplan.prefix.reference import reference_match
from xmemplan.traces._build import BatchBuilder, PromptSet, TextBatch, concat_text
from xmemplan.traces.schema import RequestBatch

# A message: a short run of tokens from a tiny alphabet, so that distinct messages share
# leading tokens and a match often ends inside a message.
message = st.lists(st.integers(0, 3), min_size=0, max_size=6)

# One step of a conversation, applied to the message list the previous request sent.
step = st.one_of(
    st.tuples(st.just("append"), message),  # the agent's usual call: one more message
    st.tuples(st.just("edit"), st.integers(0, 50), message),  # a message changed mid-way
    st.tuples(st.just("compact"), st.integers(0, 50), message),  # summary + the recent tail
    st.tuples(st.just("copy"), st.just(0)),  # same content in fresh arrays (a new chunk id)
    st.tuples(st.just("split"), st.integers(0, 50)),  # same tokens, cut into other messages
    st.tuples(st.just("fork"), st.integers(0, 50)),  # back to an earlier point
)


def _conversations(draw_steps: list[tuple], sessions: list[int]) -> list[tuple[int, list]]:
    """(session, message list) per request; arrays are shared between requests, as the
    readers' cached chunks are, except where a step makes new ones."""
    convs: dict[int, list[np.ndarray]] = {}
    out = []
    for s, st_ in zip(sessions, draw_steps):
        conv = list(convs.get(s, []))
        kind = st_[0]
        if kind == "append":
            conv.append(np.array(st_[1], dtype=np.int64))
        elif kind == "edit" and conv:
            i = st_[1] % len(conv)
            conv[i] = np.array(st_[2], dtype=np.int64)
        elif kind == "compact":
            keep = conv[len(conv) - st_[1] % (len(conv) + 1):] if conv else []
            conv = [np.array(st_[2], dtype=np.int64), *keep]
        elif kind == "copy":
            conv = [c.copy() for c in conv]
        elif kind == "split" and conv:
            i = st_[1] % len(conv)
            c = conv[i]
            cut = len(c) // 2
            conv[i : i + 1] = [c[:cut], c[cut:]]
        elif kind == "fork" and conv:
            conv = conv[: st_[1] % len(conv)]
        convs[s] = conv
        out.append((s, conv))
    return out


def _batch(rows: list[tuple[int, list]]) -> TextBatch:
    b = BatchBuilder("test", block_tokens=1)
    for i, (s, conv) in enumerate(rows):
        b.add(f"s{s}", float(i), int(sum(len(c) for c in conv)), list(conv))
    batch = b.build()
    assert isinstance(batch, TextBatch)
    return batch


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_interned_prompts_match_the_token_oracle(data):
    n = data.draw(st.integers(1, 30))
    steps = data.draw(st.lists(step, min_size=n, max_size=n))
    sessions = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    batch = _batch(_conversations(steps, sessions))
    flat = [batch.keys[batch.key_offsets[r]:batch.key_offsets[r + 1]] for r in range(n)]
    # the interned prompts hold exactly the tokens the reader gave
    for r, (_, conv) in enumerate(_conversations(steps, sessions)):
        want = np.concatenate(conv) if conv else np.empty(0, dtype=np.int64)
        assert np.array_equal(flat[r], want)
    resets = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    got = match_prompts(batch.prompts, batch.nodes, resets)
    oracle = reference_match([f.tolist() for f in flat], list(resets | (np.arange(n) == 0)))
    assert got.tolist() == oracle
    assert np.array_equal(got, match(batch.keys, batch.key_offsets, resets))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_replay_of_interned_prompts_equals_the_flat_replay(data):
    """Every scope and page size: the same hit tokens as the materialised token keys."""
    n = data.draw(st.integers(1, 25))
    steps = data.draw(st.lists(step, min_size=n, max_size=n))
    sessions = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    batch = _batch(_conversations(steps, sessions))
    flat = RequestBatch(
        source="test", session_id=batch.session_id, timestamp_s=batch.timestamp_s,
        prompt_tokens=batch.prompt_tokens, output_tokens=batch.output_tokens,
        block_tokens=batch.block_tokens, keys=batch.keys.copy(),
        key_offsets=batch.key_offsets.copy(),
    )
    fresh = _batch(_conversations(steps, sessions))  # keys never materialised
    for scope in ("session", "global"):
        for page in (1, 2, 4):
            want = replay(flat, scope, page).column("hit_tokens")
            got = replay(fresh, scope, page).column("hit_tokens")
            assert np.array_equal(got, want), (scope, page)
    assert fresh._keys is None  # the replay did not materialise the prompts


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_concatenated_prompt_sets_match_as_one(data):
    """Files read apart (request logs) and merged: the same figures as one batch."""
    parts = []
    for _ in range(data.draw(st.integers(1, 4))):
        n = data.draw(st.integers(1, 10))
        steps = data.draw(st.lists(step, min_size=n, max_size=n))
        sessions = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        parts.append(_batch(_conversations(steps, sessions)))
    merged = concat_text(parts)
    keys = np.concatenate([p.keys for p in parts])
    lengths = np.concatenate([np.diff(p.key_offsets) for p in parts])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    assert np.array_equal(merged.keys, keys)
    resets = np.zeros(len(merged), dtype=bool)
    assert np.array_equal(
        match_prompts(merged.prompts, merged.nodes, resets), match(keys, offsets, resets)
    )


def test_a_long_session_grows_with_distinct_content():
    """2,000 calls of ~60 tokens each: 120 M prompt tokens, stored as the 120 k distinct."""
    rng = np.random.default_rng(7)
    b = BatchBuilder("test", block_tokens=1)
    conv: list[np.ndarray] = []
    for _ in range(2000):
        conv.append(rng.integers(0, 50_000, 60))
        b.add("s", None, 60 * len(conv), list(conv))
    batch = b.build()
    assert isinstance(batch, TextBatch)
    total = int(batch.prompt_tokens.sum())
    distinct = 60 * 2000
    assert total == 60 * 2000 * 2001 // 2
    assert batch.prompts.tokens.shape[0] == distinct
    assert batch.prompts.nbytes < 12 * distinct * 8  # ~ the distinct tokens, not the 120 M
    hit = replay(batch, "session", 1).column("hit_tokens")
    assert np.array_equal(hit, np.arange(2000) * 60)  # each call hits the previous prompt
    assert batch._keys is None


def test_merge_maps_every_root_to_one():
    a = _batch([(0, [np.array([1, 2])])])
    b = _batch([(0, [np.array([1, 2]), np.array([3])])])
    merged, bases = PromptSet.merge([a.prompts, b.prompts])
    assert merged.parent[0] == -1 and bases == [0, a.prompts.parent.shape[0] - 1]
    assert (merged.parent[1:] >= 0).all() and (merged.parent[1:] < np.arange(1, len(merged.parent))).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 30), st.lists(message, max_size=3)), min_size=1,
                max_size=30))
def test_extend_gives_the_prompt_a_full_list_gives(spec):
    """`Extend(row, parts)` (a reader that knows its call continues an earlier one) and the
    full message list build the same prompts and the same figures."""
    from xmemplan.traces._build import Extend

    by_list, by_extend = BatchBuilder("a", 1), BatchBuilder("b", 1)
    prompts: list[list[np.ndarray]] = []
    for i, (base, parts) in enumerate(spec):
        arrays = [np.array(p, dtype=np.int64) for p in parts]
        row = base % i if i and base >= 0 else None
        full = (prompts[row] if row is not None else []) + arrays
        prompts.append(full)
        n = int(sum(len(a) for a in full))
        by_list.add("s", None, n, list(full))
        by_extend.add("s", None, n, Extend(row, arrays) if row is not None else arrays)
    a, b = by_list.build(), by_extend.build()
    assert isinstance(a, TextBatch) and isinstance(b, TextBatch)  # message rows: interned
    assert np.array_equal(a.keys, b.keys) and np.array_equal(a.key_offsets, b.key_offsets)
    resets = np.zeros(len(spec), dtype=bool)
    assert np.array_equal(match_prompts(a.prompts, a.nodes, resets),
                          match_prompts(b.prompts, b.nodes, resets))


def test_kernels_run_as_plain_python_for_coverage():
    """NUMBA_DISABLE_JIT=1: the interned-prompt matcher and the materialiser as Python, with
    the answers of the token-level tree (a message edited, then the conversation resumed)."""
    code = (
        "import numpy as np\n"
        "from xmemplan.traces._build import BatchBuilder\n"
        "from xmemplan.prefix.chunks import match_prompts\n"
        "from xmemplan.prefix.matcher import match\n"
        "a, b, c, d = (np.array(x) for x in ([1, 2, 3], [4, 5], [4, 6, 7], [8]))\n"
        "bb = BatchBuilder('t', 1)\n"
        "for p in ([a], [a, b], [a, c], [a, b, d], [a.copy(), c, d]):\n"
        "    bb.add('s', None, sum(len(x) for x in p), list(p))\n"
        "t = bb.build()\n"
        "r = np.zeros(5, bool)\n"
        "print(match_prompts(t.prompts, t.nodes, r).tolist(),"
        " match(t.keys, t.key_offsets, r).tolist())\n"
    )
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 3, 4, 5, 6] [0, 3, 4, 5, 6]"


def test_a_builder_given_both_kinds_of_rows_flattens_them():
    b = BatchBuilder("mixed", 1)
    b.add("s", None, 2, [np.array([1]), np.array([2])])
    b.add("s", None, 3, np.array([1, 2, 3]))
    b.add("s", None, 3, [np.array([1]), np.array([2, 9])])
    batch = b.build()
    assert not isinstance(batch, TextBatch)
    assert batch.keys.tolist() == [1, 2, 1, 2, 3, 1, 2, 9]
    assert batch.key_offsets.tolist() == [0, 2, 5, 8]


def _long_transcript(folder: Path, calls: int) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_tokenize import make_long_session

    folder.mkdir(parents=True, exist_ok=True)
    return make_long_session(folder, calls)


def test_the_transcript_reader_is_linear_in_the_session(tmp_path, monkeypatch):
    """Each call of a generated Claude Code session costs its new records only: the chain
    steps, the messages tokenized and the messages given to the builder are the records,
    not calls x prompt length, and every call after the first reaches the builder as an
    `Extend` of an earlier one (two new messages)."""
    from xmemplan.text.encoder import get_encoder
    from xmemplan.traces import claude_transcript as CT
    from xmemplan.traces._build import Extend
    from xmemplan.traces.base import ReadOptions, SkipLog

    calls = 600
    path = _long_transcript(tmp_path, calls)
    records = 2 * calls + 1
    counts = {"push": 0, "tokenized": 0}
    given: list = []
    push, message, add = CT._Transcript._push, CT._Transcript._message, BatchBuilder.add

    def count_push(self, *a):
        counts["push"] += 1
        return push(self, *a)

    def count_message(self, group, **kw):
        counts["tokenized"] += 1
        return message(self, group, **kw)

    def keep(self, session, ts, n, keys, **kw):
        given.append(keys)
        return add(self, session, ts, n, keys, **kw)

    monkeypatch.setattr(CT._Transcript, "_push", count_push)
    monkeypatch.setattr(CT._Transcript, "_message", count_message)
    monkeypatch.setattr(BatchBuilder, "add", keep)
    (batch,) = CT.read_with(path, ReadOptions(), SkipLog(), get_encoder(None))
    assert len(batch) == calls
    assert counts["push"] <= records and counts["tokenized"] <= records
    assert isinstance(given[0], list) and len(given[0]) == 1
    assert all(isinstance(k, Extend) and k.row == i and len(k.parts) == 2
               for i, k in enumerate(given[1:]))
    # The figures: call k's prompt is call k-1's plus two messages, so it hits all of it.
    hit = replay(batch, "session", 1).column("hit_tokens")
    assert np.array_equal(hit[1:], batch.prompt_tokens[:-1]) and hit[0] == 0


def test_a_4000_call_transcript_through_the_whole_command(tmp_path):
    """Issue 14's long session: `xmemplan hitrate` on a generated 4,000-call Claude Code
    transcript (7.2 G prompt tokens) within 400 MB of peak RSS, every call hitting the whole
    previous prompt. Its time is measured by benchmarks/bench_long_sessions.py (under 5 s
    on an idle machine, docs/performance.md); here only a bound no quadratic reader meets
    (the reader before took 66-100 s)."""
    import json
    import time

    path = _long_transcript(tmp_path / "long", 4000)
    small = _long_transcript(tmp_path / "small", 20)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_long_sessions import PEAK  # the command's own peak (VmHWM), in KiB

    code = (PEAK + "import runpy, sys; sys.argv = ['xmemplan'] + sys.argv[1:]\n"
            "code = 0\ntry:\n    runpy.run_module('xmemplan', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code or 0\n"
            "print(peak(), file=sys.stderr)\nsys.exit(code)\n")
    def run(folder: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, "-q", "hitrate", str(folder),
                               "--format", "json"], capture_output=True, text=True)

    # A short session first: numba compiles the kernels when its cache is stale (an edited
    # module), and the compiler's memory is not the reader's.
    assert run(small.parent).returncode == 0
    t0 = time.perf_counter()
    out = run(path.parent)
    seconds = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    peak_mb = int(out.stderr.strip().splitlines()[-1]) * 1024 / 1e6
    assert doc["requests"] == 4000 and doc["prompt_tokens"] > 7e9
    # Every call hits the whole previous prompt, so the misses add up to the last prompt
    # (about 2 / 4,000 of all prompt tokens, the prompts growing linearly).
    missed = doc["prompt_tokens"] - doc["hit_tokens"]
    assert 0 < missed < doc["prompt_tokens"] / 1500
    assert peak_mb < 400, peak_mb
    assert seconds < 30, seconds
