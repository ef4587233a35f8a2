"""A small streaming OpenAI-compatible server whose TTFT follows xmemplan's model (tests, CI).

    python tests/live_server.py --trace T.jsonl [--model M --gpu G --tier T] [--slowdown 1]
        [--port 0] [--port-file F] [--max-seconds 300] [--max-requests 10000]

It serves `POST /v1/completions` and `POST /v1/chat/completions` with `stream: true`, on
127.0.0.1 only. Each request names its trace row in the body (`xmemplan_row`, which AIPerf
merges in from the row's `extra`); the server keeps its own prefix cache (the set of
hash_ids seen, one cache, arrival order: a separate implementation from `validate`'s radix
matcher), takes the hit as the leading seen blocks x block_tokens, waits the model's TTFT
for (input_length, hit) x `--slowdown`, then streams `output_length` tokens (at most 4,
1 ms apart), a usage chunk and `[DONE]` (SSE format: research/serving-sim.md 4.5).

Bounded: it stops after --max-seconds or --max-requests, whichever comes first.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, trace: Path, model: str, gpu: str, tier: str,
                 slowdown: float, max_requests: int) -> None:
        from xmemplan.catalog import load_catalog
        from xmemplan.sizing.model import calibration_for

        super().__init__(("127.0.0.1", port), Handler)
        cat = load_catalog([])
        self.spec = (cat.model(model), cat.gpu(gpu), cat.tier(tier),
                     calibration_for(cat, "sglang"))
        self.rows = [json.loads(line) for line in trace.read_text().splitlines() if line]
        self.slowdown = slowdown
        self.max_requests = max_requests
        self.seen: set[int] = set()
        self.lock = threading.Lock()
        self.served = 0

    def ttft_s(self, row: dict[str, Any]) -> tuple[float, int]:
        """(the model's TTFT x slowdown, hit tokens) for one row, updating the cache."""
        from xmemplan.sizing.model import ttft

        ids = row["hash_ids"]
        with self.lock:
            lead = 0
            while lead < len(ids) and ids[lead] in self.seen:
                lead += 1
            self.seen.update(ids)
            self.served += 1
        prompt = int(row["input_length"])
        hit = min(lead * int(row.get("block_tokens", 512)), prompt)
        model, gpu, tier, cal = self.spec
        return float(ttft(model, gpu, tier, prompt, hit, calibration=cal).single_s) \
            * self.slowdown, hit


class Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.0"  # one response per connection: no keep-alive bookkeeping

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({"object": "list", "data": [{"id": "sim", "object": "model"}]})
        self._send(200, "application/json", body.encode())

    def do_POST(self) -> None:  # noqa: N802
        chat = self.path.rstrip("/").endswith("/chat/completions")
        if not (chat or self.path.rstrip("/").endswith("/completions")):
            self._send(404, "text/plain", b"not found")
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            row = self.server.rows[int(body["xmemplan_row"])]
        except (ValueError, KeyError, IndexError, TypeError):
            self._send(400, "text/plain", b"body needs xmemplan_row naming a trace row")
            return
        start = time.perf_counter()
        delay, hit = self.server.ttft_s(row)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        time.sleep(max(0.0, delay - (time.perf_counter() - start)))
        n = max(1, min(4, int(row.get("output_length", 1)),
                       int(body.get("max_tokens") or body.get("max_completion_tokens") or 4)))
        for k in range(n):
            if chat:
                chunk = {"id": "x", "object": "chat.completion.chunk", "model": "sim",
                         "choices": [{"index": 0, "delta": {"content": f"t{k} "}}]}
            else:
                chunk = {"id": "x", "object": "text_completion", "model": "sim",
                         "choices": [{"index": 0, "text": f"t{k} "}]}
            self._event(chunk)
            time.sleep(0.001)
        self._event({"id": "x", "object": "chat.completion.chunk" if chat else
                     "text_completion", "choices": [], "usage": {
                         "prompt_tokens": int(row["input_length"]), "completion_tokens": n,
                         "total_tokens": int(row["input_length"]) + n,
                         "prompt_tokens_details": {"cached_tokens": hit}}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        if self.server.served >= self.server.max_requests:
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def _event(self, obj: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True)
    from xmemplan.defaults import SEED_GPU, SEED_MODEL

    ap.add_argument("--model", default=SEED_MODEL)
    ap.add_argument("--gpu", default=SEED_GPU)
    ap.add_argument("--tier", default="host-dram-pcie5")
    ap.add_argument("--slowdown", type=float, default=1.0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", type=Path)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--max-requests", type=int, default=10_000)
    a = ap.parse_args(argv)
    server = ModelServer(a.port, a.trace, a.model, a.gpu, a.tier, a.slowdown, a.max_requests)
    port = server.server_address[1]
    if a.port_file:
        a.port_file.write_text(str(port))
    print(f"live_server: 127.0.0.1:{port}", flush=True)
    timer = threading.Timer(a.max_seconds, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        timer.cancel()
        server.server_close()
    print(f"live_server: served {server.served} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
