"""A small builder that readers append rows to, producing one RequestBatch.

Block and token-id readers pass each request's keys as one array; they are stored flat.

Text readers pass a prompt as its list of message token arrays (the encoder's cached
chunks). Those are not concatenated: every distinct chunk is stored once and each prompt
becomes a node of an interned message-level trie (`PromptSet`), whose node `(parent, chunk)`
stands for the parent's tokens followed by the chunk's. An agent resends the whole
conversation every call, so flat keys grow with calls x prompt length (a 1,000-call session
is 440 M keys); the trie grows with the distinct messages. The matcher walks it without
materialising a prompt (`xmemplan.prefix.chunks`); `keys` are built only if something asks
for them (`TextBatch.keys`).

Consecutive prompts of a file share most of their message list, usually the very same
array objects, so `add` finds the shared lead by comparing object ids in numpy against the
previous prompt and interns (hashes) only the messages after it: the Python work per request
is the number of new messages, not the prompt length. Tokens are stored as int32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from xmemplan.traces.schema import NULL_INT, RequestBatch


@dataclass
class PromptSet:
    """Prompts as paths of a trie of interned token chunks (messages); node 0 is empty.

    `tokens` holds every distinct chunk once, chunk c being
    `tokens[chunk_start[c] : chunk_start[c] + chunk_len[c]]`. Node n > 0 is its parent's
    prompt followed by chunk `chunk[n]`; `depth[n]` is its length in tokens.
    """

    tokens: np.ndarray  # int32 token ids
    chunk_start: np.ndarray  # int64 (C,)
    chunk_len: np.ndarray  # int64 (C,)
    parent: np.ndarray  # int64 (P,), -1 for the root
    chunk: np.ndarray  # int64 (P,), -1 for the root
    depth: np.ndarray  # int64 (P,), tokens from the root to the node

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.tokens, self.chunk_start, self.chunk_len,
                                      self.parent, self.chunk, self.depth))

    def materialize(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat token keys and offsets of the prompts ending at `nodes` (what flat readers give)."""
        from xmemplan.traces.keys import prompt_tokens

        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        offsets = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.depth[nodes], out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.int64)
        prompt_tokens(self.tokens, self.chunk_start, self.chunk_len, self.parent, self.chunk,
                      nodes, offsets, out)
        return out, offsets

    @staticmethod
    def merge(sets: list[PromptSet]) -> tuple[PromptSet, list[int]]:
        """One set holding all of `sets`, and the node offset of each (its root maps to 0).

        Chunks are not deduplicated across sets: the matcher's figures do not depend on it
        (it compares tokens; equal chunk ids only let it skip a compare).
        """
        tok_base = np.cumsum([0] + [s.tokens.shape[0] for s in sets])
        chunk_base = np.cumsum([0] + [s.chunk_len.shape[0] for s in sets])
        node_base = np.cumsum([1] + [s.parent.shape[0] - 1 for s in sets])
        parents = [np.array([-1], dtype=np.int64)]
        chunks = [np.array([-1], dtype=np.int64)]
        depths = [np.zeros(1, dtype=np.int64)]
        for s, nb, cb in zip(sets, node_base, chunk_base):
            p = s.parent[1:]
            # node n of set s becomes nb + n - 1; its root (0) becomes the merged root
            parents.append(np.where(p == 0, 0, p + nb - 1))
            chunks.append(s.chunk[1:] + cb)
            depths.append(s.depth[1:])
        merged = PromptSet(
            tokens=np.concatenate([s.tokens for s in sets]),
            chunk_start=np.concatenate(
                [s.chunk_start + tb for s, tb in zip(sets, tok_base)]).astype(np.int64),
            chunk_len=np.concatenate([s.chunk_len for s in sets]).astype(np.int64),
            parent=np.concatenate(parents).astype(np.int64),
            chunk=np.concatenate(chunks).astype(np.int64),
            depth=np.concatenate(depths).astype(np.int64),
        )
        return merged, [int(b) - 1 for b in node_base[:-1]]


