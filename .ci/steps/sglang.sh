#!/usr/bin/env bash
# CI step: load xmemplan's X-Mem HiCache backend through SGLang's own StorageBackendFactory.
#
# SGLang's full install pulls ~4 GB of CUDA wheels and pins numba/numpy versions that clash
# with ours, so this step builds its OWN venv with SGLang's CPU-importable subset only
# (docs/research feasibility notes): torch CPU, `sglang --no-deps`, the light packages its
# import needs, and a stub `triton` package on PYTHONPATH. Nothing here touches the main venv.
#
# The venv is reused when it already holds the pinned versions (set XMEMPLAN_SGLANG_FRESH=1
# to rebuild it). Fails (non-zero) on any real failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

SGLANG_VERSION="${XMEMPLAN_SGLANG_VERSION:-0.5.23}"
TORCH_VERSION="2.13.0"
VENV=".ci-sglang-venv"
STAMP="$VENV/.xmemplan-stamp"
WANT="sglang=$SGLANG_VERSION torch=$TORCH_VERSION"
start=$(date +%s)
LOG="$(mktemp -t xmemplan-sglang-pip.XXXXXX)"
# pip is noisy here (find-links warnings, and --no-deps leaves sglang's ~75 declared
# requirements "missing" on purpose): keep its output in a log, show it only on failure.
pipq() {
  "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -40 "$LOG" >&2; echo "pip $* failed" >&2; exit 1; }
}

if [ "${XMEMPLAN_SGLANG_FRESH:-0}" = "1" ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  pipq install -q --upgrade pip
  # torch CPU build: the machine's pre-staged wheel is taken by a plain pin.
  pipq install -q "torch==$TORCH_VERSION"
  pipq install -q --no-deps "sglang==$SGLANG_VERSION"
  # The light packages that `sglang.srt.mem_cache` needs at import time (none need CUDA).
  pipq install -q orjson psutil pybase64 requests packaging pillow starlette \
    msgspec pydantic pyzmq tqdm ipython aiohttp numpy
  echo "$WANT" > "$STAMP"
fi
# Our package without its heavy deps (numba/polars are not needed by the backend), then the
# backend's own light deps.
pipq install -q --no-deps -e .
pipq install -q xxhash typer rich

# sglang/srt/utils/common.py does a top-level `import triton` (999 MB on PyPI): a stub will do.
STUB=".ci/triton_stub"
export PYTHONPATH="$PWD/$STUB${PYTHONPATH:+:$PYTHONPATH}"
"$VENV/bin/python" .ci/sglang_client_check.py
rm -f "$LOG"
echo "sglang step: $(( $(date +%s) - start )) s wall (sglang $SGLANG_VERSION, torch $TORCH_VERSION)"
