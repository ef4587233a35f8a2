"""Scheduler stepping through vLLM's own V1 `Scheduler` (docs/oracles.md, part B).

The scheduler is built as vLLM's engine core builds it, on CPU: a `VllmConfig` whose
`ModelConfig` points at a folder holding only a `config.json` (no weights, no tokenizer:
`skip_tokenizer_init=True`), `SchedulerConfig` (max_num_seqs, max_num_batched_tokens,
chunked prefill, long_prefill_token_threshold), `CacheConfig` (block size, prefix caching,
num_gpu_blocks), `DeviceConfig("cpu")`; a `KVCacheConfig` with one `FullAttentionSpec` group;
a stand-in structured-output manager (no request uses a grammar). Each `Request` gets vLLM's
block hasher (`get_request_block_hasher`, sha256), as the engine core gives it.

Each step: requests that have arrived are `add_request`ed, `schedule()` runs, and
`update_from_output()` gets a hand-made `ModelRunnerOutput` that gives one sampled token to
every scheduled request whose computed tokens reach its length (its prefill completes or it
decodes). The model runner is the only part replaced.

Each step's record also carries `lookups`: the hit tokens of every prefix-cache lookup
`schedule()` made (`_count_lookups`); `unrecorded_lookups`, [(id, hit tokens)] of the
lookups of the schedules since the record before that scheduled nothing (no record of
their own: the engine's replay drops them, its `lookup_totals` count them); and
`admitted_stats`: vLLM 0.33's own `PrefixCacheStats` of the step (requests, queries,
hits; recorded at admission).

`replay_scenario_async` drives vLLM's `AsyncScheduler` the way `EngineCore.
step_with_batch_queue` does with async scheduling (a batch queue of 2): the batch of step
k+1 is scheduled while step k runs, before step k's `update_from_output`; arrivals are
added before each scheduling call (the engine core's input queue).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from . import output_token

_STATE: dict[str, Any] = {}
MODEL_CONFIG = {  # architecture fields only: the scheduler never loads a model
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2,
    "intermediate_size": 128, "vocab_size": 32000, "max_position_embeddings": 1 << 20,
    "torch_dtype": "float32", "rms_norm_eps": 1e-5,
}
MAX_MODEL_LEN = 1 << 17


class _NoGrammar:
    """Stands in for StructuredOutputManager: no request of ours has a grammar."""

    def grammar_bitmask(self, *args: Any, **kwargs: Any) -> None:
        return None

    def accept_tokens(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def validate_tokens(self, request: Any, tokens: list[int]) -> list[int]:
        return tokens

    def should_advance(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"structured-output stand-in has no {name!r} (driver needs it)")


def _vllm() -> dict[str, Any]:
    if not _STATE:
        import torch

        torch.set_num_threads(1)
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            KVTransferConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus

        hash_fn = get_hash_fn_by_name("sha256")
        init_none_hash(hash_fn)
        folder = Path(tempfile.mkdtemp(prefix="xmemplan-vllm-model-"))
        (folder / "config.json").write_text(json.dumps(MODEL_CONFIG))
        model = ModelConfig(model=str(folder), skip_tokenizer_init=True,
                            max_model_len=MAX_MODEL_LEN, dtype="float32")
        _STATE.update(
            torch=torch, CacheConfig=CacheConfig, DeviceConfig=DeviceConfig, model=model,
            SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig, SamplingParams=SamplingParams,
            get_request_block_hasher=get_request_block_hasher, hash_fn=hash_fn,
            Scheduler=Scheduler, AsyncScheduler=AsyncScheduler, FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig,
            KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
            Request=Request, KVTransferConfig=KVTransferConfig,
            KVConnectorOutput=KVConnectorOutput, RequestStatus=RequestStatus,
        )
    return _STATE


def make_scheduler(scenario: dict[str, Any], cls: str = "Scheduler",
                   tier: bool = False, async_config: bool = False) -> Any:
    v = _vllm()
    block = int(scenario["block_size"])
    blocks = int(scenario["num_gpu_blocks"])
    sched = v["SchedulerConfig"](
        max_num_seqs=int(scenario["max_num_seqs"]),
        max_num_batched_tokens=int(scenario["max_num_batched_tokens"]),
        max_model_len=MAX_MODEL_LEN, enable_chunked_prefill=True, is_encoder_decoder=False,
        long_prefill_token_threshold=int(scenario.get("long_prefill_token_threshold", 0)),
        scheduler_reserve_full_isl=bool(scenario.get("scheduler_reserve_full_isl", True)),
        **({"async_scheduling": True} if async_config else {}),
    )
    cache = v["CacheConfig"](block_size=block,
                             enable_prefix_caching=bool(scenario["enable_prefix_caching"]))
    cache.num_gpu_blocks = blocks
    kv_transfer = None
    if tier:  # our scheduler-side connector (tier_connector.py), loaded by module path
        kv_transfer = v["KVTransferConfig"](
            kv_connector="OracleTierConnector", kv_role="kv_both",
            kv_connector_module_path="oracle_drivers.tier_connector")
    config = v["VllmConfig"](model_config=v["model"], scheduler_config=sched, cache_config=cache,
                             device_config=v["DeviceConfig"]("cpu"),
                             kv_transfer_config=kv_transfer)
    spec = v["FullAttentionSpec"](block_size=block, num_kv_heads=1, head_size=1,
                                  dtype=v["torch"].float32)
    kv = v["KVCacheConfig"](num_blocks=blocks, kv_cache_tensors=[],
                            kv_cache_groups=[v["KVCacheGroupSpec"](["layer.0"], spec)])
    return v[cls](config, kv, _NoGrammar(), block_size=block, log_stats=True)


def _count_lookups(scheduler: Any) -> list[tuple[str, int]]:
    """Every call the scheduler makes to `KVCacheManager.get_computed_blocks`, as (request
    id, hit tokens), for requests never preempted and with the cache on: what the vLLM of
    Netpreme's fork recorded into vllm:prefix_cache_queries / hits at each call (vLLM 0.33
    records at admission instead, PR 48860). The manager's own method runs unchanged."""
    kvm = scheduler.kv_cache_manager
    calls: list[tuple[str, int]] = []
    inner = kvm.get_computed_blocks

    def counted(request: Any, *args: Any, **kwargs: Any) -> Any:
        out = inner(request, *args, **kwargs)
        if kvm.prefix_cache_lookup_enabled(request) and request.num_preemptions == 0:
            calls.append((request.request_id, int(out[1])))
        return out

    kvm.get_computed_blocks = counted
    return calls


