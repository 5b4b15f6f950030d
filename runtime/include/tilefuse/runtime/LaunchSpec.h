// The launch spec of a compiled kernel: what a launch needs besides the image, as one
// typed description. The compiler's lowering result produces it (frontend/csrc/lower.cpp),
// the disk cache stores it as JSON with named keys (DiskCache.h), and LoadedKernel and
// the launch fast path read it. No compiler types here: prebuilt kernels launch without
// the compiler.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tilefuse::runtime {

// How a kernel parameter is passed.
enum class ParamKind : uint8_t { Ptr, I1, I32, I64, F32, I8, I16, U8, U16, U32, U64, F64 };

struct LaunchSpec {
  struct Param {
    std::string name;  // the kernel's parameter name
    ParamKind kind = ParamKind::Ptr;
    bool operator==(const Param&) const = default;
  };
  // A CUDA tensor map (TMA descriptor) that each launch encodes from the arguments and
  // passes by value after the parameters, in order.
  struct TensorMap {
    // A constant `value` (param -1), or parameter `param` times parameter `factor` (-1:
    // none) times `value` when it is not 0: what the launch evaluates.
    struct Dim {
      int param = -1;
      int64_t value = 0;
      int factor = -1;
      bool operator==(const Dim&) const = default;
      int64_t of(const int64_t* args) const {
        if (param < 0) return value;
        int64_t v = args[param] * (factor >= 0 ? args[factor] : 1);
        return value ? v * value : v;
      }
    };
    int base = 0;  // the pointer parameter holding the global address
    int elemBytes = 0;
    std::vector<Dim> sizes, strides;  // outermost first; strides in elements, the last is 1
    std::vector<int64_t> box;         // the box one copy moves, outermost first
    int swizzleBytes = 0;             // 0 (none), 32, 64 or 128
    std::string where;                // file:line of the descriptor, for messages
    bool operator==(const TensorMap&) const = default;
  };
  std::string kernel;  // the entry point
  std::string arch;    // the target it was compiled for ("sm_90a")
  int numWarps = 0, numStages = 0;
  int numThreads = 0;
  int sharedBytes = 0;  // dynamic shared memory per block
  std::vector<Param> params;
  std::vector<TensorMap> tensorMaps;
  bool operator==(const LaunchSpec&) const = default;
};

// JSON with named keys (snake_case of the fields; kinds as "ptr", "i32", ...).
std::string toJson(const LaunchSpec& s);
// Throws std::invalid_argument for text that is not a launch spec with every key.
LaunchSpec launchSpecFromJson(std::string_view json);

}  // namespace tilefuse::runtime
