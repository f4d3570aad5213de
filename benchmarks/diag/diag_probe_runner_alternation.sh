#!/usr/bin/env bash
# A probe process and a runner process alternated three times on one instance, glm-4.5-air BF16, 11 threads,
# all 128 experts on the CPU: does a separate probe process time kt-kernel slower than the runner's process?
# Run from the repository root of an uninstalled checkout on the GPU box (the links below are the ones
# docs/tune.md describes; .devcarry/site holds kt-kernel and the deps); results go to $OUT/r.
#   bash benchmarks/diag/diag_probe_runner_alternation.sh
for d in probes kernels profiles; do ln -sfn ../$d kttune/$d; done
export PYTHONPATH=$PWD/.devcarry/site:$PWD
R=$OUT/r; mkdir -p $R
T0=$(date +%s)
for i in 1 2 3; do
  [ $(( $(date +%s) - T0 )) -gt 440 ] && { echo "stop: time"; break; }
  echo "== probe $i at $(( $(date +%s) - T0 )) s"
  python -m kttune.cli probe --model glm-4.5-air --methods BF16 --threads 11 --max-tokens 2048 --skip-host-ram --fresh --cpu-only --out $R/probe-runner-alternation-probe-$i.profile.json > $R/probe-runner-alternation-probe-$i.log 2>&1 || tail -5 $R/probe-runner-alternation-probe-$i.log
  python - $R/probe-runner-alternation-probe-$i.profile.json <<'PY'
import json,sys
p=json.load(open(sys.argv[1]))
for c in p['curves']:
    if c['kind']=='cpu_moe':
        print('probe cpu_moe', {int(pt['x']):round(pt['t_ms'],1) for pt in c['points'] if pt['x']>=256})
PY
  [ $(( $(date +%s) - T0 )) -gt 480 ] && { echo "stop: time"; break; }
  echo "== runner $i at $(( $(date +%s) - T0 )) s"
  python -m kttune.cli paths glm-4.5-air --kt-method BF16 --gpu-experts 0 --sweep 1024,2048 --cpuinfer 11 --repeats 5 --prompts 2048 --chunks 2048 --profile $R/probe-runner-alternation-probe-$i.profile.json --out $R/probe-runner-alternation-runs-$i.json > $R/probe-runner-alternation-runs-$i.log 2>&1 || tail -5 $R/probe-runner-alternation-runs-$i.log
  python - $R/probe-runner-alternation-runs-$i.json <<'PY'
import json,sys,statistics
d=json.load(open(sys.argv[1]))
for r in d['runs']:
    if r.get('forced_path')=='hybrid':
        f=r['forwards'][0]
        print('runner hybrid', f['tokens'], 'moe_ms', [round(x,1) for x in f['moe_ms']], 'measured per layer median', round(r['timing']['measured_ms']['median']/2,1))
PY
done
echo "done at $(( $(date +%s) - T0 )) s"
