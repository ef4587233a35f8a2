"""Text readers read gzip, xz and bzip2 files transparently (base.read_input): the figures of
a compressed copy are those of the plain files, to the last digit."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import shutil
from pathlib import Path

import pytest

from xmemplan.errors import ExitCode

TEXT = Path(__file__).resolve().parent / "fixtures" / "text"
PACK = {".gz": lambda b: gzip.compress(b, mtime=0), ".xz": lzma.compress, ".bz2": bz2.compress}
FIGURES = ("sessions", "requests", "prompt_tokens", "hit_tokens", "token_hit_ratio",
           "mean_request_hit_ratio", "by_round", "skipped", "files_by_format", "reported")


def _pack_tree(src: Path, dst: Path, suffix: str) -> Path:
    """A copy of `src` with every .jsonl file compressed (and its plain copy removed)."""
    shutil.copytree(src, dst)
    for p in sorted(dst.rglob("*.jsonl")):
        p.with_name(p.name + suffix).write_bytes(PACK[suffix](p.read_bytes()))
        p.unlink()
    return dst


def _figures(cli, *args) -> dict:
    r = cli("hitrate", *args, "-f", "json")
    assert r.code == ExitCode.OK, r.err
    assert "Traceback" not in r.err
    doc = json.loads(r.out)
    return {k: doc.get(k) for k in FIGURES}


@pytest.mark.parametrize("suffix", sorted(PACK))
@pytest.mark.parametrize("tree,fmt", [("netpreme", "netpreme"), ("request_log", "request-log")])
def test_compressed_text_traces_give_the_same_figures(cli, tmp_path, tree, fmt, suffix):
    plain = _figures(cli, TEXT / tree)
    packed_dir = _pack_tree(TEXT / tree, tmp_path / tree, suffix)
    before = {p: p.read_bytes() for p in packed_dir.rglob("*") if p.is_file()}
    packed = _figures(cli, packed_dir)
    assert plain["requests"] > 0 and plain["files_by_format"] == {fmt: plain[
        "files_by_format"][fmt]}
    assert packed == plain
    assert {p: p.read_bytes() for p in packed_dir.rglob("*") if p.is_file()} == before


def test_request_log_session_name_ignores_the_compression_suffix(cli, tmp_path):
    """A request without a session id belongs to its file's session: `log.jsonl.gz` is
    session `log`, as `log.jsonl` is."""
    rows = [{"request": {"model": "m", "messages": [{"role": "user", "content": "hi " * n}]}}
            for n in (50, 60, 70)]
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "log.jsonl").write_bytes(text)
    (tmp_path / "b" / "log.jsonl.gz").write_bytes(gzip.compress(text, mtime=0))
    assert _figures(cli, tmp_path / "a") == _figures(cli, tmp_path / "b")
