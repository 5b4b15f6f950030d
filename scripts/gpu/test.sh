#!/usr/bin/env bash
# On the GPU machine (repo root, .gpu carried): the GPU tests in parallel processes
# (pytest-xdist; compiles dominate a cold run, and each process compiles on its own core),
# one line per test in $OUT/gpu-tests.log so that a run cut by its time limit still names
# every result. Usage: scripts/gpu/test.sh [pytest args, e.g. files or -k]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/.gpu/pkg:$PWD" PYTHONUNBUFFERED=1 TILEFUSE_CACHE_DIR=${TILEFUSE_CACHE_DIR:-/tmp/tilefuse-cache}
OUT=${OUT:-/tmp/tilefuse-out}
mkdir -p "$OUT"
export TILEFUSE_FAIL_LOG=${TILEFUSE_FAIL_LOG:-$OUT/gpu-failures.log}
jobs=${GPU_TEST_JOBS:-$(nproc)}
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(tests/gpu)
python3 -m pytest -p no:cacheprovider -m gpu -n "$jobs" -v -rf --timeout "${GPU_TEST_TIMEOUT:-300}" \
  -p no:benchmark "${args[@]}" >"$OUT/gpu-tests.log" 2>&1
rc=$?
grep -E "^FAILED|^ERROR| (passed|failed|error)" "$OUT/gpu-tests.log" | tail -40
echo "passed: $(grep -c ' PASSED ' "$OUT/gpu-tests.log")  failed: $(grep -c ' FAILED ' "$OUT/gpu-tests.log")  skipped: $(grep -c ' SKIPPED ' "$OUT/gpu-tests.log")"
exit $rc
