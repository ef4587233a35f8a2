"""`size`'s per-replica caches and routers against public multi-replica measurements
(data/measurements/multi-replica.csv; docs/validation.md, "Multi-replica check").

    python benchmarks/replicas_check.py [--seeds 3] [--runs RUN,...] [--client-cap N]

Each row of the CSV is one stage of a published run: a shared-prefix workload (G groups of
a prefix, P prompts per group) sent to R replicas under one scheduler. We replay the run as
its benchmark sent it and price it with `size`'s own model: the planner's placement (our
router with the run's scorer weights) and the planner's `simulate` (the engine's block
pool per replica, pinned routes, the group prefix one set of block keys shared by the
group's requests in flight). Compared per stage: TTFT p90 (bound 30 %), and per
scheduler the throughput ceiling, the largest stage QPS whose TTFT p90 stays under 2 s
(bound 20 %). Nothing here is fitted: every row is a check; the rows marked `held-out` (a
third) are reported apart as well, for the project's rule. Prints PASS/FAIL per row and in
total; exits 0 either way (a report, not a gate).

The run's protocol, from its own configuration (llm-d/llm-d-kv-cache-manager
benchmarking/37-capacity/README.md, inference-perf):
- one run per scheduler through every stage in order (a 25 s warm-up at 10 QPS, then 3
  QPS for 210 s, 4 for 180 s, ... 20 for 50 s), int(rate x duration) requests a stage;
  a stage ends when all its requests have finished (inference-perf
  loadgen/load_generator.py `run_stage`: "Wait until all requests are finished
  processing"), so no queue passes from one stage to the next, while the replicas'
  caches and the router's state do: we start each stage an hour after the previous one
  began and check that it had drained. The warm-up is in no row: llm-d's report script
  averages the stage files of a requested QPS, and its run-wide TTFT p90 for the
  approximate scheduler (64.430 s, the success-weighted mean of the per-QPS rows)
  reproduces from the staged rows alone (64.430; 64.499 with a warm-up in the QPS-10 row);
- `load: type: constant`: requests evenly spaced at the stage's rate
  (inference-perf loadgen ConstantLoadTimer);
- the prompts: G x P prompts (group prefix + question) generated once and shuffled once;
  a stage's request k sends prompt k mod G x P (inference-perf
  datagen/shared_prefix_datagen.py `load_lazy_data`: `data_index % len(prompts)`, the
  index being the request's number within its stage); `ignore_eos`, 1,000 output tokens
  each. The prompts are random token ids sent as text, which the server tokenises
  again: replayed at the lengths the same harness and tokenizer counted (RETOKENIZED);
  each replica's KV room is the run's own in the engine's pool (`kv_tokens_per_replica`,
  with_run_room).
What the run's figures are (inference-perf's stage summary, reportgen/base.py
`summarize_requests`, as llm-d's report script reads it: the TTFT p90 column is
`successes.latency.time_to_first_token.p90`):
- TTFT p90 is numpy's percentile over the stage's per-request TTFTs (first streamed
  chunk minus send time, measured by the client through the gateway): not a histogram
  bucket and not a cap. The precise run's 0.400 at seven of nine stages is that
  percentile; values on 0.1 s multiples (0.400, 2.000, 2.200) are the run's, and we
  compare them as they are;
- the ITL mean is not the time per output token. The completion client of that
  inference-perf (apis/completion.py, `async for chunk_bytes in response.content`)
  appends a timestamp for every line of the SSE stream, the `data:` line and the blank
  line that ends the event alike, so each token leaves two timestamps microseconds apart:
  ITL p50 is 0.0000 at every stage, and llm-d's report script
  (`_read_per_request_stats`) notes such "start/end pairs [t1, t1, t2, t2, ...]". The
  mean over those gaps is half the time per token (STAMPS_PER_TOKEN). The stages' own
  spans say the same: at QPS 3, 630 requests of 1,000 tokens at 2,506-2,590 tokens/s
  end 33-42 s after the last send: 33-42 ms a token (30-38 ms if the client's count of
  output tokens is 1.6 % short, OUTPUT_COUNTED), where the ITL means read 13-20 ms. So
  our TPOT is compared with 2 x ITL mean (a report line; no bound of the issue's applies
  to it).
The schedulers, from the run's EndpointPickerConfig:
- precise-prefix-cache_load -> `llm-d-precise` (KV-event prefix scorer 2, kv-cache 1,
  active-request 1);
- estimate-prefix-cache_load -> `llm-d-prefix` (approximate prefix scorer 2, kv-cache 1,
  active-request 1; hashBlockSize 256 characters, maxPrefixBlocksToMatch 256,
  lruCapacityPerServer 2,200: a 16,384-token match cap and a 140,800-token index per
  replica at 4 characters a token);
- load -> `llm-d-prefix` with the prefix scorer at weight 0 (kv-cache 1, active-request 1);
- random -> `random` (random-picker).

The tiered-prefix-cache run (llm-d/llm-d guides/tiered-prefix-cache/README.md, "CPU
Offloading Benchmarking Results", GPU High Cache Scenario): Qwen3-32B on 8 vLLM replicas
(TP2, 16 H100s), HBM only against vLLM's OffloadingConnector to CPU RAM; its inference-perf
profile (llm-d/llm-d-benchmark workload/profiles/inference-perf/
guide_tiered-prefix-cache_1.yaml.in): Poisson stages of 60 s at 5, 10, ... 40 QPS (the
README reports 5, 10, 20, 40), 250 groups x 5 prompts, 16,000-token prefix, 256-token
question, 256 output tokens. Its router (guides/tiered-prefix-cache/router/single-host/
tiered-prefix-cache-cpu.values.yaml): queue, kv-cache-utilization, GPU prefix (an index
of the replica's KV room: autoTune), CPU prefix (lruCapacityPerServer 82,000 blocks of 16
tokens) and no-hit-lru scorers at weight 1 each (the README: "1:1:1:1:1"); the HBM-only
baseline is taken as the same without the CPU scorer (the README does not give its
configuration: an assumption). The CPU tier per replica: 200 GiB a vLLM server (the
README: "at 200 GiB/replica"; the guide's cpu/ overlay of that release sets
`cpu_bytes_to_use` 214,748,364,800, guides/tiered-prefix-cache/cpu/modelserver/gpu/vllm/
offloading-connector/base/patch-vllm.yaml), which vLLM's CPUOffloadingSpec spends for
the whole engine, not per TP rank (its offloaded block is the GPU page x the KV tensors x
`parallel_config.world_size`; the same in vLLM 0.33's kv_offload/cpu/spec.py) = 819,200
tokens of Qwen3-32B's 262,144-byte KV (the README's 1,312,000 tokens assume 160 KB a
token; the later native/cpu overlay's 100 GiB would be 409,600). Compared: TTFT p90 and total (prompt +
output) tokens/s per stage, and the ceiling; reported beside them, the time per output
token from the README's mean E2E latency and mean TTFT.

The unseen runs (rows `unseen`, added in round 13 and replayed as they landed: no
constant, flag or mapping was chosen after seeing their results; docs/validation.md,
"Unseen runs"), llm-d-kv-cache-manager reports of the same harness and report script as
37-capacity, Llama-3.1-70B on 4 vLLM pods, each with its own EndpointPickerConfig (the
queue scorer where 37-capacity has the active-request scorer, every scorer at weight 1:
PICKERS), their GPU not published (taken as 37-capacity's H100, an assumption):
- `llm-d-64p-headroom` (benchmarking/load-with-headroom/standard-scale-64p-cache-load):
  TP4, 141,056 KV tokens a pod, 100 groups x 2 prompts of a 3,500-token prefix and a
  512-token question, 192 output tokens, a 20 s warm-up at 10 QPS, then constant stages
  of 3 to 20 QPS. Its token counts are where RETOKENIZED comes from. (The folder's
  standard-scale-75p-cache-load README prints the same tables number for number: one
  run, checked once.)
- `llm-d-80u-overload` (benchmarking/cache-overload/80-users-3k-tokens): TP2, the 40k KV
  tokens a pod cache-overload/README.md states, 80 groups x 1 prompt of a 2,500-token
  prefix and a 256-token question, 20 output tokens, constant 50 s stages of 2 to 20 QPS.
- `llm-d-73-capacity` (round 15; benchmarking/73-capacity/README.md, 37-capacity's
  sibling, stored in forks of llm-d-kv-cache-manager: zetxqx at d070ea60): Qwen3-32B on 8
  vLLM pods of 2 H100s (the llm-d blog of 2025-09-24, Appendix A.1: the README gives
  neither), 307,328 KV tokens a pod, 150 groups x 5 prompts of a 6,000-token prefix and a
  1,200-token question, 1,000 output tokens, Poisson stages: a 50 s warm-up at 15 QPS,
  then 3 to 60 QPS for 20-38 s each. Its pickers: precise prefix 3, kv-cache 2, queue 2;
  estimated prefix, kv-cache and queue at 1 over 64-character blocks x 31,250 a pod;
  load queue and kv-cache at 1 (PICKERS, PRECISE_PICKERS). Its QPS-15 row is taken as
  the staged 20 s alone, as 37-capacity's QPS-10 row reproduces without its warm-up; the
  README does not say. Qwen3's tokenizer: no re-tokenising count is published (1).
- `llm-d-tiered-sglang` (round 15; llm-d guides/tiered-prefix-cache/benchmark-results/
  sglang-qwen3-32b-h100.md, llm-d PR 1921, stored in the fork zetxqx/llm-d at 3fa7bfc5):
  the tiered run's SGLang twin. SGLang v0.5.13.post1, Qwen3-32B on 8 servers of 2 H100s
  at TP2, 321,856 GPU KV tokens and 819,200 HiCache host tokens (`--hicache-size 200`) a
  replica, the same 250 x 5 workload of 16,000 + 256 tokens and 256 out, HBM only against
  HiCache at 5, 10, 20 and 40 QPS. It publishes neither its stages nor its router: both
  are taken as the vLLM run's (assumptions), and "Throughput (tok/s)" as total tokens/s,
  as the vLLM README's column is.
- `llm-d-guide-precise` (round 15; llm-d guides/precise-prefix-cache-routing/README.md at
  0aa9f337, "Benchmarking Report"): 73-capacity's workload and ladder (its inference-perf
  profile, llm-d-benchmark guide_precise-prefix-cache-routing_1.yaml.in) on 8 vLLM pods
  of 2 H100s at TP2, `--block-size 64 --gpu-memory-utilization 0.95` (the guide's vLLM
  overlay; no KV room is published: the engine's pool at 0.95, MEM_FRACTION). Two arms:
  "a stock Kubernetes Service that round-robins requests" (kube-proxy's default iptables
  mode picks an endpoint at random: `random`) and precise routing at the stored values
  file's weights (prefix 3, kv-cache 2, queue 2; its no-hit-lru scorer at 2 is not in
  our precise router). The vLLM version and the client cap are not published. The
  guide's third arm (optimized-baseline, whose router at run time is not published and
  whose stored config is an affinity filter we do not model) is left out.
- `llm-d-optbase-sglang`, `llm-d-optbase-vllm` (round 16; llm-d guides/optimized-baseline/
  benchmark-results/sglang-qwen3-32b-h100/README.md at 17e359c1 and vllm-qwen3-32b-h100/
  README.md at 53c5b20a): the same workload and ladder (the guide's
  benchmark-templates/shared_prefix.yaml at 9084370b: 150 groups x 5, 6,000 + 1,200
  tokens, 1,000 out, a 50 s warm-up at 15 QPS, then 3 to 60) on 8 SGLang / 8 vLLM
  servers of 2 H100s at TP2, "a stock Kubernetes Service that round-robins requests
  across the same 8 pods (no EPP, no scoring)" against llm-d's optimized-baseline
  router. The memory share, as no KV room is published (MEM_FRACTION): SGLang's
  `--mem-fraction-static=0.9` (modelserver/gpu/sglang/base/patch-sglang.yaml at
  83bb7c18); vLLM's default 0.9, since no overlay of the guide read for Qwen3-32B sets
  one (modelserver/gpu/vllm/vllm-deployment.yaml at ae9f98f1; an assumption). The
  Service arm is `random` by default, as above (what kube-proxy's iptables mode does;
  `--service-router round-robin` replays what the READMEs write, a sensitivity). The
  optimized-baseline router is a prefix-cache-affinity-filter (endpoints whose
  approximate prefix match is >= 0.80 of the prompt are kept; all are kept when the
  best kept one's in-flight tokens / peakPrefillThroughput exceed the best other's by
  maxTTFTPenaltyMs) then a token-load-scorer (the least uncached tokens in flight)
  (guides/optimized-baseline/router/optimized-baseline.values.yaml at 0a3b0c93; llm-d/
  llm-d-router pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity). None
  of our routers is that; its arm is replayed with a stand-in, labelled `(stand-in)` in
  the CSV and the output: our llm-d-prefix at prefix, kv-cache and queue weights 1
  (AFFINITY_STANDIN), a 40,960-token match (maxPrefixTokensToMatch) over an index of the
  pod's KV room. A new question of a cached group matches 6,000 / 7,200 = 0.83 of its
  prompt, so the pod holding its group wins unless the load scores part by more than
  0.83 (of 2): a usage gap of most of a pod's room, where the filter's gate breaks at 18
  s x 15,928 tokens/s = 286,704 tokens in flight (vLLM; ~1 pod's room) or x 30,720 =
  552,960 (SGLang, ~1.7 rooms). Set from those figures before any replay; not a fit.
  The vLLM README prints TTFT to 0.1 s and 0.0 where a stage's latency histogram was
  empty (3, 10 and 15 QPS in both arms): those rows have no `ttft_p90_s`, are counted
  as skipped and left out of the TTFT comparison and the ceilings, and are still
  compared on output tokens/s.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
from _util import add_async_flag, apply_async_flag, positive_int

from xmemplan.sizing import routing as RT
from xmemplan.sizing.planner import Planner, SizeRequest
from xmemplan.sizing.request import build_request

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements" / "multi-replica.csv"
KNEE_S = 2.0
TTFT_BOUND = 0.30
CEILING_BOUND = 0.20
CHARS_PER_TOKEN = 4  # GIE prefix plugin averageCharactersPerToken
STAGE_GAP_S = 3600.0  # stage k starts at k x this (each stage drains first: checked)

HEADROOM = "llm-d-64p-headroom"  # the unseen runs (module docstring)
OVERLOAD = "llm-d-80u-overload"
CAP73 = "llm-d-73-capacity"
SGLANG_TIERED = "llm-d-tiered-sglang"
GUIDE_PRECISE = "llm-d-guide-precise"
OPTBASE_SGLANG = "llm-d-optbase-sglang"  # round 16: the optimized-baseline guide's ladders
OPTBASE_VLLM = "llm-d-optbase-vllm"
OPTBASE = (OPTBASE_SGLANG, OPTBASE_VLLM)
# per benchmark: (rate, seconds) per stage, whether the first is a warm-up (reported by
# no row), and the load type (inference-perf `load.type`)
STAGES = {
    "llm-d-37-capacity": [(10.0, 25.0), (3.0, 210.0), (4.0, 180.0), (5.0, 120.0),
                          (6.0, 120.0), (8.0, 90.0), (10.0, 70.0), (12.0, 60.0),
                          (15.0, 50.0), (20.0, 50.0)],
    "llm-d-tiered-prefix-cache": [(5.0 * k, 60.0) for k in range(1, 9)],
    SGLANG_TIERED: [(5.0 * k, 60.0) for k in range(1, 9)],  # assumed: the vLLM run's
    HEADROOM: [(10.0, 20.0), (3.0, 120.0), (4.0, 100.0), (5.0, 90.0), (6.0, 60.0),
               (8.0, 60.0), (10.0, 50.0), (12.0, 50.0), (14.0, 35.0), (16.0, 30.0),
               (18.0, 30.0), (20.0, 30.0)],
    OVERLOAD: [(r, 50.0) for r in (2.0, 5.0, 8.0, 10.0, 12.0, 15.0, 20.0)],
    CAP73: [(15.0, 50.0), (3.0, 20.0), (10.0, 20.0), (15.0, 20.0), (20.0, 38.0),
            (22.0, 34.0), (25.0, 30.0), (30.0, 25.0), (35.0, 21.0), (40.0, 38.0),
            (43.0, 36.0), (46.0, 33.0), (49.0, 30.0), (52.0, 29.0), (55.0, 27.0),
            (57.0, 26.0), (60.0, 25.0)],
}
STAGES[GUIDE_PRECISE] = STAGES[CAP73]  # the same ladder (its inference-perf profile)
for _b in OPTBASE:  # the same ladder again (the guide's benchmark-templates/shared_prefix.yaml)
    STAGES[_b] = STAGES[CAP73]
WARMUP = {"llm-d-37-capacity": True, "llm-d-tiered-prefix-cache": False, HEADROOM: True,
          OVERLOAD: False, CAP73: True, SGLANG_TIERED: False, GUIDE_PRECISE: True,
          OPTBASE_SGLANG: True, OPTBASE_VLLM: True}
LOAD = {"llm-d-37-capacity": "constant", "llm-d-tiered-prefix-cache": "poisson",
        HEADROOM: "constant", OVERLOAD: "constant", CAP73: "poisson",
        SGLANG_TIERED: "poisson", GUIDE_PRECISE: "poisson", OPTBASE_SGLANG: "poisson",
        OPTBASE_VLLM: "poisson"}
TIERED_GPU_BLOCK = 16  # vLLM's block; the router's CPU index: 82,000 of them
# the runs whose READMEs give total (prompt + output) tokens/s and mean E2E, not an ITL
TOTAL_TOKENS = ("llm-d-tiered-prefix-cache", SGLANG_TIERED)
# timestamps the run's client records per streamed token (module docstring): the
# measured time per output token is STAMPS_PER_TOKEN x the published ITL mean
STAMPS_PER_TOKEN = 2
# What the servers saw of inference-perf's shared_prefix prompts: the generator draws
# random token ids and sends their decoded text (datagen/shared_prefix_datagen.py
# `_generate_random_token_ids`, `hf_tokenizer.decode`), which the server tokenises again,
# with its BOS. Measured for the Llama-3.1-70B-Instruct tokenizer by the same harness in
# llm-d/llm-d-kv-cache-manager benchmarking/load-with-headroom/standard-scale-64p-cache-load
# (analysis_metrics.csv, precise-prefix-cache: input_tokens_total 22,826,707 and
# output_tokens_total 1,029,882 over its 5,451 successful requests, 200 warm-up + 5,260
# staged - 9 failed, of system_prompt_len 3,500 + question_len 512 and output_len 192;
# its estimate and load runs give 1.0435 / 1.0455 and 0.983 / 0.982):
# (22,826,707 / 5,451 - 1) / 4,012 = 1.0435 tokens sent per configured prompt token, and
# the client counts 1,029,882 / 5,451 / 192 = 0.984 of the tokens generated (it
# re-tokenises the streamed text; run 1's output tokens/s are that count). The tiered run
# uses Qwen3-32B's tokenizer, for which no such count is published: 1 there. The counts
# hold for every run of that harness and tokenizer (LLAMA_HARNESS).
LLAMA_HARNESS = ("llm-d-37-capacity", HEADROOM, OVERLOAD)
RETOKENIZED = dict.fromkeys(LLAMA_HARNESS, 1.0435)
OUTPUT_COUNTED = dict.fromkeys(LLAMA_HARNESS, 0.984)


def served_lengths(row: dict[str, str]) -> tuple[float, float]:
    """(shared prefix, question) tokens the server computes for a row's configured
    system_prompt_len and question_len (RETOKENIZED; the BOS is part of the prefix)."""
    r = RETOKENIZED.get(row["benchmark"])
    prefix, question = float(row["prefix_tokens"]), float(row["question_tokens"])
    if r is None:
        return prefix, question
    return round(prefix * r) + 1.0, float(round(question * r))
TPOT_BOUND = 0.30  # reported, not a done-when bound


# The llm-d-kv-cache-manager runs' EndpointPickerConfigs (module docstring), per run:
# the prefix, queue and active-request scorers' weights (the kv-cache scorer is at 1 in
# all), and the approximate index's hashBlockSize (characters) and lruCapacityPerServer
# (blocks). 37-capacity weighs the active-request scorer; the unseen runs weigh the queue
# scorer instead, every scorer at 1.
PICKERS = {
    "llm-d-37-capacity": (2.0, 0.0, 1.0, 256, 2200),
    HEADROOM: (1.0, 1.0, 0.0, 256, 2200),
    OVERLOAD: (1.0, 1.0, 0.0, 64, 31250),
    CAP73: (1.0, 1.0, 0.0, 64, 31250),
}
# Where a run's precise scheduler has weights of its own: (prefix, kv-cache, queue,
# active-request). 73-capacity's precise-scheduling: prefix 3, kv-cache 2, queue 2.
PRECISE_PICKERS = {CAP73: (3.0, 2.0, 2.0, 0.0), GUIDE_PRECISE: (3.0, 2.0, 2.0, 0.0)}
# Runs that state the engine's memory share instead of its KV room (with_run_room): the
# precise guide's vLLM overlay 0.95; the optimized-baseline guide's SGLang overlay
# --mem-fraction-static=0.9, and its vLLM overlays for Qwen3-32B read set none (vLLM's 0.9)
MEM_FRACTION = {GUIDE_PRECISE: 0.95, OPTBASE_SGLANG: 0.9, OPTBASE_VLLM: 0.9}
# The optimized-baseline router (prefix-cache-affinity-filter + token-load-scorer) is not
# one of ours; its arm is replayed with a stand-in, our llm-d-prefix at AFFINITY_STANDIN's
# weights, and labelled so in the CSV (router_ours) and the output (module docstring)
AFFINITY = "prefix-cache-affinity-filter"
STAND_IN = " (stand-in)"
AFFINITY_STANDIN = (1.0, 1.0, 1.0)  # prefix, kv-cache, queue weights
AFFINITY_MATCH_TOKENS = 40_960.0  # approx-prefix-cache-producer maxPrefixTokensToMatch
# what a Kubernetes Service arm is replayed as (--service-router): kube-proxy's default
# iptables mode picks an endpoint at random per connection; round-robin is what the
# optimized-baseline READMEs write (a sensitivity)
SERVICE_ROUTERS = ("random", "round-robin")
service_router = "random"
# the runs' names for the same schedulers
SCHEDULER_NAMES = {"prefix-cache-estimate": "estimate-prefix-cache",
                   "random-routing": "random", "random-scheduling": "random",
                   "load-scheduling": "load"}


def scheduler(measured: str, hbm_tokens: float = 0.0,
              bench: str = "llm-d-37-capacity") -> tuple[str, RT.RouterParams]:
    """Our router and its parameters for a scheduler of the runs (module docstring);
    `hbm_tokens`: a replica's KV room (the GPU index of the tiered run: autoTune);
    `bench`: the run, whose EndpointPickerConfig gives the weights (PICKERS)."""
    p = RT.RouterParams()
    if measured in ("optimized-baseline-hbm-only", "gpu-cpu-tier-prefix-aware"):
        cpu = measured.startswith("gpu-cpu")
        return "llm-d-prefix", replace(
            p, llmd_prefix_weight=1.0, llmd_queue_weight=1.0, llmd_kv_weight=1.0,
            llmd_nohit_weight=1.0, llmd_cap_tokens=256.0 * TIERED_GPU_BLOCK,
            llmd_view_tokens=hbm_tokens, llmd_tier_weight=1.0 if cpu else 0.0,
            llmd_tier_view_tokens=82_000.0 * TIERED_GPU_BLOCK)
    if measured == AFFINITY:  # a stand-in (module docstring)
        pw, kw, qw = AFFINITY_STANDIN
        return "llm-d-prefix", replace(
            p, llmd_prefix_weight=pw, llmd_kv_weight=kw, llmd_queue_weight=qw,
            llmd_active_weight=0.0, llmd_nohit_weight=0.0, llmd_cap_tokens=AFFINITY_MATCH_TOKENS,
            llmd_view_tokens=hbm_tokens)
    if measured == "k8s-service":
        return service_router, p
    measured = SCHEDULER_NAMES.get(measured, measured)
    if measured == "random":
        return "random", p
    if measured.startswith("precise") and bench in PRECISE_PICKERS:
        pw, kw, qw, aw = PRECISE_PICKERS[bench]
        return "llm-d-precise", replace(p, precise_prefix_weight=pw, precise_queue_weight=qw,
                                        precise_kv_weight=kw, precise_active_weight=aw)
    prefix, queue, active, block_chars, blocks = PICKERS[bench]
    if measured.startswith("precise"):
        pw, kw, qw, aw = prefix, 1.0, queue, active
        return "llm-d-precise", replace(p, precise_prefix_weight=pw, precise_queue_weight=qw,
                                        precise_kv_weight=kw, precise_active_weight=aw)
    if measured.startswith("estimate"):
        # maxPrefixBlocksToMatch 256 in every run
        return "llm-d-prefix", replace(
            p, llmd_prefix_weight=prefix, llmd_queue_weight=queue, llmd_kv_weight=1.0,
            llmd_active_weight=active, llmd_cap_tokens=256 * block_chars / CHARS_PER_TOKEN,
            llmd_view_tokens=blocks * block_chars / CHARS_PER_TOKEN)
    if measured == "load":
        return "llm-d-prefix", replace(p, llmd_prefix_weight=0.0, llmd_queue_weight=queue,
                                       llmd_kv_weight=1.0, llmd_active_weight=active)
    raise KeyError(measured)


class StagedPlanner(Planner):
    """The planner with the run's own requests: its stages, the shuffled prompt list sent
    in order (module docstring), and the run's CPU tier per replica."""

    run_stream: RT.Stream
    tier_per_replica: float = 0.0

    def stream(self, scale: float, k: int = 0) -> RT.Stream:
        return self.run_stream

    def deployment(self, option: str, gpus: int, nodes: int) -> RT.Deployment:
        d = super().deployment(option, gpus, nodes)
        if option != "host-dram":
            return d
        R = d.replicas  # each replica its own CPU tier (vLLM's connector per instance)
        return RT.Deployment(R, d.hbm_tokens, np.arange(R, dtype=np.int64),
                             np.full(R, self.tier_per_replica))


