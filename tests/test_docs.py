"""Docs that cannot drift: the CLI reference and the shipped examples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from conftest import ROOT


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current():
    gen = _load(ROOT / "docs" / "make_cli_reference.py")
    assert (ROOT / "docs" / "cli.md").read_text() == gen.render(), (
        "docs/cli.md is stale: run python docs/make_cli_reference.py"
    )


def test_example_traces_are_what_the_generator_makes(tmp_path):
    gen = _load(ROOT / "examples" / "make_traces.py")
    gen.make(tmp_path)
    shipped = ROOT / "examples"
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert made, "generator wrote nothing"
    for rel in made:
        assert (shipped / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel


def test_readme_main_command_runs_on_the_examples(cli):
    r = cli("hitrate", ROOT / "examples" / "traces", "--format", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["files_by_format"] == {"claude-blocks": 4, "tokens": 1}
    assert doc["sessions"] == 8 and 0.5 < doc["token_hit_ratio"] < 1


def test_other_examples_run(cli):
    for name, fmt in (("mooncake.jsonl", "mooncake"), ("bailian.jsonl", "bailian")):
        r = cli("hitrate", ROOT / "examples" / "other" / name, "-f", "json")
        assert r.code == 0, r.err
        assert json.loads(r.out)["files_by_format"] == {fmt: 1}
