"""Open an HTML file in headless Chromium and report what a reader would see wrong.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: fd 3 in,
fd 4 out, NUL-terminated JSON), so the check sees the page as loaded: every request the page
makes (Network.requestWillBeSent), every console error, exception and browser log error
(CSP refusals among them), the DOM (evaluated in the page), and a screenshot.

`check(path, answer, figure_ids)` returns a list of problems, [] for a good page:
- the screenshot is blank (one colour, or under 2 % of pixels away from the background);
- the DOM lacks the answer text, or a figure id, or a figure's image did not decode;
- a console error, an uncaught exception or a browser log error;
- a request for anything but the page itself and data: URIs.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--remote-debugging-pipe", "--window-size=1100,1600"]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium, a fresh profile, driven over the pipe."""

    def __init__(self, binary: str) -> None:
        self._profile = tempfile.mkdtemp(prefix="xmemplan-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads our commands, fd 4 writes its replies
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, pass_fds=(3, 4),  # kept open after preexec_fn set them
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        want = self._id
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for m in self._read(end):
                if m.get("id") == want:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m.get("result", {})
                self.events.append(m)
        raise TimeoutError(method)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        end = time.monotonic() + timeout
        seen = next((e for e in self.events if e.get("method") == method), None)
        while seen is None and time.monotonic() < end:
            for m in self._read(end):
                self.events.append(m)
                if m.get("method") == method:
                    seen = m
        if seen is None:
            raise TimeoutError(method)
        return seen

    def _read(self, end: float) -> list[dict[str, Any]]:
        import select

        out: list[dict[str, Any]] = []
        ready, _, _ = select.select([self._from_child], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            return out
        chunk = os.read(self._from_child, 1 << 20)
        if not chunk:
            raise RuntimeError("chromium closed the pipe")
        self._buf += chunk
        while b"\0" in self._buf:
            raw, self._buf = self._buf.split(b"\0", 1)
            out.append(json.loads(raw))
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a browser already gone
            self.send("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self._profile, ignore_errors=True)


def load(browser: Browser, path: Path) -> dict[str, Any]:
    """Open `path` in a new tab; returns requests, errors, DOM facts and the screenshot."""
    browser.events.clear()
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session=sid)
    url = Path(path).resolve().as_uri()
    browser.send("Page.navigate", {"url": url}, session=sid)
    browser.wait_for("Page.loadEventFired")
    time.sleep(0.3)  # late console messages and requests
    facts = browser.send("Runtime.evaluate", {"expression": _DOM_FACTS, "returnByValue": True},
                         session=sid)["result"]["value"]
    shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=sid)["data"]
    browser.send("Target.closeTarget", {"targetId": target})
    mine = [e for e in browser.events if e.get("sessionId") == sid]
    requests = [e["params"]["request"]["url"] for e in mine
                if e.get("method") == "Network.requestWillBeSent"]
    errors = []
    for e in mine:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                 for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            errors.append("exception: " + str(d.get("exception", {}).get("description",
                                                                        d.get("text", ""))))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + p["entry"].get("text", ""))
    return {"url": url, "requests": requests, "errors": errors, "dom": facts,
            "screenshot": base64.b64decode(shot)}


_DOM_FACTS = """(() => ({
  text: document.body ? document.body.innerText : "",
  figures: Array.from(document.querySelectorAll("figure")).map(f => {
    const img = f.querySelector("img");
    return {id: f.id, loaded: !!img && img.complete && img.naturalWidth > 0,
            src: img ? img.getAttribute("src").slice(0, 30) : ""};
  }),
}))()"""


def blank(png: bytes) -> str | None:
    """Why the screenshot is blank, or None when it shows something."""
    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    px = np.asarray(img.resize((img.width // 4 or 1, img.height // 4 or 1))).reshape(-1, 3)
    colours, counts = np.unique(px, axis=0, return_counts=True)
    if len(colours) < 3:
        return "the screenshot is one colour"
    bg = colours[np.argmax(counts)].astype(int)
    off = float((np.abs(px.astype(int) - bg).max(axis=1) > 40).mean())
    if off < 0.02:
        return f"the screenshot is blank: {off:.1%} of pixels differ from the background"
    return None


def problems(page: dict[str, Any], answer: str, figure_ids: list[str]) -> list[str]:
    out = []
    why = blank(page["screenshot"])
    if why:
        out.append(why)
    text = " ".join(page["dom"]["text"].split())
    if " ".join(answer.split()) not in text:
        out.append(f"the DOM lacks the answer text {answer[:60]!r}")
    figs = {f["id"]: f for f in page["dom"]["figures"]}
    for fid in figure_ids:
        if fid not in figs:
            out.append(f"the DOM lacks figure {fid}")
        elif not figs[fid]["loaded"]:
            out.append(f"figure {fid} did not load (src {figs[fid]['src']!r})")
    out += [f"error: {e}" for e in page["errors"]]
    page_url = page["url"]
    out += [f"request left the page: {u[:100]}" for u in page["requests"]
            if u != page_url and not u.startswith("data:")]
    return out


def check(browser: Browser, path: Path, answer: str, figure_ids: list[str]) -> list[str]:
    return problems(load(browser, path), answer, figure_ids)
