"""The requests `validate` replays: synthetic sessions, (prompt, hit) pairs from a profile,
a plan or traces, trimmed to fit the machine."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.errors import InputError
from xmemplan.validate.options import ValidateOptions


@dataclass
class Request:
    session: int
    round: int
    prompt_tokens: int
    keys: np.ndarray  # int64 page keys (prefix-chained)
    measured: bool = True


class Requests(list[Request]):
    """Requests as built, with how many measured requests the flags asked for (`asked`):
    the seed scenario is trimmed to --max-requests before it is built."""

    def __init__(self, items: Iterable[Request] = (), asked: int | None = None) -> None:
        super().__init__(items)
        self.asked = asked


def replayed_shape(opts: ValidateOptions) -> tuple[int, int]:
    """(sessions, rounds) of the seed scenario that fit --max-requests: whole sessions
    while they fit, else the first --max-requests rounds of one session."""
    rounds = max(1, min(opts.rounds, opts.max_requests))
    sessions = max(1, min(opts.sessions, opts.max_requests // rounds))
    return sessions, rounds


def built_pages(opts: ValidateOptions) -> int:
    """Page keys `synthetic` or `from_pairs` hold for one reader before scaling (what
    MAX_BUILT_PAGES bounds)."""
    t = opts.page_tokens
    if opts.pairs:
        return sum(2 * max(1, p // t) + min(h, p) // t for p, h in opts.pairs)
    sessions, rounds = replayed_shape(opts)
    full = opts.prompt_tokens + (rounds - 1) * opts.growth_tokens
    per_session = full // t + sum((opts.prompt_tokens + r * opts.growth_tokens) // t
                                  for r in range(rounds))
    return sessions * per_session


def synthetic(opts: ValidateOptions) -> Requests:
    """Sessions whose every round resends the conversation plus `growth_tokens`.

    Only what --max-requests replays is built (`replayed_shape`); the sessions kept are the
    first ones, drawn from the same random stream as before, so their keys are unchanged."""
    rng = np.random.default_rng(opts.seed)
    sessions, rounds = replayed_shape(opts)
    out = Requests(asked=opts.sessions * opts.rounds)
    for s in range(sessions):
        full = opts.prompt_tokens + (rounds - 1) * opts.growth_tokens
        pages = full // opts.page_tokens
        keys = rng.integers(1, 2**62, pages, dtype=np.int64)
        for r in range(rounds):
            prompt = opts.prompt_tokens + r * opts.growth_tokens
            out.append(Request(s, r, prompt, keys[: prompt // opts.page_tokens].copy()))
    return out


def from_pairs(opts: ValidateOptions) -> list[Request]:
    """One session per (prompt, hit) pair: an unmeasured request writes the hit prefix."""
    rng = np.random.default_rng(opts.seed)
    out = []
    for s, (prompt, hit) in enumerate(opts.pairs):
        hit = min(hit, prompt)
        keys = rng.integers(1, 2**62, max(1, prompt // opts.page_tokens), dtype=np.int64)
        hit_pages = hit // opts.page_tokens
        if hit_pages:
            out.append(Request(s, 0, hit_pages * opts.page_tokens, keys[:hit_pages].copy(),
                                measured=False))
        out.append(Request(s, 1, prompt, keys[: prompt // opts.page_tokens].copy()))
    return out


@dataclass(frozen=True)
class FileWorkload:
    """What `--workload`/`--plan` contribute: (prompt, hit) token pairs, and a plan's model
    and GPU (None for a profile)."""

    pairs: tuple[tuple[int, int], ...]
    source: str
    model: str | None = None
    gpu: str | None = None
    concurrency: int | None = None
    kv_dtype: str | None = None  # a plan sized with --kv-dtype fp8: "fp8"
    shape: str | None = None  # a plan's deployment shape label
    claims: Any = None  # a plan's decision (xmemplan.plan.PlanClaims), None for a profile


def pairs_from_file(path: Path, limit: int = 12) -> FileWorkload:
    """(prompt, hit) token pairs from a workload profile or a `size` plan (JSON).

    A profile's `requests_sample` is used when present (pairs picked evenly, at most
    `limit`), else its p50 prompt and token hit ratio. A plan (`xmemplan size --format
    json`) gives its p50 prompt, hit ratio, model and GPU.
    """
    from xmemplan import plan, profile
    from xmemplan.jsonio import read_json

    doc = read_json(path)
    kind = doc.get("schema") if isinstance(doc, dict) else None
    if kind == profile.SCHEMA:
        prof = profile.profile_from_doc(doc, Path(path))
        prompts, hits = prof.sample_prompt, prof.sample_hit
        if prompts.size:
            idx = np.linspace(0, len(prompts) - 1, min(limit, len(prompts))).round().astype(int)
            return FileWorkload(tuple((int(prompts[i]), int(hits[i])) for i in idx),
                                f"profile {path}")
        if prof.prompt_p50 is None or prof.token_hit_ratio is None:
            raise InputError("profile has no requests_sample nor prompt p50 and hit ratio",
                             path=path, field="requests_sample")
        p50, ratio = prof.prompt_p50, prof.token_hit_ratio
        return FileWorkload(((int(p50), int(p50 * ratio)),), f"profile {path} (p50 request)")
    if kind != plan.SCHEMA:
        raise InputError(
            "neither a workload profile nor a plan (its 'schema' is neither "
            f"'{profile.SCHEMA}' nor '{plan.SCHEMA}')", path=path, field="schema",
            hint="pass a profile from 'xmemplan hitrate --profile-out' or a plan from "
            "'xmemplan size --format json'",
        )
    got = plan.plan_from_doc(doc, Path(path))
    prompt, ratio = got.prompt_tokens_p50, got.hit_ratio
    return FileWorkload(
        ((int(prompt), int(prompt * ratio)),), f"plan {path}",
        model=got.model, gpu=got.gpu, concurrency=got.concurrency,
        kv_dtype={1: "fp8", 2: "bf16"}.get(got.kv_dtype_bytes or 0), shape=got.shape,
        claims=got.claims,
    )


def pairs_from_traces(paths: list[Path], limit: int = 12) -> tuple[tuple[tuple[int, int], ...],
                                                                  str]:
    """(prompt, hit) pairs of requests in traces, via `xmemplan.hitrate.analyze`."""
    from xmemplan.hitrate import HitrateOptions, analyze
    from xmemplan.traces import schema as S

    replayed = analyze(paths, HitrateOptions()).replayed
    prompts = replayed.column(S.PROMPT_TOKENS)
    hits = replayed.column(S.HIT_TOKENS)
    if len(prompts) == 0:
        raise InputError("no requests could be read from the traces", path=paths[0])
    idx = np.linspace(0, len(prompts) - 1, min(limit, len(prompts))).round().astype(int)
    return tuple((int(prompts[i]), int(hits[i])) for i in idx), f"traces {paths[0]}"


def scale_to_budget(requests: list[Request], page_bytes: int, page_tokens: int,
                     budget: float, max_requests: int) -> tuple[list[Request], list[str]]:
    """At most `max_requests` measured requests (whole sessions first), token counts scaled
    so that at most `budget` bytes move; a request keeps at least one page, so when even
    that is over the budget the last sessions are left out (each step with a note)."""
    notes = []
    measured = [r for r in requests if r.measured]
    asked = getattr(requests, "asked", None) or len(measured)
    if len(measured) > max_requests:
        keep_sessions = sorted({r.session for r in measured})
        # keep whole sessions while the count fits
        chosen: set[int] = set()
        count = 0
        for s in keep_sessions:
            n = sum(1 for r in measured if r.session == s)
            if count + n > max_requests and chosen:
                break
            chosen.add(s)
            count += n
        requests = [r for r in requests if r.session in chosen]
        if count > max_requests:  # one session longer than --max-requests: its first rounds
            last = sorted(r.round for r in requests if r.measured)[max_requests - 1]
            requests = [r for r in requests if r.round <= last]
            count = max_requests
    else:
        count = len(measured)
    if asked > count:
        notes.append(f"replayed {count:,} of {asked:,} requests (--max-requests)")
    total = sum(len(r.keys) for r in requests) * page_bytes
    if total > budget:
        factor = budget / total
        for r in requests:
            r.prompt_tokens = max(1, int(r.prompt_tokens * factor))
            r.keys = r.keys[: max(1, r.prompt_tokens // page_tokens)]
        notes.append(
            f"token counts scaled by {factor:.3g} to move at most {budget / 1e9:.3g} GB on this "
            "machine; prediction and measurement use the same scaled requests"
        )
        total = sum(len(r.keys) for r in requests) * page_bytes
        if total > budget:  # one page per request is already too much: fewer sessions
            kept: list[Request] = []
            moved = 0
            for s in sorted({r.session for r in requests}):
                rows = [r for r in requests if r.session == s]
                size = sum(len(r.keys) for r in rows) * page_bytes
                if kept and moved + size > budget:
                    break
                kept += rows
                moved += size
            n = sum(1 for r in kept if r.measured)
            notes.append(f"replayed {n:,} of {count:,} requests: each moves at least one "
                         f"{page_bytes / 1e6:.3g} MB page and --max-bytes holds "
                         f"{budget / 1e9:.3g} GB")
            requests = kept
    return requests, notes
