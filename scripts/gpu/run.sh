#!/usr/bin/env bash
# On the GPU machine (repo root, .gpu carried): GPU tests, then benchmarks.
# Results go to $OUT (gpu-tests.log, bench.json, autotune.json) when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/.gpu/pkg:$PWD" PYTHONUNBUFFERED=1 TILEFUSE_CACHE_DIR=/tmp/tilefuse-cache
OUT=${OUT:-/tmp/tilefuse-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import tilefuse, torch; print('tilefuse', tilefuse.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())"
OUT="$OUT" bash scripts/gpu/test.sh "$@"
rc=$?
python3 bench/gpu_bench.py --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
python3 bench/autotune_bench.py --out "$OUT/autotune.json" 2>&1 | tee "$OUT/autotune.log"
exit $rc
