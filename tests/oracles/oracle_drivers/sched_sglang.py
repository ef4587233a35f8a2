"""SGLang 0.5.23's own scheduling on CPU (docs/oracles.md, part B, SGLang).

`replay_scenario`: SGLang's real `Scheduler` step loop. `make_scheduler` builds a
`sglang.srt.managers.scheduler.Scheduler` without its `__init__` (which starts the
TpModelWorker on a CUDA/NPU device) and sets the fields `get_next_batch_to_run` and
`process_batch_result` read as `__init__` sets them, from the same ServerArgs, with
SGLang's own parts where they run on CPU; `_run_batch` stands in for `run_batch` (the
forward): it returns the contract's output ids as the sampled tokens. Each step runs
`event_loop_normal`'s body. `replay_scenario_overlap`: SGLang's default overlap loop
(`event_loop_overlap`'s body) with the real `run_batch` and `_ModelWorker` in place of
the TpModelWorker. What is ours and what is SGLang's: docs/oracles.md.

`first_prefill`: the first prefill batch through `PrefillAdder` alone (all requests
waiting at t = 0, FCFS, an empty running batch, `new_token_ratio` 0.7 x
`schedule_conservativeness`, `_get_new_batch_prefill_raw`'s loop): {id: extend tokens}.
A cross-check of the step loop's first step.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
import types
from array import array
from collections import deque
from pathlib import Path
from typing import Any

from . import output_token
from .sched_vllm import MODEL_CONFIG

_STATE: dict[str, Any] = {}
MAX_CONTEXT = 1 << 17


def _sglang() -> dict[str, Any]:
    if not _STATE:
        from .cache_sglang import _sglang as cache_modules

        s = cache_modules()
        from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
        from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.runtime_context import get_context
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        folder = Path(tempfile.mkdtemp(prefix="xmemplan-sglang-model-"))
        (folder / "config.json").write_text(json.dumps(MODEL_CONFIG))
        s.update(Req=Req, ScheduleBatch=ScheduleBatch, AddReqResult=AddReqResult,
                 PrefillAdder=PrefillAdder, ReqToTokenPool=ReqToTokenPool,
                 get_context=get_context, SamplingParams=SamplingParams, ServerArgs=ServerArgs,
                 SpeculativeAlgorithm=SpeculativeAlgorithm, folder=folder)
        _STATE.update(s)
    return _STATE


def first_prefill(scenario: dict[str, Any]) -> dict[str, int]:
    """SGLang's first prefill batch for the scenario's requests, all waiting at once."""
    s = _sglang()
    torch = s["torch"]
    page = int(scenario["block_size"])
    conservativeness = float(scenario.get("schedule_conservativeness", 1.0))
    max_running = int(scenario["max_num_seqs"])
    chunk = int(scenario.get("chunked_prefill_size", scenario["max_num_batched_tokens"]))
    args = s["ServerArgs"](
        model_path=str(s["folder"]), device="cpu", page_size=page, skip_tokenizer_init=True,
        schedule_conservativeness=conservativeness, chunked_prefill_size=chunk,
        max_running_requests=max_running,
    )
    s["get_context"]().set_server_args(args)
    size = int(scenario["num_gpu_blocks"]) * page
    if page > 1:
        alloc = s["Paged"](size, page, torch.int64, "cpu", None, False)
    else:
        alloc = s["Token"](size, torch.int64, "cpu", None, False)
    pool = s["ReqToTokenPool"](max_running + 1, MAX_CONTEXT, "cpu", False)
    tree = s["radix_cache"].RadixCache(s["CacheInitParams"](
        disable=not scenario["enable_prefix_caching"], req_to_token_pool=pool,
        token_to_kv_pool_allocator=alloc, page_size=page,
    ))
    running = s["ScheduleBatch"](reqs=[])
    adder = s["PrefillAdder"](
        page, tree, alloc, running, 0.7 * conservativeness,
        int(scenario["max_num_batched_tokens"]), chunk,
        max_running_requests=max_running,
    )
    for r in sorted(scenario["requests"], key=lambda r: r["arrival_s"]):
        if len(adder.can_run_list) >= max_running:
            break
        params = s["SamplingParams"](max_new_tokens=int(r["max_tokens"]), ignore_eos=True)
        req = s["Req"](str(r["id"]), "", array("q", r["tokens"]), params)
        req.init_next_round_input(tree)
        res = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if res != s["AddReqResult"].CONTINUE:
            break
    batch = s["ScheduleBatch"].init_new(
        adder.can_run_list, pool, alloc, tree,
        types.SimpleNamespace(vocab_size=MODEL_CONFIG["vocab_size"], is_encoder_decoder=False),
        False,
        s["SpeculativeAlgorithm"].NONE,
    )
    if adder.can_run_list:
        batch.prepare_for_extend()  # the engine's own allocation of the batch's KV
    return {req.rid: int(req.extend_len) for req in adder.can_run_list}


# -- SGLang's own Scheduler, stepped (docs/oracles.md, part B, SGLang) ------------------------
class _Quiet:
    """Stands in for an observability part of the Scheduler (metrics, load publishing):
    every attribute is a call that does nothing and returns None."""

    enable_metrics = False

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Quiet(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __bool__(self) -> bool:
        return False


class _Reporter(_Quiet):
    """The metrics reporter: the counters the step loop adds to, calls that report."""

    num_generated_tokens = 0
    forward_ct_decode = 0
    num_retracted_reqs = 0


def _loop_modules() -> dict[str, Any]:
    s = _sglang()
    if "Scheduler" not in s:
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.managers.min_free_slots_delayer import resolve_min_free_slots
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.managers.scheduler_components.batch_result_processor import (
            SchedulerBatchResultProcessor,
        )
        from sglang.srt.managers.scheduler_components.dp_attn import SchedulerDPAttnAdapter
        from sglang.srt.managers.scheduler_components.logprob_result_processor import (
            SchedulerLogprobResultProcessor,
        )
        from sglang.srt.managers.utils import GenerationBatchResult
        from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import (
            NgramEmbeddingManager,
        )
        from sglang.srt.runtime_context import get_parallel, get_schedule

        s.update(
            ModelConfig=ModelConfig, DisaggregationMode=DisaggregationMode,
            resolve_min_free_slots=resolve_min_free_slots, Scheduler=Scheduler,
            SchedulerBatchResultProcessor=SchedulerBatchResultProcessor,
            SchedulerDPAttnAdapter=SchedulerDPAttnAdapter,
            SchedulerLogprobResultProcessor=SchedulerLogprobResultProcessor,
            GenerationBatchResult=GenerationBatchResult,
            NgramEmbeddingManager=NgramEmbeddingManager, get_parallel=get_parallel,
            get_schedule=get_schedule,
        )
    return s


def make_scheduler(scenario: dict[str, Any]) -> Any:
    """A real `sglang.srt.managers.scheduler.Scheduler`, built without its `__init__`
    (which starts the TpModelWorker on a device): the fields its step loop reads are set
    as `__init__` sets them, from the same ServerArgs (published into SGLang's runtime
    context), with SGLang's own parts where they run on CPU (ModelConfig, RadixCache,
    allocators, ReqToTokenPool, SchedulePolicy, NewTokenRatioTracker, BeamCoordinator,
    SchedulerDPAttnAdapter, SchedulerBatchResultProcessor, the running status of
    `init_running_status`) and `_Quiet` stand-ins for metrics and load publishing."""
    if scenario.get("async_scheduling", False):
        raise NotImplementedError("SGLang's overlap event loop is not driven: it needs "
                                  "run_batch's future map and init_overlap's device "
                                  "streams (docs/oracles.md)")
    s = _loop_modules()
    torch = s["torch"]
    page = int(scenario["block_size"])
    max_running = int(scenario["max_num_seqs"])
    chunk = int(scenario.get("chunked_prefill_size", scenario["max_num_batched_tokens"]))
    args = s["ServerArgs"](
        model_path=str(s["folder"]), device="cpu", page_size=page, skip_tokenizer_init=True,
        schedule_conservativeness=float(scenario.get("schedule_conservativeness", 1.0)),
        chunked_prefill_size=chunk, max_running_requests=max_running,
        max_prefill_tokens=int(scenario.get("max_prefill_tokens", 16384)),
        disable_overlap_schedule=True,  # event_loop_normal
        disable_radix_cache=not scenario["enable_prefix_caching"],
    )
    ctx = s["get_context"]()
    ctx.set_server_args(args)
    # Scheduler.init_model_worker: pp_max_micro_batch_size defaults to the running cap
    if not s["get_parallel"]().pp_max_micro_batch_size:
        ctx.override("scheduler.pp_max_micro_batch_size_default",
                     pp_max_micro_batch_size=max(max_running // s["get_parallel"]().pp_size, 1))
    g = s["get_schedule"]()
    size = int(scenario["num_gpu_blocks"]) * page
    if page > 1:
        alloc = s["Paged"](size, page, torch.int64, "cpu", None, False)
    else:
        alloc = s["Token"](size, torch.int64, "cpu", None, False)
    pool = s["ReqToTokenPool"](max_running + 1, MAX_CONTEXT, "cpu", False)
    tree = s["radix_cache"].RadixCache(s["CacheInitParams"](
        disable=not scenario["enable_prefix_caching"], req_to_token_pool=pool,
        token_to_kv_pool_allocator=alloc, page_size=page,
    ))
    model_config = s["ModelConfig"].from_server_args(args)
    runner = types.SimpleNamespace(attn_backend=object(), prefill_aware_swa=False)
    none_spec = s["SpeculativeAlgorithm"].NONE
    null = s["DisaggregationMode"].NULL
    if s["resolve_min_free_slots"](g.min_free_slots_delay, max_running,
                                   is_dflash_family=False) is not None:
        raise RuntimeError("min_free_slots_delay is set: the driver builds no delayer")
    sch = object.__new__(s["Scheduler"])
    fields: dict[str, Any] = dict(
        server_args=args, model_config=model_config, is_generation=True,
        page_size=page, tree_cache=tree, token_to_kv_pool_allocator=alloc,
        req_to_token_pool=pool, max_running_requests=max_running,
        max_prefill_tokens=args.max_prefill_tokens, max_req_len=MAX_CONTEXT,
        max_queued_requests=args.max_queued_requests,
        schedule_policy=g.schedule_policy,
        enable_priority_scheduling=g.enable_priority_scheduling,
        abort_on_priority_when_disabled=g.abort_on_priority_when_disabled,
        schedule_low_priority_values_first=g.schedule_low_priority_values_first,
        priority_scheduling_preemption_threshold=g.priority_scheduling_preemption_threshold,
        enable_overlap=False, enable_overlap_mlx=False, enable_pdmux=False,
        spec_algorithm=none_spec, disaggregation_mode=null, require_mlp_sync=False,
        enable_hierarchical_cache=False, enable_unified_cache_external_linker=False,
        enable_lmcache=False, enable_hicache_storage=False, enable_hisparse=False,
        enable_lora=False, is_hybrid_swa=False,
        hisparse_coordinator=None, decode_offload_manager=None, future_map=None,
        min_free_slots_delayer=None, dynamic_chunk_sizer=None, truncation_align_size=None,
        scheduler_stage_metrics=None, enable_fpm=False, load_snapshot_writer=None,
        processed_tokens_counter=0, max_prefill_bs=0,
        _pending_chunked_abort_req=None, _sched_idled=False,
        # init_chunked_prefill (no mixed chunk: its default)
        chunked_prefill_size=chunk, prefill_decode_interval=0,
        _prefill_decode_interval_remaining=0, chunked_req=None,
        is_mixed_chunk=bool(g.enable_mixed_chunk),
        # init_load_inquirer's step counters (metrics only)
        total_prefill_uncached_tokens=0, total_prefill_busy_us=0,
        decode_moment_totals=[0.0] * 6, _prev_step=None, _prev_prefill_end_ts=None,
        _pause_intervals=deque(maxlen=8), _pause_started_at=None,
        # the model worker: only what the scheduling reads (no forward runs)
        tp_worker=types.SimpleNamespace(model_runner=runner),
        grammar_manager=types.SimpleNamespace(has_waiting_grammars=lambda: False,
                                              grammar_queue=[]),
        metrics_reporter=_Reporter("metrics_reporter"),
        load_inquirer=_Quiet("load_inquirer"), load_publisher=_Quiet("load_publisher"),
        output_streamer=types.SimpleNamespace(stream_output=lambda *a, **k: None),
        ngram_embedding_manager=s["NgramEmbeddingManager"](enabled=False, table=None, n=0),
    )
    for name, value in fields.items():
        setattr(sch, name, value)
    sch.dp_attn_adapter = s["SchedulerDPAttnAdapter"](
        model_runner=runner, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc,
        tree_cache=tree, offload_tags=set(), model_config=model_config,
        enable_overlap=False, spec_algorithm=none_spec, get_require_mlp_sync=lambda: False)
    sch.init_diffusion_llm()  # dllm_config None, its (empty) DllmManager
    sch.init_running_status()
    sch.init_schedule_policy()  # SchedulePolicy, NewTokenRatioTracker.from_config()
    sch.init_beam_coordinator()
    sch.batch_result_processor = s["SchedulerBatchResultProcessor"](
        is_generation=True, disaggregation_mode=null, enable_overlap=False,
        enable_overlap_mlx=False, model_config=model_config, token_to_kv_pool_allocator=alloc,
        tree_cache=tree, hisparse_coordinator=None, req_to_token_pool=pool,
        decode_offload_manager=None, metrics_collector=_Quiet("metrics_collector"),
        metrics_reporter=sch.metrics_reporter, draft_worker=None, model_worker=None,
        logprob_result_processor=s["SchedulerLogprobResultProcessor"](
            model_config=model_config),
        output_streamer=sch.output_streamer, beam_coordinator=sch.beam_coordinator,
        abort_request=lambda *a: None)
    sch.send_abort_output = _aborted(sch)
    return sch


def _aborted(sch: Any) -> Any:
    """Scheduler.send_abort_output stand-in: records the aborted request ids (SGLang aborts
    a decode whose KV cannot fit even alone, retract_decode)."""
    sch.aborted_rids = []

    def send(abort_req: Any, req: Any) -> None:
        sch.aborted_rids.append(req.rid)

    return send


def _run_batch(sch: Any, batch: Any, index: dict[str, int]) -> Any:
    """Stands in for `Scheduler.run_batch` (the model forward): its bookkeeping
    (forward_ct, forward_iter, launch_ts, processed_tokens_counter) and a
    `GenerationBatchResult` whose sampled token of each request is the contract's output id."""
    sch.metrics_reporter.record_scheduler_active(time.monotonic_ns())
    sch.forward_ct += 1
    batch.forward_iter = sch.forward_ct
    batch.launch_ts = time.monotonic()
    batch.after_idle_gap = sch._sched_idled
    sch._sched_idled = False
    if batch.extend_num_tokens:
        sch.processed_tokens_counter += batch.extend_num_tokens
    ids = [output_token(index[r.rid], len(r.output_ids)) for r in batch.reqs]
    torch = _STATE["torch"]
    return _STATE["GenerationBatchResult"](next_token_ids=torch.tensor(ids, dtype=torch.int64))


