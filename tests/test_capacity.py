"""Finite caches end to end: generated traces against the reference LRU, CLI, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xmemplan.errors import UsageError
from xmemplan.hitrate import HitrateOptions, analyze
from xmemplan.hitrate.capacity import build_spec, capacity_hits, parse_capacity
from xmemplan.prefix.lru import ReferenceLRU, reference_lru
from xmemplan.traces import synth


def _pages(tokens: np.ndarray, page: int) -> list[int]:
    """One key per full page; the trie in ReferenceLRU makes a key's path its identity."""
    return [
        hash(tuple(tokens[i * page : (i + 1) * page].tolist())) for i in range(len(tokens) // page)
    ]


@pytest.fixture(scope="module")
def sessions():
    return synth.agent_sessions(n_sessions=6, turns=9, seed=5, compact_every=4)


def _replay_order(result, sessions):
    """Prompts in the order the result replayed them (from its session/request columns)."""
    by = {s.session_id: s for s in sessions}
    frame = result.requests_frame()
    return [
        (r["session_id"], by[r["session_id"]].prompts[r["request_index"]])
        for r in frame.iter_rows(named=True)
    ]


CAPS = [640, 3_000, 12_800, 50_000]


def test_session_scope_blocks_equal_reference(tmp_path: Path, sessions):
    synth.write_claude_blocks(tmp_path / "cb", sessions)
    spec = build_spec(capacity=",".join(map(str, CAPS)))
    result = analyze([tmp_path / "cb"], HitrateOptions(scope="session", capacity=spec))
    order = _replay_order(result, sessions)
    resets = [i == 0 or order[i][0] != order[i - 1][0] for i in range(len(order))]
    pages = [_pages(p, 64) for _, p in order]
    prompts = np.array([len(p) for _, p in order])
    cap = result.capacity
    assert cap is not None
    for c, row in zip(CAPS, cap.capacities):
        want = np.minimum(
            np.array(reference_lru(pages, resets, [64] * len(pages), c)) * 64, prompts
        )
        got = capacity_hits(result.replayed, spec, c)
        assert got.tolist() == want.tolist(), c
        assert row["hit_tokens"] == int(want.sum())
        assert row["token_hit_ratio"] == pytest.approx(want.sum() / prompts.sum())
    # Small caches lose hits; a cache larger than any session is the infinite cache.
    ratios = [row["token_hit_ratio"] for row in cap.capacities]
    assert ratios == sorted(ratios) and ratios[0] < ratios[-1]
    assert ratios[-1] == pytest.approx(result.summary["token_hit_ratio"])
    assert cap.per_session_cache


def test_global_token_trace_with_pages_and_tiers_equal_reference(tmp_path: Path, sessions):
    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions)
    tiers = [("HBM", 800), ("DRAM", 4_000), ("XMEM", 20_000)]
    spec = build_spec(capacity="1k,20k", tiers=",".join(f"{n}={c}" for n, c in tiers), page_size=16)
    result = analyze(
        [tmp_path / "t.jsonl"], HitrateOptions(scope="global", page_size=16, capacity=spec)
    )
    order = _replay_order(result, sessions)
    pages = [_pages(p, 16) for _, p in order]
    prompts = [len(p) for _, p in order]
    # Capacities: one reference LRU each.
    for c in (1_000, 20_000):
        want = [
            min(k * 16, n)
            for k, n in zip(
                reference_lru(pages, [True] + [False] * (len(pages) - 1), [16] * len(pages), c),
                prompts,
            )
        ]
        assert capacity_hits(result.replayed, spec, c).tolist() == want
    # Tiers: three reference LRUs, all fed every request (write-through); each hit page is
    # served by the fastest tier holding it.
    caches = [ReferenceLRU(c) for _, c in tiers]
    served = [0] * len(tiers)
    for p, n in zip(pages, prompts):
        presence = [cache.contains_path(p) for cache in caches]
        k = caches[-1].match(p)
        for i in range(k):
            tier = next(t for t in range(len(tiers)) if presence[t][i])
            served[tier] += min((i + 1) * 16, n) - min(i * 16, n)
        for cache in caches:
            cache.insert(p, 16)
    assert result.capacity is not None
    rows = result.capacity.tiers
    assert rows is not None
    assert [r["name"] for r in rows] == ["HBM", "DRAM", "XMEM", "miss (prefill)"]
    assert [r["hit_tokens"] for r in rows[:3]] == served
    assert sum(r["hit_tokens"] for r in rows) == sum(prompts)
    assert rows[0]["bytes_to_gpu"] == 0 and rows[1]["bytes_to_gpu"] is None  # no model
    # Paged capacity hits at infinity equal the infinite cache rounded to pages.
    big = build_spec(capacity="1G", page_size=16)
    inf = analyze(
        [tmp_path / "t.jsonl"], HitrateOptions(scope="global", page_size=16, capacity=big)
    )
    assert (
        capacity_hits(inf.replayed, big, 10**9).tolist()
        == inf.requests_frame()["hit_tokens"].to_list()
    )


