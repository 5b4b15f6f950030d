# make run   : set up what is missing, build, run the demo
# make test  : set up what is missing, build, run ctest + lit + pytest
# Both are idempotent: a second run only rebuilds what changed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUILD := build
APT_PKGS := llvm-19-dev llvm-19-tools libeigen3-dev libzstd-dev libgtest-dev cmake ninja-build g++
NPROC := $(shell nproc)
# ccache, where installed, for rebuilds in several checkouts (not needed by CI).
LAUNCHER := $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

.PHONY: all setup deps venv torch build editable run test test-cpp test-lit test-python test-wheel lint format clean golden-ptx
.PHONY: deps-clang build-asan build-asan-cpp test-asan test-asan-cpp fuzz fuzz-lib fuzz-frontend ci-sanitize

all: build

deps:
	@missing=$$(for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing apt packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.stamp: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.stamp

# torch (requirements-torch.txt, with its CUDA wheels ~4.6 GB) for the PyTorch tests: GroupedMLP,
# the expert-parallel tests on gloo, the guide's torch pages, the wheel's prebuilt kernels.
# Not part of setup: without it those tests skip, saying so. .ci/run installs it.
$(VENV)/.torch-stamp: requirements-torch.txt | venv
	$(PY) -m pip install -q --no-cache-dir -r requirements-torch.txt
	touch $@

torch: $(VENV)/.torch-stamp

setup: deps venv

$(BUILD)/build.ninja: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(abspath $(PY)) $(LAUNCHER)

build: setup $(BUILD)/build.ninja
	ninja -C $(BUILD) -j$(NPROC)
	cp -f $(BUILD)/frontend/csrc/_C*.so $(BUILD)/compiler/libtilefuse_compiler.so frontend/tilefuse/
	$(MAKE) --no-print-directory editable

# The editable install: a .pth in the venv puts this checkout's frontend/ (tilefuse) and root
# (kernels_dsl) on sys.path, so `.venv/bin/python my_kernel.py` imports both from anywhere and
# `ninja -C build` + the copy above is the whole rebuild. Targets below still set PYTHONPATH:
# checkouts sharing one venv (git worktrees) then each test their own tree.
EDITABLE_PTH = $(shell $(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/tilefuse-editable.pth
editable: venv
	printf '%s\n' $(abspath frontend) $(abspath .) > $(EDITABLE_PTH)

run: build
	$(PY) -m tilefuse.demo

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j$(NPROC)

test-lit: build
	TILEFUSE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/lit -sv tests/lit

# One pytest worker per core (pytest-xdist); PYTEST_JOBS=0 runs in this process.
PYTEST_JOBS ?= $(NPROC)
test-python: build
	PYTHONPATH=frontend:. $(PY) -m pytest -q -n $(PYTEST_JOBS) tests/python

lint: venv
	$(VENV)/bin/ruff check frontend kernels_dsl tests bench examples scripts
	$(VENV)/bin/ruff format --check frontend kernels_dsl tests bench examples scripts

# The wheel, built by pip from the CMake tree above (scikit-build-core reuses $(BUILD): it only
# reconfigures and installs), installed into a fresh venv outside the source tree, runs kernels
# there on the interpreter (tests/python/test_packaging.py, TILEFUSE_WHEEL_TEST).
test-wheel: build
	rm -rf $(BUILD)/wheel
	$(PY) -m pip wheel . -q --no-build-isolation --no-deps -w $(BUILD)/wheel \
	  -Cbuild-dir=$(BUILD) -Ccmake.define.TILEFUSE_BUILD_TESTS=ON
	TILEFUSE_WHEEL_TEST=$(abspath $(BUILD)/wheel) PYTHONPATH=frontend:. $(PY) -m pytest -q tests/python/test_packaging.py -k wheel

test: build
	$(MAKE) --no-print-directory test-cpp test-lit test-python test-wheel lint

# --- sanitizers and fuzzing: not part of `make test` (their clang is installed only here) ---
# build-asan: clang, AddressSanitizer + UndefinedBehaviorSanitizer (any report aborts) and
# libFuzzer coverage, so one build serves make test-asan and make fuzz.
ASAN_BUILD := build-asan
CLANG_APT_PKGS := clang-14 libclang-rt-14-dev
ASAN_RT = $(shell clang++-14 -print-file-name=libclang_rt.asan-x86_64.so)
SAN_ENV = ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The Python suite under ASan (CPython itself is not instrumented: LD_PRELOAD of the runtime,
# no leak checking): 21 min here with two workers (README: Robustness). test_golden_ptx is left out: clang's build emits PTX that
# differs from the golden (gcc-built) files in 10 matmul cases (not a sanitizer report).
ASAN_PYTESTS ?= tests/python --ignore=tests/python/test_golden_ptx.py
FUZZ_SECONDS ?= 60
# At most this many inputs per target too (-1: no limit). With the fixed seed, a run of N inputs
# replays exactly on another machine: CI's findings can be reproduced here.
FUZZ_RUNS ?= -1

deps-clang:
	@missing=$$(for p in $(CLANG_APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing apt packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(ASAN_BUILD)/build.ninja: | setup deps-clang
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" \
	  -DCMAKE_CXX_COMPILER=clang++-14 -DTILEFUSE_SANITIZE=ON -DTILEFUSE_FUZZ=ON \
	  -DPython_EXECUTABLE=$(abspath $(PY)) $(LAUNCHER)

# The package with the instrumented extension, beside (not over) the regular build's.
build-asan: setup $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD) -j$(NPROC)
	rm -rf $(ASAN_BUILD)/pkg && mkdir -p $(ASAN_BUILD)/pkg
	cp -r frontend/tilefuse $(ASAN_BUILD)/pkg/
	cp -f $(ASAN_BUILD)/frontend/csrc/_C*.so $(ASAN_BUILD)/compiler/libtilefuse_compiler.so $(ASAN_BUILD)/pkg/tilefuse/

# The C++ side alone (no Python extension, about half the build): the GoogleTest binary,
# tilefuse-opt for lit, the libFuzzer targets.
build-asan-cpp: setup $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD) -j$(NPROC) tilefuse_tests tilefuse-opt fuzz_ir fuzz_lower

test-asan-cpp: build-asan-cpp
	cd $(ASAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j$(NPROC)
	$(SAN_ENV) TILEFUSE_BUILD_DIR=$(abspath $(ASAN_BUILD)) $(VENV)/bin/lit -sv tests/lit

test-asan: build-asan test-asan-cpp
	$(SAN_ENV) LD_PRELOAD=$(ASAN_RT) PYTHONPATH=$(ASAN_BUILD)/pkg:. $(PY) -m pytest -q -n $(PYTEST_JOBS) -p no:cacheprovider $(ASAN_PYTESTS)

# Each libFuzzer target: first its kept regressions (each must pass), then FUZZ_SECONDS of
# fuzzing from the seed corpus (new inputs and a crash's input go to $(ASAN_BUILD)/fuzz);
# make fuzz then runs the frontend grammar fuzzer for FUZZ_SECONDS, on the instrumented extension.
fuzz: build-asan fuzz-lib fuzz-frontend

# The grammar fuzzer on the instrumented extension: FUZZ_KERNELS kernels from FUZZ_SEED (a run
# replays exactly elsewhere), or FUZZ_SECONDS, whichever comes first; unset seed: the clock's.
FUZZ_KERNELS ?=
FUZZ_SEED ?=
fuzz-frontend: build-asan
	$(SAN_ENV) LD_PRELOAD=$(ASAN_RT) PYTHONPATH=$(ASAN_BUILD)/pkg:. $(PY) -m scripts.fuzz.gen_kernels --seconds $(FUZZ_SECONDS) \
	  $(if $(FUZZ_KERNELS),--count $(FUZZ_KERNELS)) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

# What .ci/run adds to make test (README: Robustness): the C++ tests, lit and the Python suite
# under ASan + UBSan, the libFuzzer targets and the grammar fuzzer; any report or finding fails.
ci-sanitize: test-asan fuzz-lib fuzz-frontend

fuzz-lib: build-asan-cpp
	@for t in ir lower; do \
	  bin=$(ASAN_BUILD)/tests/fuzz/fuzz_$$t; out=$(ASAN_BUILD)/fuzz/$$t; mkdir -p $$out/corpus; \
	  if [ -n "$$(ls tests/fuzz/regressions/$$t 2>/dev/null)" ]; then \
	    $(SAN_ENV) $$bin tests/fuzz/regressions/$$t/* || exit 1; fi; \
	  $(SAN_ENV) $$bin -max_total_time=$(FUZZ_SECONDS) -runs=$(FUZZ_RUNS) -seed=1 -max_len=16384 -timeout=20 -rss_limit_mb=4096 \
	    -print_final_stats=1 -artifact_prefix=$$out/ $$out/corpus tests/fuzz/corpus/ir || exit 1; \
	done

# Rewrites tests/python/golden/ptx/ after an intended change of code generation.
golden-ptx: build
	PYTHONPATH=frontend:. $(PY) -m tests.python.golden.ptx_cases --update

format: venv
	$(VENV)/bin/ruff format frontend kernels_dsl tests bench examples scripts
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) frontend/tilefuse/_C*.so frontend/tilefuse/libtilefuse_compiler.so
	rm -f $(EDITABLE_PTH)
