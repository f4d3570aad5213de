#!/usr/bin/env bash
# kttune as a new user meets it, as a table: each row is a command, its exit code, its widest stdout
# line at the COLUMNS shown, the tracebacks on stderr (always 0) and the first line of stderr. A fresh
# cache (KTTUNE_CACHE_DIR) and an empty working folder; no GPU needed. Run it in the environment
# kttune is installed in. Exit codes: 0 an answer, 1 no configuration fits, 2 bad input.
#   bash scripts/new_user_tour.sh > tour.md
export KTTUNE_CACHE_DIR=$(mktemp -d)
W=$(mktemp -d); cd "$W"
row() { # cols label cmd...
  local cols=$1 label=$2; shift 2
  local out err rc
  out=$(COLUMNS=$cols "$@" 2>"$W/err"); rc=$?
  local width=$(printf '%s\n' "$out" | python3 -c "import sys; print(max((len(l) for l in sys.stdin.read().splitlines()), default=0))")
  local e=$(grep -v '^\s*$' "$W/err" | grep -v "Core .* not found\|Goodbye\|CPUInfer" | head -1 | cut -c1-150)
  local tb=$(grep -c Traceback "$W/err")
  printf '| %s | %s | %s | %s | %s |\n' "$label" "$rc" "$width" "$tb" "$e"
}
echo "| case | exit | widest line | tracebacks | first stderr line |"
echo "|---|---|---|---|---|"
row 80 "kttune (no args)" kttune
row 80 "kttune --version" kttune --version
row 80 "main job, 80 cols" kttune search --model qwen3-30b-a3b --vram 32G
row 60 "main job, 60 cols" kttune search --model qwen3-30b-a3b --vram 32G
row 80 "--vram 8G on the RTX 4090 profile (kt run row over budget)" kttune search --model qwen3-30b-a3b --vram 8G --profile datasheet-rtx4090-pcie4-xeon-amx-64c
row 80 "search --json" kttune search --model qwen3-30b-a3b --vram 32G --json
kttune search --model qwen3-30b-a3b --vram 32G --json > pick.json 2>/dev/null
row 80 "measured search (model evaluator), 80 cols" kttune search --model qwen3-30b-a3b --vram 32G --measure --evaluator model --trials 8
row 80 "simulate -w rag" kttune simulate -m qwen3-30b-a3b -w rag --requests 200
row 80 "simulate --from-search pick.json" kttune simulate --from-search pick.json --requests 200
echo '{not json' > bad.json
row 80 "simulate -w bad.json (broken JSON)" kttune simulate -m qwen3-30b-a3b -w bad.json
CMD=$(python3 -c "import json; import shlex; print(shlex.join(json.load(open('pick.json'))['command']))" 2>/dev/null)
row 80 "explain -- (the printed command)" bash -c "kttune explain -- $CMD"
row 80 "search --seed -1" kttune search --model qwen3-30b-a3b --vram 32G --seed -1
row 80 "--vram 32X" kttune search --model qwen3-30b-a3b --vram 32X
row 80 "--trials nan" kttune search --model qwen3-30b-a3b --vram 32G --trials nan
row 80 "unknown model" kttune search --model no-such-model --vram 32G
cp pick.json pick.bak
row 80 "calibrate onto its own input" kttune calibrate pick.json --out pick.json
cmp -s pick.json pick.bak && echo "| (pick.json unchanged after that) | | | | |"
row 80 "storage with a password, closed port" kttune search --model qwen3-30b-a3b --vram 32G --storage postgresql://u:S3CRETMARK@127.0.0.1:1/db
row 80 "profile derive --gpu list, 80" kttune profile derive --gpu list
row 60 "profile derive --gpu list, 60" kttune profile derive --gpu list
row 80 "probe --help" kttune probe --help
row 80 "profiles" kttune profiles
row 60 "profiles, 60 cols" kttune profiles
row 80 "workloads" kttune workloads
row 80 "tune, no GPU (answers from the model)" kttune tune --model qwen3-30b-a3b --vram 32G
kttune search --model qwen3-30b-a3b --vram 32G | head -1 > /dev/null; echo "| search piped into head -1 | ${PIPESTATUS[0]} | | | |"
grep -rl S3CRETMARK "$W" "$KTTUNE_CACHE_DIR" 2>/dev/null | grep -v "/err$" | sed 's/^/| password found in: /; s/$/ | | | | |/'
grep -l S3CRETMARK "$W/err" >/dev/null && echo "| password in last stderr | | | | |"
