#!/usr/bin/env bash
# CI step: the engines' own code as the oracle (issues 19 and 22).
#
# Builds its OWN venv with vLLM's and SGLang's CPU-importable subset (see
# ../shared/docs/research/engines-on-cpu.md and docs/oracles.md): torch CPU, `vllm --no-deps`,
# `sglang --no-deps`, the light packages their scheduler and cache modules import, and the
# stand-in `triton` package on PYTHONPATH. Installs xmemplan into it (--no-deps plus what the
# compared modules need), then runs tests/oracles/ with CI=1 so the comparisons run, not skip.
#
# The venv is reused when its stamp matches (XMEMPLAN_ENGINES_FRESH=1 rebuilds it).
# Fails (non-zero) on any real failure. Budget: 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

VLLM_VERSION="0.33.0"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"
VENV=".ci-engines-venv"
STAMP="$VENV/.xmemplan-stamp"
WANT="vllm=$VLLM_VERSION sglang=$SGLANG_VERSION torch=$TORCH_VERSION rev=2"
start=$(date +%s)
LOG="$(mktemp -t xmemplan-engines-pip.XXXXXX)"
pipq() {
  "$VENV/bin/pip" "$@" >>"$LOG" 2>&1 || { tail -40 "$LOG" >&2; echo "pip $* failed" >&2; exit 1; }
}

if [ "${XMEMPLAN_ENGINES_FRESH:-0}" = "1" ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  pipq install -q --upgrade pip
  # torch CPU build: the machine's pre-staged wheel is taken by a plain pin. Never install
  # torchvision from PyPI here: it replaces the CPU torch with a CUDA build.
  pipq install -q "torch==$TORCH_VERSION"
  pipq install -q --no-deps "vllm==$VLLM_VERSION" "sglang==$SGLANG_VERSION"
  # What vllm.v1.core.*, vllm.v1.request and the V1 Scheduler import on CPU.
  pipq install -q packaging numpy msgspec pydantic cloudpickle psutil pyzmq cachetools regex \
    urllib3 cbor2 transformers aiohttp requests openai-harmony openai pillow pybase64 uvloop \
    py-cpuinfo prometheus_client fastapi partial-json-parser einops blake3 diskcache \
    lark gguf
  # What sglang.srt.mem_cache and sglang.srt.managers.schedule_policy import.
  pipq install -q orjson starlette tqdm ipython sentencepiece dill loguru
  pipq install -q --no-deps compressed-tensors apache-tvm-ffi
  # vllm.parser imports xgrammar; with its deps it would pull the real triton (~1 GB).
  pipq install -q --no-deps xgrammar llguidance
  echo "$WANT" > "$STAMP"
fi
# xmemplan without its heavy optional deps, then what the compared modules import.
pipq install -q --no-deps -e .
pipq install -q numba polars typer rich xxhash pytest hypothesis
# What sglang.srt.managers.scheduler imports beyond schedule_policy (its Scheduler is built
# without its model worker: tests/oracles/oracle_drivers/sched_sglang.py).
pipq install -q setproctitle uvicorn email-validator
"$VENV/bin/python" -c "import torch; assert torch.__version__.endswith('+cpu'), torch.__version__"
built=$(date +%s)

# No triton and no torchvision here: tests/oracles/oracle_drivers/standins.py stands in for
# both when SGLang imports them (docs/oracles.md).
set +e
CI=1 XMEMPLAN_ENGINES=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/oracles
rc=$?
set -e
rm -f "$LOG"
echo "engines step: $(( built - start )) s venv, $(( $(date +%s) - built )) s tests" \
  "(vllm $VLLM_VERSION, sglang $SGLANG_VERSION, torch $TORCH_VERSION)"
if [ "$rc" -eq 5 ]; then
  echo "engines step: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