def _new_req(r: dict[str, Any]) -> Any:
    """A request as the tokenizer manager hands it on: normalized, verified sampling
    params. It ends by length (max_tokens): no sampled id is an EOS (the model config has
    none). `ignore_eos` stays False, as for a client that does not set it: SGLang 0.5.23
    reserves a running request's remaining output x new_token_ratio only then, and all
    of it with ignore_eos (PrefillAdder._get_running_request_total_token_offset)."""
    s = _STATE
    params = s["SamplingParams"](max_new_tokens=int(r["max_tokens"]), ignore_eos=False)
    params.normalize(None)
    params.verify(MODEL_CONFIG["vocab_size"])
    return s["Req"](str(r["id"]), "", array("q", r["tokens"]), params)


def _arrive(sch: Any, pending: list[tuple[int, dict[str, Any]]], pos: int, now: float,
            live: dict[str, Any]) -> int:
    """Queue every request arrived by `now` (`_add_request_to_queue`); the next one's
    position."""
    while pos < len(pending) and pending[pos][1]["arrival_s"] <= now:
        req = _new_req(pending[pos][1])
        live[req.rid] = req
        sch._add_request_to_queue(req)
        pos += 1
    return pos


def _next_batch(sch: Any, admitted: set[str]) -> tuple[Any, list[str], float]:
    """SGLang's own `get_next_batch_to_run`: the batch (None: nothing to run), the running
    requests it retracted (no longer admitted) and the new_token_ratio its admission used."""
    running = {r.rid for r in sch.running_batch.reqs}
    ratio = sch.new_token_ratio_tracker.current
    plan = sch.get_next_batch_to_run(running_batch=sch.running_batch,
                                     last_batch=sch.last_batch)
    sch.running_batch = plan.running_batch
    retracted = sorted(r.rid for r in sch.waiting_queue if r.rid in running)
    for rid in retracted:
        admitted.discard(rid)
    return plan.batch_to_run, retracted, ratio


