#!/usr/bin/env bash
# One device call: benchmarks/diag/diag_kt_mask.py at each JOB's shape, so the GPU box answers whether
# kt-kernel skips the experts its `gpu_experts_mask` names when the mask is set at the build
# (sglang-kt's order) or after it (docs/path-runner.md). The files come back in $OUT/kt-mask-TAG.tgz
# (benchmarks/device_common.sh).
#
# JOB is MODEL:TOKENS:MASKED[:METHOD] (METHOD defaults to BF16); THREADS (11) and ROUNDS (6) apply to
# every job.
#
#   TAG=h100aa bash benchmarks/diag/diag_kt_mask.sh mixtral-8x7b:256:2 glm-4.5-air:1024:8 qwen3-30b-a3b:1024:8
set -u
TAG=${TAG:?name the call: TAG=h100aa}
THREADS=${THREADS:-11}
ROUNDS=${ROUNDS:-6}
cd "$(dirname "$0")/../.."
# shellcheck source=../device_common.sh
source benchmarks/device_common.sh
device_results "kt-mask-$TAG-t$THREADS"
describe_machine
for job in "$@"; do
  IFS=: read -r model tokens n method <<< "$job"
  method=${method:-BF16}
  name=$model-$method-$tokens-t$THREADS-$TAG
  step "mask $model $method $tokens tokens" 150 "kt-mask-$name.log" python benchmarks/diag/diag_kt_mask.py \
    --out "$R/kt-mask-$name.json" --model "$model" --method "$method" --tokens "$tokens" --masked "$n" \
    --threads "$THREADS" --rounds "$ROUNDS"
done
