// Lowering of an optimized tile-IR kernel to LLVM IR for nvptx64, then PTX.
//
// Tile values live in registers in the distributed layouts of their types (the GPU
// stage: plan-layouts writes lib/lower/Layout.h's plan into them); an axis analysis
// (AxisInfo.h) vectorizes memory accesses; dots run on wgmma (sm_90a) or mma.sync,
// and K loops feeding a wgmma dot are software pipelined with cp.async
// (lib/lower/LowerPipeline.cpp). The implementation is split by area under lib/lower
// (Lowering.h lists the files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilefuse/ir/IR.h"

namespace tilefuse::lower {

struct LowerOptions {
  std::string arch = "sm_90a";
  int numWarps = 4;
  int numStages = 3;      // shared-memory stages of pipelined K loops (1: no pipelining)
  bool keepIR = true;     // also return the optimized LLVM IR (asm["llir"]); launches skip it
  std::string libdevice;  // path of libdevice.10.bc; empty: $CUDA_HOME or /usr/local/cuda
  // TILEFUSE_DEBUG=1: every access of global memory is checked against its buffer (no
  // pipelining, no TMA, no vector accesses); see DebugCheck.
  bool debug = false;
};

// One bounds-checked access of a debug build. The kernel takes hidden parameters after
// its own (before any tensor maps): the bytes from each pointer argument to the end of
// its allocation (i64, in parameter order), then the address of a zeroed error record of
// kDebugRecordWords u64: [0] 1 once written, [1] the check's index in `checks`, [2..4]
// the program id, [5] the lane's flat element of the tile, [6] the element index it
// accessed, relative to the buffer's start. The first violating lane writes it and
// skips its access; masked-off lanes are not checked.
struct DebugCheck {
  Location loc;
  std::string what;            // "load", "store", "atomic_add", "descriptor load", ...
  int param = 0;               // the kernel parameter whose buffer the access is checked against
  int elemBytes = 0;           // of the accessed elements
  std::vector<int64_t> shape;  // of the accessed tile ([] for a scalar)
};
constexpr int kDebugRecordWords = 7;

// A CUDA tensor map (TMA descriptor) of one make_tensor_descriptor: the launch encodes
// it from the kernel's arguments and passes it by value as an extra parameter (the
// kernel's own parameters first, then the maps in order).
struct TensorMapSpec {
  // A constant `value` (param -1), or the kernel parameter `param`, times the parameter
  // `factor` (-1: none), times `value` when it is not 0 (sizes such as G * N).
  struct Dim {
    int param = -1;
    int64_t value = 0;
    int factor = -1;
  };
  int base = 0;  // the parameter holding the global address (16-byte aligned)
  int elemBytes = 0;
  std::vector<Dim> sizes, strides;  // outermost first; strides in elements, the last is 1
  std::vector<int64_t> box;         // the box one copy moves, outermost first
  int swizzleBytes = 0;             // 0 (none), 32, 64 or 128
  std::string where;                // file:line of the make_tensor_descriptor
};

// A fast path the backend did not take (TILEFUSE_PERF_HINTS): a dot not on wgmma, a
// dot loop not pipelined, a memory access not vectorized, a descriptor not on TMA.
struct PerfHint {
  Location loc;
  std::string message;  // what was not done, and why
};

struct LoweredKernel {
  std::string name;
  std::string gpuIR;  // the GPU-stage IR text the lowering read (with keepIR)
  std::string llir;   // optimized LLVM IR text
  std::string ptx;
  int numThreads = 0;
  int sharedBytes = 0;  // dynamic shared memory the launch must provide
  std::vector<TensorMapSpec> tensorMaps;
  std::vector<PerfHint> hints;  // in program order, one per op and message
  std::vector<DebugCheck> checks;  // with opts.debug
};

// `m` is tile IR (plan-layouts runs on a copy) or GPU-stage IR for opts' arch and
// num_warps (verified). Throws UserError at the op's location for ops the GPU backend
// does not lower yet.
LoweredKernel compileKernel(const Module& m, const std::string& kernel, const LowerOptions& opts = {});

}  // namespace tilefuse::lower