def measured_per_token(row: dict[str, str]) -> float | None:
    """A row's measured mean time per output token after the first (s): run 1, 2 x its
    ITL mean (STAMPS_PER_TOKEN); run 2, (mean E2E - mean TTFT) / (output - 1) from the
    README's table (inference-perf's request latency and TTFT, both from the send)."""
    if row.get("itl_mean_s"):
        return STAMPS_PER_TOKEN * float(row["itl_mean_s"])
    if row.get("e2e_mean_s") and row.get("ttft_mean_s"):
        out = float(row["output_tokens"])
        return (float(row["e2e_mean_s"]) - float(row["ttft_mean_s"])) / (out - 1)
    return None


def run_stream(row: dict[str, str], stages: list[tuple[float, float]], seed: int,
               hold_rates: tuple[float, float], load: str = "constant") -> RT.Stream:
    G, P = int(row["groups"]), int(row["prompts_per_group"])
    prefix, question = served_lengths(row)
    out = float(row["output_tokens"])
    arr: list[np.ndarray] = []
    idx: list[np.ndarray] = []
    rng = np.random.default_rng([seed, 7])
    for k, (rate, dur) in enumerate(stages):
        n = int(rate * dur)
        t = (np.arange(n) / rate if load == "constant"
             else np.cumsum(rng.exponential(1.0 / rate, n)) - 1.0 / rate)
        arr.append(k * STAGE_GAP_S + np.maximum(t, 0.0))
        idx.append(np.arange(n))
    arrival = np.concatenate(arr)
    n = len(arrival)
    order = np.random.default_rng(seed).permutation(G * P)  # prompt g x P + j
    prompt_id = order[np.concatenate(idx) % (G * P)]
    group = prompt_id // P
    prompt = np.full(n, prefix + question)
    per_tok, step = hold_rates
    # a re-sent prompt is its own session: all of it is reusable where it ran before
    hold = question * per_tok + out * step
    return RT.Stream(arrival, np.full(n, hold), prompt, np.full(n, out), prompt.copy(),
                     group.astype(np.int64), np.full(n, prefix), prompt_id.astype(np.int64))


