#!/usr/bin/env bash
# MXFP4 on the GPU box, in one device call (docs/path-runner.md#mxfp4): the path runner's MXFP4 paths
# (kt-kernel's MXFP4 class for the CPU experts and stage A, kttune's 4-bit GEMM with the e2m1 decode
# for the GPU experts, the Triton repack as stage C) checked on CUDA by the GPU tests, then per model
# its own probe (`kttune probe --model MODEL --methods MXFP4`: kt-kernel's MXFP4 CPU curves, the MXFP4
# GPU MoE, its layerwise pipeline) and the runner's forced sweep around its crossover, predicted from
# that probe. benchmarks/bench_mxfp4_runner.py reads the archive and predicts every sweep from the
# model's own probe and from the same instance's quick probe (no MXFP4 curve: the stand-ins).
#
#   TAG=h100at THREADS=11 bash benchmarks/bench_mxfp4_runner.sh      (results: $OUT/mxfp4-runner-TAG.tgz;
#   run it under `timeout 580`)
set -u
source "$(dirname "$0")/device_common.sh"
TAG=${TAG:?name the call: TAG=h100at}
THREADS=${THREADS:-11}
device_results "mxfp4-runner-$TAG"
describe_machine
step "gpu tests" 150 "gpu-tests-$TAG.log" python -m pytest -q -p no:cacheprovider -m gpu \
  tests/kernels/test_grouped_moe.py tests/runner/test_path_runner.py
for job in ${JOBS:-gpt-oss-20b:8:128,256,384,512,768 gpt-oss-120b:8:256,512,768,1024,1536}; do
  IFS=: read -r model n sizes <<< "$job"
  step "own $model" 150 "model-$model-$TAG.log" python -m kttune.cli probe --model "$model" --methods MXFP4 \
    --threads "$THREADS" --skip-host-ram --fresh --out "$R/model-$model-$TAG.profile.json"
  sweeps "-$TAG" "$R/model-$model-$TAG.profile.json" "$model:MXFP4:$n:$sizes"
done
if [ "${QUICK:-1}" = 1 ]; then
  step "quick" 200 "quick-$TAG.log" python -m kttune.cli probe --quick --skip-host-ram --fresh \
    --out "$R/quick-$TAG.profile.json"
fi
