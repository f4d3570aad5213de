#!/usr/bin/env bash
# The user's flow, held out: on one GPU box, `kttune probe --quick` (no model: its representative
# shapes only), then the path runner's forced sweep around each model's crossover, in one device
# call so the probe and the runs share the machine instance. benchmarks/bench_quick_transfer.py then
# predicts every sweep from that quick profile (which measured none of the models' expert shapes,
# layers or attention blocks) and from a shipped profile of another instance. Results go to
# /tmp/kttune-r/quick-transfer-TAG and are packed into $OUT/quick-transfer-TAG.tgz (benchmarks/device_common.sh).
#
#   TAG=a THREADS=11 bash benchmarks/bench_quick_transfer.sh MODEL:METHOD:GPU_EXPERTS:SIZES [...]
#
# 2026-12-04, H200 box: TAG=a, b (one instance) and c (another); the models and sizes are in
# benchmarks/results/2026-12-04-h200-pcie5-xeon-amx-16c/quick-transfer-crossover-*.json ("request").
# 2026-12-05, H100 box: TAG=h100a, h100hog (one instance), h100b, h100c (AGAIN=1 LATE=1), h100d then
# h100e LATE=1 (one call, one instance), h100f LATE=1, h100g, h100h and h100i LATE=1 NARROW=1, h100k AGAIN=1
# NARROW=1 (run as TAG=h200e) then h100k2 GAP=1 LATE=1 NARROW=1 (one instance); the commands are in
# benchmarks/results/manifest.json.
#
# HOG=N runs N bursty memory neighbours (benchmarks/diag/diag_memory_hog.py: HOG_ON s of copying,
# HOG_OFF s idle) beside the quick probe only, so the sweeps judge a profile measured on a host busy
# part of the time (docs/probe.md#disturbed-points); their figures go to machine.txt.
#
# AGAIN=1 runs a second quick probe straight after the first (quick-TAG-again.profile.json) and LATE=1
# one after the sweeps (quick-TAG-late.profile.json): on a fresh instance they tell whether a probe in
# the instance's first minutes reads slow (docs/probe.md#what-the-host-was-doing); each profile
# records the host's uptime at its start.
#
# NARROW=1 times the layerwise pipeline over a narrow layer per method after each quick probe
# (benchmarks/bench_pipeline_narrow.py --measure: narrow-TAG.profile.json, narrow-TAG-late.profile.json),
# so the sweeps can judge whether the quick probe should stream a second expert size.
#
# COLD=1 times the quick probe's CPU MoE layer warm (one layer) and cold (cycled over copies to twice
# the last-level cache) straight after the quick probe, one round of each, the runner's methods at
# THREADS (benchmarks/bench_cpu_moe_cold.py: cold-warm-TAG.profile.json, cold-TAG.profile.json), so the
# sweeps can judge which one carries the hybrid path (benchmarks/bench_hybrid_cold.py). COLD_TOKENS=N
# times both to N tokens instead of the quick probe's 256 (1024: the rows a BF16 model's long hybrid
# forwards run, docs/probe.md#the-quick-layers-series-how-far-up-in-tokens). COLD_METHODS takes other
# methods (default BF16,FP8,FP8_PERCHANNEL,RAWINT4). Until 2026-12-07 the cold variant cycled over no
# copies (docs/probe.md#the-quick-layer-in-the-cache, the correction): calls m-p and ae-ag timed it warm twice.
#
# SHAPE_LAW=1 adds the shape-law sets to the first quick probe (`kttune probe --shape-law`: r measured on
# this CPU, docs/cost-model.md#the-probe-measures-r-itself), so the sweeps can judge whether a CPU
# generation the constants were not measured on needs its own r (docs/probe.md#one-name-two-cpus).
#
# GAP=1 takes the probe-runner gap apart in one process after the sweeps, at the two BF16 shapes the
# hybrid path is read fastest on the H100 box (benchmarks/diag/diag_probe_runner_gap.py, 1,024-3,072
# tokens, THREADS: gap-TAG.json, gap-TAG.log): whether the runner's hybrid MoE and the probe agree in
# one process there, as they did on the H200 box (docs/cost-model.md#one-machine-instance-seven-models).
# GAP_MODELS and GAP_SIZES take other shapes (defaults: glm-4.5-air:BF16,qwen3-30b-a3b:BF16 and
# 1024,2048,3072).
#
# OWN="MODEL:METHOD ..." probes each model's own layer after the sweeps (and after LATE's probe):
# `kttune probe --model MODEL --methods METHOD --threads THREADS` into model-MODEL-TAG.profile.json, so
# benchmarks/bench_own_layer.py can put the model's own probe beside the quick probe against the same
# instance's sweeps (docs/cost-model.md, "Instance s: the model's own layer").
set -u
source "$(dirname "$0")/device_common.sh"
TAG=${TAG:-a}
THREADS=${THREADS:-11}
HOG=${HOG:-0}
AGAIN=${AGAIN:-0}
LATE=${LATE:-0}
NARROW=${NARROW:-0}
COLD=${COLD:-0}
GAP=${GAP:-0}
SHAPE_LAW=${SHAPE_LAW:-0}
narrow() {  # narrow SUFFIX: the narrow layers beside quick-TAG$SUFFIX.profile.json
  [ "$NARROW" = 1 ] || return 0
  step "narrow$1" 150 "narrow-$TAG$1.log" python benchmarks/bench_pipeline_narrow.py \
    --measure "$R/quick-$TAG$1.profile.json" "$R/narrow-$TAG$1.profile.json"
}
device_results "quick-transfer-$TAG"
describe_machine
hogs=()
for _ in $(seq 1 "$HOG"); do
  python benchmarks/diag/diag_memory_hog.py --mib 1024 --on "${HOG_ON:-0.3}" --off "${HOG_OFF:-0.6}" --seconds 200 \
    >> "$R/hog-$TAG.jsonl" 2>&1 &
  hogs+=($!)
