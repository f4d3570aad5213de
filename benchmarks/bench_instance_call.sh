#!/usr/bin/env bash
# One device call whose plan depends on the instance that came (the device tool lends an H100 or an
# H200 box, and the H100 box's instances are two CPU generations under one name,
# docs/probe.md#one-name-two-cpus). Each branch runs benchmarks/bench_quick_transfer.sh at 11 threads:
#
# Every branch times the quick layer cold (COLD=1 COLD_TOKENS=1024, BF16 and FP8: cycled past twice the
# L3) straight after the first quick probe, since 2026-12-07: the runner's BF16 hybrid forwards sit 4-6
# ms per GB of CPU experts above the prediction on every box and CPU (bench_hybrid_intercept.py), the
# one cold timing the project has added 5.6-7.4 ms per GB, and the COLD=1 calls before (m-p, ae-ag)
# timed the layer warm twice (docs/probe.md#the-quick-layer-in-the-cache, the correction).
#
# - Sapphire Rapids (family 6 model 143): the four BF16 models, then MiniMax-M2.1, LATE=1 and COLD=1:
#   this generation's quick probes read the BF16 hybrid paths slow (+10% median) where the models'
#   own layers read them within 5-10% (docs/cost-model.md, "Instance af"; the plan before took each
#   BF16 model's own layer, OWN, as well); the quick BF16 layer (96 MiB) about fills this
#   generation's 105 MiB L3;
# - an H200: AGAIN=1 and COLD=1, Qwen3-Next first: its layerwise path (26% on the instance
#   with two quick probes, before the quick probe streamed its narrow layers: docs/probe.md);
# - an Emerald Rapids H100: the four BF16 models and two FP8 ones, with COLD=1, AGAIN=1 and LATE=1 (a second
#   quick probe straight after the first, a third after the sweeps): three probes of one instance,
#   whose merge takes each point's median of three, so a reading one probe's checks do not name
#   (busy instance am's FP8 loop, 2026-12-07: docs/probe.md#a-busy-machine) is outvoted, not averaged.
#   The plans before: LATE=1 alone on ah-am (two probes; the twenty-second and twenty-third
#   sessions), and before those SHAPE_LAW=1 COLD=1 COLD_TOKENS=1024 on n, o and p (the instance's own
#   r did not move the hybrid error on average; the "cold" layer was timed warm), LATE=1 on r and s (the median of
#   two probes; with the merge's left-out readings, docs/probe.md#repeated-probes), OWN on s and t
#   (each model's own layer: bench_own_layer.py), GAP at Mixtral-8x7B's shape on u and v (the
#   probe's and the runner's calls, one after the other in one process), answered on w by
#   benchmarks/diag/diag_gap_rounds.py (the same calls in interleaved rounds agree).
#
# Since 2026-12-07 every quick probe times its CPU MoE layer to 1,024 tokens (docs/probe.md#the-quick-layers-series-how-far-up-in-tokens):
# h100ah (an Emerald Rapids instance) was the first call whose probes read the runner that way; the
# plans stay as they were and their probes are judged as before.
# Carry .devcarry/site packed (benchmarks/device_common.sh says how): the tree no longer fits with it as is.
# Each plan runs in about 300-480 s, so a call started late in a session's device time still ends.
# H100TAG / H200TAG name the call on either box (2026-12-06: h100n, h100o, h100p, h100r, h100s,
# h100t, h100u, h100v and h100x ran on Emerald Rapids instances n-x (w and y: diag_gap_rounds.py and
# two probes with the median rule, by hand; z: diag_gap_rounds.sh), h100q names instance q's lone
# shape-law probe, h100aa ran the Sapphire Rapids plan, h100ac the Emerald Rapids one (ab:
# diag_kt_mask.sh alone), h100ad the Emerald Rapids one again (then each BF16 model's own layer, by
# hand), h100ae the Sapphire Rapids one (2026-12-07; then the four BF16 models' own layers and a late
# quick probe by hand), h100af the Sapphire Rapids one again (then diag_pipeline_modes.py, the own
# layers and a late quick probe by hand) and h100ag the same plan on the same instance (a call that
# asked for an H200 and kept the held H100), h100ah the Emerald Rapids one (then quick probes at 256 and
# 1,024 tokens by hand; h100ai: the quick probe and sweeps again on the same instance), h100aj and h100ak the
# Emerald Rapids plan twice on one instance, h100al and h100am once each on two more (2026-12-07; an: one
# quick probe by hand), h100ao, h100ap and h100aq the Emerald Rapids plan with three quick probes on three
# more (2026-12-07, twenty-fourth session), h100ar the same plan with the quick layer timed cold and MX=1
# (twenty-sixth session; then benchmarks/bench_mxfp4_runner.sh on the same instance; h100as: a quick probe
# and gpt-oss's MXFP4 sweeps by hand on another; h100at a quick probe alone on a third), h100av the same plan
# (2026-12-08, twenty-ninth session, after h100au's gpt-oss call on the same instance), and h200f ran on a busy H200 instance, docs/probe.md#a-busy-machine; pass the
# next letter so a new call's files do not take an earlier one's names). Steps run by hand should pack
# their files into one archive under $OUT as this plan does: the device tool brings back only so many
# files per call, and the late quick probe of h100ae's own-layer call was left out and run again.
#
#   H100TAG=h100ax H200TAG=h200g bash benchmarks/bench_instance_call.sh     (results: $OUT/quick-transfer-TAG.tgz,
#   and with APART=1 $OUT/apart-TAG.tgz; run it under `timeout 580`: the plans take up to 500 s)
set -u
H100TAG=${H100TAG:?name the call: H100TAG=h100ax (h100a-z, h100aa-aw are taken)}
H200TAG=${H200TAG:?name the call: H200TAG=h200g (h200a-f are taken)}
Q="$(dirname "$0")/bench_quick_transfer.sh"
export THREADS=${THREADS:-11}
glm=glm-4.5-air:BF16:8:1024,1536,2048,3072
mixtral=mixtral-8x7b:BF16:2:256,384,512,768
next=qwen3-next-80b-a3b:BF16:8:3072,4096,6144
minimax=minimax-m2.1:FP8:8:64,96,128,192
tag=$H100TAG
export COLD=1 COLD_TOKENS=1024 COLD_METHODS=BF16,FP8
if grep -qE "^model\s+: 143$" /proc/cpuinfo; then
  TAG=$H100TAG LATE=1 bash "$Q" $glm $mixtral qwen3-30b-a3b:BF16:8:1024,1536,2048,3072 $next $minimax
