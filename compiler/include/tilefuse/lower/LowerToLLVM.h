// Lowering of an optimized tile-IR kernel to LLVM IR for nvptx64, then PTX.
//
// Layout v0 (correct first): a tile of N elements is spread cyclically over the
// block's T threads: slot s of thread t holds element (s*T + t) mod N, and the
// thread owns it (performs its side effects) when s*T + t < N. Consecutive
// threads hold consecutive elements, so global accesses coalesce. Ops that move
// elements between threads (broadcast, trans, join, split, reductions, dot) go
// through shared memory.
#pragma once

#include <string>

#include "tilefuse/ir/IR.h"

namespace tilefuse::lower {

struct LowerOptions {
  std::string arch = "sm_90a";
  int numWarps = 4;
  int numStages = 3;        // shared-memory stages of pipelined K loops (1: no pipelining)
  std::string libdevice;  // path of libdevice.10.bc; empty: $CUDA_HOME or /usr/local/cuda
};

struct LoweredKernel {
  std::string name;
  std::string llir;  // optimized LLVM IR text
  std::string ptx;
  int numThreads = 0;
  int sharedBytes = 0;  // dynamic shared memory the launch must provide
};

// Throws UserError at the op's location for ops the GPU backend does not lower yet.
LoweredKernel compileKernel(const Module& m, const std::string& kernel, const LowerOptions& opts = {});

}  // namespace tilefuse::lower
