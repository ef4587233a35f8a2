"""The one writer (xmemplan.jsonio.open_output / write_output / check_output), directly and
through the commands: unique temporary names, no temporary file left, modes, non-regular
targets, outputs that are inputs or would be read as inputs next run, a full disk."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from xmemplan import jsonio
from xmemplan.errors import UsageError
from xmemplan.traces import synth


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_new_file_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        jsonio.write_output(tmp_path / "a.json", "{}\n", "--out")
        os.umask(0o002)
        jsonio.write_output(tmp_path / "b.json", "{}\n", "--out")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o664


def test_existing_mode_is_kept_and_links_stay_links(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    jsonio.write_output(link, "new", "--out")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["fifo", "dir", "devnull"])
def test_non_regular_targets_are_refused(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        target = tmp_path / "pipe.json"
        os.mkfifo(target)
    elif kind == "dir":
        target = tmp_path / "d"
        target.mkdir()
    else:
        target = Path(os.devnull)
    with pytest.raises(UsageError, match="not a regular file"):
        jsonio.write_output(target, "x", "--profile-out")
    if kind == "fifo":
        assert stat.S_ISFIFO(os.stat(target).st_mode)
    if kind == "devnull":
        assert stat.S_ISCHR(os.stat(target).st_mode)


def test_a_full_disk_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path,
                                                                monkeypatch) -> None:
    target = tmp_path / "overlay.toml"
    target.write_text("the old overlay\n")
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UsageError, match="No space left"):
        jsonio.write_output(target, "x" * 10_000, "--out")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert target.read_text() == "the old overlay\n"
    assert _leftovers(tmp_path) == []


def test_an_error_while_writing_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_text("old\n")
    with pytest.raises(ValueError), jsonio.open_output(target, "--out") as fh:
        fh.write(b"half")
        assert len(_leftovers(tmp_path)) == 1
        raise ValueError("the producer failed")
    assert target.read_text() == "old\n" and _leftovers(tmp_path) == []


def test_two_writers_get_their_own_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    with jsonio.open_output(target, "--out") as a, jsonio.open_output(target, "--out") as b:
        a.write(b"A\n" * 100)
        b.write(b"B\n" * 100)
        assert len(_leftovers(tmp_path)) == 2
    assert target.read_text() in ("A\n" * 100, "B\n" * 100)
    assert _leftovers(tmp_path) == []


def test_stdout_dash(capsys) -> None:
    jsonio.write_output("-", "to stdout\n", "--out")
    assert capsys.readouterr().out == "to stdout\n"


def test_json_is_never_nan_or_infinity() -> None:
    assert jsonio.to_json({"a": float("inf"), "b": [float("nan")]}) == \
        '{\n  "a": null,\n  "b": [\n    null\n  ]\n}'
    assert jsonio.json_line({"t": float("-inf"), "x": 1}) == b'{"t":null,"x":1}\n'


# --- through the commands -----------------------------------------------------------------

@pytest.fixture
def trace(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    p = d / "t.jsonl"
    synth.write_mooncake(p, synth.agent_sessions(n_sessions=3, turns=4, seed=2))
    return p


def test_export_refuses_its_input_and_its_input_folder(cli, trace: Path) -> None:
    before = trace.read_bytes()
    r = cli("export", trace, "--to", "aiperf", "-o", trace)
    assert r.code == 2 and "is one of the inputs" in r.err
    assert trace.read_bytes() == before
    out = trace.parent / "aiperf.jsonl"
    r = cli("export", trace.parent, "--to", "aiperf", "-o", out)
    assert r.code == 2 and "inside the input folder" in r.err and not out.exists()
    r = cli("export", trace.parent, "--to", "aiperf", "-o", trace.parent.parent / "a.jsonl")
    assert r.code == 0 and _leftovers(trace.parent.parent) == []


def test_export_extreme_speedup_is_refused_not_infinity(cli, trace: Path, tmp_path) -> None:
    out = tmp_path / "a.jsonl"
    r = cli("export", trace, "--to", "aiperf", "-o", out, "--speedup", "1e-310")
    assert r.code == 2 and "--speedup" in r.err and not out.exists()


def test_calibrate_refuses_to_overwrite_its_points_or_catalog(cli, tmp_path: Path) -> None:
    pts = tmp_path / "pts.csv"
    pts.write_text("gpu,model,engine,tier,prompt_tokens,hit_tokens,concurrency,ttft_ms\n")
    before = pts.read_bytes()
    r = cli("calibrate", pts, "-o", pts)
    assert r.code == 2 and "is one of the inputs" in r.err and pts.read_bytes() == before
    cat = tmp_path / "extra.toml"
    cat.write_text("")
    r = cli("calibrate", pts, "--catalog", cat, "-o", cat)
    assert r.code == 2 and "is one of the inputs" in r.err and cat.read_text() == ""


def test_profile_out_to_a_fifo_or_device_is_refused(cli, trace: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    for target in (fifo, Path(os.devnull)):
        r = cli("hitrate", trace, "--capacity", "1M", "--profile-out", target)
        assert r.code == 2 and "not a regular file" in r.err, r.err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