elif nvidia-smi -L 2>/dev/null | grep -q H200; then
  tag=$H200TAG
  TAG=$H200TAG AGAIN=1 bash "$Q" $next $glm $mixtral qwen3-30b-a3b:BF16:8:1536,2048,2560,3072 $minimax
else
  TAG=$H100TAG AGAIN=1 LATE=1 bash "$Q" \
    $glm $mixtral qwen3-30b-a3b:BF16:8:1024,1536,2048,3072 $next $minimax qwen3-235b-a22b-fp8:FP8:8:32,48,64,96
fi
# MX=1 (the default): then kt-kernel's MXFP4 and MXFP8 classes at gpt-oss-20b's experts beside the
# same-bits methods the cost model read for them before the probe timed them, two shuffled rounds at
# THREADS (`bench_mx_methods.py`; measured only on the development VM at 1 thread so far). Its own archive.
if [ "${MX:-1}" = 1 ]; then
  d=$(mktemp -d)
  timeout 100 python benchmarks/bench_mx_methods.py measure --out "$d" --threads "$THREADS" --rounds 2 \
    --models gpt-oss-20b > "$d/mx-methods.log" 2>&1
  echo "mx rc=$?"
  tar czf "${OUT:-.}/mx-$tag.tgz" -C "$d" .
fi
# APART=1: then the full pipeline step of Qwen3-30B-A3B's layer in this process and in a process of
# its own (PipelineStep.apart), three interleaved rounds: the GPU check that a step timed apart reads
# as one timed here (docs/probe.md#the-pipeline-step-and-kt-kernels-kept-writers; five calls on ah-am
# agreed, so it is off by default). Its own archive.
[ "${APART:-0}" = 1 ] || exit 0
d=$(mktemp -d)
timeout 100 python benchmarks/diag/diag_pipeline_modes.py --model qwen3-30b-a3b --threads "$THREADS" --rounds 3 \
  --apart --out "$d" > "$d/diag-pipeline-modes-apart.log" 2>&1
echo "apart rc=$?"
tar czf "${OUT:-.}/apart-$tag.tgz" -C "$d" .
