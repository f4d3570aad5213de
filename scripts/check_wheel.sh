#!/usr/bin/env bash
# Install kttune as a user does (a built wheel, not the editable checkout) and run it from outside the
# source tree. `.ci/run` runs this after the tests.
#   1. build the wheel from the files git ships (tracked and new, not ignored: no stale build/ output)
#   2. fresh venv, the wheel without extras (no torch): the README's main job runs, every module but
#      the measure layer (probes, kernels, the path runner) imports, and `kttune probe` names the extra it needs
#   3. the pinned CPU torch, then the wheel's measure and plot extras: every module imports, and the
#      main job writes its report
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kttune-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "check_wheel: $*"; }
pip_q() { "$@" -q --disable-pip-version-check; }

mkdir -p "$WORK/src" "$WORK/run"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$WORK/src"

# Without network a build-isolated wheel needs setuptools from an index: use this Python's when it
# builds wheels by itself (setuptools >= 70.1; pyproject asks >= 68), else let pip fetch it.
if "$PY" -c 'import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split(".")[:2])) < (70, 1))' 2>/dev/null; then
  iso=--no-build-isolation
else
  iso=
fi
pip_q "$PY" -m pip wheel --no-deps $iso -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/kttune-*.whl)
say "built $(basename "$WHEEL")"

"$PY" -m venv "$WORK/venv"
V="$WORK/venv/bin"
pip_q "$V/python" -m pip install "$WHEEL"
cd "$WORK/run"   # outside the source tree: only the installed copy can be imported
export KTTUNE_CACHE_DIR="$WORK/cache"
"$V/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is not None)' \
  || { say "torch came with the plain wheel; it belongs in the measure extra"; exit 1; }
"$V/kttune" --version
"$V/kttune" search --model qwen3-30b-a3b --vram 32G > main-job.txt
grep -q "python -m sglang.launch_server" main-job.txt || { cat main-job.txt; say "no launch command"; exit 1; }
say "main job without torch: $(grep -c . main-job.txt) lines, launch command printed"
"$V/python" "$REPO/scripts/check_install.py" --source "$WORK/src" --no-torch
set +e
"$V/kttune" probe --quick 2> probe-err.txt; rc=$?
set -e
if [ "$rc" != 2 ] || ! grep -q "kttune\[measure\]" probe-err.txt; then
  cat probe-err.txt; say "probe without torch: exit $rc, expected 2 naming kttune[measure]"; exit 1
fi
say "probe without torch: $(cat probe-err.txt)"

pip_q "$V/python" -m pip install "torch==${KTTUNE_TORCH_VERSION:-2.13.0}"
pip_q "$V/python" -m pip install "$WHEEL[measure,plot]"
"$V/python" "$REPO/scripts/check_install.py" --source "$WORK/src"
"$V/kttune" search --model qwen3-30b-a3b --vram 32G --report report > main-job-torch.txt
test -s report/report.md || { say "the main job's --report wrote no report.md"; exit 1; }
say "ok: the wheel runs the main job with and without torch, and every module imports from site-packages"
