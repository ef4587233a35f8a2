"""`hitrate --cache-model vllm|sglang`: the pipeline against the engine references, the
CLI flags, the profile field, and the engines' own figures on the shared traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xmemplan.hitrate import HitrateOptions, analyze
from xmemplan.hitrate.capacity import build_spec, capacity_hits
from xmemplan.prefix.engine_reference import reference_replay
from xmemplan.traces import synth


@pytest.fixture(scope="module")
def sessions():
    return synth.agent_sessions(n_sessions=6, turns=9, seed=5, compact_every=4)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("outputs", [True, False])
def test_global_token_trace_equals_reference(tmp_path: Path, sessions, engine, outputs):
    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions)
    caps = [3_000, 12_800, 50_000]
    spec = build_spec(capacity=",".join(map(str, caps)), page_size=16, cache_model=engine,
                      with_outputs=outputs)
    result = analyze([tmp_path / "t.jsonl"],
                     HitrateOptions(scope="global", page_size=16, capacity=spec))
    by = {s.session_id: s for s in sessions}
    frame = result.requests_frame()
    prompts = [by[r["session_id"]].prompts[r["request_index"]].tolist()
               for r in frame.iter_rows(named=True)]
    outs = [by[r["session_id"]].outputs[r["request_index"]] for r in frame.iter_rows(named=True)]
    for c in caps:
        want = reference_replay(engine, prompts, outs, 16, c, outputs).hit_tokens
        assert capacity_hits(result.replayed, spec, c).tolist() == want, c
    assert result.capacity is not None
    assert result.capacity.cache_model == engine
    # the engines never hit a partial page nor the last prompt token
    assert (capacity_hits(result.replayed, spec, 50_000) % 16 == 0).all()


def test_cli_flags_json_out_and_profile(cli, tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli("hitrate", tmp_path / "m.jsonl", "--cache-model", "vllm")
    assert r.code == 2 and "no size is given" in " ".join(r.err.split())
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity", "5k", "--prefill-only")
    assert r.code == 2 and "--prefill-only" in r.err
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity", "5k", "--cache-model", "tgi")
    assert r.code == 2 and "lru, vllm, sglang" in r.err
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity", "5k,20k", "--cache-model", "sglang",
            "--tiers", "HBM=5k,DRAM=20k", "-f", "json", "--out", tmp_path / "o.csv",
            "--profile-out", tmp_path / "p.json")
    assert r.code == 0, r.err
    cap = json.loads(r.out)["capacity"]
    assert cap["policy"] == "sglang-radix-lru" and cap["cache_model"] == "sglang"
    assert cap["with_outputs"] is True
    assert cap["tiers"][0]["hit_tokens"] == cap["capacities"][0]["hit_tokens"]
    assert "hit_tokens_sglang_5k" in (tmp_path / "o.csv").read_text().splitlines()[0]
    prof = json.loads((tmp_path / "p.json").read_text())
    assert prof["cache_model"] == "sglang"
    from xmemplan.profile import load_profile

    assert load_profile(tmp_path / "p.json").cache_model == "sglang"
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity", "5k", "--cache-model", "vllm")
    assert r.code == 0 and "vLLM block pool of finite capacity" in r.out


def test_engine_models_below_lru_hits_only_where_rules_say(tmp_path: Path, sessions):
    # at a capacity that holds everything, the engines lose only the prompt - 1 cap and the
    # partial pages: never more hits than the infinite cache, rarely fewer
    synth.write_tokens_jsonl(tmp_path / "t.jsonl", sessions)
    for engine in ("vllm", "sglang"):
        spec = build_spec(capacity="10G", page_size=1, cache_model=engine, with_outputs=False)
        res = analyze([tmp_path / "t.jsonl"], HitrateOptions(scope="global", capacity=spec))
        inf = res.replayed.column("hit_tokens")
        prompt = res.replayed.column("prompt_tokens")
        got = capacity_hits(res.replayed, spec, 10**10 // 1)
        assert (got <= inf).all() and (got <= np.maximum(prompt - 1, 0)).all()
        assert (got == np.minimum(inf, prompt - 1)).all()


# --- The engines' own code: the figures of issue 22, measured with vLLM 0.33.0 and SGLang
# 0.5.23 on CPU (prefill only, one request at a time, global scope). Not fitted: the models
# are written from the engines' rules.


def test_mooncake_synthetic_10m_matches_the_engines():
    from conftest import shared_trace

    path = shared_trace("mooncake-fast25", "synthetic_trace.jsonl")
    for engine, want in (("vllm", 0.5881), ("sglang", 0.5872), ("lru", 0.5770)):
        spec = build_spec(capacity="10M", cache_model=engine, with_outputs=False)
        res = analyze([path], HitrateOptions(capacity=spec))
        assert res.capacity is not None
        assert res.capacity.capacities[0]["token_hit_ratio"] == pytest.approx(want, abs=5e-5)


def test_size_warns_when_engine_and_cache_model_differ(cli, tmp_path: Path, sessions):
    synth.write_mooncake(tmp_path / "m.jsonl", sessions)
    r = cli("hitrate", tmp_path / "m.jsonl", "--capacity-curve", "auto", "--cache-model",
            "sglang", "--profile-out", tmp_path / "p.json")
    assert r.code == 0, r.err
    r = cli("size", "--ttft-slo", "2s", "--workload", tmp_path / "p.json", "--engine", "vllm",
            "-f", "json")
    assert r.code == 0, r.err
    warnings = json.loads(r.out)["warnings"]
    assert any("sglang's cache" in w and "--engine is vllm" in w for w in warnings)
    r = cli("size", "--ttft-slo", "2s", "--workload", tmp_path / "p.json", "--engine",
            "sglang", "-f", "json")
    assert not any("cache" in w for w in json.loads(r.out)["warnings"])


# --- `size` on a placed workload: the replicas' and tiers' caches follow the profile's
# model (xmemplan.sizing.cachemodel), checked against the plain-Python references.


def _prefix_model_tokens(sample: dict, order: np.ndarray) -> list[list[int]]:
    """Token lists of the profile's sampled requests (in `order`) under the prefix model
    of docs/size.md: [group prefix][session context], a request's first H tokens equal to
    its session's previous request's (written here token by token, not page by page)."""
    last: dict[int, list[int]] = {}
    fresh = 10**12
    out = []
    groups = sample.get("prefix_group")
    gtoks = sample.get("prefix_group_tokens")
    for i in order:
        S = int(sample["prompt_tokens"][i])
        H = min(S, int(sample["hit_tokens"][i]))
        g = -1 if groups is None else int(groups[i])
        if g < 0:
            G = 0
        else:
            assert gtoks is not None, "a profile with prefix_group lacks prefix_group_tokens"
            G = min(S, int(gtoks[i]))
        prev = last.get(int(sample["session"][i]), [])
        toks = [10**9 * (g + 1) + t for t in range(G)]
        for t in range(G, S):
            if t < H and t < len(prev):
                toks.append(prev[t])
            else:
                toks.append(fresh)
                fresh += 1
        last[int(sample["session"][i])] = toks
        out.append(toks)
    return out


@pytest.fixture(scope="module")
def placed_profiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("placed")
    ss = synth.agent_sessions(n_sessions=8, turns=8, seed=7, system_tokens=1000,
                              turn_tokens=(800, 2500), compact_every=5)
    synth.write_tokens_jsonl(d / "t.jsonl", ss)
    from xmemplan.cli.main import run

    for m in ("lru", "vllm", "sglang"):
        assert run(["hitrate", str(d / "t.jsonl"), "--scope", "global", "--page-size", "64",
                    "--capacity-curve", "auto", "--cache-model", m, "--profile-out",
                    str(d / f"{m}.json"), "-f", "json"]) == 0
    return d


# One tp1 replica with a 31.5k-token KV room (492 pages of 64) under each engine's own pool
# accounting (simmodel.kv_pool_tokens): SGLang's at 0.395 of the device's memory, vLLM's
# (less its profile run and non-torch memory) at 0.4511
MEM_FRACTION = {"sglang": "0.395", "vllm": "0.4511"}
SIZE_ARGS = ("--model", "qwen3-30b-a3b-fp8", "--tp", "1", "--ttft-slo", "5s", "-f", "json")


def _size_args(engine: str = "sglang") -> tuple[str, ...]:
    return (*SIZE_ARGS, "--mem-fraction", MEM_FRACTION[engine], "--engine", engine)


def test_size_split_follows_the_profiles_cache_model(cli, placed_profiles):
    """The same trace profiled with lru, vllm and sglang: `size --workload` places its
    sessions on replicas, and the placement's HBM / tier / recompute split (what the
    replicas' and tiers' caches hold) is each model's own, equal to a replay of the
    requests through the model's plain-Python reference at the replica's HBM room and the
    tier's capacity. The engine run loads what the model's tier holds: the answer's hits
    with host DRAM (`hit_split` hbm + tier) are the model's, while its HBM share is the
    run's own block pool (the engine simulation decides HBM hits of placed requests)."""
    from xmemplan.sizing.planner import Planner
    from xmemplan.sizing.request import build_request

    splits, placed = {}, {}
    for m in ("lru", "vllm", "sglang"):
        path = placed_profiles / f"{m}.json"
        r = cli("size", "--workload", path, *_size_args())
        assert r.code == 0, r.err
        opts = {o["option"]: o for o in json.loads(r.out)["options"]}
        splits[m] = {k: opts[k]["hit_split"] for k in ("hbm-only", "host-dram")}
        req, _ = build_request(ttft_slo="5s", workload=path, model="qwen3-30b-a3b-fp8",
                               mem_fraction=MEM_FRACTION["sglang"], tp=1)
        p = Planner(req)
        placed[m] = {o: p.placement(o, opts[o]["gpus"], 0, 1.0, 0).split()
                     for o in ("hbm-only", "host-dram")}
        if m == "lru":
            continue
        doc = json.loads(path.read_text())
        assert doc["cache_page_tokens"] == 64 and doc["cache_with_outputs"] is True
        sample = doc["requests_sample"]
        order = np.argsort(np.asarray(sample["timestamp_s"]), kind="stable")
        prompts = _prefix_model_tokens(sample, order)
        outs = [max(1, int(sample["output_tokens"][i])) for i in order]
        total = sum(len(q) for q in prompts)
        for option in ("hbm-only", "host-dram"):
            dep = p.deployment(option, opts[option]["gpus"], 0)
            assert dep.replicas == 1  # one replica: every request is its own
            hbm = reference_replay(m, prompts, outs, 64, int(dep.hbm_tokens), True).hit_tokens
            got = placed[m][option]
            assert got[0] == pytest.approx(sum(hbm) / total, abs=1e-12), (m, option)
            if option == "host-dram":
                tier = reference_replay(m, prompts, outs, 64, int(dep.tier_tokens[0]),
                                        True).hit_tokens
                want = sum(max(0, t - h) for t, h in zip(tier, hbm, strict=True)) / total
                assert got[1] == pytest.approx(want, abs=1e-12), m
    # the models part: HBM shares 0.44 (lru) / 0.47 (vllm) / 0.42 (sglang) at 31.5k tokens
    for a, b in (("lru", "vllm"), ("lru", "sglang"), ("vllm", "sglang")):
        assert abs(placed[a]["hbm-only"][0] - placed[b]["hbm-only"][0]) > 0.01, placed
    for m in ("lru", "vllm", "sglang"):
        got = splits[m]["host-dram"]
        assert got["hbm"] + got["tier"] == pytest.approx(sum(placed[m]["host-dram"][:2]),
                                                         abs=1e-9), m
    assert splits["lru"]["host-dram"] != splits["sglang"]["host-dram"]


