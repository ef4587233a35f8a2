"""SGLang's own admission rule on CPU (docs/oracles.md, part B, SGLang).

What runs: `PrefillAdder` (managers/schedule_policy.py) over real `Req` objects, a real
`RadixCache`, `ReqToTokenPool` and KV allocator on CPU, with `ServerArgs` published into
SGLang's runtime context; `ScheduleBatch.init_new(...).prepare_for_extend()`,
`check_decode_mem()` and `prepare_for_decode()` also run on CPU (checked here).

What does not: SGLang's `Scheduler` itself cannot be built without its `TpModelWorker` (the
model runner loads weights onto a CUDA/NPU device), and its step loop
(`get_next_batch_to_run` -> `_get_new_batch_prefill_raw`, `update_running_batch`,
`process_batch_result_*`) is methods of that object, reading ~40 of its fields (tp_worker,
grammar_manager, new_token_ratio_tracker, ...). So the driver stops at the first prefill
batch: all requests waiting at t = 0, FCFS (SGLang's default `schedule_policy`), an empty
running batch, `new_token_ratio` = 0.7 x `schedule_conservativeness` (SGLang's
`init_new_token_ratio` default); the same loop over the waiting queue as
`_get_new_batch_prefill_raw` (stop at `max_running_requests`, `add_one_req`, stop at the
first result other than CONTINUE). It returns what that batch schedules: {id: extend tokens}.
"""

from __future__ import annotations

import json
import tempfile
import types
from array import array
from pathlib import Path
from typing import Any

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