class TextBatch(RequestBatch):
    """A RequestBatch whose prompts are `prompts` paths (`nodes[r]` for row r).

    `keys` and `key_offsets` are the flat token keys, built on first access only (tests
    and the finite-capacity replay use them; the infinite-cache replay does not).
    """

    def __init__(self, prompts: PromptSet, nodes: np.ndarray, **fields: Any) -> None:
        self.prompts = prompts
        self.nodes = nodes
        self._keys: np.ndarray | None = None
        self._key_offsets: np.ndarray | None = None
        super().__init__(keys=None, key_offsets=None, **fields)  # type: ignore[arg-type]

    def _flat(self) -> None:
        self._keys, self._key_offsets = self.prompts.materialize(self.nodes)

    @property
    def keys(self) -> np.ndarray:
        if self._keys is None:
            self._flat()
        assert self._keys is not None
        return self._keys

    @keys.setter
    def keys(self, value: np.ndarray | None) -> None:
        self._keys = value

    @property
    def key_offsets(self) -> np.ndarray:
        if self._key_offsets is None:
            self._flat()
        assert self._key_offsets is not None
        return self._key_offsets

    @key_offsets.setter
    def key_offsets(self, value: np.ndarray | None) -> None:
        self._key_offsets = value


def concat_text(batches: list[TextBatch]) -> TextBatch:
    """Concatenate text batches without materialising their prompts."""
    from xmemplan.traces.schema import concat_batches

    prompts, bases = PromptSet.merge([b.prompts for b in batches])
    nodes = np.concatenate(
        [np.where(b.nodes == 0, 0, b.nodes + base) for b, base in zip(batches, bases)]
    ).astype(np.int64)
    # the scalar columns as schema concatenates them (its keys are the empty placeholders)
    shells = [
        RequestBatch(
            source=b.source, session_id=b.session_id, timestamp_s=b.timestamp_s,
            prompt_tokens=b.prompt_tokens, output_tokens=b.output_tokens,
            block_tokens=b.block_tokens, keys=np.empty(0, dtype=np.int64),
            key_offsets=np.zeros(len(b) + 1, dtype=np.int64),
            reported_cached_tokens=b.reported_cached_tokens,
            reported_prompt_tokens=b.reported_prompt_tokens,
            complete_sessions=b.complete_sessions, extras=b.extras,
        )
        for b in batches
    ]
    flat = concat_batches(shells)
    return TextBatch(
        prompts, nodes, source=flat.source, session_id=flat.session_id,
        timestamp_s=flat.timestamp_s, prompt_tokens=flat.prompt_tokens,
        output_tokens=flat.output_tokens, block_tokens=flat.block_tokens,
        reported_cached_tokens=flat.reported_cached_tokens,
        reported_prompt_tokens=flat.reported_prompt_tokens,
        complete_sessions=flat.complete_sessions,
    )


@dataclass(frozen=True)
class Extend:
    """A prompt given as an earlier row's prompt followed by `parts` (token arrays).

    For a reader that knows its call continues an earlier one (an agent resends the
    conversation and appends to it): `builder.add(..., keys=Extend(row, new_parts))` costs
    the new parts only, where a full list costs a compare per message.
    """

    row: int  # an earlier row of the same builder
    parts: list[np.ndarray]


