// Axis info: a dataflow analysis of the integer and pointer values of a kernel
// that tells the GPU lowering which runs of tile elements are contiguous and
// aligned in memory, so that it can use vectorized (up to 16-byte) loads and stores.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "tilefuse/ir/IR.h"

namespace tilefuse::lower {

// Per dimension d of a value (rank-0 scalars have one entry). "Runs" are aligned
// runs of indices along d, [j*len, (j+1)*len), at every fixed index of the other dims:
//  contiguity[d]: the value increases by exactly 1 per step along d within runs of this length
//                 (a pointer by one element);
//  divisibility[d]: a power of two dividing the first element of every such run (for ints: the value;
//                   for pointers: the byte address); capped at 1<<30. With contiguity 1 it divides
//                   every element;
//  constancy[d]: the value is constant within runs of this length along d.
// Every entry is a power of two that divides the dim size (1 for scalars).
struct AxisInfo {
  std::vector<int64_t> contiguity, divisibility, constancy;
  bool operator==(const AxisInfo&) const = default;
};

namespace detail {
// AxisInfo plus whether the value is known to be >= 0: rem and div round toward zero, so
// their runs only behave on non-negative dividends.
struct AxisFact {
  AxisInfo info;
  bool nonNeg = false;
  bool operator==(const AxisFact&) const = default;
};
}  // namespace detail

class AxisAnalysis {
 public:
  // `func` is a "func" op (kernel); analyses its body, nested regions included. Its int-list
  // attribute "aligned16" lists the arguments known to be multiples of 16 (pointers: 16-byte aligned).
  explicit AxisAnalysis(const Op& func);

  // Every value of the function has an entry (worst case: all 1s); throws InternalError for others.
  const AxisInfo& get(const Value* v) const;

  // The number of consecutive elements along dim `dim` (-1: the last) of pointer tile `ptr` that
  // form one contiguous, aligned run of memory, at most maxBytes bytes (a power of two):
  // min(contiguity, divisibility/elemBytes, maxBytes/elemBytes), also limited by the constancy of
  // `mask` (may be null) along that dim. Runs start at multiples of the width along that dim.
  // 1 = no vectorization.
  int64_t vectorWidth(const Value* ptr, const Value* mask, int64_t maxBytes = 16, int dim = -1) const;

 private:
  using Fact = detail::AxisFact;

  const Fact& fact(const Value* v) const;
  void visitBlock(const Block& block);
  void visitOp(const Op& op);
  Fact transfer(const Op& op) const;
  // Iterates `body` (which returns the values flowing back to `args`) until the facts of the
  // loop-carried `args`, the meet of their `inits` and the values flowing back, are stable.
  void solveLoop(const std::vector<Value*>& args, const std::vector<Value*>& inits,
                 const std::function<std::vector<Value*>()>& body);

  std::unordered_map<const Value*, Fact> facts_;
};

}  // namespace tilefuse::lower