def test_mooncake_partial_blocks_and_bytes_per_tier(tmp_path: Path, sessions):
    prompts = synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    spec = build_spec(capacity="5k", tiers="HBM=3k,DRAM=10k", kv_bytes=1000)
    result = analyze([tmp_path / "m.jsonl"], HitrateOptions(capacity=spec))
    blocks = [
        [hash(tuple(p[: (i + 1) * 512].tolist())) for i in range(-(-len(p) // 512))]
        for p in prompts
    ]
    want = [
        min(k * 512, len(p))
        for k, p in zip(
            reference_lru(blocks, [True] + [False] * (len(blocks) - 1), [512] * len(blocks), 5000),
            prompts,
        )
    ]
    assert capacity_hits(result.replayed, spec, 5000).tolist() == want
    cap = result.capacity
    assert cap is not None and cap.tiers is not None
    hbm, dram, miss = cap.tiers
    assert dram["bytes_to_gpu"] == dram["hit_tokens"] * 1000 and hbm["bytes_to_gpu"] == 0
    assert cap.capacities[0]["capacity_bytes"] == 5e6


def test_parallel_workers_give_identical_capacity_figures(tmp_path: Path):
    many = synth.agent_sessions(n_sessions=10, turns=5, seed=8)
    synth.write_claude_blocks(tmp_path / "cb", many)
    spec = build_spec(capacity="2k")
    one = analyze([tmp_path / "cb"], HitrateOptions(workers=1, capacity=spec))
    two = analyze([tmp_path / "cb"], HitrateOptions(workers=2, capacity=spec))
    assert one.capacity is not None and two.capacity is not None
    assert one.capacity.capacities[0]["hit_tokens"] == two.capacity.capacities[0]["hit_tokens"]


def test_curve_points_equal_single_capacities(tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    curve = analyze([tmp_path / "m.jsonl"], HitrateOptions(capacity=build_spec(curve="1k:100k:7")))
    assert curve.capacity is not None
    pts = curve.capacity.curve
    assert pts is not None
    assert (
        len(pts) == 7
        and pts[0]["capacity_tokens"] == 1000
        and pts[-1]["capacity_tokens"] == 100_000
    )
    for p in pts[::3]:
        single = analyze(
            [tmp_path / "m.jsonl"],
            HitrateOptions(capacity=build_spec(capacity=str(p["capacity_tokens"]))),
        )
        assert single.capacity is not None
        assert single.capacity.capacities[0]["token_hit_ratio"] == p["token_hit_ratio"]
    ratios = [p["token_hit_ratio"] for p in pts]
    assert ratios == sorted(ratios)


def test_auto_curve_spans_one_page_to_everything(tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    result = analyze([tmp_path / "m.jsonl"], HitrateOptions(capacity=build_spec(curve="auto")))
    cap = result.capacity
    assert cap is not None
    pts = cap.curve
    assert pts is not None
    assert pts[0]["capacity_tokens"] <= 1000
    assert pts[-1]["capacity_tokens"] >= cap.distinct_tokens
    assert pts[-2]["capacity_tokens"] < cap.distinct_tokens
    assert pts[-1]["token_hit_ratio"] == pytest.approx(result.summary["token_hit_ratio"])


# --- Parsing and bad input ----------------------------------------------------------------------


def test_parse_capacity_units():
    assert parse_capacity("3M", None).tokens == 3_000_000
    assert parse_capacity("64Ki", None).tokens == 65_536
    c = parse_capacity("80GB", 98_304)
    assert c.tokens == 80_000_000_000 // 98_304 and c.bytes == 80e9
    assert parse_capacity("1GiB", 1024).tokens == 2**20


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"capacity": "0"}, "is zero"),
        ({"capacity": "-3M"}, "is negative"),
        ({"capacity": "3X"}, "unknown suffix"),
        ({"capacity": "three"}, "cannot read"),
        ({"capacity": "80GB"}, "Add --model"),
        ({"capacity": "10", "page_size": 16}, "smaller than one page"),
        ({"capacity": "10B", "kv_bytes": 1000}, "holds no token"),
        ({"tiers": "HBM60GB"}, "HBM=60GB"),
        ({"tiers": "HBM=10M,DRAM=1M"}, "not larger than"),
        ({"tiers": "HBM=1M,hbm=2M"}, "listed twice"),
        ({"curve": "1M:100M:1"}, "from 2 to 1000"),
        ({"curve": "100M:1M:20"}, "not above its start"),
        ({"curve": "1M:100M"}, "LOW:HIGH:POINTS"),
        ({"idle": "5"}, "no time unit"),
        ({"idle": "0s"}, "not positive"),
        ({"capacity": "80GB", "model": "no-such-model"}, "unknown model"),
        ({"capacity": "1k,3M,1k"}, "--capacity 1k is given twice"),
        ({"capacity": "1k,1000"}, "--capacity 1k and 1000 are the same size (1,000 tokens)"),
        ({"capacity": "1GB,1000MB", "kv_bytes": 1000},
         "--capacity 1GB and 1000MB are the same size (1,000,000 tokens at 1,000 KV bytes"),
        ({"curve": "1M,3M,1000k"}, "--capacity-curve 1M and 1000k are the same size"),
    ],
)
def test_bad_values_say_what_to_write(kwargs, needle):
    with pytest.raises(UsageError) as exc:
        build_spec(**kwargs)
    assert needle in exc.value.render()
    assert exc.value.hint


def test_capacity_below_a_block_is_refused_after_reading(tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    with pytest.raises(UsageError, match="smaller than one page"):
        analyze([tmp_path / "m.jsonl"], HitrateOptions(capacity=build_spec(capacity="100")))


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--capacity", "0"], "zero"),
        (["--capacity", "80GB"], "--model"),
        (["--capacity", "100"], "smaller than one page (512 tokens)"),
        (["--tiers", "HBM=2M,DRAM=1M"], "fastest first"),
    ],
)
def test_cli_bad_input_exit_2(cli, tmp_path: Path, sessions, args, needle):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli("hitrate", tmp_path / "m.jsonl", *args)
    assert r.code == 2, r.err
    assert needle in " ".join(r.err.split())
    assert "Traceback" not in r.err


