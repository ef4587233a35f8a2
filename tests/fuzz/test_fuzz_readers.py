"""Hypothesis over the block and token-id readers: hostile rows, files cut anywhere, CRLF, a
BOM, compression. Every line is either a request or a counted skip (never a silent drop),
and every run ends with a documented exit code, no traceback, and the input unchanged."""

from __future__ import annotations

import gzip
import json
import lzma

import pytest
from fuzzlib import assert_clean, digest, examples, hypothesis_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmemplan.errors import ExitCode

SETTINGS = hypothesis_settings(HealthCheck.data_too_large)

# Any JSON value a hostile file might hold in a field.
LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
)
HOSTILE = st.one_of(
    LEAF,
    st.lists(st.integers(-(2**65), 2**65), max_size=6),
    st.lists(LEAF, max_size=4),
    st.dictionaries(st.sampled_from(["hash_ids", "input_ids", "x"]),
                    st.lists(st.integers(0, 99), max_size=4), max_size=2),
)
MISSING = object()


def _maybe(good: st.SearchStrategy, p_bad: float = 0.25) -> st.SearchStrategy:
    """Mostly the good value, sometimes hostile, sometimes absent."""
    return st.one_of(good, good, good, HOSTILE, st.just(MISSING))


def _obj(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if v is not MISSING}


@st.composite
def token_row(draw) -> dict:
    n = draw(st.integers(0, 40))
    base = draw(st.integers(0, 3))
    ids = list(range(base * 100, base * 100 + n))
    return _obj({
        "session_id": draw(_maybe(st.sampled_from(["s1", "s2", 7]))),
        "timestamp": draw(_maybe(st.floats(0, 1e6))),
        "input_ids": draw(_maybe(st.just(ids))),
        "output_tokens": draw(_maybe(st.integers(0, 100))),
    })


