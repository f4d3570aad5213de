# Sourced by the scripts that run as one device call (bench_quick_transfer.sh,
# bench_thread_interp_runner.sh, bench_tp_paths.sh): results under /tmp/kttune-r/NAME (outside $OUT:
# the device returns at most 8 files, and a call cut off at its limit returns whichever it finds),
# packed into $OUT/NAME.tgz after every step and on exit, each step's exit status and seconds logged
# to machine.txt.

# device_results NAME: the results folder $R and the archive $OUT/NAME.tgz, packed on exit.
# DEVICE_IMPORTS adds modules a call's steps need beyond these (optuna for a search: it is left out
# of the check since probes and the runner do not import it, so a call may carry .devcarry without
# it when the working tree is near the device's 64 MiB carry limit).
# Since 2026-12-07 the tracked tree alone is 53 MB and .devcarry/site (12 MB) no longer fits beside it:
# pack it (`tar cJf .devcarry/site.tar.xz -C .devcarry site`, 2.4 MB), carry [".devcarry/site.tar.xz"]
# and start the call with `tar xJf .devcarry/site.tar.xz -C .devcarry`. Since the twenty-sixth session the
# tree (58 MB) leaves room only for `xz -9e` (6.4 MB) or a site without optuna, SQLAlchemy, alembic, mako and
# colorlog (2.8 MB: `tar cf - -C .devcarry --exclude='site/sqlalchemy*' --exclude='site/alembic*'
# --exclude='site/optuna*' --exclude='site/mako*' --exclude='site/colorlog*' site | xz -9e > .devcarry/site-small.tar.xz`),
# which the probes and the runner need none of.
device_results() {
  R=/tmp/kttune-r/$1
  ARCHIVE=${OUT:-/tmp/out}/$1.tgz
  mkdir -p "$R"
  trap pack EXIT
  # every step needs these: one line and exit 3 at once rather than a failed step each
  if ! python -c "import typer, rich, kt_kernel, kttune.cli${DEVICE_IMPORTS:+, $DEVICE_IMPORTS}" > "$R/imports.txt" 2>&1; then
    echo "imports failed: $(tail -1 "$R/imports.txt")" | tee -a "$R/machine.txt"
    exit 3
  fi
}

pack() { tar czf "$ARCHIVE" -C "$R" . ; }

# describe_machine: what the device is, into machine.txt (CPU, memory, GPUs).
describe_machine() {
  { date; echo "uptime_s $(cut -d" " -f1 /proc/uptime)"; lscpu; grep -m4 -E "^(cpu family|model|stepping|microcode)\s*:" /proc/cpuinfo; nproc; free -g; nvidia-smi -L; } > "$R/machine.txt" 2>&1
}

# step LABEL SECONDS LOG CMD...: CMD under a time limit with its output in $R/LOG, its exit status
# and seconds in machine.txt, then the results packed.
step() {
  local label=$1 limit=$2 log=$3 s0
  shift 3
  s0=$(date +%s)
  timeout "$limit" "$@" > "$R/$log" 2>&1
  echo "$label rc=$? $(( $(date +%s) - s0 )) s" | tee -a "$R/machine.txt"
  pack
}

# sweeps SUFFIX PROFILE JOB...: for each MODEL:METHOD:GPU_EXPERTS:SIZES, the path runner's forced sweep
# at $THREADS threads (3 interleaved repeats), predicted from PROFILE, into $R/crossover-MODEL$SUFFIX.json.
sweeps() {
  local suffix=$1 profile=$2 job model method n sizes max
  shift 2
  for job in "$@"; do
    IFS=: read -r model method n sizes <<< "$job"
    max=${sizes##*,}
    step "paths $model" 100 "crossover-$model$suffix.log" python -m kttune.cli paths "$model" --kt-method "$method" \
      --gpu-experts "$n" --sweep "$sizes" --cpuinfer "$THREADS" --repeats 3 --prompts "$max" --chunks "$max" \
      --profile "$profile" --out "$R/crossover-$model$suffix.json"
  done
}
