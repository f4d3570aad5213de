#!/usr/bin/env bash
# A thread count between two measured ones, at the path runner, with the model's own shape measured
# on both sides (what the shipped profile could not give: its 11-thread curves hold only the probe's
# small expert; docs/cost-model.md#a-thread-count-between-two-measured). One device call: for each
# model, `kttune probe --model X --threads LO,MID,HI` (the CPU MoE, stage A and pipeline at the three
# counts), then the runner's forced sweep at MID threads. Offline, benchmarks/bench_thread_interp.py
# predicts the sweep from that probe with the MID curves as measured and left out and read from LO and
# HI:
#
#   LO=11 MID=13 HI=15 bash benchmarks/bench_thread_interp_runner.sh MODEL:METHOD:GPU_EXPERTS:SIZES [...]
#   python benchmarks/bench_thread_interp.py --runs-profile R/probe-MODEL.profile.json \
#       --runs R/sweep-MODEL.json --hold 13 --out FILE.md
#
# Results go to /tmp/kttune-r/thread-interp-runner, packed into $OUT/thread-interp-runner.tgz (benchmarks/device_common.sh).
set -u
source "$(dirname "$0")/device_common.sh"
LO=${LO:-11}
MID=${MID:-13}
HI=${HI:-15}
device_results thread-interp-runner
describe_machine
for job in "$@"; do
  IFS=: read -r MODEL METHOD N SIZES <<< "$job"
  MAX=${SIZES##*,}
  step "probe $MODEL" 240 "probe-$MODEL.log" python -m kttune.cli probe --model "$MODEL" --methods "$METHOD" \
    --threads "$LO,$MID,$HI" --skip-host-ram --fresh --out "$R/probe-$MODEL.profile.json"
  step "paths $MODEL" 120 "sweep-$MODEL.log" python -m kttune.cli paths "$MODEL" --kt-method "$METHOD" \
    --gpu-experts "$N" --sweep "$SIZES" --cpuinfer "$MID" --repeats 3 --prompts "$MAX" --chunks "$MAX" \
    --profile "$R/probe-$MODEL.profile.json" --out "$R/sweep-$MODEL.json"
done
