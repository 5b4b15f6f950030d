#!/usr/bin/env bash
# On the GPU machine (repo root, .gpu carried, as scripts/gpu/run.sh): the library kernels
# (scripts/gpu/sanitize_kernels.py: MoE grouped GEMMs fwd/dgrad/wgrad, quantizers,
# activations, the MLP, the tutorials) at small shapes under compute-sanitizer memcheck and
# racecheck. Fails on any report. Logs go to $OUT (sanitize-<tool>.log) when OUT is set.
# torch's caching allocator is off, so that every tensor is its own allocation and an access
# past its end is memcheck's to see; every launch is checked (torch's own kernels too).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/.gpu/pkg:$PWD" PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
export TILEFUSE_CACHE_DIR=${TILEFUSE_CACHE_DIR:-/tmp/tilefuse-cache}
OUT=${OUT:-/tmp/tilefuse-out}
mkdir -p "$OUT"
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
[ -x "$SAN" ] || { echo "sanitize.sh: compute-sanitizer not found (CUDA_HOME/bin)" >&2; exit 2; }
python3 scripts/gpu/sanitize_kernels.py "$@" >/dev/null || { echo "sanitize.sh: the kernels fail without the sanitizer" >&2; exit 1; }  # compiles, fills the cache
rc=0
for tool in memcheck racecheck; do
  start=$(date +%s)
  "$SAN" --tool "$tool" --error-exitcode 99 --print-limit 50 python3 scripts/gpu/sanitize_kernels.py "$@" \
    > "$OUT/sanitize-$tool.log" 2>&1
  r=$?
  echo "sanitize.sh: $tool exit $r in $(( $(date +%s) - start )) s ($(grep -c '^========= ' "$OUT/sanitize-$tool.log") report lines)"
  tail -3 "$OUT/sanitize-$tool.log"
  [ $r -eq 0 ] || rc=1
done
exit $rc
