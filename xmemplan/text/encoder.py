"""Tokenize each distinct chunk once and build prompts by concatenating token arrays.

Agent traces resend the same messages hundreds of times (every request carries the whole
conversation so far), so tokenizing full prompts is quadratic in the session length. Here a
chunk (one rendered message, the system prompt, or the tool list) is keyed by the xxh3-128
hash of its role and text; its tokens are computed on first sight and reused afterwards.

A chunk's tokens are the chat-template rendering `<|im_start|>{role}\\n{text}<|im_end|>\\n`,
with the markers as special-token ids where the vocabulary has them (Qwen) and as their text
where it does not. Chunks are tokenized independently, as the markers between them make a
real template's tokens independent too, so concatenation gives the same array every time a
message is resent: shared message prefixes give shared token prefixes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import xxhash

from xmemplan.text.tokenizer import TextTokenizer, get_tokenizer

# Cap on cached tokens per encoder (int32, 4 bytes each: 64 M tokens = 256 MiB); past it the
# cache starts over, which costs time, never correctness.
MAX_CACHED_TOKENS = 64 << 20


class ChunkEncoder:
    """Chunk -> tokens with a content-keyed cache; `cache=False` re-tokenizes every chunk."""

    def __init__(
        self, tokenizer: TextTokenizer, cache: bool = True,
        max_cached_tokens: int = MAX_CACHED_TOKENS,
    ) -> None:
        self.tokenizer = tokenizer
        self.cache = cache
        self.max_cached_tokens = max_cached_tokens
        self._store: dict[int, np.ndarray] = {}
        self._stored_tokens = 0
        self._newline = tokenizer.encode("\n")
        self.hits = 0
        self.misses = 0
        self.bytes_tokenized = 0

    def _remember(self, key: int, ids: np.ndarray) -> np.ndarray:
        if not self.cache:
            return ids
        if self._stored_tokens + ids.shape[0] > self.max_cached_tokens:
            self._store.clear()
            self._stored_tokens = 0
        self._store[key] = ids
        self._stored_tokens += ids.shape[0]
        return ids

    def chunk(self, role: str, text: str) -> np.ndarray:
        """Tokens of one templated chunk (read-only array: it is shared)."""
        head = f"{role}\n{text}"
        data = head.encode("utf-8", "surrogatepass")
        key = xxhash.xxh3_128_intdigest(data)
        if self.cache:
            got = self._store.get(key)
            if got is not None:
                self.hits += 1
                return got
        self.misses += 1
        self.bytes_tokenized += len(data)
        tok = self.tokenizer
        ids = np.concatenate(
            [tok.im_start, tok.encode_bounded(head), tok.im_end, self._newline]
        ).astype(np.int32)  # ids < 2^31 in every vocabulary: half the memory of int64
        ids.flags.writeable = False
        return self._remember(key, ids)

    def memo(self, key: bytes, build: Callable[[], np.ndarray]) -> np.ndarray:
        """Tokens cached under the hash of raw `key` bytes (skips rendering on a hit)."""
        if not self.cache:
            return build()
        k = xxhash.xxh3_128_intdigest(b"\x01raw\x00" + key)
        got = self._store.get(k)
        if got is not None:
            return got
        return self._remember(k, build())

    @staticmethod
    def join(chunks: list[np.ndarray]) -> np.ndarray:
        if not chunks:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(chunks).astype(np.int64)


_ENCODERS: dict[str, ChunkEncoder] = {}


def get_encoder(spec: str | None) -> ChunkEncoder:
    """The process-wide cached encoder of a tokenizer spec (shared by all files read here)."""
    tok = get_tokenizer(spec)
    enc = _ENCODERS.get(tok.name)
    if enc is None:
        enc = ChunkEncoder(tok)
        _ENCODERS[tok.name] = enc
    return enc