def with_run_room(req: SizeRequest, row: dict[str, str]) -> SizeRequest:
    """`req` with the memory share that gives each replica the run's own KV room
    (`kv_tokens_per_replica`: the engine's logged KV capacity the source states, 461,376
    tokens a pod in run 1, 298,000 a replica in run 2) in the engine's own pool. The
    engine sizes its pool as vLLM does (simmodel.kv_pool_tokens: util x memory less the
    weights, the profile run's peak and the non-torch memory), so the share is solved on
    that pool; solving it on weights alone (before round 7) left the engine 3.3 % (run 1,
    446,241) and 4.3 % (run 2, 285,207) short of the room the runs logged."""
    from xmemplan.sizing.simmodel import kv_pool_tokens

    if not row.get("kv_tokens_per_replica"):  # the share the run sets, else the request's
        frac = MEM_FRACTION.get(row["benchmark"])
        return req if frac is None else replace(req, mem_fraction=frac)
    kv = float(row["kv_tokens_per_replica"])
    # the pool is linear in the share where it is positive: two secant steps land on it
    lo, hi = 0.5, 0.99
    f_lo = kv_pool_tokens(replace(req, mem_fraction=lo).setup, req.engine) - kv
    f_hi = kv_pool_tokens(replace(req, mem_fraction=hi).setup, req.engine) - kv
    frac = hi
    for _ in range(3):
        if f_hi == f_lo:
            break
        frac = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        lo, f_lo = hi, f_hi
        hi, f_hi = frac, kv_pool_tokens(replace(req, mem_fraction=frac).setup, req.engine) - kv
    return replace(req, mem_fraction=frac)


