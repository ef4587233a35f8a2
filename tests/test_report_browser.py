"""report.html opened in a real browser (headless Chromium over the DevTools protocol).

The run folder is made by `xmemplan plan` on the shipped examples. The good report must show
its answer and every figure, with no console error and no request leaving the page; each
broken copy (answer gone, a figure corrupted, an outside image, a script error, an empty body)
must be caught. Without Chromium these tests skip, unless XMEMPLAN_REQUIRE_BROWSER=1
(.ci/steps/browser.sh installs Debian's chromium and sets it), where they fail.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import browser_check as bc
from tests.conftest import ROOT
from xmemplan.cli.main import run
from xmemplan.cli.views.report import FIGURES


@pytest.fixture(scope="module")
def browser() -> Iterator[bc.Browser]:
    binary = bc.chromium()
    if binary is None:
        if os.environ.get("XMEMPLAN_REQUIRE_BROWSER") == "1":
            pytest.fail("XMEMPLAN_REQUIRE_BROWSER=1 but no chromium on PATH "
                        "(apt-get install -y chromium)")
        pytest.skip("no chromium on PATH (apt-get install -y chromium)")
    pytest.importorskip("PIL")  # the screenshot check (Pillow comes with matplotlib)
    b = bc.Browser(binary)
    yield b
    b.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("runs") / "examples"
    code = run(["-q", "plan", str(ROOT / "examples" / "traces"), "--ttft-slo", "500ms",
                "--rate", "2", "--validate", "-o", str(out)])
    assert code == 0
    assert (out / "validation.json").is_file()
    return out


def _answer(run_dir: Path) -> str:
    return json.loads((run_dir / "plan.json").read_text())["answer"]


def _ids(run_dir: Path) -> list[str]:
    return [fid for fname, fid, _ in FIGURES if (run_dir / fname).is_file()]


def test_report_opens_with_answer_and_every_figure(browser: bc.Browser, run_dir: Path) -> None:
    ids = _ids(run_dir)
    assert len(ids) == len(FIGURES)  # the examples have data for every chart
    page = bc.load(browser, run_dir / "report.html")
    assert bc.problems(page, _answer(run_dir), ids) == []
    text = page["dom"]["text"]
    for heading in ("Hit ratio", "TTFT against load", "GPUs and X-Mem nodes by SLO",
                    "Assumptions and their sources", "Validated range and measured errors",
                    "Validation in emulation", "Reproduce"):
        assert heading in text, heading
    assert page["requests"] == [page["url"]] + [u for u in page["requests"][1:]
                                                if u.startswith("data:")]


def _broken(run_dir: Path, tmp_path: Path, name: str, change) -> Path:  # noqa: ANN001
    html = (run_dir / "report.html").read_text()
    bad = change(html)
    assert bad != html, f"the breakage {name} changed nothing"
    path = tmp_path / f"{name}.html"
    path.write_text(bad)
    return path


_CSP = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')

BREAKAGES = {
    # the answer heading emptied
    "no-answer": (lambda h: re.sub(r'(<h1 class="answer" id="answer">)[^<]*', r"\1", h),
                  "lacks the answer"),
    # one figure's PNG cut short: it no longer decodes
    "corrupt-figure": (lambda h: h.replace("data:image/png;base64,iVBORw0KGgo",
                                           "data:image/png;base64,AAAA", 1),
                       "did not load"),
    # an image from outside, with the page's CSP removed: the request is seen
    "outside-image": (lambda h: _CSP.sub("", h).replace(
        "</body>", '<img src="http://192.0.2.1/pixel.png"></body>'), "request left the page"),
    # the same image with the CSP in place: the browser refuses it, a console error
    "outside-image-csp": (lambda h: h.replace(
        "</body>", '<img src="http://192.0.2.1/pixel.png"></body>'), "error:"),
    # a script error (CSP removed so that the script runs)
    "script-error": (lambda h: _CSP.sub("", h).replace(
        "</body>", "<script>undefinedFunction()</script></body>"), "error: exception"),
    # everything white: the body hidden
    "blank": (lambda h: h.replace("</style>", "body { visibility: hidden; }</style>"),
              "blank"),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_a_broken_report_is_caught(browser: bc.Browser, run_dir: Path, tmp_path: Path,
                                   name: str) -> None:
    change, expect = BREAKAGES[name]
    path = _broken(run_dir, tmp_path, name, change)
    found = bc.check(browser, path, _answer(run_dir), _ids(run_dir))
    assert any(expect in p for p in found), (name, found)
