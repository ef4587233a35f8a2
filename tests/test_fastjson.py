"""The byte scanner that pulls integer arrays out of JSON text before parsing."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.traces.fastjson import extract


def test_arrays_in_text_order_with_lines():
    text = b'{"a": 1, "hash_ids" : [ 1,2 , -3 ],\n "b": [{"hash_ids": []}, {"hash_ids":[7]}]}'
    e = extract(text, "hash_ids")
    assert e is not None
    assert [e.array(k).tolist() for k in range(len(e))] == [[1, 2, -3], [], [7]]
    assert e.lines.tolist() == [1, 2, 2]
    assert orjson.loads(e.text) == {"a": 1, "hash_ids": [], "b": [{"hash_ids": []},
                                                                 {"hash_ids": []}]}


def test_field_name_inside_a_string_is_not_an_array():
    text = json.dumps({"note": '"hash_ids": [1, 2]', "hash_ids": [3]}).encode()
    e = extract(text, "hash_ids")
    assert e is not None and len(e) == 1 and e.array(0).tolist() == [3]
    assert orjson.loads(e.text)["note"] == '"hash_ids": [1, 2]'


def test_anything_but_plain_integers_falls_back():
    for bad in (b'{"hash_ids": [1.5]}', b'{"hash_ids": ["1"]}', b'{"hash_ids": [[1]]}',
                b'{"hash_ids": [1, 2', b'{"hash_ids": [12345678901234567890]}',
                b'{"hash_ids": [1,,2]}', b'{"hash_ids": [,]}'):
        assert extract(bad, "hash_ids") is None, bad


def test_other_fields_untouched():
    text = b'{"input_ids": [5, 6], "hash_ids": [1]}'
    e = extract(text, "input_ids")
    assert e is not None and orjson.loads(e.text) == {"input_ids": [], "hash_ids": [1]}


ints = st.lists(st.integers(-(10**17), 10**17), max_size=8)
# orjson reads integers beyond 64 bits as floats: keep other fields in range
leaf = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.none(), ints)
docs = st.recursive(
    st.dictionaries(st.sampled_from(["a", "hash_ids", "requests", "t"]), leaf, max_size=4),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["x", "requests", "sub"]), children, max_size=3),
    ),
    max_leaves=12,
)


def _strip(node):
    if isinstance(node, dict):
        return {k: ([] if k == "hash_ids" and isinstance(v, list) else _strip(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _collect(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "hash_ids" and isinstance(v, list):
                out.append(v)
            else:
                _collect(v, out)
    elif isinstance(node, list):
        for v in node:
            _collect(v, out)
    return out


@settings(max_examples=200, deadline=None)
@given(docs, st.booleans())
def test_round_trip_against_the_json_parser(doc, pretty):
    text = (json.dumps(doc, indent=1) if pretty else json.dumps(doc)).encode()
    e = extract(text, "hash_ids")
    want = _collect(doc, [])
    if any(not all(isinstance(x, int) for x in v) for v in want):
        assert e is None  # e.g. strings inside a hash_ids list
        return
    assert e is not None
    assert [e.array(k).tolist() for k in range(len(e))] == want
    assert orjson.loads(e.text) == _strip(doc)
