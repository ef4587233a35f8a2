"""Every caller of the input resolver reports what it skipped: `export` (counted notes, with
examples) and the per-call transcript report (its SkipLog and notes), as `hitrate` does."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from xmemplan.errors import ExitCode

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = Path(__file__).resolve().parent / "corpus"
TRANSCRIPT = FIXTURES / "text" / "claude" / "5d0c1e2a-0000-4000-8000-00000000a001.jsonl"


def test_export_counts_and_names_the_entries_it_skips(cli, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(CORPUS / "tokens" / "plain.jsonl", d / "t.jsonl")
    os.mkfifo(d / "p.jsonl")
    (d / "z.jsonl").write_text("junk\n")
    r = cli("export", d, "--to", "aiperf", "-o", tmp_path / "out.jsonl")
    assert r.code == ExitCode.OK, r.err
    text = r.out + r.err
    assert "1 file skipped, 1 file in no known format" in text, text
    assert "p.jsonl: not a regular file" in text and "z.jsonl: matches no known" in text


def test_export_with_nothing_readable_says_why(cli, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    os.mkfifo(d / "p.jsonl")
    r = cli("export", d, "--to", "aiperf", "-o", tmp_path / "out.jsonl")
    assert r.code == ExitCode.INPUT and "Traceback" not in r.err
    assert "1 file skipped" in r.err, r.err


def test_per_call_report_keeps_its_skips_and_notes(tmp_path):
    from xmemplan.hitrate import HitrateOptions
    from xmemplan.hitrate.transcript_calls import analyze_calls

    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(TRANSCRIPT, d / TRANSCRIPT.name)
    os.mkfifo(d / "p.jsonl")
    rep = analyze_calls([d, d / TRANSCRIPT.name], HitrateOptions())
    assert rep is not None and rep.rows
    assert rep.skips.files == 1  # the FIFO, counted
    assert any("p.jsonl" in ex.path for ex in rep.skips.examples)
    assert any(TRANSCRIPT.name in n for n in rep.notes), rep.notes  # named twice: read once
