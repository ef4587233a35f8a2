"""The part of each prompt a transcript does not hold, and token counts matched to the API's.

A Claude Code transcript holds the conversation but not the system prompt and tool
definitions sent before it, nor the reminders Claude Code injects. Each call's usage gives the
length of the prompt the API saw, `input_tokens + cache_read_input_tokens +
cache_creation_input_tokens`, so per conversation (a context: a session file, or one
sub-agent) the reconstructed lengths `ours` and the API's `api` fit

    api_i = H + k * ours_i

by least squares over the context's calls: `k` is the API's tokens per token of ours (our
tokenizer is not the model's), and `H`, the hidden prefix in the API's tokens, is the
smallest of the per-call values `api_i - k * ours_i` (so the stand-in never makes a prompt
longer than the API's; reminders injected later in a conversation raise the other values).
Everything comes from the file's own usage records; nothing is tuned to a data set. The
per-call values `api_i - k * ours_i` show how constant the prefix is (their spread).

Per message kind (text, tool results, code), `k_kind` comes from the growth between
consecutive calls, `api_i - api_{i-1} = sum_kind k_kind * (ours_kind_i - ours_kind_{i-1})`,
a least-squares fit of the calls whose prompt extends the previous one.

- `--hidden-prefix auto|N|none` prepends a stand-in of `H` tokens (auto) or N tokens. Its
  token ids (above every vocabulary) are a function of the client version, the model and the
  position only, so two
  contexts of the same client version and model share the stand-in up to the shorter
  length, and a global-scope replay sees the sharing the API's cache sees.
- `--tokens calibrated` resamples each message's tokens to `round(n * k)` (one factor per
  context; a message's tokens depend only on its content and that factor, so a shared
  prefix of messages stays a shared prefix of tokens); lengths, hit tokens and the stand-in
  are then in the API's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import xxhash

from xmemplan.errors import UsageError
from xmemplan.traces.base import ChainedList

if TYPE_CHECKING:
    from xmemplan.traces.claude_transcript import Call

KINDS = ("text", "tool_result", "code")
_POS_BITS = 24  # the longest stand-in, 16 M tokens (far above any context window)


def parse_mode(value: str | None) -> str | int | None:
    """`--hidden-prefix`: None/'none' (nothing), 'auto', or a whole number of tokens."""
    if value is None or value == "none":
        return None
    if value == "auto":
        return "auto"
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--hidden-prefix {value!r} is not auto, none or a token count",
                         "use --hidden-prefix auto, none, or a number such as 20000") from None
    if not 0 <= n < 1 << _POS_BITS:
        raise UsageError(f"--hidden-prefix {n} is outside [0, {1 << _POS_BITS:,})",
                         "give the hidden prefix in tokens, e.g. 20000")
    return n


def standin(version: str, model: str, n: int) -> np.ndarray:
    """`n` stand-in token ids for the hidden prefix of (client version, model).

    Pseudo-random ids in [2**30, 2**31), above every vocabulary and within the int32 range
    that text prompts are stored in, drawn by position from a seed of (version, model): a
    shorter stand-in of the same version and model is a prefix of a longer one, and two
    versions or models differ from the first token (splitmix64 of seed + position)."""
    seed = xxhash.xxh3_64_intdigest(f"{version}\0{model}".encode())
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(
            0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    ids = (np.int64(1 << 30) + (z & np.uint64((1 << 30) - 1)).astype(np.int64))
    ids.flags.writeable = False
    return ids


@dataclass
class Estimate:
    """The hidden prefix and token ratio of one context, from its usage."""

    context: str
    version: str
    model: str
    calls: int  # calls with usage
    hidden_tokens: float  # H, in the API's tokens
    api_per_ours: float  # k
    spread: tuple[float, float, float]  # min, median, max of api_i - k * ours_i
    fitted: bool  # False: too few calls for a line (k = 1, H = the smallest gap)
    kind_api_per_ours: dict[str, float | None] = field(default_factory=dict)
    kind_tokens: dict[str, float] = field(default_factory=dict)  # ours, summed over growth

    @property
    def ratio(self) -> float:
        """Reconstructed / API-reported tokens (the inverse of k)."""
        return 1.0 / self.api_per_ours if self.api_per_ours > 0 else float("nan")

    def kind_ratios(self) -> dict[str, float | None]:
        return {k: (1.0 / v if v else None) for k, v in self.kind_api_per_ours.items()}


def _kind_fit(calls: Sequence[Call], ok: np.ndarray) -> tuple[dict[str, float | None],
                                                               dict[str, float]]:
    rows, ys = [], []
    for i in range(1, len(calls)):
        a, b = calls[i - 1], calls[i]
        if not (ok[i] and ok[i - 1]) or b.compacted and not a.compacted:
            continue
        if b.tokens <= a.tokens or b.reported is None or a.reported is None:
            continue
        d = b.kinds - a.kinds
        if np.any(d < -0.5):
            continue  # not an extension of the previous prompt
        rows.append(d)
        ys.append(b.reported[1] - a.reported[1])
    out: dict[str, float | None] = dict.fromkeys(KINDS)
    totals = {k: 0.0 for k in KINDS}
    if not rows:
        return out, totals
    x = np.array(rows)
    y = np.array(ys, dtype=np.float64)
    for j, k in enumerate(KINDS):
        totals[k] = float(x[:, j].sum())
    use = [j for j in range(3) if x[:, j].sum() > 0]
    if len(rows) < len(use) + 1:
        return out, totals
    coef, *_ = np.linalg.lstsq(x[:, use], y, rcond=None)
    for j, c in zip(use, coef):
        out[KINDS[j]] = float(c) if c > 0 else None
    return out, totals


MIN_API_PER_OURS = 0.1  # see estimate()


def estimate(context: str, calls: Sequence[Call]) -> Estimate | None:
    """Fit `api = H + k * ours` over the context's calls with usage; None without usage."""
    ok = np.array([c.reported is not None for c in calls])
    if not ok.any():
        return None
    ours = np.array([c.tokens for c, o in zip(calls, ok) if o], dtype=np.float64)
    api = np.array([c.reported[1] for c, o in zip(calls, ok) if o and c.reported],
                   dtype=np.float64)
    fitted = len(np.unique(ours)) >= 2
    k, h = 1.0, float(np.min(api - ours))
    if fitted:
        k, h = (float(v) for v in np.polyfit(ours, api, 1))
        # A slope far below one token of the API's per token of ours is no tokenizer ratio:
        # it is a flat fit (every call reported the same), whose round-off slope (1e-19 with
        # numpy 2.4) would make hidden / k a stand-in of 10^18 tokens.
        if k < MIN_API_PER_OURS:
            fitted, k, h = False, 1.0, float(np.min(api - ours))
    resid = api - k * ours
    # The smallest per-call value, not the intercept: the stand-in never makes a prompt
    # longer than the API's (content injected later in a conversation raises the others).
    h = min(max(float(resid.min()), 0.0), float(api.min()))
    kinds, totals = _kind_fit(calls, ok)
    first = calls[0]
    return Estimate(
        context=context, version=first.version, model=first.model, calls=int(ok.sum()),
        hidden_tokens=h, api_per_ours=k,
        spread=(float(resid.min()), float(np.median(resid)), float(resid.max())),
        fitted=fitted, kind_api_per_ours=kinds, kind_tokens=totals,
    )


