#!/usr/bin/env bash
# Does the quick probe's matrix-kernel rate hold at the rows per expert the hybrid path runs? The
# quick layer (H1024 x I512, 32 experts, top-8) at its default 256 tokens gives each expert at most
# 64 rows, so the rate behind every hybrid forward of a BF16 model (GLM-4.5-Air at 3,072 tokens:
# 192 rows an expert) rests on one or two points of 20-256 tokens. One device call: quick probes at
# the default series and at `--max-tokens 1024` (256 rows an expert) in turn, twice (ABBA), then the
# path runner's forced sweeps at THREADS; benchmarks/bench_transfer.py predicts the sweeps from each.
#
#   TAG=a THREADS=11 bash benchmarks/bench_quick_tokens.sh MODEL:METHOD:GPU_EXPERTS:SIZES [...]
#
# Results go to /tmp/kttune-r/quick-tokens-TAG, packed into $OUT/quick-tokens-TAG.tgz
# (benchmarks/device_common.sh).
set -u
source "$(dirname "$0")/device_common.sh"
TAG=${TAG:-a}
THREADS=${THREADS:-11}
device_results "quick-tokens-$TAG"
describe_machine
quick() {  # quick NAME [ARGS...]
  local name=$1
  shift
  step "quick $name" 200 "quick-$name.log" python -m kttune.cli probe --quick --skip-host-ram --fresh "$@" \
    --out "$R/quick-$name.profile.json"
}
quick 256-1
quick 1024-1 --max-tokens 1024
sweeps "" "$R/quick-256-1.profile.json" "$@"
quick 1024-2 --max-tokens 1024
quick 256-2
