"""Measured points for `xmemplan calibrate` from `validate --format json` results.

One row per request whose TTFT was measured (a GPU run: compute timed on the GPU, the load
a real host-to-GPU copy), in calibrate's columns (`xmemplan.sizing.calibration.COLUMNS`):
gpu, model, engine, tier, prompt_tokens, hit_tokens, concurrency, ttft_ms, plus the parts
(load_ms, compute_ms) and a source. Every third point is `held-out` (never fitted), so a fit
on these points can be checked on points it did not see.

    python -m xmemplan.validate.points OUT.json OUT.csv VALIDATE.json...
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

from xmemplan.errors import InputError
from xmemplan.jsonio import read_json

COLUMNS = ("gpu", "model", "engine", "tier", "prompt_tokens", "hit_tokens", "concurrency",
           "ttft_ms", "load_ms", "compute_ms", "role", "source")


def points_from_validate(doc: dict[str, Any], name: str = "validate") -> list[dict[str, Any]]:
    """The measured-TTFT requests of one validate result (none without a GPU)."""
    if not isinstance(doc, dict) or "requests" not in doc:
        raise InputError("not a 'validate --format json' result", path=Path(name),
                         field="requests")
    out = []
    for r in doc["requests"]:
        if r.get("ttft_s") is None or r.get("compute_s") is None:
            continue  # compute not measured (no GPU): not a TTFT point
        out.append({
            "gpu": doc["gpu"], "model": doc["model"], "engine": "sglang", "tier": doc["tier"],
            "prompt_tokens": int(r["prompt_tokens"]), "hit_tokens": int(r["hit_tokens"]),
            "concurrency": int(doc.get("readers") or 1),
            "ttft_ms": round(float(r["ttft_s"]) * 1e3, 4),
            "load_ms": round(float(r["load_s"]) * 1e3, 4),
            "compute_ms": round(float(r["compute_s"]) * 1e3, 4),
            "source": f"{name}: xmemplan validate --backend {doc['backend']} on "
                      f"{doc['gpu']}; load = measured pinned host->GPU copy, compute = "
                      "measured bf16 matmul of the prefill FLOPs, ttft = model t0 + "
                      f"combine(load, compute, {doc.get('overlap', 'layer')})",
        })
    return out


def write_points(points: list[dict[str, Any]], json_path: Path, csv_path: Path) -> None:
    for i, p in enumerate(points):
        p["role"] = "held-out" if i % 3 == 2 else "fit"
    import io

    from xmemplan.jsonio import write_output

    write_output(json_path, json.dumps({"points": points}, indent=1) + "\n", "OUT.json")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for p in points:
        w.writerow({k: p.get(k, "") for k in COLUMNS})
    write_output(csv_path, buf.getvalue(), "OUT.csv")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    from xmemplan.errors import XmemplanError

    points: list[dict[str, Any]] = []
    try:
        for name in args[2:]:
            points += points_from_validate(read_json(Path(name)), Path(name).name)
        write_points(points, Path(args[0]), Path(args[1]))
    except XmemplanError as exc:
        print(f"Error: {exc.render()}", file=sys.stderr)
        return int(exc.exit_code)
    held = sum(p["role"] == "held-out" for p in points)
    print(f"points: {len(points)} measured TTFT rows ({held} held out) -> {args[0]}, {args[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
