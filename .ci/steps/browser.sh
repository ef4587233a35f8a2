#!/usr/bin/env bash
# CI step: the run folder's report.html in a real browser.
#
# Installs Debian's chromium (apt-get; CI runs as root) and runs tests/test_report_browser.py
# with XMEMPLAN_REQUIRE_BROWSER=1, so that a missing browser fails instead of skipping. The
# test opens the report headless (--headless --no-sandbox --disable-gpu
# --disable-background-networking --disable-component-update --disable-sync --no-first-run,
# a fresh --user-data-dir) over the DevTools pipe and checks: the screenshot is not blank, the
# DOM holds the answer and every figure, no console error, no request leaves the page; and
# that six broken copies of the report are each caught. Budget: apt ~1 min, test ~20 s.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi
chromium --version
XMEMPLAN_REQUIRE_BROWSER=1 python -m pytest -q -p no:cacheprovider tests/test_report_browser.py
