#!/usr/bin/env bash
# On a box with two GPUs (the device tool's nvidia-h200-x2): the TP 2 slot test on the GPUs, then per
# model a `kttune probe --model X` (the instance's own curves, the all-reduce and the two-link copies
# included) and the path runner's forced sweep at TP 2 and TP 1 alternated (benchmarks/bench_tp_paths.py
# measure), everything in one device call so the probe and the runs share the instance. Results are
# packed into $OUT/tp-paths.tgz (the device returns few files).
#
#   [DIAG_MODELS=a,b] [TP_ORDER=2,1,2,1] [ROUNDS=5] [SKIP_TESTS=1] \
#     bash benchmarks/bench_tp_paths.sh THREADS MODEL:METHOD:GPU_EXPERTS:SIZES [...]
set -u
source "$(dirname "$0")/device_common.sh"
THREADS=$1
shift
device_results tp-paths
{ nvidia-smi topo -m; nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv; lscpu | head -20; } > "$R/machine.txt" 2>&1
if [ -z "${SKIP_TESTS:-}" ]; then
  step "slot tests" 120 test-tp-slots.log python -m pytest -q -p no:cacheprovider tests/runner/test_tp_slots.py
fi
if [ -n "${DIAG_MODELS:-}" ]; then  # where a TP load's time goes (benchmarks/diag/diag_tp_pipeline.py)
  step diag 200 diag-tp-pipeline.log python benchmarks/diag/diag_tp_pipeline.py --models "$DIAG_MODELS" \
    --threads "$THREADS" --out "$R/diag-tp-pipeline.json"
fi
for job in "$@"; do
  IFS=: read -r MODEL METHOD N SIZES <<< "$job"
  MAX=${SIZES##*,}
  step "probe $MODEL" 200 "probe-$MODEL-x2.log" python -m kttune.cli probe --model "$MODEL" --methods "$METHOD" \
    --threads "$THREADS" --max-tokens "$MAX" --skip-host-ram --fresh --out "$R/probe-$MODEL-x2.profile.json"
  step "tp $MODEL" 330 "tp-$MODEL.log" python benchmarks/bench_tp_paths.py measure --model "$MODEL" --method "$METHOD" \
    --tp "${TP_ORDER:-2,1,2,1}" --gpu-experts "$N" --cpuinfer "$THREADS" --sizes "$SIZES" --rounds "${ROUNDS:-5}" \
    --out "$R"
  tail -3 "$R/tp-$MODEL.log"
done
