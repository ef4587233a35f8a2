"""The synthetic multi-turn workload -> AIPerf's `mooncake_trace` JSONL.

Rows are the requests of `xmemplan.sizing.synthetic.schedule` at one user-centric rate,
in send order, each sent at its scheduled time (`timestamp` ms; replay with
`--fixed-schedule`), in the same row format as `export_aiperf` writes for traces (own
`session_id`, `block_tokens`, `extra.xmemplan_row`), so that `validate --aiperf` judges a
replay of it.

hash_ids, blocks of `block_tokens`: a block that lies inside the shared system prompt has
one id for every user; any other block belongs to its session, with one id per (session,
block, length), so a turn repeats the ids of the previous turn's full blocks (the history
it sends again) and the partial last block of a prompt gets its own id (AIPerf refuses an
id seen at two sizes). A mooncake row carries its prompt only, not the previous reply: on
replay the reply's tokens are new text and are computed again, where `size` (and AIPerf's
own user-centric run against a real server) finds them cached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from xmemplan.errors import UsageError
from xmemplan.export.aiperf import ROW_PREFIX, ExportResult
from xmemplan.sizing.synthetic import SyntheticWorkload, aiperf_command, schedule


def rows(w: SyntheticWorkload, rate_rps: float, requests: int, block_tokens: int
         ) -> tuple[list[dict[str, Any]], int, int]:
    """(rows, hash ids written, distinct ids)."""
    if block_tokens < 1:
        raise UsageError("--block-tokens must be at least 1")
    s = schedule(w, rate_rps=rate_rps, requests=requests)
    send = s.ideal_send()
    order = np.argsort(send, kind="stable")[:requests]
    intern: dict[tuple[Any, ...], int] = {}
    out: list[dict[str, Any]] = []
    blocks = 0
    sys_end = w.shared_system_prompt_length
    for row, i in enumerate(order.tolist()):
        length = int(s.prompt[i])
        ids = []
        for a in range(0, length, block_tokens):
            b = min(length, a + block_tokens)
            key: tuple[Any, ...] = ("sys", a, b) if b <= sys_end else \
                ("user", int(s.session[i]), a, b)
            got = intern.get(key)
            if got is None:
                got = intern[key] = len(intern)
            ids.append(got)
        blocks += len(ids)
        out.append({"timestamp": round(float(send[i]) * 1e3, 3), "input_length": length,
                    "output_length": int(s.output[i]), "hash_ids": ids,
                    "session_id": f"{ROW_PREFIX}{row:06d}", "block_tokens": block_tokens,
                    "extra": {"xmemplan_row": row}})
    return out, blocks, len(intern)


def export_synthetic(w: SyntheticWorkload, out: Path, *, rate_rps: float,
                     requests: int = 300, block_tokens: int = 512) -> ExportResult:
    """Write the workload at `rate_rps` as mooncake_trace JSONL to `out`."""
    from xmemplan.jsonio import check_output, json_line, open_output

    w.check()
    check_output(out, "--out")
    rs, blocks, uniq = rows(w, rate_rps, requests, block_tokens)
    with open_output(out, "--out") as fh:
        for r in rs:
            fh.write(json_line(r))
    notes = [f"{w.describe()}; user-centric QPS {rate_rps:g}, sends on schedule "
             "(--fixed-schedule); each row's previous reply is recomputed on replay",
             "the same workload against a real server, AIPerf's own run: "
             + aiperf_command(w, rate_rps=rate_rps)]
    return ExportResult(str(out), len(rs), block_tokens, blocks, uniq, 0, 0, notes)
