// The CPU interpreter: executes a kernel of the (optimized) tile IR for every
// program of the grid, tile ops vectorized with Eigen, on host memory.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tilefuse/ir/IR.h"

namespace tilefuse::interp {

// A memory range the kernel may touch: every pointer argument's array. Loads
// and stores outside all of them are errors naming the kernel's source line.
struct Buffer {
  uint64_t base;
  uint64_t size;  // bytes
  std::string name;
  bool readOnly = false;  // stores and atomics into it are errors
};

struct Arg {
  enum class Kind { Ptr, Int, Float } kind;
  uint64_t ptr = 0;
  int64_t i = 0;
  double f = 0;
};

// Runs kernel `kernel` of `m` over `grid`. Throws UserError (with the op's
// location) on out-of-bounds accesses, failed device asserts and integer
// division by zero. `interrupted`, asked before each program, stops the launch
// where it returns true (the caller then reports why, e.g. KeyboardInterrupt).
void launch(const Module& m, const std::string& kernel, std::array<int64_t, 3> grid, const std::vector<Arg>& args,
            const std::vector<Buffer>& buffers, const std::function<bool()>& interrupted = {});

// Thrown by launch when `interrupted` said so.
struct Interrupted {};

}  // namespace tilefuse::interp
