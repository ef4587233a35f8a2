#!/usr/bin/env bash
# GPU check of the host-DRAM load path and a short hit-rate / prompt-length sweep, on ONE
# CUDA GPU, writing JSON that `xmemplan calibrate` reads. Under 5 minutes on one H200.
#
#   bash benchmarks/gpu_check.sh            # on the GPU machine; results in $OUT
#   bash benchmarks/gpu_check.sh --dry-run  # on a CPU: same steps, small sizes, no torch
#
# What it runs (each step prints a progress line with the elapsed time):
#   1. validate --backend dram --calibrate: pinned host -> GPU copies against the planner
#      with this GPU's own probed bandwidth (tests the load term's shape);
#   2. validate --backend dram: the same against the planner's shipped host bandwidth
#      (48.3 GB/s fitted to public H100 points): the falsifiable check;
#   3. a sweep: prompts of 2k, 8k, 32k tokens x hit ratios 0, 0.5, 0.9, 0.98, one request
#      each (each preceded by an unmeasured request that writes its hit prefix);
#   4. the measured-TTFT rows of all three -> gpu_check_points.json / .csv in calibrate's
#      columns (gpu, model, engine, tier, prompt_tokens, hit_tokens, concurrency, ttft_ms;
#      every third row held out).
# Files in $OUT (default ./out/gpu_check): env.txt, validate_dram_calibrate.json,
# validate_dram.json, sweep.json, gpu_check_points.json, gpu_check_points.csv, gpu_check.log.
# A FAIL verdict (exit 5) of a validate run is a result and is kept; any other error stops.
#
# Python: the machine's python3 if it imports torch with CUDA; else a venv made here with
# torch installed into it (from wheels in $WHEELS, default ./.whl, when that folder exists:
# the device machine cannot reach PyPI). xmemplan runs from this checkout (PYTHONPATH); on
# the device it needs numpy, numba, typer, rich and xxhash, which its image has.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
DRY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$arg' (use --dry-run)" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$REPO/out/gpu_check}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
start=$(date +%s)
say() { echo "[gpu_check $(( $(date +%s) - start ))s] $*" | tee -a "$LOG"; }
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 NO_COLOR=1 COLUMNS=100

# -- python with torch ------------------------------------------------------------------------
PY="${PYTHON:-python3}"
if [ "$DRY" = 1 ]; then
  say "dry run: CPU, small sizes, torch not required ($($PY --version 2>&1))"
elif ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "no torch with CUDA in $PY: making a venv with torch"
  VENV="$REPO/.gpu-check-venv"
  "$PY" -m venv --system-site-packages "$VENV"
  WHEELS="${WHEELS:-$REPO/.whl}"
  if [ -d "$WHEELS" ]; then
    "$VENV/bin/pip" install -q --no-index --find-links "$WHEELS" torch 2>&1 | tee -a "$LOG"
  else
    "$VENV/bin/pip" install -q torch 2>&1 | tee -a "$LOG"
  fi
  PY="$VENV/bin/python"
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || { say "torch installed but sees no CUDA GPU: stopping"; exit 4; }
fi
"$PY" -c 'import xmemplan.cli.main' \
  || { say "cannot import xmemplan from $REPO with $PY (numpy, numba, typer, rich, xxhash?)"; exit 3; }

# -- the GPU and the catalog name for it ----------------------------------------------------
{
  date -u
  "$PY" --version
  "$PY" - <<'EOF'
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", p.multi_processor_count, "SMs")
except ImportError:
    print("torch not installed")
EOF
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt" | tee -a "$LOG"
GPU_NAME="${GPU:-$("$PY" - <<'EOF'
try:
    import torch
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
except ImportError:
    name = ""
n = name.upper()
print("h200-sxm" if "H200" in n else "h100-sxm" if "H100" in n else "b200" if "B200" in n
      else "h100-sxm")
EOF
)}"
MODEL="${MODEL:-qwen3-30b-a3b}"
say "catalog gpu $GPU_NAME, model $MODEL"

