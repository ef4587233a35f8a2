"""Round 2 (issue 21): every document xmemplan reads, mutated by Hypothesis at any JSON path
or TOML key: profiles, catalog overlays, device files, calibration points, AIPerf records.

Shapes: type confusion (a list or dict for a number or string), integers past int64, past
Python's 4,300-digit conversion limit and 10^400, nesting past the JSON limits, control
characters and surrogates, invalid UTF-8, a FIFO for the file. Each case: a documented exit
code, no traceback, the culprit (the file) named, inputs unchanged, no temporary file.
Then the silent-wrong cases, each with the figure it must give, and the bounded-work cases,
each within a time bound."""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import CliResult
from fuzzlib import assert_clean, digest, examples, hypothesis_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.errors import ExitCode
from xmemplan.traces import synth

ROOT = Path(__file__).resolve().parent.parent.parent
SETTINGS = hypothesis_settings()
BIG = "@@BIG@@"

# Replacement values: the raw JSON/TOML text of each (big literals cannot pass json.dumps).
RAW = st.one_of(
    st.sampled_from([
        "9223372036854775808", "-9223372036854775809", "1" + "0" * 30, "1" + "0" * 5000,
        "1e400", "-1e400", "[]", "{}", "[[[[1]]]]", '"\\ud800"', '"\\u001b[2J"', "true",
        "null", '"x"', "-1", "0", "[1, 2]", '{"value": [1]}',
        "[" * 1100 + "]" * 1100, "[" * 300 + "]" * 300,
    ]),
    st.integers(-(2**70), 2**70).map(str),
)


def _paths(obj: object, prefix: tuple = ()) -> list[tuple]:
    out, stack = [], [(obj, prefix)]
    while stack:
        cur, p = stack.pop()
        if p:
            out.append(p)
        if isinstance(cur, dict):
            stack += [(v, (*p, k)) for k, v in cur.items()]
        elif isinstance(cur, list):
            stack += [(v, (*p, i)) for i, v in enumerate(cur[:3])]
    return sorted(out, key=str)