def run_room(req: SizeRequest) -> float:
    """A replica's KV room as the engine holds it (the router's GPU index, autoTune)."""
    from xmemplan.sizing.simmodel import kv_pool_tokens

    return float(kv_pool_tokens(req.setup, req.engine))


def capped_sends(scheduled: np.ndarray, latency: np.ndarray, cap: int) -> np.ndarray:
    """When each request is sent where the client holds at most `cap` in flight
    (inference-perf: num_workers x worker_max_concurrency, `LoadConfig`; a request waits in
    the client's queue until a slot frees, first come first served, and its TTFT is timed
    from the send): request k goes at its scheduled time, or when the earliest of the
    `cap` requests before it in flight ends (`latency`: each request's send to finish),
    never before the one ahead of it."""
    import heapq

    send = np.empty_like(scheduled)
    ends: list[float] = []
    last = -np.inf
    for k in range(len(scheduled)):
        t = max(float(scheduled[k]), last)
        while ends and ends[0] <= t:  # finished by then: their slots are free
            heapq.heappop(ends)
        if len(ends) >= cap:
            t = max(t, heapq.heappop(ends))
        send[k] = last = t
        heapq.heappush(ends, t + float(latency[k]))
    return send


CAP_ROUNDS = 8  # replays of a capped run: the sends move with the latencies they cause


