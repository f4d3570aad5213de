#!/usr/bin/env bash
# On the GPU box: time `kttune probe --quick --fresh`, pick flags for qwen3-30b-a3b at 32G from that
# quick profile and from the shipped full profile, and time both picks on the path runner (K = 2
# layers, the default workload's prompt lengths). Results go to $1 (default: benchmarks/results/<today>-<this machine>/,
# benchmarks/results_layout.py).
set -euo pipefail
out=${1:-$(python3 benchmarks/results_layout.py)}
mkdir -p "$out"
start=$(python3 -c "import time; print(time.time())")
python3 -m kttune.cli probe --quick --fresh --out "$out/quick-profile.json" > "$out/quick-probe.log" 2>&1
python3 -c "import time; print('quick probe wall (with Python start-up): %.1f s' % (time.time() - $start))" | tee "$out/quick-probe-wall.txt"
for tag in quick full; do
  prof=$([ $tag = quick ] && echo "$out/quick-profile.json" || echo h200-pcie5-xeon-amx-16c)
  python3 -m kttune.cli search --model qwen3-30b-a3b --vram 32G --seed 1 --profile "$prof" --json > "$out/pick-$tag.json" 2>/dev/null
  args=$(python3 -c "
import json; d = json.load(open('$out/pick-$tag.json')); f = d['pick']['flags']
prompts = ','.join(d['pick']['predicted']['prefill_ms_by_prompt_tokens'])
print(f\"--gpu-experts {f['num_gpu_experts']} --chunks {f['chunked_prefill_size']} --threshold {f['gpu_prefill_token_threshold']} --cpuinfer {f['cpuinfer_threads']} --prompts {prompts}\")")
  echo "$tag pick: $args"
  python3 -m kttune.cli paths qwen3-30b-a3b --layers 2 $args --profile h200-pcie5-xeon-amx-16c --out "$out/pick-$tag-paths.json" --json > /dev/null 2>>"$out/quick-probe.log"
  python3 -c "
import json; d = json.load(open('$out/pick-$tag-paths.json')); rs = d['runs']
print('$tag: mean extrapolated prefill %.0f ms over %d prompts' % (sum(r['extrapolated_ms'] for r in rs) / len(rs), len(rs)))"
done