@st.composite
def block_row(draw, block: int, parent: bool) -> dict:
    blocks = draw(st.integers(0, 6))
    n = max(0, blocks * block - draw(st.integers(0, block - 1)))
    ids = list(range(draw(st.integers(0, 3)), draw(st.integers(0, 3)) + -(-n // block)))
    row = {
        "timestamp": draw(_maybe(st.floats(0, 1e6))),
        "input_length": draw(_maybe(st.just(n))),
        "output_length": draw(_maybe(st.integers(0, 100))),
        "hash_ids": draw(_maybe(st.just(ids))),
    }
    if parent:
        row["chat_id"] = draw(_maybe(st.integers(0, 20)))
        row["parent_chat_id"] = draw(_maybe(st.integers(-1, 20)))
    return _obj(row)


@st.composite
def blocks_doc(draw) -> dict:
    reqs = []
    for _ in range(draw(st.integers(0, 5))):
        n = draw(st.integers(0, 400))
        req = _obj({"t": draw(_maybe(st.floats(0, 1e4))), "type": "n",
                    "in": draw(_maybe(st.just(n))), "out": draw(_maybe(st.integers(0, 9))),
                    "hash_ids": draw(_maybe(st.just(list(range(n // 64)))))})
        if draw(st.booleans()) and draw(st.booleans()):
            req = {"type": "subagent", "t": 1.0, "requests": [req]}
        reqs.append(req)
    return _obj({"id": draw(_maybe(st.sampled_from(["a", "b"]))), "block_size": 64,
                 "hash_id_scope": "local", "requests": draw(_maybe(st.just(reqs)))})


def _dump(obj: dict) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


@st.composite
def jsonl_file(draw, rows: st.SearchStrategy) -> tuple[bytes, int]:
    """(file bytes, count of non-blank lines) with CRLF, BOM, garbage lines and cuts."""
    lines = [_dump(r) for r in draw(st.lists(rows, min_size=1, max_size=12))]
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))),
                     draw(st.sampled_from([b"{", b"[1,2]", b"\xff\xfe", b"null", b'{"a":'])))
    sep = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = sep.join(lines) + sep
    if draw(st.booleans()) and draw(st.booleans()):
        data = data[: draw(st.integers(1, len(data)))]
    if draw(st.booleans()) and draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    count = sum(1 for ln in body.split(b"\n") if ln.strip())
    return data, count


def _pack(data: bytes, how: str) -> bytes:
    return {"plain": data, "gzip": gzip.compress(data), "xz": lzma.compress(data)}[how]


FORMATS = {
    "tokens": token_row(),
    "mooncake": block_row(512, parent=False),
    "bailian": block_row(16, parent=True),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@settings(max_examples=examples(40), **SETTINGS)
@given(data=st.data())
def test_line_readers_count_every_line(cli, tmp_path_factory, fmt, data):
    raw, lines = data.draw(jsonl_file(FORMATS[fmt]))
    how = data.draw(st.sampled_from(["plain", "plain", "gzip", "xz"]))
    folder = tmp_path_factory.mktemp(fmt)
    path = folder / f"trace.jsonl{'' if how == 'plain' else '.' + how}"
    path.write_bytes(_pack(raw, how))
    before = digest([path])
    r = cli("hitrate", path, "-t", fmt, "-f", "json")
    assert_clean(r, names=[path.name], before=before, inputs=[path],
                 codes={ExitCode.OK, ExitCode.INPUT})
    if r.code == ExitCode.OK:
        doc = json.loads(r.out)
        # never a silent drop: each non-blank line is a request or a counted skip
        assert doc["requests"] + doc["skipped"]["lines"] == lines, (doc, raw[:400])
    # sniffed (no -t): the same guarantees, whatever the first line looks like
    r2 = cli("hitrate", path, "-f", "json")
    assert_clean(r2, names=[path.name], before=before, inputs=[path],
                 codes={ExitCode.OK, ExitCode.INPUT})
    s = cli("hitrate", path, "-t", fmt, "--strict", "-f", "json")
    assert_clean(s, names=[path.name], before=before, inputs=[path],
                 codes={ExitCode.OK, ExitCode.INPUT})


@settings(max_examples=examples(40), **SETTINGS)
@given(docs=st.lists(blocks_doc(), min_size=1, max_size=3), cut=st.integers(0, 400),
       one_per_line=st.booleans())
def test_claude_blocks_documents(cli, tmp_path_factory, docs, cut, one_per_line):
    folder = tmp_path_factory.mktemp("blocks")
    raw = b"\n".join(_dump(d) for d in docs) + b"\n" if one_per_line else _dump(docs[0])
    if cut:
        raw = raw[: max(1, len(raw) - cut)]
    path = folder / "s.json"
    path.write_bytes(raw)
    before = digest([path])
    for extra in ([], ["--subagents"], ["--scope", "global"], ["--strict"]):
        r = cli("hitrate", path, "-t", "claude-blocks", "-f", "json", *extra)
        assert_clean(r, names=[path.name], before=before, inputs=[path],
                     codes={ExitCode.OK, ExitCode.INPUT})


@settings(max_examples=examples(15), **SETTINGS)
@given(junk=st.binary(max_size=300), name=st.sampled_from(["x.jsonl", "x.json", "x.gz",
                                                          "x.parquet", "x.xz", "x"]))
def test_any_bytes(cli, tmp_path_factory, junk, name):
    """Arbitrary bytes under any name: a counted skip or an error naming the file."""
    path = tmp_path_factory.mktemp("junk") / name
    path.write_bytes(junk)
    before = digest([path])
    r = cli("hitrate", path, "-f", "json")
    assert_clean(r, names=[path.name], before=before, inputs=[path],
                 codes={ExitCode.OK, ExitCode.INPUT})
    for fmt in ("tokens", "mooncake", "claude-blocks"):
        r = cli("hitrate", path, "-t", fmt, "-f", "json")
        assert_clean(r, names=[path.name], before=before, inputs=[path],
                     codes={ExitCode.OK, ExitCode.INPUT})


@settings(max_examples=examples(10), **SETTINGS)
@given(first=st.integers(9_000, 40_000), how=st.sampled_from(["plain", "gzip", "xz"]),
       bom=st.booleans())
def test_first_record_of_any_size_is_sniffed(cli, tmp_path_factory, first, how, bom):
    """Sniffing reads the whole first record: a 9k-40k token first prompt (64-300 KB) is
    still recognized, compressed or not, with or without a BOM, with the same figures."""
    folder = tmp_path_factory.mktemp("long")
    rows = [{"session_id": "s", "timestamp": i, "input_ids": list(range(first + 50 * i))}
            for i in range(3)]
    raw = b"".join(_dump(r) + b"\n" for r in rows)
    plain = folder / "ref.jsonl"
    plain.write_bytes(raw)
    path = folder / f"t.jsonl{'' if how == 'plain' else '.' + how}"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + raw if how == "plain"
                     else _pack((b"\xef\xbb\xbf" if bom else b"") + raw, how))
    forced = json.loads(cli("hitrate", plain, "-t", "tokens", "-f", "json").out)
    r = cli("hitrate", path, "-f", "json")
    assert_clean(r, codes={ExitCode.OK})
    doc = json.loads(r.out)
    assert doc["files_by_format"] == {"tokens": 1}
    assert doc["token_hit_ratio"] == forced["token_hit_ratio"]
    assert doc["requests"] == 3 and doc["skipped"]["lines"] == 0


GOOD = {
    "tokens": lambda i: {"session_id": "s", "timestamp": i, "input_ids": list(range(10 * (i + 1))),
                         "output_tokens": 3},
    "mooncake": lambda i: {"timestamp": i, "input_length": 512 * (i + 1), "output_length": 3,
                           "hash_ids": list(range(i + 1))},
    "bailian": lambda i: {"chat_id": i, "parent_chat_id": i - 1 if i else -1, "timestamp": i,
                          "input_length": 16 * (i + 1), "output_length": 3,
                          "hash_ids": list(range(i + 1))},
}
# Hostile values that still make valid JSON (NaN would break the whole line, not a field)
FIELD_HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False,
                                                                      allow_infinity=False),
    st.text(max_size=6), st.lists(st.integers(-(2**65), 2**65), max_size=4),
    st.lists(st.text(max_size=2), max_size=2), st.dictionaries(st.text(max_size=2),
                                                               st.integers(), max_size=2),
)


@pytest.mark.parametrize("fmt", sorted(GOOD))
@settings(max_examples=examples(30), **SETTINGS)
@given(data=st.data(), value=FIELD_HOSTILE)
def test_strict_error_blames_the_field_that_is_wrong(cli, tmp_path_factory, fmt, data, value):
    """One field of one row made hostile: under --strict the run passes (the value was fine)
    or fails naming that row's line and that field."""
    rows = [GOOD[fmt](i) for i in range(3)]
    name = data.draw(st.sampled_from(sorted(rows[1])))
    rows[1][name] = value
    path = tmp_path_factory.mktemp("blame") / "t.jsonl"
    path.write_bytes(b"".join(_dump(r) + b"\n" for r in rows))
    r = cli("hitrate", path, "-t", fmt, "--strict", "-f", "json")
    assert_clean(r, codes={ExitCode.OK, ExitCode.INPUT}, names=[path.name])
    if r.code == ExitCode.INPUT:
        assert "t.jsonl:2" in r.err, r.err
        assert name in r.err, f"{name}={value!r} blamed on: {r.err}"