def _admit_arrivals(v: dict[str, Any], scheduler: Any, hasher: Any,
                    pending: list[tuple[int, dict[str, Any]]], pos: int, clock: float,
                    live: dict[str, Any]) -> int:
    """Add every pending request that has arrived by `clock` (in arrival order) to vLLM's
    scheduler and to `live`; returns the position of the first one still to come."""
    while pos < len(pending) and pending[pos][1]["arrival_s"] <= clock:
        _, r = pending[pos]
        pos += 1
        req = v["Request"](
            str(r["id"]), list(r["tokens"]),
            v["SamplingParams"](max_tokens=int(r["max_tokens"]), ignore_eos=True),
            None, arrival_time=float(r["arrival_s"]), block_hasher=hasher,
        )
        scheduler.add_request(req)
        live[req.request_id] = req
    return pos


def _blocks_used(scheduler: Any, scenario: dict[str, Any]) -> int:
    """Blocks held as the schedule left them (the pool less its null block)."""
    pool = scheduler.kv_cache_manager.block_pool
    return int(scenario["num_gpu_blocks"]) - 1 - pool.get_num_free_blocks()


def _new_hits(out: Any) -> dict[str, int]:
    """Computed tokens of the requests a schedule admits or resumes: their prefix hits."""
    hits = {d.req_id: int(d.num_computed_tokens) for d in out.scheduled_new_reqs}
    cached = out.scheduled_cached_reqs
    for rid, n in zip(cached.req_ids, cached.num_computed_tokens):
        if rid in cached.resumed_req_ids:
            hits[rid] = int(n)
    return hits


