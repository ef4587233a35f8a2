"""A small builder that readers append rows to, producing one RequestBatch."""

from __future__ import annotations

import numpy as np

from xmemplan.traces.schema import NULL_INT, RequestBatch


class BatchBuilder:
    def __init__(self, source: str, block_tokens: int) -> None:
        self.source = source
        self.block_tokens = block_tokens
        self.session_id: list[str] = []
        self.timestamp_s: list[float] = []
        self.prompt_tokens: list[int] = []
        self.output_tokens: list[int] = []
        self.reported_cached: list[int] = []
        self.reported_prompt: list[int] = []
        self.keys: list[np.ndarray] = []  # parts, in order; a request may have several
        self.key_counts: list[int] = []
        self._any_reported = False

    def add(
        self,
        session_id: str,
        timestamp_s: float | None,
        prompt_tokens: int,
        keys: np.ndarray | list[np.ndarray],
        output_tokens: int | None = None,
        reported_cached_tokens: int | None = None,
        reported_prompt_tokens: int | None = None,
    ) -> None:
        self.session_id.append(session_id)
        self.timestamp_s.append(np.nan if timestamp_s is None else float(timestamp_s))
        self.prompt_tokens.append(prompt_tokens)
        self.output_tokens.append(NULL_INT if output_tokens is None else output_tokens)
        self.reported_cached.append(
            NULL_INT if reported_cached_tokens is None else reported_cached_tokens
        )
        self.reported_prompt.append(
            NULL_INT if reported_prompt_tokens is None else reported_prompt_tokens
        )
        if reported_cached_tokens is not None:
            self._any_reported = True
        # Text readers pass a prompt as its list of cached per-message arrays: they are
        # concatenated once, in build(), instead of once per request and again there.
        parts = keys if isinstance(keys, list) else [keys]
        self.keys.extend(parts)
        self.key_counts.append(sum(part.shape[0] for part in parts))

    def __len__(self) -> int:
        return len(self.session_id)

    def build(self, complete_sessions: bool = False) -> RequestBatch:
        n = len(self.session_id)
        lengths = np.array(self.key_counts, dtype=np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        keys = np.concatenate(self.keys) if self.keys else np.empty(0, dtype=np.int64)
        return RequestBatch(
            source=self.source,
            session_id=self.session_id,
            timestamp_s=np.array(self.timestamp_s, dtype=np.float64),
            prompt_tokens=np.array(self.prompt_tokens, dtype=np.int64),
            output_tokens=np.array(self.output_tokens, dtype=np.int64),
            block_tokens=np.full(n, self.block_tokens, dtype=np.int64),
            keys=keys.astype(np.int64, copy=False),
            key_offsets=offsets,
            reported_cached_tokens=(
                np.array(self.reported_cached, dtype=np.int64) if self._any_reported else None
            ),
            reported_prompt_tokens=(
                np.array(self.reported_prompt, dtype=np.int64) if self._any_reported else None
            ),
            complete_sessions=complete_sessions,
        )
