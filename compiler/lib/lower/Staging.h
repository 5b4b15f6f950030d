// How tiles are staged in shared memory for the tensor cores and the copy engine: the
// SharedTile every writer and reader of a tile derives its addressing from, and how a
// wgmma dot stages its operands. No LLVM here: the GPU-stage passes (plan-tma) and
// the lowering read the same rules.
#pragma once

#include <numeric>

#include <algorithm>
#include <cstdint>

#include "Layout.h"

namespace tilefuse::lower::detail {

// The value a chain of convert_layout ops starts from. Its readers convert it (in()),
// each where it reads it, so a convert_layout result has its operand's registers.
inline const Value* convertSource(const Value* v) {
  for (const Op* d = v->definingOp(); d && d->kind() == OpKind::ConvertLayout; d = v->definingOp()) v = d->operand(0);
  return v;
}

// The one description of a tile in shared memory (DESIGN.md's #shared attribute):
// rows x cols elements of `eb` bytes stored as column blocks of `swizzle` bytes (32, 64
// or 128), each block rows x swizzle bytes, row-major, with the 16-byte chunks of a row
// XOR-swizzled by the row within its 8-row group; swizzle 0 is plain row-major (tiles
// read back into registers only, e.g. rows too narrow for a swizzle span). Every writer (st.shared staging,
// cp.async, TMA boxes) and every reader (wgmma descriptors, ld.shared) of a tile takes
// its addressing from this one value.
struct SharedTile {
  int64_t rows = 0, cols = 0, eb = 0, swizzle = 0;
  int64_t blockBytes() const { return rows * swizzle; }
  // Bytes from a row to the next within a column block (swizzle 0: unswizzled rows).
  int64_t rowPitch() const { return swizzle ? swizzle : cols * eb; }
  bool operator==(const SharedTile&) const = default;
};
// A descriptor's block type t (rank >= 2) as a tile of its flattened outer dims.
inline SharedTile descTile(const Type& t, int64_t eb, int64_t swizzle) {
  return {t.numel() / t.shape.back(), t.shape.back(), eb, swizzle};
}
// `bytes` of a wgmma operand tile rounded up to whole 1024-byte swizzle atoms.
inline int64_t swizzleAtoms(int64_t bytes) { return (bytes + 1023) / 1024 * 1024; }
// Swizzle width for rows of `rowBytes` bytes.
inline int64_t swizzleBytes(int64_t rowBytes) { return std::min<int64_t>(128, rowBytes); }

inline int64_t wgmmaElemBytes(DType d) { return d == DType::BF16 || d == DType::F16 ? 2 : 1; }
inline bool isFp8(DType d) { return d == DType::F8E4M3 || d == DType::F8E5M2; }
// dot_scaled of fp8 operands runs on fp8 wgmma, scaling each 32-wide K block's partial
// sum (LowerWgmma.cpp); fp4 operands are dequantized to bf16.
inline bool scaledOnFp8(const Op& dot) {
  return dot.kind() == OpKind::DotScaled && isFp8(dot.operand(0)->type().elem) && isFp8(dot.operand(2)->type().elem);
}
// A zero, possibly splat, broadcast, converted or cast (zero in every format and rounding
// mode: an fp8 load's other=0.0 is a cast of an f32 constant).
inline bool isZeroConstant(const Value* v) {
  const Op* def = convertSource(v)->definingOp();
  if (def && (def->kind() == OpKind::Splat || def->kind() == OpKind::Broadcast || def->kind() == OpKind::Cast))
    return isZeroConstant(def->operand(0));
  if (!def || def->kind() != OpKind::Constant) return false;
  const Attr& a = *def->attr("value");
  // -0.0 too: masked-out products only add zeros to the dot.
  return std::holds_alternative<double>(a) ? std::get<double>(a) == 0.0 : std::get<int64_t>(a) == 0;
}
// An fp8 dot of at most 128 of K into a zero accumulator is one partial sum of the
// tensor cores' precision, which is what promotion would add to zero: it needs none
// and stays in flight like a bf16 group (a kernel adds it in fp32 itself, e.g. times its
// block scales a K step later, while the next step's group runs).
inline bool freshFp8(const Value* acc, int64_t k) { return k <= 128 && isZeroConstant(acc); }
// fp8 dots add their products in fp32 outside the tensor cores (LowerWgmma.cpp): every
// 128 of K, or every scale block of a dot_scaled; they wait for their own groups.
inline bool wgmmaPromotes(const Op& dot) {
  if (dot.kind() == OpKind::Dot && isFp8(dot.operand(0)->type().elem))
    return !freshFp8(dot.operand(2), dot.operand(0)->type().shape[1]);
  return scaledOnFp8(dot);
}
// The same for the GPU stage's wgmma op (A, its stage, B, its stage, the accumulator,
// and for a scaled one A's and B's scale tables, which it always promotes by; a sixth
// operand alone is restart-accumulators' flag).
inline bool wgmmaOpPromotes(const Op& w) {
  if (w.numOperands() == 7) return true;
  return isFp8(w.operand(0)->type().elem) && !freshFp8(w.operand(4), w.operand(0)->type().shape[1]);
}
// The run length over which v's rows repeat one value along dim 1 (1: not known to): a
// broadcast of one column (the whole row), a [rows, n, r] broadcast of [rows, n, 1]
// reshaped to [rows, n r] (runs of r), a splat (all), through bitcasts and layout conversions, or a
// loop-carried value whose initial and yielded values both repeat (scales the loop
// loads a step ahead).
inline int64_t runAlongK(const Value* v, int depth = 0) {
  if (depth > 8) return 1;
  const Value* x = convertSource(v);
  const Op* d = x->definingOp();
  if (!d) {  // a block argument: a for loop's carried value?
    const Block* body = x->ownerBlock();
    const Op* loop = body ? body->parentOp() : nullptr;
    if (!loop || loop->kind() != OpKind::For || x->index() == 0) return 1;
    unsigned i = x->index() - 1;
    return std::gcd(runAlongK(loop->operand(3 + i), depth + 1), runAlongK(body->terminator()->operand(i), depth + 1));
  }
  if (d->kind() == OpKind::Bitcast || d->kind() == OpKind::ConvertLayout) return runAlongK(d->operand(0), depth + 1);
  if (d->kind() == OpKind::Broadcast && d->operand(0)->type().shape[1] == 1) return x->type().shape[1];
  if (d->kind() == OpKind::Splat || d->kind() == OpKind::Constant) return x->type().shape[1];  // one scale
  if (d->kind() == OpKind::Reshape) {
    const Value* src = convertSource(d->operand(0));
    const Op* b = src->definingOp();
    const auto& s = src->type().shape;
    if (s.size() == 3 && s[0] == x->type().shape[0] && b && b->kind() == OpKind::Broadcast &&
        b->operand(0)->type().shape[2] == 1)
      return s[2];
  }
  return 1;
}

// The 32-wide K blocks over which a dot_scaled scale table is known to repeat: all of
// them when it is a broadcast along K of one scale per row (FP8-block's 1x128 and
// 128x128 scales, broadcast by the kernel to the 32-blocks of dot_scaled), runs of 4
// for such scales of two or more 128-blocks, else 1.
inline int64_t repeatedScaleBlocks(const Value* v) { return runAlongK(v); }
// The K run over which a fp8 dot_scaled's partial sum is promoted at once: 32 of K
// (one scale block), or up to 128 where both scale tables repeat along K (one FFMA per
// slot instead of four for FP8-block's 128-blocks): the most blocks, up to 4, that
// divide both runs.
inline int64_t scaleChunk(const Value* sa, const Value* sb) {
  int64_t run = std::gcd(repeatedScaleBlocks(sa), repeatedScaleBlocks(sb));
  for (int64_t blocks : {4, 3, 2})
    if (run % blocks == 0) return 32 * blocks;
  return 32;
}

// A dot that plan-layouts put on wgmma (its result in the #wgmma layout), or on
// mma.sync (#mma): the GPU-stage passes and the lowering take the instruction from it.
inline bool onWgmmaLayout(const Op& op) {
  if (op.kind() != OpKind::Dot && op.kind() != OpKind::DotScaled) return false;
  const DistLayout* d = op.result()->type().dist();
  return d && d->kind == DistKind::Wgmma;
}
inline bool onMmaLayout(const Op& op) {
  const DistLayout* d = op.result()->type().dist();
  return op.kind() == OpKind::Dot && d && d->kind == DistKind::Mma;
}
// The accumulator operand of dot (2) and dot_scaled (4).
inline unsigned accOperand(const Op& dot) { return dot.kind() == OpKind::Dot ? 2 : 4; }

// A tile type's distributed layout; values without one (scalars, descriptors) are one per thread.
inline Layout typeLayout(const Type& t, int threads) {
  const DistLayout* d = t.dist();
  if (!d) return scalarLayout(threads);
  Layout l{d->reg, d->lane};
  l.thr.insert(l.thr.end(), d->warp.begin(), d->warp.end());
  return l;
}

// How a wgmma dot stages operand B: `value` ([K, N], or the [N, K] operand of a trans)
// goes to shared memory K-major or N-major; `transposeOnStage` when the registers
// hold [K, N] but the staging is K-major (8-bit types).
struct WgmmaB {
  const Value* value;
  bool kMajor, transposeOnStage;
  int64_t elemBytes;
};
// K-major for 8-bit types, for trans(x) of an [N, K] tile, and for a [K, N] tile the
// layout plan coalesced along K (K contiguous in memory).
inline WgmmaB wgmmaB(const Op& dot, int threads) {
  bool scaled = dot.kind() == OpKind::DotScaled;
  const Value* b = dot.operand(scaled ? 2 : 1);
  int64_t eb = wgmmaElemBytes(b->type().elem);
  const Op* def = b->definingOp();
  if (def && def->kind() == OpKind::Trans && b->uses().size() == 1) return {def->operand(0), true, false, eb};
  bool alongK = runDim(typeLayout(b->type(), threads), b->type().shape) == 0;
  return {b, eb == 1 || alongK, eb == 1 || alongK, eb};
}

// How a wgmma dot stages operand A: `value` ([M, K], or the [K, M] operand of a trans)
// goes to shared memory K-major, or M-major (16-bit types only: wgmma's transposed A)
// when the program computes it as trans(x) of a [K, M] tile read by nothing else, so
// that a tile loaded with M contiguous (a group's rows of dy, for dW = dyᵀ x) is copied
// as it lies.
struct WgmmaA {
  const Value* value;
  bool mMajor;
};
inline WgmmaA wgmmaA(const Op& dot) {
  const Value* a = dot.operand(0);
  const Op* def = a->definingOp();
  if (def && def->kind() == OpKind::Trans && a->uses().size() == 1 && wgmmaElemBytes(a->type().elem) == 2)
    return {def->operand(0), true};
  return {a, false};
}

// wgmma dot operand `which` (0: A, [M, K] if K-major else [K, M]; 1: B, [N, K] if
// K-major else [K, N]) on tiling w. An MN-major operand takes the swizzle of one
// instruction's M (64 rows) or one warpgroup's instruction N, so that each
// instruction's rows or columns are whole column blocks (split tilings).
inline SharedTile wgmmaOperandTile(const Op& dot, unsigned which, const WgmmaShape& w, int threads) {
  WgmmaB bs = wgmmaB(dot, threads);
  int64_t eb = bs.elemBytes;
  const Type& a = dot.operand(0)->type();
  int64_t m = a.shape[0], k = a.shape[1];
  if (which == 0) {
    if (wgmmaA(dot).mMajor) return {k, m, eb, swizzleBytes(64 * eb)};
    return {m, k, eb, swizzleBytes(k * eb)};
  }
  int64_t n = dot.operand(dot.kind() == OpKind::DotScaled ? 2 : 1)->type().shape[1];
  if (bs.kMajor) return {n, k, eb, swizzleBytes(k * eb)};
  return {k, n, eb, swizzleBytes(w.instrN * eb)};
}

// Shared-memory bytes of a wgmma dot's staged A and B, each in whole swizzle atoms.
struct WgmmaOperandBytes {
  int64_t a, b;
};
inline WgmmaOperandBytes wgmmaOperandBytes(const Op& dot, int threads) {
  WgmmaB bs = wgmmaB(dot, threads);
  return {swizzleAtoms(dot.operand(0)->type().numel() * bs.elemBytes),
          swizzleAtoms(bs.value->type().numel() * bs.elemBytes)};
}

}  // namespace tilefuse::lower::detail