def _step_s(st: dict[str, float], out: Any) -> float:
    """The scenario's time of a step that schedules `out`."""
    return (st["base_s"] + st["per_token_s"] * out.total_num_scheduled_tokens
            + st["per_seq_s"] * len(out.num_scheduled_tokens))


def _sampled(live: dict[str, Any], index: dict[str, int], req_ids: list[str],
             samples: list[bool]) -> list[list[int]]:
    """The token each request that samples this step gets (none for a prefill chunk)."""
    return [[output_token(index[rid], len(live[rid].output_token_ids))] if smp else []
            for rid, smp in zip(req_ids, samples, strict=True)]


def _loads_started(conn: Any, live: dict[str, Any], remote: Any,
                   todo: dict[str, list[float]], loading: dict[str, float]
                   ) -> dict[str, list[int]]:
    """{id: [HBM hit, tokens loaded]} of the loads the last schedule started (requests now
    in WAITING_FOR_REMOTE_KVS); each is put in `loading` with the time `todo` lands it."""
    loads: dict[str, list[int]] = {}
    for rid, ext in conn.started:
        req = live[rid]
        if req.status == remote:
            loads[rid] = [int(req.num_computed_tokens) - ext, ext]
            times = todo.get(rid)
            loading[rid] = times.pop(0) if times else float("inf")
    return loads


def _connector_stats(scheduler: Any) -> tuple[int, int, int]:
    """vLLM 0.33's own connector prefix-cache stats since the last call (requests,
    queries, hits of requests never preempted: `connector_prefix_cache_stats`, recorded
    once a request's blocks are allocated, queries its tokens past the local hit, hits
    the connector's tokens), taken and reset as `Scheduler.make_stats` takes them: what
    vllm:external_prefix_cache_queries / hits count."""
    st = scheduler.connector_prefix_cache_stats
    scheduler.connector_prefix_cache_stats = type(st)()
    return int(st.requests), int(st.queries), int(st.hits)


def _next_event(loading: dict[str, float], pending: list[tuple[int, dict[str, Any]]],
                pos: int) -> float:
    """When a driver waiting on nothing runnable moves its clock to: the next landing or
    arrival (inf: none)."""
    nxt = min(loading.values(), default=float("inf"))
    if pos < len(pending):
        nxt = min(nxt, float(pending[pos][1]["arrival_s"]))
    return nxt


