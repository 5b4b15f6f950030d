// Limits the IR checks early, so that input past them is a clear error instead of a
// crash (stack overflow), a hang or a wrong result later.
#pragma once

#include <cstdint>

namespace tilefuse {

// Elements of one tile: Triton's limit (TRITON_MAX_TENSOR_NUMEL) as well; a program's
// tiles live in registers and shared memory, far below it.
constexpr int64_t kMaxTileElements = int64_t{1} << 20;
// Regions nested in one function (if / for / while / reduce bodies): the parser, the
// verifier, the passes and the interpreter recurse once per level.
constexpr int kMaxRegionDepth = 256;

}  // namespace tilefuse
