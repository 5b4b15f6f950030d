#!/usr/bin/env bash
# Builds here what the GPU machine needs (x86-64, CPython 3.12, no LLVM there):
# the compiler library with LLVM linked in (from `make build`) and a cp312 _C
# extension, staged with the Python package in .gpu/pkg (with the runtime library
# and headers for AOT, as in the wheel). Then call, through the device tool with
# carry [".gpu"]:  bash scripts/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
make build >/dev/null
[ -x .venv312/bin/python ] || "$PY312" -m venv .venv312
.venv312/bin/python -c "import pybind11" 2>/dev/null || .venv312/bin/pip install -q pybind11==2.13.6
rm -rf .gpu && mkdir -p .gpu/pkg
cp -r frontend/tilefuse .gpu/pkg/
rm -f .gpu/pkg/tilefuse/_C*.so
find .gpu/pkg -name __pycache__ -prune -exec rm -rf {} +
cp build/compiler/libtilefuse_compiler.so .gpu/pkg/tilefuse/
# The runtime library and headers where the wheel has them, for AOT launch functions (tilefuse.aot).
mkdir -p .gpu/pkg/tilefuse/lib .gpu/pkg/tilefuse/include
cp build/runtime/libtilefuse_runtime.a .gpu/pkg/tilefuse/lib/
cp -r runtime/include/. .gpu/pkg/tilefuse/include/
strip --strip-unneeded .gpu/pkg/tilefuse/libtilefuse_compiler.so
ext=$(.venv312/bin/python -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
g++ -O2 -std=c++20 -shared -fPIC -fvisibility=hidden frontend/csrc/*.cpp \
  -Icompiler/include -Iruntime/include -isystem /usr/local/cuda/include \
  $(.venv312/bin/python -m pybind11 --includes) \
  -Lbuild/compiler -ltilefuse_compiler build/runtime/libtilefuse_runtime.a -ldl \
  -Wl,-rpath,'$ORIGIN' -o ".gpu/pkg/tilefuse/_C$ext"
echo "staged: $(du -sh .gpu | cut -f1) in .gpu/pkg"
