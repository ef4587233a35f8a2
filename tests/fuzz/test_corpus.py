"""The crafted corpus (tests/corpus, written by make_corpus.py) and the paths that cannot be
committed (FIFOs, '-', pipes, devices, links, loops, unreadable folders, outputs over
inputs), each with what it must get. Every case also makes fuzzlib's checks: documented
exit code, no traceback, the message names the file or flag, inputs unchanged."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from fuzzlib import assert_clean, digest

from xmemplan.errors import ExitCode

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
OK, USAGE, INPUT = ExitCode.OK, ExitCode.USAGE, ExitCode.INPUT

# (id, args, exit code, text that must appear in stderr)
CASES = [
    # class 4: compressed, BOM, CRLF, archives, binary
    ("gzip-read", ["hitrate", "tokens/gz.jsonl.gz", "-f", "json"], OK, ""),
    ("xz-read", ["hitrate", "tokens/xz.jsonl.xz", "-f", "json"], OK, ""),
    ("bom-read", ["hitrate", "tokens/bom.jsonl", "-f", "json"], OK, ""),
    ("crlf-read", ["hitrate", "tokens/crlf.jsonl", "-f", "json"], OK, ""),
    ("gzip-cut", ["hitrate", "bad/truncated.jsonl.gz"], INPUT, "corrupt or cut short"),
    ("zstd-no-lib", ["hitrate", "bad/fake.jsonl.zst"], INPUT, "zstd"),
    ("zip", ["hitrate", "bad/archive.zip"], INPUT, "zip archive"),
    ("binary", ["hitrate", "bad/binary.jsonl"], INPUT, "no known format"),
    ("binary-forced", ["hitrate", "bad/binary.jsonl", "-t", "tokens"], INPUT, "binary.jsonl"),
    ("bad-folder", ["hitrate", "bad", "-f", "json"], OK, "files skipped"),
    ("bad-folder-strict", ["hitrate", "bad", "--strict"], INPUT, "bad/"),
    # class 6: null ids never take a nested list; timestamps kept in file order
    ("null-input-ids", ["hitrate", "bad/nulls_ids.jsonl", "-f", "json"], OK,
     "nulls_ids.jsonl:2: missing field (input_ids)"),
    ("null-hash-ids", ["hitrate", "bad/mooncake_null_hash.jsonl", "-f", "json"], OK,
     "mooncake_null_hash.jsonl:2: missing field (hash_ids)"),
    ("timestamps", ["hitrate", "bad/timestamps.jsonl", "-f", "json"], OK,
     "kept in file order"),
    ("timestamps-strict", ["hitrate", "bad/timestamps.jsonl", "--strict"], INPUT,
     "timestamps.jsonl:2"),
    ("scope-session-no-sessions", ["hitrate", "mooncake", "--scope", "session"], OK,
     "carry no session ids"),
    # class 7: notes still print when nothing is read
    ("subagent-only", ["hitrate", "blocks/subagent_only.json"], INPUT, "--subagents"),
    # class 2: catalogs and plans
    ("catalog-0GB/s", ["catalog", "tiers", "--catalog", "catalog/zero_bandwidth.toml"], INPUT,
     "node_bandwidth"),
    ("catalog-0TB", ["catalog", "tiers", "--catalog", "catalog/zero_capacity.toml"], INPUT,
     "capacity"),
    ("catalog-nan", ["catalog", "tiers", "--catalog", "catalog/nan_bandwidth.toml"], INPUT,
     "bandwidth"),
    ("plan-negative", ["validate", "--emulate", "--plan", "plan/negative_prompt.json"], INPUT,
     "prompt_tokens_p50"),
    ("plan-nan", ["validate", "--emulate", "--plan", "plan/nan_hit.json"], INPUT, "hit_ratio"),
]


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A copy of the corpus (the runs must not change it; the copy is hashed too)."""
    dst = tmp_path / "corpus"
    shutil.copytree(CORPUS, dst, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return dst


@pytest.mark.parametrize("args,code,text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_corpus_case(cli, corpus, monkeypatch, args, code, text):
    monkeypatch.chdir(corpus)
    before = digest([corpus])
    names = [Path(a).name for a in args if (corpus / a).exists()] or [a for a in args
                                                                     if a.startswith("--")]
    r = cli(*args)
    assert_clean(r, codes={code}, names=names, before=before, inputs=[corpus])
    assert text in r.err, r.err


def test_compressed_bom_crlf_read_as_plain(cli, corpus):
    """The same rows give the same figures plain, gzip, xz, with a BOM or with CRLF."""
    def figures(name: str) -> dict:
        r = cli("hitrate", corpus / "tokens" / name, "-f", "json")
        assert r.code == OK, r.err
        d = json.loads(r.out)
        return {k: d[k] for k in ("requests", "token_hit_ratio", "mean_request_hit_ratio")}

    plain = figures("plain.jsonl")
    assert plain["requests"] == 6
    for name in ("gz.jsonl.gz", "xz.jsonl.xz", "bom.jsonl", "crlf.jsonl"):
        assert figures(name) == plain, name


# --- paths that are not plain files ----------------------------------------------------


@pytest.fixture
def trace(tmp_path) -> Path:
    p = tmp_path / "t.jsonl"
    shutil.copy(CORPUS / "tokens" / "plain.jsonl", p)
    return p


def test_fifo_named_and_in_a_folder(cli, tmp_path, trace):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    r = cli("hitrate", fifo)  # must not block: refused before it is opened
    assert_clean(r, codes={INPUT}, names=["pipe.jsonl"])
    assert "not a regular file" in r.err and "FIFO" in r.err
    r = cli("hitrate", tmp_path, "-f", "json")
    assert_clean(r, codes={OK})
    skipped = json.loads(r.out)["skipped"]
    assert "pipe.jsonl" in r.err and skipped["files"] == 1 and skipped["lines"] == 0
    r = cli("hitrate", tmp_path, "--strict")
    assert_clean(r, codes={INPUT}, names=["pipe.jsonl"])
    r = cli("size", "--ttft-slo", "500ms", "--workload", fifo)
    assert_clean(r, codes={INPUT}, names=["pipe.jsonl"])


def test_pipe_and_stdin_and_device(cli, trace):
    r = cli("hitrate", "-")
    assert_clean(r, codes={USAGE}, names=["'-'"])
    read, write = os.pipe()  # what <(...) hands over: /dev/fd/N, a pipe
    try:
        r = cli("hitrate", f"/dev/fd/{read}")
        assert_clean(r, codes={INPUT}, names=[f"/dev/fd/{read}"])
        assert "process substitution" in r.err
    finally:
        os.close(read)
        os.close(write)
    r = cli("hitrate", "/dev/null")
    assert_clean(r, codes={INPUT}, names=["/dev/null"])
    assert "character device" in r.err


def test_directory_given_as_a_file(cli, tmp_path):
    for args in (["size", "--ttft-slo", "500ms", "--workload", tmp_path],
                 ["validate", "--emulate", "--plan", tmp_path],
                 ["catalog", "--catalog", tmp_path]):
        r = cli(*args)
        assert_clean(r, codes={INPUT}, names=[tmp_path.name])


def test_links_loops_and_broken_links(cli, tmp_path, trace):
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(trace, sub / "u.jsonl")
    (sub / "loop").symlink_to(tmp_path)  # a loop back to the top
    (tmp_path / "again").symlink_to(sub)  # a second way into sub
    (tmp_path / "broken.jsonl").symlink_to(tmp_path / "nowhere")
    before = digest([tmp_path])
    r = cli("hitrate", tmp_path, "-f", "json")
    assert_clean(r, codes={OK}, before=before, inputs=[tmp_path])
    doc = json.loads(r.out)
    assert doc["files_by_format"] == {"tokens": 2}  # t.jsonl and sub/u.jsonl, once each
    assert "broken.jsonl" in r.err and "read once" in r.err
    r = cli("hitrate", tmp_path / "broken.jsonl")
    assert_clean(r, codes={INPUT}, names=["broken.jsonl"])
    assert "broken symbolic link" in r.err
    (tmp_path / "self").symlink_to(tmp_path / "self")
    r = cli("hitrate", tmp_path / "self")
    assert_clean(r, codes={INPUT}, names=["self"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder: permissions not testable")
def test_unreadable_subfolder_and_file(cli, tmp_path, trace):
    locked = tmp_path / "locked"
    locked.mkdir()
    shutil.copy(trace, locked / "x.jsonl")
    secret = tmp_path / "secret.jsonl"
    shutil.copy(trace, secret)
    locked.chmod(0)
    secret.chmod(0)
    try:
        r = cli("hitrate", tmp_path, "-f", "json")
        assert_clean(r, codes={OK})
        assert "locked" in r.err and "secret.jsonl" in r.err
        r = cli("hitrate", secret)
        assert_clean(r, codes={INPUT}, names=["secret.jsonl"])
    finally:
        locked.chmod(stat.S_IRWXU)
        secret.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_unreadable_subfolder_reported_when_listing_fails(cli, tmp_path, trace, monkeypatch):
    """The same as above where root can read everything: the walk's error path, forced."""
    locked = tmp_path / "locked"
    locked.mkdir()
    shutil.copy(trace, locked / "x.jsonl")
    real = os.scandir

    def scandir(path="."):
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    r = cli("hitrate", tmp_path, "-f", "json")
    assert_clean(r, codes={OK})
    assert "locked" in r.err and "not readable" in r.err
    assert json.loads(r.out)["files_by_format"] == {"tokens": 1}


# --- class 1: outputs never destroy inputs ------------------------------------------------


def test_outputs_never_overwrite_inputs(cli, tmp_path, trace):
    pq = tmp_path / "t.parquet"
    import polars as pl

    pl.DataFrame({"session_id": ["s"], "timestamp": [0.0],
                  "input_ids": [[1, 2, 3]]}).write_parquet(pq)
    before = digest([tmp_path])
    for args in (["hitrate", trace, "--profile-out", trace],
                 ["hitrate", pq, "-o", pq],
                 ["hitrate", tmp_path, "-o", trace.with_suffix(".csv").with_name("t.jsonl")],
                 ["hitrate", trace, "-o", tmp_path / "nodir" / "r.csv"],
                 ["hitrate", trace, "--profile-out", tmp_path]):
        r = cli(*args)
        assert_clean(r, codes={USAGE}, names=["--profile-out", "--out", "-o"],
                     before=before, inputs=[tmp_path])


def test_output_is_replaced_whole(cli, tmp_path, trace):
    out = tmp_path / "r.csv"
    out.write_text("old\n")
    r = cli("hitrate", trace, "-o", out)
    assert_clean(r, codes={OK})
    assert out.read_text().startswith("session_id")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_compressed_transcript_reads_as_plain(cli, tmp_path, trace):
    """Text readers read compressed files too (base.read_input): a gzip'd transcript gives
    the plain file's figures, named or inside a folder; a cut one is refused by name."""
    import gzip

    src = (Path(__file__).resolve().parent.parent / "fixtures" / "text" / "claude"
           / "5d0c1e2a-0000-4000-8000-00000000a001.jsonl")
    gz = tmp_path / "transcript.jsonl.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    before = digest([tmp_path])
    plain = cli("hitrate", src, "-f", "json")
    assert_clean(plain, codes={OK})
    r = cli("hitrate", gz, "-f", "json")
    assert_clean(r, codes={OK}, before=before, inputs=[tmp_path])
    keys = ("requests", "prompt_tokens", "hit_tokens", "token_hit_ratio", "reported")
    want = {k: json.loads(plain.out)[k] for k in keys}
    assert {k: json.loads(r.out)[k] for k in keys} == want and want["requests"] > 0
    r = cli("hitrate", tmp_path, "-f", "json")
    assert_clean(r, codes={OK}, before=before, inputs=[tmp_path])
    assert json.loads(r.out)["files_by_format"] == {"tokens": 1, "claude-transcript": 1}
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz.read_bytes()[:-40])
    r = cli("hitrate", cut)
    assert_clean(r, codes={INPUT}, names=["cut.jsonl.gz"])
    assert "corrupt or cut short" in r.err


def test_two_outputs_never_share_a_path(cli, tmp_path, trace):
    r = cli("hitrate", trace, "-o", tmp_path / "r.csv", "--profile-out", tmp_path / "r.csv")
    assert_clean(r, codes={USAGE}, names=["--profile-out"])
    assert not (tmp_path / "r.csv").exists()