done
if [ "$SHAPE_LAW" = 1 ]; then law=(--shape-law); limit=400; else law=(); limit=200; fi
step "quick ($HOG neighbours)" "$limit" "quick-$TAG.log" python -m kttune.cli probe --quick --skip-host-ram --fresh \
  ${law[@]+"${law[@]}"} --out "$R/quick-$TAG.profile.json"
for h in "${hogs[@]}"; do kill "$h" 2>/dev/null; done
pack
narrow ""
if [ "$COLD" = 1 ]; then
  step "cold" 200 "cold-$TAG.log" python benchmarks/bench_cpu_moe_cold.py --out "$R/cold-$TAG" --threads "$THREADS" \
    --rounds 1 --methods "${COLD_METHODS:-BF16,FP8,FP8_PERCHANNEL,RAWINT4}" ${COLD_TOKENS:+--max-tokens "$COLD_TOKENS"}
  mv "$R/cold-$TAG/warm-1.profile.json" "$R/cold-warm-$TAG.profile.json" 2>/dev/null
  mv "$R/cold-$TAG/cold-1.profile.json" "$R/cold-$TAG.profile.json" 2>/dev/null
  pack
fi
if [ "$AGAIN" = 1 ]; then
  step "quick again" 200 "quick-$TAG-again.log" python -m kttune.cli probe --quick --skip-host-ram --fresh \
    --out "$R/quick-$TAG-again.profile.json"
fi
sweeps "-quick-$TAG" "$R/quick-$TAG.profile.json" "$@"
if [ "$GAP" = 1 ]; then
  step "gap" 200 "gap-$TAG.log" python benchmarks/diag/diag_probe_runner_gap.py --out "$R" \
    --models "${GAP_MODELS:-glm-4.5-air:BF16,qwen3-30b-a3b:BF16}" --threads "$THREADS" \
    --sizes "${GAP_SIZES:-1024,2048,3072}" --repeats 5 --tag "$TAG"
  mv "$R/diag-probe-runner-gap-$TAG.json" "$R/gap-$TAG.json" 2>/dev/null
  pack
fi
if [ "$LATE" = 1 ]; then
  step "quick late" 200 "quick-$TAG-late.log" python -m kttune.cli probe --quick --skip-host-ram --fresh \
    --out "$R/quick-$TAG-late.profile.json"
  narrow -late
fi
for job in ${OWN:-}; do
  model=${job%%:*}
  step "own $model" 120 "model-$model-$TAG.log" python -m kttune.cli probe --model "$model" --methods "${job##*:}" \
    --threads "$THREADS" --skip-host-ram --fresh --out "$R/model-$model-$TAG.profile.json"
done
