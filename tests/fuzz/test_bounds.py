"""Bounded work: each case runs `xmemplan` in a subprocess under an address-space limit
(RLIMIT_AS) and a wall-clock timeout, and must end inside both with a documented exit code,
no traceback, and a message naming the file or flag. Class 3 of docs/reliability.md."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from fuzzlib import DOCUMENTED, digest, run_bounded

from xmemplan.errors import ExitCode

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
GiB = 1 << 30


def _check(r, codes, names=()):
    assert not r.timed_out, f"ran past its timeout ({r.wall_s:.0f} s)"
    assert r.code in codes, f"exit {r.code}:\n{r.err[-2000:]}"
    assert "Traceback" not in r.out + r.err, r.err[-2000:]
    if r.code != ExitCode.OK and names:
        assert any(n in r.err for n in names), r.err[-2000:]


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> Path:
    """1 GiB of 'x' without a newline, and 8 MiB lines, each ~5 MB gzip'd (members repeated)."""
    d = tmp_path_factory.mktemp("bombs")
    member = gzip.compress(b"x" * (16 << 20), compresslevel=1, mtime=0)
    (d / "noline.jsonl.gz").write_bytes(member * 64)
    row = b'{"session_id": "s", "input_ids": [' + b"1," * (4 << 20) + b"1]}\n"
    (d / "lines.jsonl.gz").write_bytes(gzip.compress(row, mtime=0) * 80)
    return d


@pytest.mark.parametrize("name,extra,text", [
    ("noline.jsonl.gz", [], "first line is longer than"),
    ("noline.jsonl.gz", ["-t", "tokens"], "decompresses to more than"),
    ("lines.jsonl.gz", [], "decompresses to more than"),
])
def test_compression_bombs_stop_at_the_memory_limit(bombs, name, extra, text):
    before = digest([bombs / name])
    r = run_bounded(["hitrate", bombs / name, *extra], memory=GiB, timeout=60)
    _check(r, {ExitCode.INPUT}, [name])
    assert text in r.err
    assert digest([bombs / name]) == before


def test_fifo_in_a_folder_does_not_block(tmp_path):
    import os

    shutil.copy(CORPUS / "tokens" / "plain.jsonl", tmp_path / "t.jsonl")
    os.mkfifo(tmp_path / "p.jsonl")
    r = run_bounded(["hitrate", tmp_path], memory=2 * GiB, timeout=60)
    _check(r, {ExitCode.OK})
    assert "p.jsonl" in r.err


def test_long_capacity_curve_is_bounded():
    r = run_bounded(["hitrate", CORPUS / "tokens" / "plain.jsonl", "--capacity-curve",
                     "1:1e15:1000", "-f", "json"], memory=2 * GiB, timeout=60)
    _check(r, {ExitCode.OK})
    assert len(json.loads(r.out)["capacity"]["curve"]) >= 2


def test_max_requests_holds(cli, tmp_path, monkeypatch):
    """validate --traces trims to --max-requests before building anything (in-process: the
    harness is replaced by a probe that records what it was handed)."""
    from xmemplan.errors import XmemplanError

    class Handed(XmemplanError):
        exit_code = ExitCode.OK

    seen = {}

    def probe(opts, *_a, **_k):
        seen["pairs"] = len(opts.pairs)
        raise Handed("probed")

    monkeypatch.setattr("xmemplan.validate.harness.run_validate", probe)
    rows = "".join(
        json.dumps({"session_id": f"s{s}", "timestamp": r, "input_ids": list(range(64 * (r + 1)))})
        + "\n" for s in range(10) for r in range(5))
    (tmp_path / "t.jsonl").write_text(rows)
    r = cli("validate", "--emulate", "--traces", tmp_path / "t.jsonl", "--max-requests", "3")
    assert r.code == ExitCode.OK, r.err
    assert 1 <= seen["pairs"] <= 3


@pytest.mark.parametrize("args,flag", [
    pytest.param(["size", "--ttft-slo", "500ms", "--users", "100000000"], "--users",
                 id="size-users"),
    pytest.param(["size", "--ttft-slo", "500ms", "--requests", "100000000"], "--requests",
                 id="size-requests"),
    pytest.param(["size", "--ttft-slo", "500ms", "--max-gpus", "100000000"], "--max-gpus",
                 id="size-max-gpus"),
    pytest.param(["validate", "--emulate", "--sessions", "100000", "--rounds", "1000"],
                 "--sessions", id="validate-sessions-rounds"),
])
def test_flags_that_ask_for_unbounded_work(args, flag):
    """A flag that asks for more than the machine can do is refused (2) or trimmed (0), inside
    2 GiB and 90 s; running out of memory (even cleanly, exit 3) does not pass."""
    r = run_bounded(args, memory=2 * GiB, timeout=90)
    _check(r, {ExitCode.OK, ExitCode.USAGE}, [flag])
    assert r.code in DOCUMENTED