def test_sglang_engine_pool_is_sglangs_cache_on_the_generated_case(cli, placed_profiles):
    """The answer's HBM share is the engine simulation's block pool (the run decides HBM
    hits of placed requests). With --engine sglang that pool is SGLang's radix cache
    (sizing/engine/radix.py), so the generated case's share moves off vLLM's free-queue
    order (0.4703 for every profile until round 5). At the answer's HBM room, the same
    requests one at a time through the engine equal the SGLang cache model's reference
    replay (the one the oracle step holds against SGLang's own RadixCache), and with
    requests in flight the engine equals its plain-Python reference step for step."""
    from xmemplan.sizing.engine import replay_scenario
    from xmemplan.sizing.engine.reference import replay_reference
    from xmemplan.sizing.planner import Planner
    from xmemplan.sizing.request import build_request

    path = placed_profiles / "sglang.json"
    share, gpus = {}, {}
    for eng in ("sglang", "vllm"):
        r = cli("size", "--workload", path, *_size_args(eng))
        assert r.code == 0, r.err
        opts = {o["option"]: o for o in json.loads(r.out)["options"]}
        share[eng] = opts["hbm-only"]["hit_split"]["hbm"]
        gpus[eng] = opts["hbm-only"]["gpus"]
    assert share["vllm"] - share["sglang"] > 0.01, share  # 0.4703 vs 0.4372 at 31.5k
    req, _ = build_request(ttft_slo="5s", workload=path, model="qwen3-30b-a3b-fp8",
                           mem_fraction=MEM_FRACTION["sglang"], tp=1)
    dep = Planner(req).deployment("hbm-only", gpus["sglang"], 0)
    blocks = int(dep.hbm_tokens) // 64
    doc = json.loads(path.read_text())
    sample = doc["requests_sample"]
    order = np.argsort(np.asarray(sample["timestamp_s"]), kind="stable")
    prompts = _prefix_model_tokens(sample, order)
    outs = [max(1, int(sample["output_tokens"][i])) for i in order]
    big = 1 << 20  # no chunking, no batch limit: the cache model replays whole prompts

    def scenario(gap_s: float) -> dict:
        return {"engine": "sglang", "block_size": 64, "num_gpu_blocks": blocks,
                "max_num_seqs": 64, "max_num_batched_tokens": big,
                "chunked_prefill_size": big, "enable_prefix_caching": True,
                "step_time": {"base_s": 0.01, "per_token_s": 1e-6, "per_seq_s": 1e-4},
                "requests": [{"id": f"q{i}", "arrival_s": gap_s * i, "tokens": p,
                              "max_tokens": o}
                             for i, (p, o) in enumerate(zip(prompts, outs, strict=True))]}

    steps = replay_scenario(scenario(1000.0))  # one request at a time
    got = [h for rec in steps for h in rec["new_hits"].values()]
    want = reference_replay("sglang", prompts, outs, 64, blocks * 64, True).hit_tokens
    assert got == want
    assert 0 < sum(got) < sum(reference_replay("sglang", prompts, outs, 64, big * 64,
                                               True).hit_tokens)  # the pool evicts
    busy = scenario(0.3)  # sessions overlap: requests in flight hold their prefixes
    ours, ref = replay_scenario(busy), replay_reference(busy)
    assert [r["new_hits"] for r in ours] == [r["new_hits"] for r in ref]
    assert [r["kv_blocks_used"] for r in ours] == [r["kv_blocks_used"] for r in ref]


