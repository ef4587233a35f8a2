"""SGLang HiCache's L3 storage prefetch and its admission policies (numba).

With a tier at L3 (a HiCacheStorage backend: X-Mem through our HiCache storage backend,
docs/hicache-backend.md, as Mooncake or 3FS would be), a request's prefix that only L3
holds is prefetched L3 -> host while the request waits, and loaded host -> GPU with the
batch that admits it (HiCache's load_back, loop.py's batch loads). SGLang 0.5.23's rules,
from its own source (site-packages/sglang/srt):

- **When it starts**: as the scheduler queues the request (`managers/scheduler.py`
  `Scheduler._add_request_to_queue` -> `_prefetch_kvcache`), after matching the prefix
  the device (and host) hold: it asks L3 for the rest, `full_untruncated_fill_ids
  [matched_len:match_end]` (`_prefetch_kvcache`).
- **Threshold**: the span, page-aligned (`RadixKey.page_aligned`), is fetched only when at
  least `prefetch_threshold` tokens, 256 by default and at least one page
  (`mem_cache/unified_radix_cache.py` `UnifiedRadixCache.prefetch_from_storage`,
  `managers/cache_controller.py` `attach_storage_backend`: `max(prefetch_threshold,
  page_size)`; the hit query's result is checked again, `_drain_and_alloc_storage_hit`).
- **Progress**: the I/O thread reads STORAGE_BATCH_SIZE = 128 pages at a time
  (`mem_cache/hicache_storage.py`) and acknowledges each batch
  (`HiCacheController._page_transfer`: `PrefetchAck(completed_tokens=completed_pages x
  page_size)`); the scheduler takes the acks as they come (`_drain_ack_prefetch`). So the
  tokens usable at a poll are whole batches moved; the whole span once it has landed
  (the completed_req ack inserts it in the host tree, `_handle_prefetch_result`, and the
  request is no longer an ongoing prefetch).
- **Admission** (`Scheduler._get_new_batch_prefill_raw`, for each waiting request after
  the running-cap and batch_is_full checks, before `add_one_req`):
  `tree_cache.check_prefetch_progress(req)`; False: the request is skipped (`continue`,
  the next one is tried). `UnifiedRadixCache.check_prefetch_progress` /
  `_can_terminate_prefetch` by `--hicache-storage-prefetch-policy`:
  - `best_effort`: terminates at the first poll; what has arrived is used, the rest is
    computed;
  - `wait_complete`: never terminates: the request waits until the whole span landed;
  - `timeout`: the first blocked poll starts a timer of `prefetch_timeout_base` +
    pages x `prefetch_timeout_per_page` (1 s + 0.25 s per 1,024 tokens by default:
    `storage_attachment.apply_runtime_config` sets per_page = page_size / 1024 x
    `prefetch_timeout_per_ki_token`; `_start_storage_prefetch_wait`); a later poll past it
    terminates with what has arrived (`_prefetch_deadline_expired`: `elapsed >
    timeout_s`, here `now >= deadline` in continuous time).
  SGLang 0.5.23's default is `timeout` (`arg_groups/fields/memory.py`
  `hicache_storage_prefetch_policy = "timeout"`).
- **Termination stops the reads**: `mark_terminate`; the I/O thread checks it before
  each batch (`_page_transfer`), so the batch in flight finishes and no other starts
  (`pf_cut`).

State per request (pf, float rows): PF_STATE, the span's first token PF_START (the
prefix matched when queued), its tokens PF_TOKENS, the tokens acknowledged PF_DONE
(`pf_progress`, set by the loop before each poll), the timeout's deadline PF_DEADLINE
(inf until the first blocked poll), the flow carrying it PF_FLOW.

`reference.PrefetchRef` is the same rules in plain Python; tests/test_engine.py drives
both with the same sequences (Hypothesis), and tests/oracles drives SGLang's own
`check_prefetch_progress` with them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import no_runtime

PF_STATE, PF_START, PF_TOKENS, PF_DONE, PF_DEADLINE, PF_FLOW = range(6)
N_PF = 6
# states: no prefetch, reading, landed (not yet polled), ended (its tokens are the tier's)
PF_NONE, PF_ONGOING, PF_LANDED, PF_ENDED = 0, 1, 2, 3
BEST_EFFORT, WAIT_COMPLETE, TIMEOUT = 0, 1, 2
POLICY_NAMES = ("best_effort", "wait_complete", "timeout")
DEFAULT_POLICY = "timeout"  # SGLang 0.5.23 arg_groups/fields/memory.py
STORAGE_BATCH_PAGES = 128  # SGLang 0.5.23 mem_cache/hicache_storage.py STORAGE_BATCH_SIZE
PREFETCH_THRESHOLD = 256  # tokens (storage_backend_extra_config prefetch_threshold)
TIMEOUT_BASE_S = 1.0  # prefetch_timeout_base
TIMEOUT_PER_KI_TOKEN_S = 0.25  # prefetch_timeout_per_ki_token
# policy parameters (pfp, floats)
PP_POLICY, PP_THRESH, PP_PAGE, PP_BASE, PP_PERKI = range(5)
N_PP = 5
# events of a poll (pfe rows (request, kind); pfe[0, 0] the count): a timer started, a
# prefetch ended while reading (its flow is cut), one ended after landing
EV_TIMER, EV_CUT, EV_LANDED = 0, 1, 2


@njit(cache=True, inline="always")
def pf_plan(matched, top, page, threshold):  # noqa: ANN001, ANN201
    """Tokens to prefetch: the page-aligned span from `matched` (the prefix the engine
    holds when the request is queued) to `top` (what L3 holds), 0 when under the
    threshold (at least a page)."""
    if page < 1:
        page = 1
    n = (top - matched) // page * page
    lim = threshold if threshold > page else page
    return n if n >= lim else 0


@njit(cache=True, inline="always")
def pf_progress(tokens, moved, kvb, page):  # noqa: ANN001, ANN201
    """Tokens acknowledged once `moved` bytes of a `tokens`-token prefetch have been
    read: whole batches of STORAGE_BATCH_PAGES pages, all of it at the end."""
    if kvb <= 0.0 or moved >= tokens * kvb:
        return tokens
    batch = STORAGE_BATCH_PAGES * (page if page > 0 else 1)
    k = int(moved / (batch * kvb)) * batch
    return k if k < tokens else tokens


@njit(cache=True, inline="always")
def pf_start(pf, i, start, tokens):  # noqa: ANN001, ANN201
    pf[i, PF_STATE] = PF_ONGOING
    pf[i, PF_START] = start
    pf[i, PF_TOKENS] = tokens
    pf[i, PF_DONE] = 0.0
    pf[i, PF_DEADLINE] = np.inf


@njit(cache=True, inline="always")
def _event(pfe, i, kind):  # noqa: ANN001, ANN202
    k = pfe[0, 0] + 1
    if k < pfe.shape[0]:
        pfe[k, 0] = i
        pfe[k, 1] = kind
        pfe[0, 0] = k


@no_runtime
def pf_poll(pf, pfe, pfp, i, now):  # noqa: ANN001, ANN201
    """SGLang's check_prefetch_progress for waiting request i at `now` (module doc):
    (ready, the tier's prefix top once it ended now, -1 if it does not change). Records
    the poll's events in pfe. (A kernel of its own, not inlined into the step loop: only
    runs with a tier at L3 hold it; docs/performance.md round 9.)"""
    st = pf[i, PF_STATE]
    if st == PF_NONE or st == PF_ENDED:  # noqa: SIM109 (numba: scalars)
        return True, -1
    if st == PF_LANDED:
        pf[i, PF_STATE] = PF_ENDED
        _event(pfe, i, EV_LANDED)
        return True, int(pf[i, PF_START] + pf[i, PF_TOKENS])
    pol = int(pfp[PP_POLICY])
    if pol == WAIT_COMPLETE:
        return False, -1
    if pol == TIMEOUT:
        if pf[i, PF_DEADLINE] == np.inf:
            page = pfp[PP_PAGE] if pfp[PP_PAGE] > 0 else 1.0
            pages = float(int(pf[i, PF_TOKENS] // page))
            pf[i, PF_DEADLINE] = now + pfp[PP_BASE] + pages * (page / 1024.0 * pfp[PP_PERKI])
            _event(pfe, i, EV_TIMER)
            return False, -1
        if now < pf[i, PF_DEADLINE]:
            return False, -1
    pf[i, PF_STATE] = PF_ENDED
    _event(pfe, i, EV_CUT)
    return True, int(pf[i, PF_START] + pf[i, PF_DONE])


@njit(cache=True, inline="always")
def pf_update(pf, active, nact, f_rem, f_rate, f_owner, f_rep, r, base, dt, kvb, page):  # noqa: ANN001, ANN201
    """PF_DONE of replica r's reading prefetches, `dt` after the flows' remaining bytes
    were last advanced. A prefetch's flow owner is base - i (loop.py)."""
    for a in range(nact):
        f = active[a]
        ow = f_owner[f]
        if ow > base or f_rep[f] != r:
            continue
        i = base - ow
        if pf[i, PF_STATE] != PF_ONGOING:  # a cut read finishing its batch: ended
            continue
        left = f_rem[f] - f_rate[f] * dt
        if left < 0.0:
            left = 0.0
        pf[i, PF_DONE] = pf_progress(int(pf[i, PF_TOKENS]), pf[i, PF_TOKENS] * kvb - left,
                                     kvb, page)


@njit(cache=True, inline="always")
def pf_cut(pf, i, f_rem, kvb, page):  # noqa: ANN001, ANN201
    """A prefetch ended while reading (f_rem advanced to now): its flow finishes the batch
    in flight and reads no other (HiCacheController._page_transfer)."""
    f = int(pf[i, PF_FLOW])
    if f < 0:  # its reads are done (the landing not yet seen)
        return
    tot = pf[i, PF_TOKENS] * kvb
    moved = tot - f_rem[f]
    batch = STORAGE_BATCH_PAGES * (page if page > 0 else 1) * kvb
    if batch <= 0.0:
        return
    end = (int(moved / batch) + 1) * batch
    if end < tot:
        f_rem[f] = end - moved


@njit(cache=True, inline="always")
def pf_push(pfn, pfh, pft, r, i):  # noqa: ANN001, ANN201
    """Request i queued on replica r: its prefetch starts at the scheduler's next pass
    (pf_pop), FIFO."""
    pfn[i] = -1
    if pft[r] >= 0:
        pfn[pft[r]] = i
    else:
        pfh[r] = i
    pft[r] = i


def policy_code(name: str) -> int:
    return POLICY_NAMES.index(name)
