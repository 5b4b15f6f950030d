// CUDA tensor maps of make_desc ops (no LLVM): what a map is encoded from at launch
// (base, sizes and strides read from the kernel's parameters), and how a
// descriptor's tiles move as TMA boxes. plan-tma decides which descriptors get a map
// and writes the box and swizzle on the op; the lowering reads them.
#pragma once

#include <string>

#include "tilefuse/ir/IR.h"
#include "tilefuse/lower/LowerToLLVM.h"

namespace tilefuse::lower::detail {

// Bytes per element of a type the copy engine moves whole (0: not byte-sized).
inline int64_t tmaElemBytes(DType d) { return d == DType::I1 || bitWidth(d) % 8 ? 0 : bitWidth(d) / 8; }

// How tiles of a descriptor's block type move as TMA boxes: whether they can, the
// swizzle span in bytes (0: none; at most `maxSwizzle`) and the box's last dim.
struct TmaView {
  bool ok = false;
  int64_t swizzle = 0, innerBox = 0;
};
TmaView tmaView(const Type& t, int64_t maxSwizzle);

// Fills base, element size, sizes, strides and `where` of the map of make_desc `md` in
// kernel `f` from its operands, or says why they cannot be encoded at launch: base,
// sizes and strides must be kernel parameters (integers for sizes and strides) or
// constants (products of at most two parameters and a constant for sizes and
// strides), the base and the row strides provably 16-byte multiples (f's `aligned16`
// parameters), the last stride 1.
std::string tensorMapOperands(const Op& md, const Op& f, TensorMapSpec* s);

}  // namespace tilefuse::lower::detail