def simulate(rows: list[dict[str, str]], seed: int, client_cap: int = 0
             ) -> dict[tuple[str, str, float], tuple[float, float, float, float]]:
    """Per (run, scheduler, stage QPS) of one replay of each scheduler's run: (TTFT p90 s,
    output tokens/s and total (prompt + output) tokens/s over the stage's span from its
    first request sent to its last finished, mean time per output token s). `client_cap`
    > 0: the client holds at most that many requests in flight (capped_sends; replayed
    until the sends settle, CAP_ROUNDS at most), a sensitivity: the runs do not publish
    their client's CPUs."""

    got: dict[tuple[str, str, float], tuple[float, float, float, float]] = {}
    by_sched: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_sched[(row["benchmark"], row["router_measured"])].append(row)
    for (bench, measured), rs in by_sched.items():
        row = rs[0]
        stages = STAGES[bench]
        n = int(sum(int(r * d) for r, d in stages))
        prefix, question = served_lengths(row)
        option = "hbm-only" if row["tier"] == "none" else row["tier"]
        req, _ = build_request(
            ttft_slo="2s", prompt_tokens=f"{prefix + question:g}",
            hit_rate=prefix / (prefix + question), prefix_groups=int(row["groups"]),
            output_tokens=int(row["output_tokens"]), rate=stages[-1][0], model=row["model"],
            gpu=row["gpu"], tp=int(row["tp"]), engine=row["engine"], router="session",
            requests=n, slo_on="all", slo_at="p90", seed=seed)
        req = with_run_room(req, row)
        room = run_room(req)
        router, params = scheduler(measured, room, bench)
        req = replace(req, router=router, router_params=params)
        p = StagedPlanner(req)
        p.tier_per_replica = float(row["tier_tokens_per_replica"])
        base = run_stream(row, stages, seed, p.hold_rates(), LOAD[bench])
        p.run_stream = base
        gpus = int(row["tp"]) * int(row["replicas"])
        res = p.simulate(option, gpus, 0, p.traffic(option, gpus, 0, 1.0))
        for _ in range(CAP_ROUNDS if client_cap > 0 else 0):
            sends = capped_sends(base.arrival, res.done - p.run_stream.arrival, client_cap)
            if np.allclose(sends, p.run_stream.arrival, atol=1e-3):
                break
            p.run_stream = replace(base, arrival=sends)
            res = p.simulate(option, gpus, 0, p.traffic(option, gpus, 0, 1.0))
        ttft = res.ttft
        stage = (base.arrival // STAGE_GAP_S).astype(np.int64)
        tokens = (res.requests.prompt + res.requests.output).astype(float)
        for k, (rate, _) in enumerate(stages):
            sel = stage == k
            if k + 1 < len(stages) and res.done[sel].max() >= (k + 1) * STAGE_GAP_S:
                raise SystemExit(f"{measured}: stage {k} did not drain within "
                                 f"{STAGE_GAP_S:g} s")
            if k == 0 and WARMUP[bench]:
                continue
            span = float(res.done[sel].max() - p.run_stream.arrival[sel].min())
            # output tokens as the run's client counted them (OUTPUT_COUNTED)
            out = float(res.requests.output[sel].sum()) * OUTPUT_COUNTED.get(bench, 1.0)
            got[(bench, measured, rate)] = (float(np.percentile(ttft[sel], 90)), out / span,
                                     float(tokens[sel].sum()) / span,
                                     float(np.nanmean(res.tpot[sel])))
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=positive_int, default=3,
                    help="replays (prompt shuffles) per scheduler; the median is compared")
    ap.add_argument("--client-cap", type=int, default=0, metavar="N",
                    help="the client holds at most N requests in flight (inference-perf: "
                    "num_workers x worker_max_concurrency 100; no run publishes its "
                    "client's CPUs: a sensitivity, default off)")
    ap.add_argument("--runs", default="", help="comma-separated benchmarks to replay "
                    "(default: every run in the CSV)")
    ap.add_argument("--service-router", choices=SERVICE_ROUTERS, default="random",
                    help="our router for a Kubernetes Service arm (default random: "
                    "kube-proxy's iptables mode; round-robin: what the optimized-baseline "
                    "READMEs say, a sensitivity)")
    add_async_flag(ap)
    a = ap.parse_args()
    apply_async_flag(a)
    global service_router
    service_router = a.service_router
    if a.client_cap < 0:
        ap.error(f"--client-cap {a.client_cap}: give a number of requests, or 0 for none")
    rows = list(csv.DictReader(DATA.open()))
    if a.runs:
        want = set(a.runs.split(","))
        if unknown := want - {r["benchmark"] for r in rows}:
            raise SystemExit(f"--runs: no such run in {DATA.name}: {', '.join(sorted(unknown))}")
        rows = [r for r in rows if r["benchmark"] in want]
    runs = [simulate(rows, s, a.client_cap) for s in range(a.seeds)]
    by_router: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    # per benchmark: [all, held-out] within the bound, and the counts; "skip": rows whose
    # run publishes no TTFT for that stage (an empty latency histogram), left out of the
    # TTFT comparison and the ceilings, still compared on tokens/s
    tally: dict[str, dict[str, list[int]]] = defaultdict(
        lambda: {"ttft": [0, 0], "tok": [0, 0], "n": [0, 0], "tpot": [0, 0], "skip": [0, 0]})
    # per (benchmark, scheduler): TTFT within, TTFT compared, skipped, tok/s within, rows
    arm: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    out: list[str] = []
    say = out.append
    say(f"{'scheduler (measured -> ours)':<46}{'QPS':>4}{'TTFT p90 s':>11}{'ours':>8}"
          f"{'err':>6}{'tok/s':>9}{'ours':>9}{'err':>6}{'ms/tok':>7}{'ours':>5}{'err':>6}"
          f"  role")
    for row in rows:
        q = float(row["qps"])
        run = (row["benchmark"], row["router_measured"])
        got = np.median(np.array([r[(*run, q)] for r in runs]), axis=0)
        published = bool(row["ttft_p90_s"])
        meas = float(row["ttft_p90_s"]) if published else float("nan")
        total = bool(row["total_tok_s"])  # the run reports total tokens/s, else output
        mtok = float(row["total_tok_s"] if total else row["output_tok_s"])
        otok = float(got[2] if total else got[1])
        e1, e2 = got[0] / meas - 1, otok / mtok - 1
        held = row["role"] == "held-out"
        t = tally[row["benchmark"]]
        t["n"][0] += 1
        t["n"][1] += held
        a_ = arm[run]
        a_[4] += 1
        if not published:
            t["skip"][0] += 1
            t["skip"][1] += held
            a_[2] += 1
        a_[1] += published
        a_[0] += published and abs(e1) <= TTFT_BOUND
        a_[3] += abs(e2) <= CEILING_BOUND
        for key, err, bound in (("ttft", e1, TTFT_BOUND), ("tok", e2, CEILING_BOUND)):
            if abs(err) <= bound:
                t[key][0] += 1
                t[key][1] += held
        if published:
            by_router[run].append((q, meas, float(got[0])))
        ours = scheduler(row["router_measured"], 0.0, row["benchmark"])[0]
        label = STAND_IN if row["router_ours"].endswith(STAND_IN) else ""
        name = f"{row['router_measured']} -> {ours}{label}"
        per_tok = measured_per_token(row)
        if per_tok is not None:
            e3 = got[3] / per_tok - 1
            t["tpot"][0] += 1
            t["tpot"][1] += abs(e3) <= TPOT_BOUND
            itl = f"{per_tok * 1e3:>7.0f}{got[3] * 1e3:>5.0f}{e3:>+6.0%}"
        else:
            itl = f"{'-':>7}{got[3] * 1e3:>5.0f}{'':>6}"
        mtxt = f"{meas:>11.3f}{got[0]:>8.3f}{e1:>+6.0%}" if published else (
            f"{'-':>11}{got[0]:>8.3f}{'':>6}")
        say(f"{name:<46}{q:>4g}{mtxt}{mtok:>9.0f}"
              f"{otok:>9.0f}{e2:>+6.0%}{itl}  {row['role']}")
    for bench, t in tally.items():
        kind = "total" if bench in TOTAL_TOKENS else "output"
        n_ttft = t["n"][0] - t["skip"][0]
        if t["n"][1]:
            held_ttft = f" (held-out {t['ttft'][1]} of {t['n'][1] - t['skip'][1]})"
            held_tok = f" (held-out {t['tok'][1]} of {t['n'][1]})"
        else:  # a run no round looked at before its rows landed: every row unseen
            held_ttft, held_tok = " (all unseen)", ""
        skipped = (f", {t['skip'][0]} skipped: no TTFT published for the stage"
                   if t["skip"][0] else "")
        say(f"{bench}: TTFT p90 within {TTFT_BOUND:.0%}: {t['ttft'][0]} of {n_ttft} "
              f"points{held_ttft}{skipped}; {kind} tokens/s within {CEILING_BOUND:.0%}: "
              f"{t['tok'][0]} of {t['n'][0]}{held_tok}")
        arms = [(measured, c) for (b, measured), c in arm.items() if b == bench]
        for measured, (tw, tn, ts, kw, n) in arms if len(arms) > 1 else ():
            skip = f" ({ts} skipped)" if ts else ""
            say(f"  {measured}: TTFT p90 {tw} of {tn}{skip}; tokens/s {kw} of {n}")
        if t["tpot"][0]:
            how = ("(E2E - TTFT) / (output - 1), the published means"
                   if bench in TOTAL_TOKENS else "2 x the published ITL mean")
            say(f"  time per output token ({how}) within {TPOT_BOUND:.0%}: "
                  f"{t['tpot'][1]} of {t['tpot'][0]} (a report line)")
    say(f"(median of {a.seeds} replays)")
    say(f"Throughput ceiling (largest stage QPS with TTFT p90 <= {KNEE_S:g} s):")
    last = ""
    passed = ceilings = 0
    for (bench, r), pts in by_router.items():
        if bench != last:
            say(f"  {bench}:")
            last = bench
        pts.sort()

        def knee(i: int) -> float:
            under = [q for q, *v in pts if v[i - 1] <= KNEE_S]
            return max(under) if under else 0.0

        m, o = knee(1), knee(2)
        top = pts[-1][0]
        ok = (m == o) or (m > 0 and abs(o / m - 1) <= CEILING_BOUND)
        passed += ok
        ceilings += 1
        mtxt = f">= {m:g}" if m == top else f"{m:g}"
        otxt = f">= {o:g}" if o == top else f"{o:g}"
        say(f"    {r:<28} measured {mtxt:>6}  ours {otxt:>6}  {'PASS' if ok else 'FAIL'}")

    n_ttft = sum(t["n"][0] - t["skip"][0] for t in tally.values())
    n_all = sum(t["n"][0] for t in tally.values())
    w_ttft = sum(t["ttft"][0] for t in tally.values())
    w_tok = sum(t["tok"][0] for t in tally.values())
    ok_all = w_ttft == n_ttft and w_tok == n_all and passed == ceilings
    runs_txt = f"{len(tally)} multi-replica run{'s' if len(tally) != 1 else ''}"
    print(f"{'PASS' if ok_all else 'FAIL'}: {runs_txt}, TTFT p90 within {TTFT_BOUND:.0%} at "
          f"{w_ttft} of {n_ttft} stages,\ntokens/s within {CEILING_BOUND:.0%} at {w_tok} of "
          f"{n_all}, throughput ceilings {passed} of {ceilings}")
    print("\n".join(out))

if __name__ == "__main__":
    main()