def test_follow_at_unlimited_capacity_hits_the_profiles_hits_by_the_engines_rules():
    """With room for everything a request hits its profile hit H in whole pages, at most
    its prompt - 1 tokens: the prefix model reproduces the profile, the rules apply."""
    from xmemplan.sizing import cachemodel as CM
    from xmemplan.sizing import routing as RT

    rng = np.random.default_rng(1)
    n, P = 300, 16
    session = rng.integers(0, 20, n)
    group_of = np.where(rng.random(20) < 0.6, rng.integers(0, 3, 20), -1)
    group = group_of[session]
    prompt, hit, gtok = np.zeros(n), np.zeros(n), np.zeros(n)
    ctx: dict[int, float] = {}
    seen: set[int] = set()
    for i in range(n):
        s, g = int(session[i]), int(group[i])
        c = ctx.get(s)
        prompt[i] = (c or 0.0) + rng.integers(64, 500)
        gtok[i] = 40.0 if g >= 0 else 0.0
        if c is None:  # a session's first request hits its group's prefix, once seen
            hit[i] = gtok[i] if g in seen else 0.0
        else:  # later ones their context, or part of it (a compaction)
            hit[i] = c if rng.random() > 0.1 else max(gtok[i], rng.integers(0, int(c) + 1))
        seen.add(g)
        ctx[s] = prompt[i]
    st = RT.Stream(np.arange(n, dtype=float), np.ones(n), prompt, np.full(n, 20.0), hit,
                   group, gtok, session)
    want = np.minimum(hit // P * P, (prompt - 1) // P * P)
    for engine in ("vllm", "sglang"):
        f = CM.Follower(CM.CacheModel(engine, P, True), st)
        assert (f.hits(np.arange(n), 1e9) == want).all(), engine


def test_follow_replays_each_replica_and_each_tier_domain_apart():
    """Three replicas, two tier domains (replicas 0 and 1 share one): HBM hits are each
    replica's requests alone, tier hits each domain's beyond them (plain-Python
    reference on the routed subsets, both engines)."""
    from xmemplan.sizing import cachemodel as CM
    from xmemplan.sizing import routing as RT

    rng = np.random.default_rng(4)
    n, P = 150, 4
    session = rng.integers(0, 12, n)
    prompt, hit = np.zeros(n), np.zeros(n)
    ctx: dict[int, float] = {}
    for i in range(n):
        c = ctx.get(int(session[i]), 0.0)
        prompt[i] = c + rng.integers(5, 60)
        hit[i] = c
        ctx[int(session[i])] = prompt[i]
    st = RT.Stream(np.arange(n, dtype=float), np.ones(n), prompt, np.full(n, 7.0), hit,
                   np.full(n, -1), np.zeros(n), session)
    rep = rng.integers(0, 3, n)
    dep = RT.Deployment(3, 300.0, np.array([0, 0, 1]), np.array([900.0, 500.0]))
    pl = RT.Placement(rep, np.zeros(n), np.zeros(n), prompt)
    sample = {"prompt_tokens": prompt, "hit_tokens": hit, "session": session}
    toks = _prefix_model_tokens(sample, np.arange(n))
    for engine in ("vllm", "sglang"):
        got = CM.follow(CM.CacheModel(engine, P, True), st, dep, pl)
        assert (got.replica == rep).all()
        for r in range(3):
            idx = np.flatnonzero(rep == r)
            want = reference_replay(engine, [toks[i] for i in idx], [7] * len(idx), P, 300,
                                    True).hit_tokens
            assert got.hit_hbm[idx].tolist() == want, (engine, r)
        for d, members, cap in ((0, (0, 1), 900), (1, (2,), 500)):
            idx = np.flatnonzero(np.isin(rep, members))
            t = reference_replay(engine, [toks[i] for i in idx], [7] * len(idx), P, cap,
                                 True).hit_tokens
            want = np.maximum(0, np.array(t) - got.hit_hbm[idx])
            assert got.hit_tier[idx].tolist() == want.tolist(), (engine, d)



def test_an_overloaded_run_balances_only_the_requests_it_ran():
    """A request an overloaded run never sent or never admitted has replica -1 (its
    session's earlier turn still waited when the run ended). The answer's per-replica
    balance and hit split count the requests that ran: with them counted, `size` exited 1
    ("'list' argument must have no negative elements") on the Claude Code sessions at
    --rate 2 --tp 1, where 2,907 of 4,197 requests never ran on the smallest probe."""
    from types import SimpleNamespace

    from xmemplan.sizing.planner import balance, ran_placement

    r = SimpleNamespace(replica=np.array([0, 1, -1, 1, -1]),
                        hbm_hit=np.array([10.0, 0.0, 0.0, 30.0, 0.0]),
                        tier_hit=np.array([0.0, 20.0, 0.0, 0.0, 0.0]),
                        requests=SimpleNamespace(prompt=np.array([40, 40, 99, 40, 99])))
    got, out = ran_placement(r, np.array([1, 2, 3, 4, 5]))
    assert got.split() == pytest.approx((40 / 120, 20 / 120, 60 / 120))
    bal = balance(got, 2, out)
    assert bal["requests"] == {"min": 1.0, "mean": 1.5, "max": 2.0}
    assert bal["kv_tokens"]["max"] == 40 + 2 + 40 + 4