def by_context(calls: Sequence[Call]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, c in enumerate(calls):
        out.setdefault(c.context, []).append(i)
    return out


def scale(arr: np.ndarray, factor: float) -> np.ndarray:
    """`arr` resampled to round(len * factor) tokens (at least 1), order kept."""
    n = arr.shape[0]
    m = max(1, int(round(n * factor))) if n else 0
    if m == n:
        return arr
    idx = (np.arange(m, dtype=np.int64) * n) // m
    return arr[idx]


@dataclass
class Prepared:
    """Each call's arrays to replay, as an earlier call's arrays (`base`, an index into the
    calls) followed by `new`, or all of them in `new` (`base` None)."""

    new: list[list[np.ndarray]]
    base: list[int | None]
    tokens: list[int]  # per call, the length of its arrays
    hidden: list[int]  # stand-in tokens per call
    estimates: dict[str, Estimate]
    added_tokens: int  # stand-in tokens over all calls

    @property
    def parts(self) -> _Parts:
        """Per call, the whole list of arrays (built on each access, from the last one
        built when the call extends it). Read-only: do not change a returned list."""
        got = self.__dict__.get("_parts")
        if got is None:
            got = self.__dict__["_parts"] = _Parts(self)
        return got


class _Parts(Sequence[list[np.ndarray]]):
    def __init__(self, prepared: Prepared) -> None:
        self.p = prepared
        # The last list built: a call whose base chain reaches it starts from a copy of it
        # instead of walking the chain to the first call (sessions are read in order, so
        # building every call's list is linear in the session, not quadratic).
        self._last: tuple[int, list[np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self.p.new)

    @overload
    def __getitem__(self, i: int) -> list[np.ndarray]: ...

    @overload
    def __getitem__(self, i: slice) -> list[list[np.ndarray]]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        chunks = []
        at: int | None = int(i)
        last = self._last
        head: list[np.ndarray] = []
        while at is not None:
            if last is not None and at == last[0]:
                head = last[1]
                break
            chunks.append(self.p.new[at])
            at = self.p.base[at]
        base = self.p.base[int(i)]
        out = ChainedList(head, key=(id(self.p), int(i)),
                          parent=None if base is None else (id(self.p), base))
        out.extend(a for new in reversed(chunks) for a in new)
        self._last = (int(i), out)
        return out


def _scaled(parts: list[np.ndarray], k: float, memo: dict[int, np.ndarray]
            ) -> list[np.ndarray]:
    """`parts` resampled by `k`, each distinct array once (`memo`, by object)."""
    if k == 1.0:
        return list(parts)
    out = []
    for p in parts:
        got = memo.get(id(p))
        if got is None:
            got = memo[id(p)] = scale(p, k)
        out.append(got)
    return out


def prepare(
    calls: Sequence[Call], hidden: str | int | None, calibrated: bool
) -> Prepared:
    """Each call's arrays with the stand-in prepended and/or tokens calibrated.

    A call kept as an earlier call's prompt plus new messages (`Call.base`) stays so when the
    two share the context, client version and model (the same stand-in and factor): only
    its new messages are scaled."""
    mode = parse_mode(hidden) if isinstance(hidden, str) else hidden
    pos = {id(c): i for i, c in enumerate(calls)}
    bases = [pos.get(id(c.base)) if c.base is not None else None for c in calls]
    n_calls = len(calls)
    new: list[list[np.ndarray]] = [[] for _ in range(n_calls)]
    base: list[int | None] = [None] * n_calls
    tokens = [0] * n_calls
    hid = [0] * n_calls
    estimates: dict[str, Estimate] = {}
    if mode is None and not calibrated:
        for i, c in enumerate(calls):
            b = bases[i]
            if b is not None and b < i:
                new[i], base[i], tokens[i] = c.new, b, c.tokens
            else:
                new[i], tokens[i] = c.parts, c.tokens
        return Prepared(new, base, tokens, hid, estimates, 0)
    for ctx, idx in by_context(calls).items():
        est = estimate(ctx, [calls[i] for i in idx])
        if est is not None:
            estimates[ctx] = est
        k = est.api_per_ours if (est is not None and calibrated) else 1.0
        if mode == "auto":
            n = 0 if est is None else int(round(est.hidden_tokens / (1.0 if calibrated
                                                                      else est.api_per_ours)))
        else:
            n = int(mode) if mode is not None else 0
        memo: dict[int, np.ndarray] = {}
        for i in idx:
            c = calls[i]
            b = bases[i]
            if b is not None and b < i and (
                (calls[b].context, calls[b].version, calls[b].model)
                == (c.context, c.version, c.model)
            ):
                base[i] = b
                new[i] = _scaled(c.new, k, memo)
                tokens[i] = tokens[b]
            else:
                new[i] = ([standin(c.version, c.model, n)] if n else []) + _scaled(c.parts, k, memo)
            tokens[i] += sum(p.shape[0] for p in new[i])
            hid[i] = n
    return Prepared(new, base, tokens, hid, estimates, int(sum(hid)))