@pytest.mark.parametrize("args,said,hint", [
    (["--capacity", "1k,1k"], "--capacity 1k is given twice", "--capacity 1k."),
    (["--capacity", "2k", "--capacity", "1k", "--capacity", "2k"],
     "--capacity 2k is given twice", "--capacity 2k,1k."),
    (["--capacity", "1k,1000,5k"], "--capacity 1k and 1000 are the same size (1,000 tokens)",
     "--capacity 1k,5k."),
])
def test_cli_same_size_twice_is_refused(cli, tmp_path: Path, sessions, args, said, hint):
    """`--capacity 1k,1k` (or 1k,1000) printed the same column twice, exit 0."""
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli("hitrate", tmp_path / "m.jsonl", *args)
    assert r.code == 2, r.err
    assert f"Error: {said}: the same cache would be replayed and shown twice. Give each size " \
           f"once: {hint}" in r.err
    assert r.out == ""


def test_cli_gb_and_gib_are_two_sizes(cli, tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity", "1GB,1GiB", "--model",
            "qwen3-30b-a3b", "-f", "json")
    assert r.code == 0, r.err
    caps = json.loads(r.out)["capacity"]["capacities"]
    assert [c["capacity"] for c in caps] == ["1GB", "1GiB"]
    assert caps[0]["capacity_tokens"] < caps[1]["capacity_tokens"]


