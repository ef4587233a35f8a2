"""Numbers out of range in the files the commands read: catalogs (TOML), workload profiles
and plans (JSON). A bad value exits 3 naming the file and the field; a value that is
negative, NaN or infinite is never used as it stands; the file is not changed."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from fuzzlib import assert_clean, digest, examples, hypothesis_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.catalog.loader import _FIELDS
from xmemplan.errors import ExitCode

SETTINGS = hypothesis_settings()



# --- catalogs ------------------------------------------------------------------------------

ENTRY = {"model": "qwen3-30b-a3b", "gpu": "h100-sxm", "tier": "xmem"}
# TOML literals that are never a usable quantity: negative, NaN, infinite (1e400 reads as inf)
NEVER = ["-1", "nan", "inf", "1e400", '"-1GB"', '"1e400GB/s"', '"0GB/s"', '"0GB"']
OPEN_CATALOG: dict[tuple[str, str, str], str] = {}
_CHOICE_OR_TEXT = {"attention", "weight_dtype", "host_link", "kind", "attach",
                   "capacity_scope", "unpublished", "display_name", "aliases", "source"}


def _catalog_cases() -> list:
    out = []
    for kind in ("model", "gpu", "tier"):
        for f in sorted(_FIELDS[kind]):
            if f in _CHOICE_OR_TEXT:
                continue
            for v in NEVER:
                why = OPEN_CATALOG.get((kind, f, v))
                marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
                out.append(pytest.param(kind, f, v, marks=marks, id=f"{kind}.{f}={v}"))
    return out


def _write_catalog(tmp: Path, kind: str, field: str, value: str) -> Path:
    p = tmp / "overlay.toml"
    p.write_text(f'[{kind}.{ENTRY[kind]}]\nsource = "fuzz"\n{field} = {value}\n')
    return p


@pytest.mark.parametrize("kind,field,value", _catalog_cases())
def test_catalog_never_takes_a_bad_number(cli, tmp_path, kind, field, value):
    p = _write_catalog(tmp_path, kind, field, value)
    before = digest([p])
    r = cli("catalog", "all", "--catalog", p, "-f", "json")
    assert_clean(r, codes={ExitCode.INPUT}, names=[p.name], before=before, inputs=[p])
    assert f"'{field}'" in r.err, r.err


_TOML_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda x: "nan" if x != x else ("inf" if x == math.inf else "-inf" if x == -math.inf
                                        else repr(x))),
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.tuples(st.floats(-1e30, 1e30), st.sampled_from(["GB", "GB/s", "us", "TFLOPS", "B", ""])
              ).map(lambda t: json.dumps(f"{t[0]!r}{t[1]}")),
    st.text(max_size=10).map(json.dumps),
    st.just("[]"), st.just('["1GB"]'), st.just("true"),
)


@settings(max_examples=examples(60), **SETTINGS)
@given(kind=st.sampled_from(["model", "gpu", "tier"]), data=st.data(), value=_TOML_VALUE)
def test_catalog_any_value(cli, tmp_path_factory, kind, data, value):
    field = data.draw(st.sampled_from(sorted(_FIELDS[kind])))
    p = _write_catalog(tmp_path_factory.mktemp("cat"), kind, field, value)
    before = digest([p])
    r = cli("catalog", "all", "--catalog", p, "-f", "json")
    assert_clean(r, codes={ExitCode.OK, ExitCode.INPUT}, names=[p.name], before=before,
                 inputs=[p])


# --- profiles ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profile_doc(tmp_path_factory) -> dict:
    from xmemplan.cli.main import run

    d = tmp_path_factory.mktemp("prof")
    t = d / "t.jsonl"
    t.write_text("".join(
        json.dumps({"session_id": f"s{s}", "timestamp": 10 * s + r,
                    "input_ids": list(range(300 * (r + 1)))}) + "\n"
        for s in range(3) for r in range(4)))
    assert run(["-q", "hitrate", str(t), "--profile-out", str(d / "p.json"), "-f", "json"]) == 0
    return json.loads((d / "p.json").read_text())


def _leaves(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from _leaves(v, (*prefix, i))
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        yield prefix


def _set(doc, path, value):
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value


# Fields `load_profile` checks (and the planner uses): a negative or non-finite value there
# must be refused, naming the field.
CHECKED = {
    "requests", "sessions", "kv_bytes_per_token", "working_set.peak_tokens",
    "prompt_tokens.mean", "prompt_tokens.p50", "prompt_tokens.p90",
    "prompt_tokens.p99", "prompt_tokens.max", "prompt_tokens.histogram.edges",
    "prompt_tokens.histogram.counts", "hit_ratio.token_hit_ratio",
    "hit_ratio.rounds_ge1_token_hit_ratio", "arrival.rate_rps",
    "requests_sample.prompt_tokens", "requests_sample.hit_tokens",
    "capacity_curve.capacity_tokens", "capacity_curve.token_hit_ratio",
}
BAD_NUMBERS = [-1, -1e-9, float("nan"), float("inf"), float("-inf"), -(2**70)]
JSON_BAD = st.sampled_from(BAD_NUMBERS)
JSON_ANY = st.one_of(JSON_BAD, st.none(), st.text(max_size=4), st.booleans(),
                     st.floats(allow_nan=True), st.integers(-(2**70), 2**70), st.just([]),
                     st.just({}))


def _dump(doc) -> str:
    return json.dumps(doc, allow_nan=True)  # NaN/Infinity as Python writes them


def _dotted(path) -> str:
    return ".".join(str(k) for k in path if not isinstance(k, int))


def _run_profile(cli, tmp: Path, doc: dict):
    p = tmp / "profile.json"
    p.write_text(_dump(doc))
    before = digest([p])
    r = cli("size", "--ttft-slo", "500ms", "--workload", p)
    assert_clean(r, codes={ExitCode.OK, ExitCode.INPUT}, names=[p.name], before=before,
                 inputs=[p])
    return r


@settings(max_examples=examples(50), **SETTINGS)
@given(data=st.data(), value=JSON_ANY)
def test_profile_any_value(cli, stubbed, tmp_path_factory, profile_doc, data, value):
    path = data.draw(st.sampled_from(sorted(_leaves(profile_doc), key=str)))
    doc = copy.deepcopy(profile_doc)
    _set(doc, path, value)
    r = _run_profile(cli, tmp_path_factory.mktemp("p"), doc)
    bad = isinstance(value, float | int) and not isinstance(value, bool) and (
        not math.isfinite(value) or value < 0)
    if bad and _dotted(path) in CHECKED:
        assert r.code == ExitCode.INPUT, f"profile field {_dotted(path)} = {value!r} was used"


_OPEN_PROFILE: dict[tuple[str, str], str] = {}


def _profile_cases() -> list:
    fields = sorted(CHECKED - {"capacity_curve.capacity_tokens",
                               "capacity_curve.token_hit_ratio"}) + ["arrival.concurrency_mean"]
    out = []
    for f in fields:
        for v in BAD_NUMBERS:
            why = _OPEN_PROFILE.get((f, repr(v)))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            out.append(pytest.param(f, v, marks=marks, id=f"{f}={v!r}"))
    return out


@pytest.mark.parametrize("field,value", _profile_cases())
def test_profile_field_never_used_when_negative_or_not_finite(cli, stubbed, tmp_path,
                                                              profile_doc, field, value):
    doc = copy.deepcopy(profile_doc)
    cur = doc
    keys = field.split(".")
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    old = cur.get(keys[-1])
    cur[keys[-1]] = [value] * len(old) if isinstance(old, list) and old else value
    r = _run_profile(cli, tmp_path, doc)
    if field == "arrival.concurrency_mean" and not value > 0:
        return  # ignored (not positive): not used as it stands
    assert r.code == ExitCode.INPUT and field.split(".")[-1] in r.err, r.err


# --- plans ---------------------------------------------------------------------------------

PLAN = {"schema": "xmemplan.plan", "schema_version": 1, "model": "qwen3-30b-a3b",
        "gpu": "h100-sxm", "prompt_tokens_p50": 8192, "hit_ratio": 0.9, "concurrency": 4,
        "recommended_nodes": 1}


@settings(max_examples=examples(40), **SETTINGS)
@given(field=st.sampled_from(sorted(PLAN)), value=JSON_ANY)
def test_plan_fields(cli, stubbed, tmp_path_factory, field, value):
    doc = dict(PLAN, **{field: value})
    p = tmp_path_factory.mktemp("plan") / "plan.json"
    p.write_text(_dump(doc))
    before = digest([p])
    r = cli("validate", "--emulate", "--plan", p)
    assert_clean(r, codes={ExitCode.OK, ExitCode.USAGE, ExitCode.INPUT}, names=[p.name],
                 before=before, inputs=[p])
    used = field in ("prompt_tokens_p50", "hit_ratio")
    bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
        value) or value < 0 or (field == "hit_ratio" and value > 1)
    if used and bad:
        assert r.code == ExitCode.INPUT and f"'{field}'" in r.err, r.err
