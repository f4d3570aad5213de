#!/usr/bin/env bash
# One device call: a quick probe, then benchmarks/diag/diag_gap_rounds.py at each JOB's shape with
# GPU experts and the quick probe's CPU MoE step in every round, so the runner's hybrid MoE with its
# GPU experts, the model's own layer (whole and masked) and the quick layer the cost model carries to
# the model's shape share each round's moment. The files come back in $OUT/gap-rounds-TAG.tgz
# (benchmarks/device_common.sh); read each one on the development machine against the call's quick
# profile:
#
#   python benchmarks/diag/diag_gap_rounds.py --read DIR/gap-rounds-MODEL-TAG.json --profile DIR/quick-TAG.profile.json
#
# JOB is MODEL:METHOD:GPU_EXPERTS:SIZES:ROUNDS:SECONDS (SIZES comma-separated; SECONDS caps the job,
# and a job cut off keeps the rounds it finished).
#
#   TAG=h100z bash benchmarks/diag/diag_gap_rounds.sh mixtral-8x7b:BF16:2:256,768:10:200 glm-4.5-air:BF16:8:1024,3072:8:180
set -u
TAG=${TAG:?name the call: TAG=h100z}
THREADS=${THREADS:-11}
cd "$(dirname "$0")/../.."
# shellcheck source=../device_common.sh
source benchmarks/device_common.sh
device_results "gap-rounds-$TAG"
describe_machine
step "quick" 200 "quick-$TAG.log" python -m kttune.cli probe --quick --skip-host-ram --fresh \
  --out "$R/quick-$TAG.profile.json"
for job in "$@"; do
  IFS=: read -r model method gpu sizes rounds seconds <<< "$job"
  step "rounds $model" "$seconds" "rounds-$model-$TAG.log" python benchmarks/diag/diag_gap_rounds.py --out "$R" \
    --model "$model:$method" --sizes "$sizes" --rounds "$rounds" --threads "$THREADS" --gpu-experts "$gpu" \
    --quick-every 1 --probe-every 0 --tag "$model-$TAG"
done
