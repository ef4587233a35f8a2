"""Regenerate the example traces shipped in examples/traces/ (deterministic).

    python examples/make_traces.py [OUT_DIR]

- agent-tokens.jsonl: 4 coding-agent sessions in xmemplan's token-id format;
- claude-blocks/: 4 other sessions as Claude Code block traces (64-token blocks, local ids),
  with sub-agents (`--subagents`);
- other/mooncake.jsonl and other/bailian.jsonl: the same kind of traffic in the Mooncake and
  Qwen-Bailian formats (they have no or tree-shaped sessions: run them on their own).
"""

from __future__ import annotations

import sys
from pathlib import Path

from xmemplan.traces import synth


def make(out: Path) -> None:
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    synth.write_tokens_jsonl(
        traces / "agent-tokens.jsonl",
        synth.agent_sessions(n_sessions=4, turns=12, seed=11, system_tokens=800,
                             turn_tokens=(20, 200), compact_every=9),
    )
    synth.write_claude_blocks(
        traces / "claude-blocks",
        synth.agent_sessions(n_sessions=4, turns=20, seed=12, system_tokens=3000,
                             turn_tokens=(100, 900)),
        subagents=1, seed=12,
    )
    other = out / "other"
    other.mkdir(parents=True, exist_ok=True)
    synth.write_mooncake(
        other / "mooncake.jsonl", synth.agent_sessions(n_sessions=6, turns=8, seed=13)
    )
    synth.write_bailian(other / "bailian.jsonl", synth.bailian_rows(n_roots=8, depth=4, seed=14))


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
