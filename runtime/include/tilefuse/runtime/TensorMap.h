// CUDA tensor maps (TMA descriptors) of the tensor descriptors that the compiler
// turned into copy-engine transfers (LaunchSpec::TensorMap): encoded at each launch
// from the kernel's arguments and passed by value after its own parameters.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tilefuse/runtime/LaunchSpec.h"

namespace tilefuse::runtime {

// Arguments the copy engine cannot take (a size of 0, a misaligned base or stride).
class TensorMapError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct TensorMapDesc {
  int rank = 0;
  int elemBytes = 0;                          // 1, 2, 4 or 8
  std::array<int64_t, 5> sizes{}, strides{};  // outermost first; strides in elements, the last 1
  std::array<int64_t, 5> box{};               // the box one copy moves
  int swizzleBytes = 0;                       // 0, 32, 64 or 128
  const std::string* where = nullptr;         // file:line of the descriptor, for messages
};

// Throws TensorMapError naming the first property of `d` and `base` the copy engine
// rejects; needs no GPU.
void checkTensorMap(const TensorMapDesc& d, uint64_t base);
// The tensor map (after checkTensorMap).
CUtensorMap encodeTensorMap(const TensorMapDesc& d, uint64_t base);
// The descriptor of `m` with its constants; a launch fills in the sizes and strides
// that parameters hold.
TensorMapDesc describeTensorMap(const LaunchSpec::TensorMap& m);

}  // namespace tilefuse::runtime