def replay_scenario(scenario: dict[str, Any], max_steps: int = 100_000) -> list[dict[str, Any]]:
    """Per-step records of vLLM's own scheduler on the scenario (contract part B)."""
    v = _vllm()
    scheduler = make_scheduler(scenario)
    calls = _count_lookups(scheduler)
    hasher = v["get_request_block_hasher"](int(scenario["block_size"]), v["hash_fn"])
    st = scenario["step_time"]
    pending = sorted(enumerate(scenario["requests"]), key=lambda ir: (ir[1]["arrival_s"], ir[0]))
    index = {r["id"]: i for i, r in enumerate(scenario["requests"])}
    pos = 0
    live: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []
    t = 0.0
    k = 0
    unrecorded: list[tuple[str, int]] = []  # lookups of schedules that scheduled nothing
    while pos < len(pending) or live:
        pos = _admit_arrivals(v, scheduler, hasher, pending, pos, t, live)
        calls.clear()
        out = scheduler.schedule()
        lookups = dict(calls)
        if len(lookups) != len(calls):
            raise RuntimeError(f"step {k}: a request was looked up twice in one schedule()")
        # vLLM 0.33's own prefix-cache stats (one record per admission)
        stats = scheduler.kv_cache_manager.make_prefix_cache_stats()
        if out.total_num_scheduled_tokens == 0:
            unrecorded += calls
            if pos >= len(pending):
                raise RuntimeError(f"vLLM scheduled nothing at step {k} with "
                                   f"{len(live)} requests unfinished and no arrivals left")
            t = max(t, float(pending[pos][1]["arrival_s"]))
            continue
        used = _blocks_used(scheduler, scenario)  # as scheduled
        new_hits = _new_hits(out)
        req_ids = list(out.num_scheduled_tokens)
        sampled = _sampled(live, index, req_ids, [
            live[rid].num_computed_tokens >= live[rid].num_tokens for rid in req_ids])
        mro = v["ModelRunnerOutput"](
            req_ids=req_ids, req_id_to_index={r: j for j, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        scheduler.update_from_output(out, mro)
        finished = [rid for rid in req_ids if rid not in scheduler.requests]
        for rid in finished:
            del live[rid]
        steps.append({
            "step": k, "t_s": t,
            "scheduled": {rid: int(n) for rid, n in out.num_scheduled_tokens.items()},
            "preempted": sorted(out.preempted_req_ids or ()),
            "new_hits": new_hits, "finished": finished,
            "kv_blocks_used": used, "lookups": lookups, "unrecorded_lookups": unrecorded,
            "admitted_stats": (int(stats.requests), int(stats.queries), int(stats.hits)),
        })
        unrecorded = []
        t += (st["base_s"] + st["per_token_s"] * out.total_num_scheduled_tokens
              + st["per_seq_s"] * len(out.num_scheduled_tokens))
        k += 1
        if k >= max_steps:
            raise RuntimeError(f"no end after {max_steps} steps")
    return steps


def replay_scenario_async(scenario: dict[str, Any], max_steps: int = 100_000
                          ) -> list[dict[str, Any]]:
    """Per-step records of vLLM's own `AsyncScheduler` driven in the engine core's
    batch-queue pattern (`EngineCore.step_with_batch_queue`, batch queue size 2,
    `VllmConfig.max_concurrent_batches`): schedule a batch and launch it; while fewer than
    two are in flight, schedule the next one at once (arrivals so far added first); else
    wait for the oldest to end and `update_from_output` it. A batch starts on the GPU when
    the one before it ends and lasts the scenario's step time. An engine with nothing in
    flight and nothing to schedule waits for the next arrival. Records as
    `replay_scenario`, less `admitted_stats`; `kv_blocks_used` is counted when the batch
    is scheduled (the step before has not freed its finished requests). A schedule that
    builds no batch (every running request finishes in flight, the waiting head does not
    fit) makes no record; its lookups go to the next record's `unrecorded_lookups`."""
    from collections import deque

    v = _vllm()
    scheduler = make_scheduler(scenario, "AsyncScheduler")
    calls = _count_lookups(scheduler)
    hasher = v["get_request_block_hasher"](int(scenario["block_size"]), v["hash_fn"])
    st = scenario["step_time"]
    pending = sorted(enumerate(scenario["requests"]), key=lambda ir: (ir[1]["arrival_s"], ir[0]))
    index = {r["id"]: i for i, r in enumerate(scenario["requests"])}
    pos = 0
    live: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []
    queue: deque[tuple[Any, list[str], list[bool], dict[str, Any]]] = deque()
    now = 0.0  # the engine core's clock (when it schedules)
    gpu_free = 0.0  # when the last launched batch ends
    unrecorded: list[tuple[str, int]] = []  # lookups of schedules that built no batch
    while pos < len(pending) or live or queue:
        pos = _admit_arrivals(v, scheduler, hasher, pending, pos, now, live)
        if len(queue) < 2 and scheduler.has_requests():
            calls.clear()
            out = scheduler.schedule()
            lookups = dict(calls)
            if len(lookups) != len(calls):
                raise RuntimeError(f"step {len(steps)}: a request was looked up twice in "
                                   "one schedule()")
            if out.total_num_scheduled_tokens > 0:
                used = _blocks_used(scheduler, scenario)
                new_hits = _new_hits(out)
                req_ids = list(out.num_scheduled_tokens)
                samples = [not live[rid].is_prefill_chunk for rid in req_ids]
                start = max(now, gpu_free)
                gpu_free = start + _step_s(st, out)
                rec: dict[str, Any] = {
                    "step": len(steps), "t_s": start,
                    "scheduled": {rid: int(n) for rid, n in out.num_scheduled_tokens.items()},
                    "preempted": sorted(out.preempted_req_ids or ()),
                    "new_hits": new_hits, "finished": [], "kv_blocks_used": used,
                    "lookups": lookups, "unrecorded_lookups": unrecorded,
                    "end": gpu_free}
                unrecorded = []
                steps.append(rec)
                queue.appendleft((out, req_ids, samples, rec))
                if len(steps) >= max_steps:
                    raise RuntimeError(f"no end after {max_steps} steps")
                if len(queue) < 2:
                    continue  # fill the queue: schedule the next batch now
            else:
                unrecorded += calls
                if not queue:
                    if pos >= len(pending):
                        raise RuntimeError(f"vLLM scheduled nothing with {len(live)} "
                                           "requests unfinished, nothing in flight and no "
                                           "arrivals left")
                    now = max(now, float(pending[pos][1]["arrival_s"]))
                    continue
        elif not queue:
            now = max(now, float(pending[pos][1]["arrival_s"]))
            continue
        # wait for the oldest batch in flight, then process its output
        out, req_ids, samples, rec = queue.pop()
        now = max(now, rec["end"])
        mro = v["ModelRunnerOutput"](
            req_ids=req_ids, req_id_to_index={r: j for j, r in enumerate(req_ids)},
            sampled_token_ids=_sampled(live, index, req_ids, samples),
        )
        scheduler.update_from_output(out, mro)
        rec["finished"] = [rid for rid in req_ids if rid not in scheduler.requests]
        for rid in rec["finished"]:
            del live[rid]
    for rec in steps:
        del rec["end"]
    return steps


def landings(ours: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The times xmemplan's engine says each request's tier loads land, in order (its
    replay records' `landed`): what the tier driver feeds vLLM as `finished_recving`."""
    out: dict[str, list[float]] = {}
    for rec in ours:
        for rid, t in rec.get("landed", {}).items():
            out.setdefault(rid, []).append(float(t))
    return out


def _tier_setup(v: dict[str, Any], scheduler: Any, scenario: dict[str, Any],
                landed: dict[str, list[float]]) -> tuple[Any, Any, list, dict, dict]:
    """What both tier replays start from: the connector told each request's tier share,
    the block hasher, the arrivals in order, each request's index and its landings left."""
    conn = scheduler.connector
    conn.tier_tokens = {str(r["id"]): int(r.get("tier_tokens", 0))
                        for r in scenario["requests"]}
    hasher = v["get_request_block_hasher"](int(scenario["block_size"]), v["hash_fn"])
    pending = sorted(enumerate(scenario["requests"]), key=lambda ir: (ir[1]["arrival_s"], ir[0]))
    index = {r["id"]: i for i, r in enumerate(scenario["requests"])}
    todo = {rid: list(ts) for rid, ts in landed.items()}
    return conn, hasher, pending, index, todo


def replay_scenario_tier(scenario: dict[str, Any], landed: dict[str, list[float]],
                         max_steps: int = 100_000) -> list[dict[str, Any]]:
    """Per-step records of vLLM's own `Scheduler` with a tier behind a KV connector
    (tier_connector.py: each request's `tier_tokens`, loaded asynchronously), as
    `replay_scenario` (less `admitted_stats`; `lookups` of the schedules that make a
    record) plus `loads`, {id: [HBM hit, tokens loaded]} of the loads the step started
    (requests put in WAITING_FOR_REMOTE_KVS), and `connector_stats`, vLLM's own
    (requests, queries, hits) of the connector's prefix-cache stats that schedule
    recorded (`_connector_stats`).

    The loads land when `landed` says (xmemplan's engine times them over its link model,
    `landings`): a load landing by the end of a step is reported in that step's
    `ModelRunnerOutput.kv_connector_output.finished_recving`, so the next `schedule()`
    promotes it (`_update_from_kv_xfer_finished`, `_handle_blocked_waiting_request`). When
    a schedule runs nothing (every request waits on a load, or only loads started) no step
    runs: the clock goes to the next arrival or landing, and the landings by then are
    reported through `update_from_output` of that empty schedule (as vLLM's engine core
    polls a connector with empty steps). A schedule that only started loads is a record of
    its own (nothing scheduled). A load the engine never lands ends the replay (the
    comparison names the step where the two part)."""
    v = _vllm()
    scheduler = make_scheduler(scenario, tier=True)
    calls = _count_lookups(scheduler)
    conn, hasher, pending, index, todo = _tier_setup(v, scheduler, scenario, landed)
    st = scenario["step_time"]
    loading: dict[str, float] = {}  # requests vLLM holds in WAITING_FOR_REMOTE_KVS -> land
    inf = float("inf")
    remote = v["RequestStatus"].WAITING_FOR_REMOTE_KVS
    pos = 0
    live: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []
    t = 0.0
    unrecorded: list[tuple[str, int]] = []  # lookups of schedules that make no record

    def output(out: Any, req_ids: list[str], sampled: list[list[int]], end: float) -> None:
        done = {rid for rid, tl in loading.items() if tl <= end}
        for rid in done:
            del loading[rid]
        mro = v["ModelRunnerOutput"](
            req_ids=req_ids, req_id_to_index={r: j for j, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=v["KVConnectorOutput"](finished_recving=done))
        scheduler.update_from_output(out, mro)

    while pos < len(pending) or live:
        pos = _admit_arrivals(v, scheduler, hasher, pending, pos, t, live)
        conn.started.clear()
        calls.clear()
        out = scheduler.schedule()
        lookups = dict(calls)
        ext_stats = _connector_stats(scheduler)
        loads = _loads_started(conn, live, remote, todo, loading)
        total = out.total_num_scheduled_tokens
        if total == 0 and not loads:
            if any(ext_stats):
                raise RuntimeError(f"step {len(steps)}: connector stats without a record")
            unrecorded += calls
            nxt = _next_event(loading, pending, pos)
            if nxt == inf:
                break  # vLLM waits on a load xmemplan's engine never lands
            output(out, [], [], nxt)
            t = max(t, nxt)
            continue
        used = _blocks_used(scheduler, scenario)
        new_hits = _new_hits(out)
        req_ids = list(out.num_scheduled_tokens)
        sampled = _sampled(live, index, req_ids, [
            live[rid].num_computed_tokens >= live[rid].num_tokens for rid in req_ids])
        # only loads started: no step runs, the engine waits for the next event
        end = t + _step_s(st, out) if total > 0 else _next_event(loading, pending, pos)
        output(out, req_ids, sampled, end)
        finished = [rid for rid in req_ids if rid not in scheduler.requests]
        for rid in finished:
            del live[rid]
        steps.append({
            "step": len(steps), "t_s": t,
            "scheduled": {rid: int(n) for rid, n in out.num_scheduled_tokens.items()},
            "preempted": sorted(out.preempted_req_ids or ()),
            "new_hits": new_hits, "finished": finished,
            "kv_blocks_used": used, "loads": loads, "lookups": lookups,
            "unrecorded_lookups": unrecorded, "connector_stats": ext_stats,
        })
        unrecorded = []
        if end == inf:
            break
        t = end
        if len(steps) >= max_steps:
            raise RuntimeError(f"no end after {max_steps} steps")
    return steps


def replay_scenario_async_tier(scenario: dict[str, Any], landed: dict[str, list[float]],
                               max_steps: int = 100_000) -> list[dict[str, Any]]:
    """`replay_scenario_async` with the tier connector (`replay_scenario_tier`), vLLM's
    config with async scheduling on (two batches in flight: with a kv_both connector vLLM
    then defers block frees, `defer_block_free`). Every schedule is a batch of the engine
    core's queue, an empty one too (it takes no GPU time but is processed in order, after
    the batch before it: its output carries the loads landed by then); an empty schedule
    with nothing but empty batches in flight processes them and waits for the next
    arrival or landing. Records as `replay_scenario_tier`."""
    from collections import deque

    v = _vllm()
    scheduler = make_scheduler(scenario, "AsyncScheduler", tier=True, async_config=True)
    calls = _count_lookups(scheduler)
    conn, hasher, pending, index, todo = _tier_setup(v, scheduler, scenario, landed)
    st = scenario["step_time"]
    loading: dict[str, float] = {}
    inf = float("inf")
    remote = v["RequestStatus"].WAITING_FOR_REMOTE_KVS
    pos = 0
    live: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []
    queue: deque[tuple[Any, list[str], list[bool], dict[str, Any] | None, float]] = deque()
    now = 0.0
    gpu_free = 0.0
    unrecorded: list[tuple[str, int]] = []  # lookups of schedules that make no record

    def process(out: Any, req_ids: list[str], samples: list[bool],
                rec: dict[str, Any] | None, end: float) -> None:
        done = {rid for rid, tl in loading.items() if tl <= end}
        for rid in done:
            del loading[rid]
        mro = v["ModelRunnerOutput"](
            req_ids=req_ids, req_id_to_index={r: j for j, r in enumerate(req_ids)},
            sampled_token_ids=_sampled(live, index, req_ids, samples),
            kv_connector_output=v["KVConnectorOutput"](finished_recving=done))
        scheduler.update_from_output(out, mro)
        fin = [rid for rid in req_ids if rid not in scheduler.requests]
        if rec is not None:
            rec["finished"] = fin
        for rid in fin:
            del live[rid]

    while pos < len(pending) or live or queue:
        pos = _admit_arrivals(v, scheduler, hasher, pending, pos, now, live)
        if len(queue) < 2 and scheduler.has_requests():
            conn.started.clear()
            calls.clear()
            out = scheduler.schedule()
            lookups = dict(calls)
            ext_stats = _connector_stats(scheduler)
            loads = _loads_started(conn, live, remote, todo, loading)
            total = out.total_num_scheduled_tokens
            if total == 0 and not loads and any(ext_stats):
                raise RuntimeError(f"step {len(steps)}: connector stats without a record")
            if total == 0 and all(q[3] is None or not q[1] for q in queue):
                # nothing runs: the batches in flight (empty) are processed, then the
                # engine waits for the next event
                while queue:
                    q = queue.pop()
                    process(*q)
                if loads:
                    steps.append({"step": len(steps), "t_s": max(now, gpu_free),
                                  "scheduled": {},
                                  "preempted": sorted(out.preempted_req_ids or ()),
                                  "new_hits": {}, "finished": [],
                                  "kv_blocks_used": _blocks_used(scheduler, scenario),
                                  "loads": loads, "lookups": lookups,
                                  "unrecorded_lookups": unrecorded,
                                  "connector_stats": ext_stats})
                    unrecorded = []
                else:
                    unrecorded += calls
                nxt = _next_event(loading, pending, pos)
                if nxt == inf:
                    break
                now = max(now, gpu_free, nxt)
                process(out, [], [], None, now)
                continue
            used = _blocks_used(scheduler, scenario)
            new_hits = _new_hits(out)
            req_ids = list(out.num_scheduled_tokens)
            samples = [not live[rid].is_prefill_chunk for rid in req_ids]
            start = max(now, gpu_free)
            gpu_free = start + (_step_s(st, out) if total > 0 else 0.0)
            rec = None
            if total > 0 or loads:
                rec = {"step": len(steps), "t_s": start,
                       "scheduled": {rid: int(n) for rid, n in out.num_scheduled_tokens.items()},
                       "preempted": sorted(out.preempted_req_ids or ()),
                       "new_hits": new_hits, "finished": [], "kv_blocks_used": used,
                       "loads": loads, "lookups": lookups,
                       "unrecorded_lookups": unrecorded, "connector_stats": ext_stats}
                steps.append(rec)
                unrecorded = []
            else:
                unrecorded += calls
            queue.appendleft((out, req_ids, samples, rec, gpu_free))
            if len(steps) >= max_steps:
                raise RuntimeError(f"no end after {max_steps} steps")
            if len(queue) < 2:
                continue
        elif not queue:
            nxt = _next_event(loading, pending, pos)
            if nxt == inf:
                break
            now = max(now, nxt)
            continue
        q = queue.pop()
        now = max(now, q[4])
        process(*q)
    return steps