class _Interner:
    """Builds a PromptSet one prompt (list of token arrays) at a time.

    Chunks are stored as int32 (token ids are below 2^31 in every vocabulary), half the
    memory of the int64 keys; a chunk with a larger value is refused (ValueError).
    """

    def __init__(self) -> None:
        self.by_content: dict[int, int] = {}  # xxh3-128 of the int32 tokens -> chunk
        self.arrays: list[np.ndarray] = []  # chunk -> tokens (int32)
        self.children: dict[tuple[int, int], int] = {}  # (node, chunk) -> node
        self.parent: list[int] = [-1]
        self.chunk: list[int] = [-1]
        self.depth: list[int] = [0]
        self.prev_ids = np.empty(0, dtype=np.int64)
        self.prev_path = np.zeros(1, dtype=np.int64)
        self.prev_parts: list[Any] = []

    def _chunk_of(self, part: Any) -> int:
        arr = np.asarray(part)
        if arr.dtype != np.int32:
            if arr.size and (arr.min() < 0 or arr.max() > np.iinfo(np.int32).max):
                raise ValueError("text prompt token ids must lie in [0, 2^31)")
            arr = arr.astype(np.int32)
        arr = np.ascontiguousarray(arr)
        h = xxhash.xxh3_128_intdigest(arr.data)
        c = self.by_content.get(h)
        if c is None:
            c = len(self.arrays)
            self.by_content[h] = c
            self.arrays.append(arr)
        return c

    def extend(self, node: int, parts: list[Any]) -> int:
        """The node of the prompt `node` followed by `parts`."""
        for part in parts:
            c = self._chunk_of(part)
            length = self.arrays[c].shape[0]
            if length:
                child = self.children.get((node, c))
                if child is None:
                    child = len(self.parent)
                    self.children[(node, c)] = child
                    self.parent.append(node)
                    self.chunk.append(c)
                    self.depth.append(self.depth[node] + length)
                node = child
        return node

    def add(self, parts: list[Any]) -> tuple[int, int]:
        """(node, tokens) of the prompt made of `parts`, in order.

        The lead shared with the previous prompt (the same array objects: compared by id,
        in numpy) reuses its path; only the parts after it are hashed and looked up."""
        n = len(parts)
        ids = np.fromiter(map(id, parts), dtype=np.int64, count=n)
        m = min(n, self.prev_ids.shape[0])
        same = ids[:m] == self.prev_ids[:m]
        k = m if same.all() else int(np.argmin(same))
        node = int(self.prev_path[k])
        path = [node]
        for part in parts[k:]:
            node = self.extend(node, [part])
            path.append(node)
        self.prev_path = np.concatenate([self.prev_path[: k + 1], path[1:]]).astype(np.int64)
        self.prev_ids = ids
        self.prev_parts = parts  # keeps the objects whose ids are compared alive
        return node, self.depth[node]

    def build(self) -> PromptSet:
        lengths = np.array([a.shape[0] for a in self.arrays], dtype=np.int64)
        starts = np.zeros(lengths.shape[0], dtype=np.int64)
        if lengths.shape[0] > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        tokens = np.concatenate(self.arrays) if self.arrays else np.empty(0, dtype=np.int32)
        self.arrays = []
        return PromptSet(
            tokens=tokens,
            chunk_start=starts,
            chunk_len=lengths,
            parent=np.array(self.parent, dtype=np.int64),
            chunk=np.array(self.chunk, dtype=np.int64),
            depth=np.array(self.depth, dtype=np.int64),
        )


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
        self.keys: list[np.ndarray] = []  # flat rows (one array per request)
        self.key_counts: list[int] = []
        self.nodes: list[int] = []  # prompt rows: node in the interned trie (-1: a flat row)
        self._interner: _Interner | None = None
        self._any_reported = False

    def add(
        self,
        session_id: str,
        timestamp_s: float | None,
        prompt_tokens: int,
        keys: np.ndarray | list[np.ndarray] | Extend,
        output_tokens: int | None = None,
        reported_cached_tokens: int | None = None,
        reported_prompt_tokens: int | None = None,
    ) -> None:
        """Add one request; `keys` is its key array, or (text readers) its list of message
        token arrays, which are interned instead of concatenated, or an `Extend` of an
        earlier row's prompt."""
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
        if isinstance(keys, list | Extend):
            if self._interner is None:
                self._interner = _Interner()
            if isinstance(keys, Extend):
                base = self.nodes[keys.row]
                if base < 0:
                    raise ValueError(f"row {keys.row} is not a text prompt")
                node = self._interner.extend(base, keys.parts)
                n_tokens = self._interner.depth[node]
            else:
                node, n_tokens = self._interner.add(keys)
            self.nodes.append(node)
            self.key_counts.append(n_tokens)
        else:
            self.keys.append(keys)
            self.nodes.append(-1)
            self.key_counts.append(int(keys.shape[0]))

    def __len__(self) -> int:
        return len(self.session_id)

    def build(self, complete_sessions: bool = False) -> RequestBatch:
        n = len(self.session_id)
        fields: dict[str, Any] = dict(
            source=self.source,
            session_id=self.session_id,
            timestamp_s=np.array(self.timestamp_s, dtype=np.float64),
            prompt_tokens=np.array(self.prompt_tokens, dtype=np.int64),
            output_tokens=np.array(self.output_tokens, dtype=np.int64),
            block_tokens=np.full(n, self.block_tokens, dtype=np.int64),
            reported_cached_tokens=(
                np.array(self.reported_cached, dtype=np.int64) if self._any_reported else None
            ),
            reported_prompt_tokens=(
                np.array(self.reported_prompt, dtype=np.int64) if self._any_reported else None
            ),
            complete_sessions=complete_sessions,
        )
        nodes = np.array(self.nodes, dtype=np.int64)
        if self._interner is not None and not self.keys:
            return TextBatch(self._interner.build(), nodes, **fields)
        lengths = np.array(self.key_counts, dtype=np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if self._interner is not None:  # both kinds of rows (no reader does this): flatten
            prompts = self._interner.build()
            it = iter(self.keys)
            parts = [
                prompts.materialize(nodes[r : r + 1])[0] if nodes[r] >= 0 else next(it)
                for r in range(n)
            ]
            keys = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        else:
            keys = np.concatenate(self.keys) if self.keys else np.empty(0, dtype=np.int64)
        return RequestBatch(keys=keys.astype(np.int64, copy=False), key_offsets=offsets,
                            **fields)