if [ "$DRY" = 1 ]; then
  SIZE=(--sessions 1 --rounds 3 --prompt-tokens 1024 --growth-tokens 512 --max-bytes 1GB)
  PROMPTS=(1024 2048)
  MAXB=2GB
else
  SIZE=(--max-bytes 16GB)
  PROMPTS=(2048 8192 32768)
  MAXB=48GB
fi
HITS=(0 0.5 0.9 0.98)

run_validate() {  # $1: output json, rest: flags. Keeps exit 0 (PASS) and 5 (FAIL).
  local out="$1"; shift
  local rc=0
  "$PY" -m xmemplan -q validate --model "$MODEL" --gpu "$GPU_NAME" --format json "$@" \
    > "$out" 2>> "$LOG" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    tail -5 "$LOG" >&2
    say "validate $* failed with exit $rc"
    exit "$rc"
  fi
  "$PY" - "$out" "$rc" <<'EOF' | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
w = {c["name"]: c for c in d["classes"]}
parts = [f"{n}: load p50 {c['load_p50_ms']:.4g} ms vs {c['predicted_load_p50_ms']:.4g}"
         + (f", TTFT p50 {c['ttft_p50_ms']:.4g} vs {c['predicted_ttft_p50_ms']:.4g}"
            if c.get("ttft_p50_ms") is not None else "") for n, c in w.items() if n != "all"]
print(f"  {'PASS' if sys.argv[2] == '0' else 'FAIL'} error {d['error']:.1%}; "
      f"predicted {d['predicted_bandwidth_bytes_per_s'] / 1e9:.4g} GB/s, achieved "
      f"{d['achieved_bandwidth_bytes_per_s'] / 1e9:.4g} GB/s; " + "; ".join(parts))
EOF
}

say "1/4 validate --backend dram --calibrate"
run_validate "$OUT/validate_dram_calibrate.json" --backend dram --calibrate "${SIZE[@]}"
say "2/4 validate --backend dram (planner's shipped host bandwidth)"
run_validate "$OUT/validate_dram.json" --backend dram "${SIZE[@]}"

say "3/4 sweep: prompts ${PROMPTS[*]} x hit ratios ${HITS[*]}"
"$PY" - "$OUT/sweep_workload.json" "${#HITS[@]}" "${PROMPTS[@]}" -- "${HITS[@]}" <<'EOF'
import json, sys
out, nh = sys.argv[1], int(sys.argv[2])
rest = sys.argv[3:]
cut = rest.index("--")
prompts, hits = [int(x) for x in rest[:cut]], [float(x) for x in rest[cut + 1:]]
pairs = [(p, int(p * h) // 64 * 64) for p in prompts for h in hits]
doc = {"schema": "xmemplan.profile", "schema_version": 1, "requests": len(pairs),
       "prompt_tokens": {"p50": prompts[len(prompts) // 2]}, "hit_ratio": {"token_hit_ratio": 0.5},
       "requests_sample": {"prompt_tokens": [p for p, _ in pairs],
                           "hit_tokens": [h for _, h in pairs]}}
json.dump(doc, open(out, "w"))
EOF
N=$(( ${#PROMPTS[@]} * ${#HITS[@]} ))
run_validate "$OUT/sweep.json" --backend dram --calibrate --workload "$OUT/sweep_workload.json" \
  --max-requests "$N" --max-bytes "$MAXB" --repeats 3
rm -f "$OUT/sweep_workload.json"

say "4/4 points for xmemplan calibrate"
"$PY" -m xmemplan.validate.points "$OUT/gpu_check_points.json" "$OUT/gpu_check_points.csv" \
  "$OUT/validate_dram_calibrate.json" "$OUT/validate_dram.json" "$OUT/sweep.json" | tee -a "$LOG"
if [ "$DRY" = 1 ]; then
  say "dry run done: no GPU, so no TTFT points (the load columns are in the validate JSON)"
else
  say "done; read the points with: xmemplan calibrate $OUT/gpu_check_points.json"
fi
