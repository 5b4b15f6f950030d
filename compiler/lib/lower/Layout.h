// Distributed layouts: how the elements of a tile spread over the threads of a block.
//
// A layout maps (slot s, thread t) to the flat row-major index of the element that
// slot s of thread t holds: the sum of reg[i] over the set bits i of s plus thr[j]
// over the set bits j of t. Every basis is a distinct power of two, or 0 where that
// bit replicates: the thread (or slot) holds a copy, and only the copy whose
// replicating bits are clear performs side effects.
//
// - blocked: runs of V consecutive elements of the last dimension per thread (V up
//   to 8, so 16-byte accesses for 16-bit types), consecutive threads on consecutive
//   runs: global accesses vectorize and coalesce.
// - wgmma accumulator: the fragment of wgmma.m64nNk16 (PTX ISA, "Matrix fragments for
//   wgmma .m64nNk16"), so dot results stay in registers across a K loop.
// - mma accumulator: the fragment of mma.sync.m16n8 (four consecutive slots per 16x8
//   tile), warps over the tiles, for dots below wgmma (or before sm_90a).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tilefuse/ir/IR.h"
#include "tilefuse/lower/AxisInfo.h"

namespace tilefuse::lower::detail {

struct Layout {
  std::vector<int64_t> reg, thr;
  int slots() const { return 1 << reg.size(); }
  // The slot part of slot s's flat index: the sum of reg[i] over the set bits i of s.
  int64_t slotPart(int s) const {
    int64_t c = 0;
    for (size_t i = 0; i < reg.size(); ++i)
      if (s >> i & 1) c += reg[i];
    return c;
  }
  bool operator==(const Layout&) const = default;
  std::string str() const;
};

// How a warpgroup-wide wgmma covers an [M, N] accumulator: wgM x wgN warpgroups,
// each issuing repM x repN instructions of shape m64 n(instrN) per K step.
struct WgmmaShape {
  int64_t wgM = 1, wgN = 1, repM = 1, repN = 1, instrN = 8;
};

Layout scalarLayout(int threads);
// Runs of up to maxRun consecutive elements of dim `runDim` (-1: the last) per thread,
// consecutive threads on consecutive runs, then the other dims from the last. Runs are
// at least minRun long where the dim allows, even if threads then hold copies.
Layout blockedLayout(const std::vector<int64_t>& shape, int threads, int64_t maxRun = 8, int runDim = -1,
                     int64_t minRun = 1);
// The flat-index step of dim d of a row-major shape.
int64_t dimStride(const std::vector<int64_t>& shape, size_t d);
// The dim whose consecutive elements `l`'s first slots hold (-1: none).
int runDim(const Layout& l, const std::vector<int64_t>& shape);
// How many leading slots of `l` hold consecutive elements of the dim of step `stride`.
int64_t vectorRun(const Layout& l, int64_t stride = 1);
// Blocked, with runs of 16 for pointers to 1-byte elements (16-byte accesses) and 8
// otherwise (16-byte accesses for 16-bit types; one layout across casts); runs of at
// least 4 bytes for pointers (a tile too small to give every thread 4 bytes has threads
// hold copies): the smallest access cp.async makes.
Layout defaultLayout(const Type& t, int threads);
Layout wgmmaAccLayout(int64_t m, int64_t n, const WgmmaShape& w, int threads);
Layout mmaAccLayout(int64_t m, int64_t n, int threads);
// The layout of a broadcast's operand (shape `from`) that puts each source element in
// the registers of the result elements (layout l, shape `to`) it is broadcast to; the
// dims broadcast along become replicating (0) bases.
Layout broadcastSourceLayout(const Layout& l, const std::vector<int64_t>& to, const std::vector<int64_t>& from);
// `l` without its replicating slot bases (the same elements in each thread, once).
Layout compactLayout(const Layout& l);
// The layout of a reduction of a tile in layout `l` (shape `shape`) along `axis` that
// combines each thread's slots and then the lanes that differ along the axis (butterfly
// shuffles): l's bases projected onto the other dims, the axis' slot bases dropped and
// its lane bases replicating (each lane of the group ends with the result). False where
// a basis moves along the axis and another dim at once, or where warps split the axis
// unless `acrossWarps` (their partials then meet in shared memory: the axis' warp bases
// replicate too).
bool reducedInWarps(const Layout& l, const std::vector<int64_t>& shape, int axis, Layout* out,
                    bool acrossWarps = false);
// Whether a reduction of kind `k` over elements of `d` may combine within warps
// (Lowering::lowerReduceInWarps): max and min of f32 / i32, and i32 sums (a float sum
// keeps its one order through shared memory).
bool reducibleInWarps(OpKind k, DType d);
// The layout of a dot_scaled scale table [L, kb] (L: the accumulator's rows when `rows`,
// else its columns; `acc`: the [*, n] accumulator's layout) in which each thread holds
// the scales of its own accumulator slots, all kb K blocks in registers: the promotion
// then reads them without shared memory or barriers.
Layout scaleTableLayout(const Layout& acc, int64_t n, int64_t kb, bool rows);

// The leading slots of `l` that hold consecutive elements from a multiple of their
// count (every other basis a multiple of it), at most maxRun: one vector access.
int64_t alignedRun(const Layout& l, int64_t maxRun);
// Whether `l`'s thread bases and slot bases share no bit: its flat index is then their
// parts' sum and XOR alike.
bool disjointParts(const Layout& l);
// The scratch of a layout conversion through shared memory (Lowering::exchange): a
// row-major tile of `pitch`-byte rows has each row's 16-byte chunks XORed with the row's
// low bits (up to 8 chunks), so that the 8 rows of a warp's wgmma fragment, one pitch
// apart, fall in 8 different bank groups. Off (rows 1) unless the pitch is a power of
// two of at least 32 bytes. Linear over XOR, and it moves only whole 16-byte chunks.
struct ExchangeSwizzle {
  int64_t pitch = 0, rows = 1;
  bool on() const { return rows > 1; }
  int64_t chunkBits() const { return (rows - 1) << 4; }
  int64_t operator()(int64_t byte) const { return on() ? byte ^ ((byte / pitch & (rows - 1)) << 4) : byte; }
};
ExchangeSwizzle exchangeSwizzle(const std::vector<int64_t>& shape, int64_t elemBytes);

// The tiling of an [M, N] accumulator (M a multiple of 64) over the warpgroups of
// `threads`: as many warpgroups along M as it has 64-row bands, the rest along N.
WgmmaShape wgmmaTiling(int64_t m, int64_t n, int threads);
// wgmma applies to a dot of bf16/f16 operands on sm_90a with 4k warps and M, N, K that
// the warpgroups can split; fills `w` when it does, else `why` (when given) for a dot
// on sm_90a.
bool wgmmaApplies(const Op& dot, const std::string& arch, int threads, WgmmaShape* w, std::string* why = nullptr);
// mma.sync applies to A (at) times B (bt) into ct: bf16/f16 and int8 from sm_80, fp8
// (e4m3, e5m2, mixed) from sm_89, fp32 (int32) accumulators, whole m16n8k16 (16-bit)
// or m16n8k32 (8-bit) tiles.
bool mmaApplies(const Type& at, const Type& bt, const Type& ct, const std::string& arch, bool tf32 = false);

// The layout each tile value of `func` gets. Dots on wgmma (mma.sync) produce its
// accumulator layout; elementwise ops follow their first operand of a non-blocked layout (so an
// epilogue stays in registers); loads follow their pointers; loop-carried values take
// the layout their loop body yields; everything else is blocked, with runs along the
// contiguous dim for loads (and their pointers) that `axis` shows contiguous along
// another dim than the last.
using LayoutPlan = std::unordered_map<const Value*, Layout>;
LayoutPlan planLayouts(const Op& func, const std::string& arch, int threads, const AxisAnalysis* axis = nullptr);

}  // namespace tilefuse::lower::detail