def test_cli_json_and_csv(cli, tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli(
        "hitrate",
        tmp_path / "m.jsonl",
        "--capacity",
        "5k,20k",
        "--tiers",
        "HBM=5k,DRAM=20k",
        "--capacity-curve",
        "1k,5k,20k",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    cap = doc["capacity"]
    assert [c["capacity"] for c in cap["capacities"]] == ["5k", "20k"]
    assert cap["policy"] == "lru-leaf-first"
    # The HBM tier serves what a 5k LRU hits; the two tiers together what a 20k LRU hits.
    assert cap["tiers"][0]["hit_tokens"] == cap["capacities"][0]["hit_tokens"]
    assert (
        cap["tiers"][0]["hit_tokens"] + cap["tiers"][1]["hit_tokens"]
        == cap["capacities"][1]["hit_tokens"]
    )
    assert [p["capacity_tokens"] for p in cap["curve"]] == [1000, 5000, 20000]
    assert cap["curve"][1]["token_hit_ratio"] == cap["capacities"][0]["token_hit_ratio"]
    # The infinite-cache part of the output is unchanged by --capacity.
    plain = json.loads(cli("hitrate", tmp_path / "m.jsonl", "--format", "json").out)
    # (provenance names the command, which differs by --capacity)
    assert {k: v for k, v in doc.items() if k not in ("capacity", "provenance")} == {
        k: v for k, v in plain.items() if k != "provenance"}
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity", "5k", "--format", "csv")
    rows = dict(line.split(",", 1) for line in r.out.strip().splitlines()[1:])
    assert math.isclose(
        float(rows["capacity[5k].token_hit_ratio"]), cap["capacities"][0]["token_hit_ratio"]
    )


def test_cli_table_shows_capacity_tables(cli, tmp_path: Path, sessions):
    synth.write_claude_blocks(tmp_path / "cb", sessions)
    r = cli(
        "hitrate",
        tmp_path / "cb",
        "--capacity",
        "3k",
        "--capacity-curve",
        "auto",
        "--tiers",
        "HBM=1k,DRAM=3k",
        "--idle",
        "5m",
    )
    assert r.code == 0, r.err
    for title in (
        "LRU cache of finite capacity",
        "Hit ratio vs capacity",
        "Tiers (inclusive",
        "Time between reuses",
        "Working set over time",
    ):
        assert title in r.out
    assert "each session's own cache" in r.err


# --- The Mooncake check (research/traces.md section 3) -----------------------------------------


def test_mooncake_conversation_capacities_against_reference():
    from conftest import shared_trace

    from xmemplan.prefix.lru import reference_flat_lru, reference_plain_lru

    path = shared_trace("mooncake-fast25", "conversation_trace.jsonl")
    spec = build_spec(capacity="3M,10M,50M")
    result = analyze([path], HitrateOptions(capacity=spec))
    assert result.capacity is not None
    got = {c["capacity"]: c["token_hit_ratio"] for c in result.capacity.capacities}
    # Exact figures of this policy (leaf-first LRU, 512-token blocks, global, token-weighted).
    assert got["3M"] == pytest.approx(0.138730, abs=5e-7)
    assert got["10M"] == pytest.approx(0.290781, abs=5e-7)
    assert got["50M"] == pytest.approx(0.370653, abs=5e-7)
    assert result.summary["token_hit_ratio"] == pytest.approx(0.373624, abs=5e-7)
    # The oracle, straight from the file: a flat LRU of block ids touched deepest first.
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    blocks = [r["hash_ids"] for r in rows]
    prompt = np.array([r["input_length"] for r in rows])
    for label, tokens in (("3M", 3_000_000), ("10M", 10_000_000), ("50M", 50_000_000)):
        k = np.array(reference_flat_lru(blocks, 512, tokens))
        assert np.minimum(k * 512, prompt).sum() / prompt.sum() == pytest.approx(
            got[label], abs=1e-12
        )
    # The published range at 3M: plain block LRU (13.82%) to leaf-first LRU (13.87%).
    k = np.array(reference_plain_lru(blocks, 512, 3_000_000))
    plain = np.minimum(k * 512, prompt).sum() / prompt.sum()
    assert 0.138 <= plain < got["3M"] <= 0.139


@pytest.mark.parametrize(
    "fmt,scope,page",
    [
        ("blocks", "session", 1),
        ("tokens", "session", 1),
        ("tokens", "global", 16),
        ("mooncake", "global", 1),
        ("bailian", "global", 1),
    ],
)
def test_infinite_figures_unchanged_by_capacity(tmp_path: Path, sessions, fmt, scope, page):
    # With a capacity the infinite-cache hits come from the LRU pass: they must not move.
    if fmt == "blocks":
        synth.write_claude_blocks(tmp_path / "in", sessions)
    elif fmt == "tokens":
        synth.write_tokens_jsonl(tmp_path / "in", sessions)
    elif fmt == "mooncake":
        synth.write_mooncake(tmp_path / "in", sessions)
    else:
        synth.write_bailian(tmp_path / "in", synth.bailian_rows(n_roots=6, depth=3, seed=2))
    plain = analyze([tmp_path / "in"], HitrateOptions(scope=scope, page_size=page))
    spec = build_spec(capacity="1G", page_size=page)
    both = analyze([tmp_path / "in"], HitrateOptions(scope=scope, page_size=page, capacity=spec))
    frame = both.requests_frame()
    assert frame.columns == plain.requests_frame().columns + ["hit_tokens_lru_1G"]
    assert frame.drop("hit_tokens_lru_1G").equals(plain.requests_frame())
    assert both.summary == plain.summary
    assert capacity_hits(both.replayed, spec, 10**9).tolist() == (
        plain.requests_frame()["hit_tokens"].to_list()
    )


@st.composite
def _tiered(draw):
    n = draw(st.integers(1, 20))
    reqs: list[list[int]] = []
    for _ in range(n):
        if reqs and draw(st.booleans()):
            base = reqs[draw(st.integers(0, len(reqs) - 1))]
            reqs.append(
                base[: draw(st.integers(0, len(base)))]
                + draw(st.lists(st.integers(0, 3), max_size=4))
            )
        else:
            reqs.append(draw(st.lists(st.integers(0, 3), max_size=8)))
    a = draw(st.integers(1, 6))
    b = a + draw(st.integers(1, 8))
    c = b + draw(st.integers(1, 12))
    return reqs, [a, b, c]


@settings(max_examples=150, deadline=None)
@given(_tiered())
def test_tiers_equal_write_through_reference(case):
    # Tier attribution from the one-pass hits equals three reference LRUs fed every request.
    from xmemplan.hitrate.capacity import Capacity, CapacitySpec, Tier, _tier_rows
    from xmemplan.prefix.lru import lru_match

    reqs, caps = case
    keys = np.array([k for r in reqs for k in r], dtype=np.int64)
    offsets = np.cumsum([0] + [len(r) for r in reqs]).astype(np.int64)
    spec = CapacitySpec(tiers=[Tier(f"T{i}", Capacity(str(c), c)) for i, c in enumerate(caps)])
    res = lru_match(keys, offsets, np.zeros(len(reqs), dtype=bool), 1, spec.points)
    prompt = np.array([len(r) for r in reqs])
    rows = _tier_rows(spec, res.hits, prompt, res.matched, None)
    caches = [ReferenceLRU(c) for c in caps]
    served = [0, 0, 0]
    for r in reqs:
        presence = [cache.contains_path(r) for cache in caches]
        for i in range(caches[-1].match(r)):
            served[next(t for t in range(3) if presence[t][i])] += 1
        for cache in caches:
            cache.insert(r, 1)
    assert [row["hit_tokens"] for row in rows[:3]] == served
    assert rows[3]["hit_tokens"] == prompt.sum() - sum(served)
    assert rows[3]["lost_to_capacity_tokens"] == res.matched.sum() - sum(served)


def test_claude_code_weka_infinite_figures_unchanged_and_capacities_monotone():
    from conftest import shared_trace

    path = shared_trace("claude-code-weka")
    plain = analyze([path], HitrateOptions(scope="session"))
    spec = build_spec(capacity="64k,256k,1G")
    both = analyze([path], HitrateOptions(scope="session", capacity=spec))
    assert both.summary == plain.summary
    assert both.capacity is not None
    caps = both.capacity.capacities
    ratios = [c["token_hit_ratio"] for c in caps]
    assert ratios[0] < ratios[1] < ratios[2] == pytest.approx(plain.summary["token_hit_ratio"])
    assert both.capacity.working_set is not None
    assert both.capacity.working_set["sessions"] == 44


def test_out_table_has_a_hit_column_per_capacity(cli, tmp_path: Path, sessions):
    import polars as pl

    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity", "2k,20k", "--out", tmp_path / "o.csv")
    assert r.code == 0, r.err
    frame = pl.read_csv(tmp_path / "o.csv")
    spec = build_spec(capacity="2k,20k")
    result = analyze([tmp_path / "m.jsonl"], HitrateOptions(capacity=spec))
    assert (
        frame["hit_tokens_lru_2k"].to_list() == capacity_hits(result.replayed, spec, 2000).tolist()
    )
    assert (
        frame["hit_tokens_lru_20k"].to_list()
        == capacity_hits(result.replayed, spec, 20000).tolist()
    )
    assert (frame["hit_tokens_lru_2k"] <= frame["hit_tokens_lru_20k"]).all()
    assert (frame["hit_tokens_lru_20k"] <= frame["hit_tokens"]).all()
