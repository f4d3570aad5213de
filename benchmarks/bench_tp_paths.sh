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
THREADS=$1
shift
R=${OUT:-/tmp/out}/r
mkdir -p "$R"
pack() { tar czf "${OUT:-/tmp/out}/tp-paths.tgz" -C "$R" . ; }
trap pack EXIT
{ nvidia-smi topo -m; nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv; lscpu | head -20; } > "$R/machine.txt" 2>&1
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 120 python -m pytest -q -p no:cacheprovider tests/runner/test_tp_slots.py > "$R/test-tp-slots.log" 2>&1
  echo "slot tests rc $?"
fi
if [ -n "${DIAG_MODELS:-}" ]; then  # where a TP load's time goes (benchmarks/diag/diag_tp_pipeline.py)
  timeout 200 python benchmarks/diag/diag_tp_pipeline.py --models "$DIAG_MODELS" --threads "$THREADS" \
    --out "$R/diag-tp-pipeline.json" > "$R/diag-tp-pipeline.log" 2>&1
  echo "diag rc $?"
  pack
fi
for job in "$@"; do
  IFS=: read -r MODEL METHOD N SIZES <<< "$job"
  MAX=${SIZES##*,}
  timeout 200 python -m kttune.cli probe --model "$MODEL" --methods "$METHOD" --threads "$THREADS" \
    --max-tokens "$MAX" --skip-host-ram --fresh --out "$R/probe-$MODEL-x2.profile.json" > "$R/probe-$MODEL-x2.log" 2>&1
  echo "probe $MODEL rc $?"
  timeout 330 python benchmarks/bench_tp_paths.py measure --model "$MODEL" --method "$METHOD" --tp "${TP_ORDER:-2,1,2,1}" \
    --gpu-experts "$N" --cpuinfer "$THREADS" --sizes "$SIZES" --rounds "${ROUNDS:-5}" --out "$R" > "$R/tp-$MODEL.log" 2>&1
  echo "tp $MODEL rc $?"
  tail -3 "$R/tp-$MODEL.log"
  pack
done