def _mutate_json(doc: object, path: tuple, raw: str) -> str:
    d = copy.deepcopy(doc)
    cur = d
    for k in path[:-1]:
        cur = cur[k]  # type: ignore[index]
    cur[path[-1]] = BIG  # type: ignore[index]
    return json.dumps(d).replace(f'"{BIG}"', raw, 1)


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> dict[str, Path]:
    """One valid document of each kind."""
    from xmemplan.cli.main import run

    d = tmp_path_factory.mktemp("docs")
    trace = d / "t.jsonl"
    synth.write_mooncake(trace, synth.agent_sessions(n_sessions=4, turns=4, seed=5))
    prof = d / "profile.json"
    assert run(["-q", "hitrate", str(trace), "--capacity", "1M", "--profile-out",
                str(prof), "-f", "json"]) == 0
    lines = (ROOT / "data" / "measurements" / "public.csv").read_text().splitlines()
    pts = d / "points.csv"
    pts.write_text("\n".join([lines[0], *lines[1::3]]) + "\n")
    aip = d / "aiperf"
    (aip / "run").mkdir(parents=True)
    rows = [{"timestamp": i, "input_length": 4096, "output_length": 1,
             "hash_ids": [i % 3, 100 + i], "session_id": f"xm{i:06d}", "block_tokens": 2048}
            for i in range(12)]
    (aip / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = [{"metadata": {"conversation_id": f"xm{k:06d}", "benchmark_phase": "profiling"},
             "metrics": {"time_to_first_token": {"value": 100.0 + k, "unit": "ms"},
                         "input_sequence_length": {"value": 4096}}} for k in range(12)]
    (aip / "run" / "profile_export.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in recs))
    return {"trace": trace, "profile": prof, "points": pts, "aiperf": aip}


def _check(cli, args: list, culprit: Path, folder: Path, codes=None) -> object:
    before = digest([folder])
    r = cli(*args)
    # An input error names the file; a failed check (the mutated figures judged) names none.
    blamed = [culprit.name] if r.code == ExitCode.INPUT else []
    assert_clean(r, codes=codes or {ExitCode.OK, ExitCode.USAGE, ExitCode.INPUT,
                                    ExitCode.CHECK_FAILED},
                 names=blamed, before=before, inputs=[folder])
    assert not list(folder.rglob("*.tmp"))
    return r


@settings(max_examples=examples(25), **SETTINGS)
@given(data=st.data())
def test_profile_mutations(cli, docs, tmp_path_factory, data) -> None:
    doc = json.loads(docs["profile"].read_text())
    path = data.draw(st.sampled_from(_paths(doc)))
    raw = data.draw(RAW)
    d = tmp_path_factory.mktemp("p")
    (d / "w.json").write_text(_mutate_json(doc, path, raw))
    _check(cli, ["size", "--ttft-slo", "2s", "--workload", d / "w.json", "--requests", "200",
                 "--max-gpus", "16"], d / "w.json", d)


CATALOG = """[model.qwen3-30b-a3b]
source = "overlay"
active_params = 3300000000
layers = 48

[tier.xmem]
source = "overlay"
node_bandwidth = "4TB/s"
"""


@settings(max_examples=examples(30), **SETTINGS)
@given(key=st.sampled_from(["active_params", "layers", "node_bandwidth", "source"]),
       raw=RAW, table=st.sampled_from(["model.qwen3-30b-a3b", "gpu(h100", "tier.xmem",
                                       'model."a\\u001b"', "x.y.z"]))
def test_catalog_overlay_mutations(cli, tmp_path_factory, key, raw, table) -> None:
    d = tmp_path_factory.mktemp("c")
    text = CATALOG.replace(f"{key} = ", f"{key} = {raw}\n# was: ", 1)
    if table != "model.qwen3-30b-a3b":
        text = text.replace("[model.qwen3-30b-a3b]", f'["{table}"]' if "(" in table
                            else f"[{table}]")
    (d / "o.toml").write_text(text)
    _check(cli, ["catalog", "--catalog", d / "o.toml"], d / "o.toml", d)


@settings(max_examples=examples(16), **SETTINGS)
@given(key=st.sampled_from(["link_bandwidth", "bank_bandwidth", "node_bandwidth",
                            "node_burst", "op_latency", "transfer_efficiency"]),
       raw=st.one_of(RAW, st.sampled_from(['"1kB/s"', "5", '"1B/s"', '"1h"', "[]"])))
def test_device_file_mutations(cli, tmp_path_factory, key, raw) -> None:
    d = tmp_path_factory.mktemp("dev")
    lines = (ROOT / "data" / "devices" / "xmem-node.toml").read_text().splitlines()
    k = next(i for i, x in enumerate(lines) if x.startswith(f"{key} ="))
    lines[k] = f"{key} = {raw}"
    (d / "dev.toml").write_text("\n".join(lines) + "\n")
    t = time.perf_counter()
    r = _check(cli, ["validate", "--emulate", "--device", d / "dev.toml", "--sessions", "1",
                     "--rounds", "2", "--prompt-tokens", "2048", "--growth-tokens", "512",
                     "--max-bytes", "64MB"], d / "dev.toml", d)
    assert time.perf_counter() - t < 60, "a device this slow must be refused, not emulated"
    del r


@settings(max_examples=examples(20), **SETTINGS)
@given(col=st.integers(0, 12), raw=st.one_of(RAW, st.just("x" * 140_000)),
       row=st.integers(1, 9), as_json=st.booleans())
def test_calibration_point_mutations(cli, docs, tmp_path_factory, col, raw, row,
                                     as_json) -> None:
    import csv
    import io

    d = tmp_path_factory.mktemp("m")
    rows = list(csv.reader(io.StringIO(docs["points"].read_text())))
    if as_json:
        objs: list[dict[str, str | float]] = [dict(zip(rows[0], r, strict=True))
                                              for r in rows[1:]]
        for o in objs:
            for k in ("prompt_tokens", "hit_tokens", "concurrency", "value"):
                o[k] = float(o[k])
        key = rows[0][col % len(rows[0])]
        objs[row - 1][key] = BIG
        f = d / "pts.json"
        f.write_text(json.dumps({"points": objs}).replace(f'"{BIG}"', raw, 1))
    else:
        rows[row][col % len(rows[0])] = raw
        f = d / "pts.csv"
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        f.write_text(buf.getvalue())
    _check(cli, ["calibrate", f, "-o", tmp_path_factory.mktemp("o") / "o.toml"], f, d)


@settings(max_examples=examples(25), **SETTINGS)
@given(data=st.data(), which=st.sampled_from(["records", "trace"]))
def test_aiperf_artifact_mutations(cli, docs, tmp_path_factory, data, which) -> None:
    import shutil

    d = tmp_path_factory.mktemp("a")
    shutil.copytree(docs["aiperf"], d / "a")
    f = d / "a" / ("run/profile_export.jsonl" if which == "records" else "t.jsonl")
    lines = f.read_text().splitlines()
    k = data.draw(st.integers(0, len(lines) - 1))
    obj = json.loads(lines[k])
    lines[k] = _mutate_json(obj, data.draw(st.sampled_from(_paths(obj))), data.draw(RAW))
    f.write_text("\n".join(lines) + "\n")
    _check(cli, ["validate", "--aiperf", d / "a" / "run", "--traces", d / "a" / "t.jsonl"],
           f, d)


@pytest.mark.parametrize("kind", ["profile", "points", "device", "aiperf-records"])
def test_not_utf8_and_fifos_are_named(cli, docs, tmp_path, kind) -> None:
    bad = tmp_path / {"profile": "w.json", "points": "p.csv", "device": "d.toml",
                      "aiperf-records": "run/profile_export.jsonl"}[kind]
    bad.parent.mkdir(exist_ok=True)
    args = {"profile": ["size", "--ttft-slo", "2s", "--workload", bad],
            "points": ["calibrate", bad, "-o", tmp_path / "o.toml"],
            "device": ["validate", "--emulate", "--device", bad],
            "aiperf-records": ["validate", "--aiperf", bad.parent, "--traces",
                               docs["aiperf"] / "t.jsonl"]}[kind]
    bad.write_bytes(b'{"a": "\xff\xfe\x80"}\n')
    _check(cli, args, bad, tmp_path, codes={ExitCode.INPUT, ExitCode.USAGE})
    bad.unlink()
    os.mkfifo(bad)
    done: list[CliResult] = []
    th = threading.Thread(target=lambda: done.append(cli(*args)), daemon=True)
    th.start()
    th.join(30)
    assert done, "a FIFO as input blocked the command"
    r = done[0]
    assert r.code in (ExitCode.INPUT, ExitCode.USAGE) and "Traceback" not in r.err, r.err


# --- silent wrong answers: the figure each must give ---------------------------------------

def test_profile_rate_beyond_physical_is_refused(cli, docs, tmp_path) -> None:
    doc = json.loads(docs["profile"].read_text())
    doc.setdefault("arrival", {})["rate_rps"] = 1e9
    (tmp_path / "w.json").write_text(json.dumps(doc))
    r = cli("size", "--ttft-slo", "2s", "--workload", tmp_path / "w.json")
    assert r.code == ExitCode.INPUT and "arrival.rate_rps" in r.err and "HBM" not in r.out


@pytest.mark.parametrize("field,value,other", [("active_params", 99_000_000_000,
                                                "total_params"),
                                               ("experts_per_token", 999, "experts")])
def test_catalog_cross_field_rules_name_file_and_field(cli, tmp_path, field, value,
                                                       other) -> None:
    f = tmp_path / "o.toml"
    f.write_text(f'[model.qwen3-30b-a3b]\nsource = "x"\n{field} = {value}\n')
    r = cli("size", "--ttft-slo", "2s", "--catalog", f, "--model", "qwen3-30b-a3b")
    assert r.code == ExitCode.INPUT and "o.toml:3" in r.err and f"'{field}'" in r.err
    assert other in r.err


def test_aiperf_negative_ttfts_are_not_judged(cli, docs, tmp_path) -> None:
    import shutil

    shutil.copytree(docs["aiperf"], tmp_path / "a")
    f = tmp_path / "a" / "run" / "profile_export.jsonl"
    recs = [json.loads(x) for x in f.read_text().splitlines()]
    for r in recs[:5]:
        r["metrics"]["time_to_first_token"]["value"] = -50.0
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = cli("validate", "--aiperf", tmp_path / "a" / "run", "--traces",
            tmp_path / "a" / "t.jsonl", "-f", "json")
    doc = json.loads(r.out)
    assert doc["records"] == 7 and all(x["ttft_ms"] > 0 for x in doc["requests"])
    assert any("5 records have a TTFT" in n for n in doc["notes"])


def test_empty_model_is_refused_not_the_default(cli) -> None:
    r = cli("size", "--ttft-slo", "2s", "--model", "")
    assert r.code == ExitCode.USAGE and "--model" in r.err


def test_profile_with_overflowing_timestamps_is_readable_by_size(cli, tmp_path) -> None:
    rows = [{"timestamp": t, "input_length": 1024, "output_length": 4,
             "hash_ids": [1, 2], "session_id": "s"} for t in (-1.7e308, 1.7e308)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli("hitrate", tmp_path / "t.jsonl", "--capacity", "1M", "--profile-out",
            tmp_path / "p.json")
    assert r.code == 0, r.err
    doc = json.loads((tmp_path / "p.json").read_text())
    assert None not in (doc["requests_sample"].get("timestamp_s") or [])
    r = cli("size", "--ttft-slo", "2s", "--workload", tmp_path / "p.json", "--requests", "200")
    assert r.code == 0, r.err


# --- bounded work ----------------------------------------------------------------------------

def test_bailian_child_first_session_walk_is_linear(cli, tmp_path) -> None:
    n = 60_000
    with (tmp_path / "b.jsonl").open("w") as f:
        for t in range(n - 1, -1, -1):
            f.write(json.dumps({"chat_id": t, "parent_chat_id": t - 1 if t else -1,
                                "turn": t, "timestamp": t, "input_length": 16,
                                "output_length": 1, "hash_ids": [1]}) + "\n")
    t0 = time.process_time()
    r = cli("hitrate", tmp_path / "b.jsonl", "-f", "json")
    assert r.code == 0 and json.loads(r.out)["sessions"] == 1
    assert time.process_time() - t0 < 10  # 14 s before the fix; 1.2 s measured after


def test_a_50mb_run_of_one_character_is_bounded() -> None:
    from xmemplan.text.tokenizer import get_tokenizer

    tok = get_tokenizer(None)
    t0 = time.process_time()
    ids = tok.encode_bounded("a" * 50_000_000)
    assert len(ids) == 50_000_000 // 8  # what BPE gives the whole run ('aaaaaaaa' tokens)
    assert time.process_time() - t0 < 10  # 37 s before; 0.42 s measured after


def test_refused_ray_address_fails_fast() -> None:
    from xmemplan.errors import UsageError
    from xmemplan.hitrate.ray_exec import check_reachable

    t0 = time.perf_counter()
    with pytest.raises(UsageError, match="cannot reach Ray"):
        check_reachable("ray://127.0.0.1:1", timeout=5)
    assert time.perf_counter() - t0 < 5
