// Lowering of an optimized tile-IR kernel to LLVM IR for nvptx64, then PTX.
//
// Tile values live in registers in distributed layouts (lib/lower/Layout.h) chosen by
// a layout plan; an axis analysis (AxisInfo.h) vectorizes memory accesses; dots run
// on wgmma (sm_90a) or mma.sync, and K loops feeding a wgmma dot are software
// pipelined with cp.async (lib/lower/LowerPipeline.cpp). The implementation is split
// by area under lib/lower (Lowering.h lists the files).
#pragma once

#include <string>

#include "tilefuse/ir/IR.h"

namespace tilefuse::lower {

struct LowerOptions {
  std::string arch = "sm_90a";
  int numWarps = 4;
  int numStages = 3;      // shared-memory stages of pipelined K loops (1: no pipelining)
  bool keepIR = true;     // also return the optimized LLVM IR (asm["llir"]); launches skip it
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
