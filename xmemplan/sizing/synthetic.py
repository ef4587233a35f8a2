"""A multi-turn chat workload without a trace, as AIPerf's user-centric mode sends it.

The shape (AIPerf's own option names, `aiperf profile --help`, and its tutorial
"User-Centric Timing for KV Cache Benchmarking", ai-dynamo/aiperf
docs/tutorials/user-centric-timing.md):

- `--shared-system-prompt-length` tokens shared by every user (one KV prefix for all);
- `--user-context-prompt-length` tokens unique to each user (a new user: a new prefix);
- `--synthetic-input-tokens-mean` new tokens per turn (the question), `--osl` output tokens
  per turn; the history of earlier turns (questions and replies) is sent again, so turn k
  (0-based) of a session has a prompt of system + context + k x (query + output) + query;
- `--session-turns-mean` turns per session, `--num-users` users, and the load: either
  `--user-centric-rate` requests/s over all users, or `--concurrency` users sending their
  next turn as soon as the reply is done.

User-centric timing (the behaviour of aiperf `timing/strategies/user_centric_rate.py`, read
to match it; our code): each user sends a turn every `turn_gap = num_users / rate` seconds,
or as soon as the previous reply is done when that is later (`send_k = max(done_{k-1},
send_{k-1} + gap)`). The run starts in steady state ("virtual history"): of the
`num_users` slots, one starts a fresh session of all its turns at t = 0, the others start
shorter sessions (turns spread evenly over 1 .. turns - 1) at staggered times
`order / rate`; when a slot's session has sent its turns (on the schedule, not waiting for
replies), a new user with a new context starts on that slot.

Hits: what a KV tier of `capacity_tokens` still holds, an LRU over whole prefixes (the
shared system prompt and each session's context, touched at each turn; a session's entry
grows to its prompt + reply, as SGLang caches a finished request's output tokens).
A turn's hit is the previous turn's prompt + reply (or, for a first turn, the shared
system prompt), counted in whole pages of `page_tokens` (SGLang HiCache matches whole
pages), when that prefix is still held; otherwise only the system prompt's pages.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import njit

from xmemplan.errors import UsageError
from xmemplan.sizing.engine.pool import dl_append, dl_remove

__all__ = ["SyntheticWorkload", "Schedule", "schedule", "tier_hits", "aiperf_command"]

# The Netpreme X-Mem post's AIPerf run (lm-sys/lm-sys.github.io
# blog/2026-06-27-netpreme-xmem.md; research/perf-model.md V8).
POST = "lm-sys blog 2026-06-27-netpreme-xmem.md (AIPerf agentic run)"


@dataclass(frozen=True)
class SyntheticWorkload:
    """Token lengths and users of a multi-turn chat workload (AIPerf's option names)."""

    shared_system_prompt_length: int = 1000
    user_context_prompt_length: int = 20000
    synthetic_input_tokens_mean: int = 26
    osl: int = 100
    session_turns_mean: int = 20
    num_users: int = 15

    def check(self) -> None:
        for name, lo in (("shared_system_prompt_length", 0), ("user_context_prompt_length", 0),
                         ("synthetic_input_tokens_mean", 1), ("osl", 1),
                         ("session_turns_mean", 1), ("num_users", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > 10_000_000:
                flag = "--" + name.replace("_", "-")
                raise UsageError(f"{flag} {v!r} is out of range",
                                 f"allowed: {lo} to 10,000,000")

    def prompt_tokens(self, turn: int | np.ndarray) -> np.ndarray:
        """Prompt of turn `turn` (0-based): system + context + history + query."""
        t = np.asarray(turn, dtype=np.float64)
        q, o = self.synthetic_input_tokens_mean, self.osl
        return (self.shared_system_prompt_length + self.user_context_prompt_length
                + t * (q + o) + q)

    @property
    def longest_prompt(self) -> int:
        return int(self.prompt_tokens(self.session_turns_mean - 1))

    def describe(self) -> str:
        return (f"synthetic chat: {self.shared_system_prompt_length:,}-token shared system "
                f"prompt, {self.user_context_prompt_length:,} tokens of context per user, "
                f"{self.synthetic_input_tokens_mean:,}-token queries, {self.osl:,} output "
                f"tokens, {self.session_turns_mean:,} turns per session, "
                f"{self.num_users:,} users")


@dataclass(frozen=True)
class Schedule:
    """Requests of one run, in session order (a turn follows its session's previous one).

    session: session index; turn: 0-based turn in it; start_s: the session's first send
    (open loop); gap_s: seconds between a session's sends on schedule (0: closed loop,
    the next turn goes when the reply is done); prev: index of the previous turn, -1 for a
    session's first (in concurrency mode, a user's next session follows its last turn)."""

    session: np.ndarray
    turn: np.ndarray
    start_s: np.ndarray
    prev: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    gap_s: float
    rate_rps: float | None
    users: int

    def __len__(self) -> int:
        return len(self.session)

    def ideal_send(self) -> np.ndarray:
        """Send times when every reply comes within the gap (the schedule itself)."""
        return self.start_s + self.turn * self.gap_s


def _initial_sessions(users: int, turns: int) -> list[tuple[int, int]]:
    """(order, turns) of the sessions running at t = 0 (AIPerf's virtual history)."""
    life = max(1, turns - 1)
    step = 1
    alternate = math.gcd(users, life) > 1
    if alternate:
        step = next((s for s in range(2, users) if math.gcd(users, s) == 1), 1)
    out = [(0, turns)]  # a fresh user replaces the one that was done before t = 0
    for i in range(1, users):
        age = (users - i) * life
        left = life - age // users
        if left <= 0:
            continue
        slot = (i * step) % users if alternate else age % users
        out.append((users - slot, left))
    return out


def schedule(w: SyntheticWorkload, *, rate_rps: float | None = None,
             concurrency: int | None = None, requests: int = 2000) -> Schedule:
    """The requests of one run of about `requests` requests at one load."""
    w.check()
    if (rate_rps is None) == (concurrency is None):
        raise UsageError("give a rate or a concurrency, not both")
    T = w.session_turns_mean
    sess: list[int] = []
    turn: list[int] = []
    start: list[float] = []
    prev: list[int] = []
    if rate_rps is not None:
        if not rate_rps > 0 or not math.isfinite(rate_rps):
            raise UsageError(f"--user-centric-rate {rate_rps!r} must be a positive number")
        users = w.num_users
        gap = users / rate_rps
        stagger = 1.0 / rate_rps
        horizon = requests / rate_rps  # about `requests` sends on schedule
        # (spawn time, turns) per slot, then each slot's next user after its turns
        pending = [(order * stagger, left) for order, left in _initial_sessions(users, T)]
        s = 0
        while pending:
            t0, n_t = pending.pop()
            if t0 >= horizon:
                continue
            n_keep = min(n_t, int(math.floor((horizon - t0) / gap)) + 1)
            for k in range(n_keep):
                sess.append(s)
                turn.append(k)
                start.append(t0)
                prev.append(len(sess) - 2 if k > 0 else -1)
            s += 1
            pending.append((t0 + n_t * gap, T))
        return _done(w, sess, turn, start, prev, gap, rate_rps, users)
    assert concurrency is not None
    if concurrency < 1:
        raise UsageError(f"--concurrency {concurrency} must be at least 1")
    # closed loop: each user runs sessions back to back, every turn when the reply is done
    per_user = max(1, math.ceil(requests / concurrency))
    s = 0
    for _u in range(concurrency):
        last = -1
        done = 0
        while done < per_user:
            n_keep = min(T, per_user - done)
            for k in range(n_keep):
                sess.append(s)
                turn.append(k)
                start.append(0.0)
                prev.append(last)
                last = len(sess) - 1
            done += n_keep
            s += 1
    return _done(w, sess, turn, start, prev, 0.0, None, concurrency)


def _done(w: SyntheticWorkload, sess: list[int], turn: list[int], start: list[float],
          prev: list[int], gap: float, rate: float | None, users: int) -> Schedule:
    t = np.asarray(turn, dtype=np.int64)
    return Schedule(session=np.asarray(sess, dtype=np.int64), turn=t,
                    start_s=np.asarray(start, dtype=np.float64),
                    prev=np.asarray(prev, dtype=np.int64), prompt=w.prompt_tokens(t),
                    output=np.full(len(t), w.osl, dtype=np.int64), gap_s=gap,
                    rate_rps=rate, users=users)


def tier_hits(w: SyntheticWorkload, s: Schedule, capacity_tokens: float,
              page_tokens: int = 64) -> np.ndarray:
    """Hit tokens per request from a tier of `capacity_tokens` (LRU over prefixes, in the
    schedule's send order; see the module doc)."""
    if page_tokens < 1:
        raise UsageError("page tokens must be at least 1")
    order = np.argsort(s.ideal_send(), kind="stable")
    sys_pages = (w.shared_system_prompt_length // page_tokens) * page_tokens
    sizes = np.asarray(s.prompt, np.float64) + np.asarray(s.output, np.float64)
    if capacity_tokens >= max(sys_pages, 0) + float(sizes[sizes > 0].sum()):
        return _tier_hits_unevicted(s, order, sys_pages, sizes, page_tokens)
    _, sess = np.unique(np.asarray(s.session), return_inverse=True)
    return _lru_kernel(order.astype(np.int64), np.asarray(s.turn, np.int64),
                       sess.astype(np.int64), np.asarray(s.prev, np.int64),
                       np.asarray(s.prompt, np.float64), np.asarray(s.output, np.float64),
                       float(sys_pages), float(capacity_tokens), float(page_tokens))


@njit(cache=True, nogil=True)
def _lru_kernel(order: np.ndarray, turn: np.ndarray, sess: np.ndarray, prev: np.ndarray,
                prompt: np.ndarray, output: np.ndarray, sys_pages: float, capacity: float,
                page: float) -> np.ndarray:  # pragma: no cover - numba
    """`_tier_hits_lru` as a kernel (a test compares them): slot 0 is the system prompt,
    slot 1 + s session s, in one of the engine's intrusive lists (`pool.dl_*`), least
    recently used at the head."""
    n = len(order)
    slots = (int(sess.max()) + 2) if n else 1
    links = np.full((slots, 2), -1, np.int64)  # (previous, next) per slot
    ends = np.full((1, 2), -1, np.int64)  # (head, tail)
    size = np.zeros(slots)
    held_in = np.zeros(slots, np.bool_)
    held = 0.0
    hits = np.zeros(n)
    seen_sys = False
    for x in range(n):
        i = order[x]
        slot = 1 + sess[i]
        base = sys_pages if seen_sys and held_in[0] else 0.0
        h = base
        if turn[i] > 0 and held_in[slot]:
            j = prev[i]
            h = max(base, math.floor((prompt[j] + output[j]) / page) * page)
        hits[i] = min(h, prompt[i] - 1.0)
        for step in range(2):  # the system prompt, then this session: most recent last
            ent = 0 if step == 0 else slot
            sz = sys_pages if step == 0 else prompt[i] + output[i]
            if sz <= 0:
                continue
            if held_in[ent]:
                held -= size[ent]
                dl_remove(links, ends, 0, ent, 0, 1, 0, 1)
            dl_append(links, ends, 0, ent, 0, 1, 0, 1)
            held_in[ent] = True
            size[ent] = sz
            held += sz
        seen_sys = True
        while held > capacity and ends[0, 0] >= 0:
            e = ends[0, 0]
            dl_remove(links, ends, 0, e, 0, 1, 0, 1)
            held_in[e] = False
            held -= size[e]
    return hits


def _tier_hits_lru(s: Schedule, order: np.ndarray, sys_pages: int, capacity_tokens: float,
                   page_tokens: int) -> np.ndarray:
    """The LRU in plain Python: the reference `_lru_kernel` is tested against."""
    lru: OrderedDict[int, float] = OrderedDict()  # -1: the system prompt
    held = 0.0
    hits = np.zeros(len(s))
    seen_sys = False
    for i in order.tolist():
        k = int(s.turn[i])
        key = int(s.session[i])
        base = sys_pages if seen_sys and -1 in lru else 0
        j = int(s.prev[i])
        if k > 0 and key in lru:
            prior = float(s.prompt[j] + s.output[j])
            hits[i] = max(base, math.floor(prior / page_tokens) * page_tokens)
        else:
            hits[i] = base
        hits[i] = min(hits[i], float(s.prompt[i]) - 1)  # the last token is always computed
        # the tier now holds this request's prompt + reply (and the system prompt)
        for ent, size in ((-1, float(sys_pages)), (key, float(s.prompt[i] + s.output[i]))):
            if size <= 0:
                continue
            held -= lru.pop(ent, 0.0)
            lru[ent] = size
            held += size
        seen_sys = True
        while held > capacity_tokens and lru:
            _, size = lru.popitem(last=False)
            held -= size
    return hits


def _tier_hits_unevicted(s: Schedule, order: np.ndarray, sys_pages: int, sizes: np.ndarray,
                         page_tokens: int) -> np.ndarray:
    """tier_hits where the tier holds everything the run writes (nothing is evicted), in
    array operations: equal to its loop (a test compares them), ~10x faster; `size --gpus`
    sweeps a large tier at every load."""
    n = len(order)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    _, sess = np.unique(np.asarray(s.session), return_inverse=True)
    first = np.full(int(sess.max()) + 1 if n else 0, n, np.int64)
    put = sizes > 0
    np.minimum.at(first, sess[put], pos[put])
    held = first[sess] < pos  # an earlier request (send order) of its session wrote it
    base = np.where(pos > 0, float(sys_pages), 0.0) if sys_pages > 0 else np.zeros(n)
    prev = np.asarray(s.prev, np.int64)
    prior = np.floor(sizes[prev] / page_tokens) * page_tokens
    hits = np.where((np.asarray(s.turn) > 0) & held, np.maximum(base, prior), base)
    return np.minimum(hits, np.asarray(s.prompt, np.float64) - 1)


def aiperf_command(w: SyntheticWorkload, *, rate_rps: float | None = None,
                   concurrency: int | None = None, duration_s: float = 300.0) -> str:
    """The `aiperf profile` command that sends this workload to a real server."""
    load = (f"--user-centric-rate {rate_rps:g} --num-users {w.num_users}"
            if rate_rps is not None else f"--concurrency {concurrency}")
    return (f"aiperf profile --model MODEL --url HOST:PORT --endpoint-type chat --streaming "
            f"{load} --session-turns-mean {w.session_turns_mean} "
            f"--shared-system-prompt-length {w.shared_system_prompt_length} "
            f"--user-context-prompt-length {w.user_context_prompt_length} "
            f"--synthetic-input-tokens-mean {w.synthetic_input_tokens_mean} "
            f"--osl {w.osl} --num-dataset-entries 1000 "
            f"--benchmark-duration {duration_s:g}")
