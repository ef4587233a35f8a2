"""Writes the crafted bad inputs of this folder (run it to regenerate them; the files are
committed so that the corpus test reads exactly these bytes). See cases.json for what each
one must get, and docs/reliability.md for the classes."""

from __future__ import annotations

import gzip
import io
import json
import lzma
import zipfile
from pathlib import Path

HERE = Path(__file__).parent


def line(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def tokens_rows() -> bytes:
    out = b""
    for s in range(2):
        ids: list[int] = []
        for r in range(3):
            ids = ids + list(range(100 * r, 100 * r + 40))
            out += line({"session_id": f"s{s}", "timestamp": 10 * s + r, "input_ids": ids})
    return out


def blocks_doc(sid: str, base: int) -> bytes:
    reqs = [{"t": float(i), "type": "n", "in": 64 * (i + 1) + 5, "out": 3,
             "hash_ids": list(range(base, base + i + 1))} for i in range(3)]
    return json.dumps({"id": sid, "block_size": 64, "hash_id_scope": "local",
                       "requests": reqs}).encode()


def main() -> None:
    rows = tokens_rows()
    files: dict[str, bytes] = {
        "tokens/plain.jsonl": rows,
        "tokens/bom.jsonl": b"\xef\xbb\xbf" + rows,
        "tokens/crlf.jsonl": rows.replace(b"\n", b"\r\n"),
        "tokens/gz.jsonl.gz": gzip.compress(rows, mtime=0),
        "tokens/xz.jsonl.xz": lzma.compress(rows),
        "bad/truncated.jsonl.gz": gzip.compress(rows, mtime=0)[:-30],
        "bad/fake.jsonl.zst": b"\x28\xb5\x2f\xfd" + b"\x00" * 20,
        "bad/binary.jsonl": bytes(range(256)) * 4,
        "bad/nulls_ids.jsonl": line({"session_id": "s", "timestamp": 0, "input_ids": [1, 2, 3]})
        + line({"session_id": "s", "timestamp": 1, "input_ids": None,
                "meta": {"input_ids": [1, 2, 3, 4]}}),
        "bad/mooncake_null_hash.jsonl": line({"timestamp": 0, "input_length": 600,
                                              "output_length": 1, "hash_ids": [1, 2]})
        + line({"timestamp": 5, "input_length": 600, "output_length": 1, "hash_ids": None,
                "meta": {"hash_ids": [1, 2]}}),
        "bad/timestamps.jsonl": line({"session_id": "s", "timestamp": 0, "input_ids": [1] * 10})
        + line({"session_id": "s", "timestamp": "noon", "input_ids": [1] * 30})
        + line({"session_id": "s", "timestamp": None, "input_ids": [1] * 20})
        + line({"session_id": "s", "timestamp": 3, "input_ids": [1] * 40}),
        "blocks/a/session.json": blocks_doc("same-id", 0),
        "blocks/b/session.json": blocks_doc("same-id", 0),
        "blocks/subagent_only.json": json.dumps({
            "id": "sub", "block_size": 64, "hash_id_scope": "local",
            "requests": [{"type": "subagent", "t": 0.0, "agent_id": "a1", "requests": [
                {"t": 0.0, "type": "n", "in": 200, "out": 1, "hash_ids": [1, 2, 3]},
                {"t": 1.0, "type": "n", "in": 300, "out": 1, "hash_ids": [1, 2, 3, 4]}]}],
        }).encode(),
        "mooncake/a/conv.jsonl": line({"timestamp": 0, "input_length": 1024, "output_length": 1,
                                       "hash_ids": [1, 2]})
        + line({"timestamp": 1, "input_length": 1536, "output_length": 1,
                "hash_ids": [1, 2, 3]}),
        "mooncake/b/conv.jsonl": line({"timestamp": 0, "input_length": 1024, "output_length": 1,
                                       "hash_ids": [7, 8]}),
        "catalog/zero_bandwidth.toml": b'[tier.xmem]\nsource = "corpus"\nnode_bandwidth = '
        b'"0GB/s"\n',
        "catalog/zero_capacity.toml": b'[tier.xmem]\nsource = "corpus"\ncapacity = "0TB"\n',
        "catalog/nan_bandwidth.toml": b'[tier.xmem]\nsource = "corpus"\nbandwidth = nan\n',
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("t.jsonl", rows)
    files["bad/archive.zip"] = buf.getvalue()
    plan = {"schema": "xmemplan.plan", "schema_version": 1, "model": "qwen3-30b-a3b",
            "gpu": "h100-sxm", "prompt_tokens_p50": -8192, "hit_ratio": 0.9}
    files["plan/negative_prompt.json"] = json.dumps(plan).encode()
    files["plan/nan_hit.json"] = json.dumps(dict(plan, prompt_tokens_p50=8192,
                                                 hit_ratio=float("nan"))).encode()
    for name, data in files.items():
        p = HERE / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


if __name__ == "__main__":
    main()
