#!/usr/bin/env bash
# CI step: our SGLang cache-aware and round-robin rules against SGLang's own router
# (tests/test_router_oracle.py): `sglang-router` (a Python package with a Rust core, no
# CUDA) in its OWN venv, driven over HTTP with fake workers on localhost. The venv is
# reused while it holds the pinned version (XMEMPLAN_SGLANG_ROUTER_FRESH=1 rebuilds it).
# Budget: under a minute once installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION="${XMEMPLAN_SGLANG_ROUTER_VERSION:-0.3.2}"
VENV=".ci-sglang-router-venv"
STAMP="$VENV/.xmemplan-stamp"
WANT="sglang-router=$VERSION"
PY="${PYTHON:-python3}"
LOG="$(mktemp -t xmemplan-sglang-router-pip.XXXXXX)"
if [ "${XMEMPLAN_SGLANG_ROUTER_FRESH:-0}" = "1" ] || [ ! -f "$STAMP" ] \
    || [ "$(cat "$STAMP")" != "$WANT" ]; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q "sglang-router==$VERSION" >>"$LOG" 2>&1 \
    || { tail -40 "$LOG" >&2; echo "pip install sglang-router failed" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
fi
XMEMPLAN_SGLANG_ROUTER_PYTHON="$PWD/$VENV/bin/python" "$PY" -m pytest -q -p no:cacheprovider \
  tests/test_router_oracle.py