def test_ctrl_c_prints_no_worker_traceback(tmp_path):
    """SIGINT to the whole process group (what Ctrl-C in a terminal does) while the worker
    pool reads: exit 130, one line, no traceback from the workers or the executor's thread."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import numpy as np

    rng = np.random.default_rng(0)
    for f in range(8):  # 8 files, ~50 MB in all: the pool starts (it needs >= 8 MiB)
        with (tmp_path / f"t{f}.jsonl").open("w") as fh:
            for s in range(12):
                ids = rng.integers(0, 50_000, 200 * 30).tolist()
                for r in range(30):
                    fh.write(json.dumps({"session_id": f"f{f}s{s}", "timestamp": r,
                                         "input_ids": ids[: 200 * (r + 1)]}) + "\n")
    p = subprocess.Popen(
        [sys.executable, "-m", "xmemplan", "hitrate", tmp_path, "--workers", "2",
         "--capacity", "1M", "-f", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, env=dict(os.environ, NO_COLOR="1"))
    children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        if children.exists() and len(children.read_text().split()) >= 2:
            break  # the workers are up
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    text = err.decode()
    if out.strip():
        pytest.skip("the run ended before the signal arrived (machine too fast)")
    # 130 from the CLI; -2 (killed by SIGINT, which a shell shows as 130) if the signal lands
    # while the interpreter shuts down. Either way: no traceback from anyone.
    assert p.returncode in (ExitCode.INTERRUPTED, -signal.SIGINT), text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text


class _PoolInterruptedAtStart:
    """Stands in for ProcessPoolExecutor when Ctrl-C lands while it starts (the race behind a
    CI failure): `map` raises KeyboardInterrupt, and waiting for the pool raises what CPython
    raises for a manager thread created but never started."""

    def __init__(self, max_workers):
        self.waited = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown(wait=True)

    def map(self, fn, jobs, chunksize=1):
        raise KeyboardInterrupt
        yield  # pragma: no cover - a generator, as Executor.map's result is iterated

    def shutdown(self, wait=True, cancel_futures=False):
        self.waited = wait
        if wait:
            raise RuntimeError("cannot join thread before it is started")


def test_ctrl_c_while_the_pool_starts_exits_130(tmp_path, monkeypatch, capsys):
    """Deterministic form of the race: exit 130 and the interrupt line, not 'internal error'."""
    from xmemplan.cli.main import run
    from xmemplan.hitrate import pipeline

    monkeypatch.setattr(pipeline, "ProcessPoolExecutor", _PoolInterruptedAtStart)
    for f in range(2):  # 2 x 5 MiB: over the 8 MiB at which the pool is used (sparse files)
        with (tmp_path / f"t{f}.jsonl").open("wb") as fh:
            fh.write(b'{"session_id": "s", "input_ids": [1]}\n')
            fh.truncate(5 << 20)
    code = run(["hitrate", str(tmp_path), "--workers", "2"])
    err = capsys.readouterr().err
    assert code == ExitCode.INTERRUPTED, err
    assert "interrupted" in err and "internal error" not in err, err


def test_an_error_while_ctrl_c_unwinds_is_still_the_interrupt(monkeypatch, capsys):
    """Whatever cleanup fails on the way out of a Ctrl-C, the user pressed Ctrl-C: exit 130."""
    from xmemplan.cli import main

    def interrupted_then_cleanup_fails(*a, **k):
        try:
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("cleanup failed")

    monkeypatch.setattr(main, "app", interrupted_then_cleanup_fails)
    assert main.run(["catalog"]) == ExitCode.INTERRUPTED
    assert "internal error" not in capsys.readouterr().err

    def plain_bug(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(main, "app", plain_bug)
    assert main.run(["catalog"]) == ExitCode.INTERNAL
    assert "internal error" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    pytest.param(["catalog", "--catalog", "{fifo}"], id="catalog"),
    pytest.param(["calibrate", "{fifo}"], id="calibrate"),
    pytest.param(["size", "--ttft-slo", "500ms", "--workload", "{fifo}"], id="size-workload"),
    pytest.param(["validate", "--emulate", "--plan", "{fifo}"], id="validate-plan"),
    pytest.param(["validate", "--emulate", "--traces", "{fifo}"], id="validate-traces"),
    pytest.param(["hitrate", "{fifo}"], id="hitrate"),
])
def test_a_fifo_named_anywhere_does_not_block(tmp_path, args):
    import os

    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    r = run_bounded([str(fifo) if a == "{fifo}" else a for a in args], memory=2 * GiB,
                    timeout=10)
    _check(r, {ExitCode.USAGE, ExitCode.INPUT}, ["p.json"])