def _batch_figures(sch: Any, batch: Any, admitted: set[str],
                   pool_tokens: int) -> tuple[dict[str, int], dict[str, int], int]:
    """A batch's scheduled tokens per request, the prefix hit of each request admitted
    by it (marked admitted), and the KV tokens held (not free, not evictable)."""
    if batch.forward_mode.is_extend():
        scheduled = {r.rid: int(n) for r, n in zip(batch.reqs, batch.extend_lens, strict=True)}
        new_hits = {r.rid: int(n) for r, n in zip(batch.reqs, batch.prefix_lens, strict=True)
                    if r.rid not in admitted}
        admitted.update(scheduled)
    else:
        scheduled = {r.rid: 1 for r in batch.reqs}
        new_hits = {}
    held = pool_tokens - sch.token_to_kv_pool_allocator.available_size() \
        - sch.tree_cache.evictable_size()
    return scheduled, new_hits, held


def _step_s(st: dict[str, float], scheduled: dict[str, int]) -> float:
    """The scenario's step time for a batch scheduling `scheduled`."""
    return (st["base_s"] + st["per_token_s"] * sum(scheduled.values())
            + st["per_seq_s"] * len(scheduled))


def _abort_record(sch: Any, k: int, t: float, retracted: list[str], live: dict[str, Any],
                  pool_tokens: int, page: int, ratio: float) -> dict[str, Any]:
    """The record of a build whose decode retract_decode aborted (nothing scheduled): the
    aborted requests leave `live`."""
    aborted = list(sch.aborted_rids)
    sch.aborted_rids.clear()
    for rid in aborted:
        live.pop(rid, None)
    held = pool_tokens - sch.token_to_kv_pool_allocator.available_size() \
        - sch.tree_cache.evictable_size()
    return {"step": k, "t_s": t, "scheduled": {}, "preempted": retracted, "new_hits": {},
            "finished": [], "aborted": aborted, "kv_blocks_used": -(-held // page),
            "ratio": ratio}


def replay_scenario(scenario: dict[str, Any], max_steps: int = 100_000,
                    stall_ok: bool = False) -> list[dict[str, Any]]:
    """Per-step records of SGLang's own Scheduler on the scenario (contract part B):
    `event_loop_normal`'s body each step (arrivals by the clock through
    `_add_request_to_queue`, `get_next_batch_to_run`, the batch run by `_run_batch`,
    `process_batch_result`, last_batch); with nothing to run, `on_idle`'s reset of
    new_token_ratio when fully idle and the clock to the next arrival. Records carry
    `ratio`, the new_token_ratio the step's admission used, and `aborted`."""
    _loop_modules()
    sch = make_scheduler(scenario)
    page = int(scenario["block_size"])
    pool_tokens = int(scenario["num_gpu_blocks"]) * page
    st = scenario["step_time"]
    pending = sorted(enumerate(scenario["requests"]), key=lambda ir: (ir[1]["arrival_s"], ir[0]))
    index = {r["id"]: i for i, r in enumerate(scenario["requests"])}
    live: dict[str, Any] = {}
    admitted: set[str] = set()
    steps: list[dict[str, Any]] = []
    pos = 0
    t = 0.0
    while pos < len(pending) or live:
        pos = _arrive(sch, pending, pos, t, live)
        batch, retracted, ratio = _next_batch(sch, admitted)
        if batch is None and sch.aborted_rids:
            # retract_decode aborted the last decode (no batch runs): a record of its own,
            # and SGLang builds again at once
            steps.append(_abort_record(sch, len(steps), t, retracted, live, pool_tokens, page,
                                       ratio))
            sch._sched_idled = True
            sch.last_batch = None
            continue
        if batch is None:
            sch._sched_idled = True
            if sch.is_fully_idle():  # on_idle
                sch.new_token_ratio_tracker.reset()
            sch.last_batch = None
            if retracted:
                raise RuntimeError(f"step {len(steps)}: a retraction without a batch")
            if pos >= len(pending):
                if stall_ok:  # nothing can ever run: SGLang would wait forever
                    return steps
                raise RuntimeError(f"SGLang scheduled nothing at step {len(steps)} with "
                                   f"{len(live)} requests unfinished and no arrivals left")
            t = max(t, float(pending[pos][1]["arrival_s"]))
            continue
        scheduled, new_hits, held = _batch_figures(sch, batch, admitted, pool_tokens)
        aborted = list(sch.aborted_rids)
        sch.aborted_rids.clear()
        result = _run_batch(sch, batch, index)
        sch.process_batch_result(batch, result)
        sch.last_batch = batch
        finished = sorted(rid for rid in scheduled if live[rid].finished())
        for rid in finished + aborted:
            live.pop(rid, None)
        steps.append({
            "step": len(steps), "t_s": t, "scheduled": scheduled, "preempted": retracted,
            "new_hits": new_hits, "finished": finished, "aborted": aborted,
            "kv_blocks_used": -(-held // page), "ratio": ratio,
        })
        t += _step_s(st, scheduled)
        if len(steps) >= max_steps:
            raise RuntimeError(f"no end after {max_steps} steps")
    return steps


class _ModelWorker:
    """Stands in for the TpModelWorker under the overlap loop: `forward_batch_generation`
    returns the contract's output id of each request as its sampled token (no forward);
    the rest of `Scheduler.run_batch` (future map relay, streams, copies) is SGLang's."""

    def __init__(self, index: dict[str, int], pending: dict[str, int]) -> None:
        self.index = index
        self.pending = pending  # forwards launched and not yet processed, per request

    def forward_batch_generation(self, batch: Any, **kwargs: Any) -> Any:
        torch = _STATE["torch"]
        ids = []
        for r in batch.reqs:
            k = len(r.output_ids) + self.pending.get(r.rid, 0)
            ids.append(output_token(self.index[r.rid], k))
            if batch.forward_mode.is_decode() or r is not batch.chunked_req:
                self.pending[r.rid] = self.pending.get(r.rid, 0) + 1
        return _STATE["GenerationBatchResult"](
            next_token_ids=torch.tensor(ids, dtype=torch.int64))


def replay_scenario_overlap(scenario: dict[str, Any], max_steps: int = 100_000,
                            stall_ok: bool = False) -> list[dict[str, Any]]:
    """Per-step records of SGLang's own Scheduler under its overlap loop
    (`event_loop_overlap`, SGLang's default): the real `run_batch` with our model worker
    (`_ModelWorker`), its result queued and processed after the next batch is scheduled.
    A batch starts on the GPU when the one before it ends and lasts the scenario's step
    time; the next is scheduled when it starts (the CPU waits for the batch before it).
    `finished` is reported in the record of the batch whose result finished it."""
    s = _loop_modules()
    torch = s["torch"]
    sc = dict(scenario, async_scheduling=False)
    sch = make_scheduler(sc)
    index = {r["id"]: i for i, r in enumerate(scenario["requests"])}
    pending_fw: dict[str, int] = {}
    worker = _ModelWorker(index, pending_fw)
    cpu = torch.get_device_module("cpu")
    sch.enable_overlap = True
    sch.device = "cpu"
    sch.draft_worker = None
    sch.model_worker = sch.tp_worker = types.SimpleNamespace(
        model_runner=sch.tp_worker.model_runner,
        forward_batch_generation=worker.forward_batch_generation)
    sch.forward_stream = cpu.Stream()
    sch.schedule_stream = cpu.Stream()
    sch.schedule_stream.synchronize = lambda: None  # run_event_loop: no-op for CPU
    sch.init_overlap()  # FutureMap on cpu, the copy stream
    sch._war_barrier_enabled = False  # run_event_loop: is_cuda() or the env flag
    sch.enable_skip_finishing_decode = True  # event_loop_overlap
    sch.batch_result_processor = dataclasses.replace(
        sch.batch_result_processor, enable_overlap=True, model_worker=sch.model_worker)
    sch.dp_attn_adapter = dataclasses.replace(sch.dp_attn_adapter, enable_overlap=True)
    for name in ("scripted_scheduler_hook", "forward_sleep_time"):
        setattr(sch, name, None)
    sch.profiler_manager = _Quiet("profiler_manager")
    sch.enable_unified_memory = False
    sch.attn_dp_enabled = False
    page = int(scenario["block_size"])
    pool_tokens = int(scenario["num_gpu_blocks"]) * page
    st = scenario["step_time"]
    pending = sorted(enumerate(scenario["requests"]), key=lambda ir: (ir[1]["arrival_s"], ir[0]))
    live: dict[str, Any] = {}
    admitted: set[str] = set()
    steps: list[dict[str, Any]] = []
    queue = sch.result_queue  # SGLang's own: _reqs_finishing_inflight reads it
    queue.clear()
    recs: deque[tuple[dict[str, Any], float]] = deque()  # each queued batch's record, end
    pos = 0
    now = 0.0
    gpu_free = 0.0

    def pop_and_process() -> None:
        nonlocal now
        tmp_batch, tmp_result = queue.popleft()
        rec, end = recs.popleft()
        now = max(now, end)  # the CPU waits for the batch (copy_done)
        sch.process_batch_result(tmp_batch, tmp_result)
        for r in tmp_batch.reqs:
            if pending_fw.get(r.rid, 0) > 0 and (tmp_batch.forward_mode.is_decode()
                                                  or r is not tmp_batch.chunked_req):
                pending_fw[r.rid] -= 1
        done = sorted(rid for rid in rec["scheduled"] if rid in live and live[rid].finished())
        for rid in done:
            live.pop(rid)
        rec["finished"] = done

    while pos < len(pending) or live or queue:
        aborted_now = False
        pos = _arrive(sch, pending, pos, now, live)
        batch, retracted, ratio = _next_batch(sch, admitted)
        disable = sch.is_disable_overlap_for_batch(batch, last_batch=sch.last_batch)
        if disable and queue:
            pop_and_process()
        result = None
        if batch is not None:
            scheduled, new_hits, held = _batch_figures(sch, batch, admitted, pool_tokens)
            start = max(now, gpu_free)
            gpu_free = start + _step_s(st, scheduled)
            rec = {"step": len(steps), "t_s": start, "scheduled": scheduled,
                   "preempted": retracted, "new_hits": new_hits, "finished": [],
                   "aborted": list(sch.aborted_rids), "kv_blocks_used": -(-held // page),
                   "ratio": ratio}
            sch.aborted_rids.clear()
            steps.append(rec)
            result = sch.run_batch(batch)
            sch._apply_war_barrier()
            queue.append((batch.copy(), result))
            recs.append((rec, gpu_free))
            if len(steps) >= max_steps:
                raise RuntimeError(f"no end after {max_steps} steps")
        else:
            sch._sched_idled = True
            if sch.aborted_rids:  # retract_decode aborted the last decode: no batch
                aborted_now = True
                steps.append(_abort_record(sch, len(steps), max(now, gpu_free), retracted,
                                           live, pool_tokens, page, ratio))
            elif retracted:
                raise RuntimeError(f"step {len(steps)}: a retraction without a batch")
        processed = disable and batch is not None
        if sch.last_batch is not None:
            if not disable:
                pop_and_process()
                processed = True
        elif batch is None and sch.is_fully_idle():  # on_idle
            sch.new_token_ratio_tracker.reset()
        sch.launch_batch_sample_if_needed(result, batch)
        sch.last_batch = batch
        if batch is None and not queue and not processed and not aborted_now:
            if pos >= len(pending):
                if not live or stall_ok:
                    break
                raise RuntimeError(f"SGLang scheduled nothing at step {len(steps)} with "
                                   f"{len(live)} requests unfinished and no arrivals left")
            now = max(now, float(pending[pos][1]["arrival_s"]))
    return steps
