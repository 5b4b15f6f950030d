// Distributed layouts (compiler/lib/lower/Layout.h): every layout the lowering builds
// must be a map of (slot, thread) onto the tile in which every element has at least
// one holder and replicated bits hold exact copies.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../../compiler/lib/lower/Layout.h"
#include "ParsedKernel.h"

namespace tilefuse::lower::detail {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The flat element of (slot s, thread t).
int64_t element(const Layout& l, int s, int t) {
  int64_t e = 0;
  for (size_t i = 0; i < l.reg.size(); ++i)
    if (s >> i & 1) e += l.reg[i];
  for (size_t j = 0; j < l.thr.size(); ++j)
    if (t >> j & 1) e += l.thr[j];
  return e;
}

// Every element held, bases distinct powers of two (or 0), and exactly as many
// (slot, thread) pairs per element as the replicating bits allow.
void expectCovers(const Layout& l, int64_t n, int threads) {
  ASSERT_EQ(static_cast<int>(l.thr.size()), __builtin_ctz(threads)) << l.str();
  std::set<int64_t> bases;
  int zeros = 0;
  for (auto* v : {&l.reg, &l.thr})
    for (int64_t b : *v) {
      if (!b) {
        ++zeros;
        continue;
      }
      EXPECT_EQ(b & (b - 1), 0) << "basis " << b << " of " << l.str();
      EXPECT_TRUE(bases.insert(b).second) << "basis " << b << " twice in " << l.str();
      EXPECT_LT(b, n) << l.str();
    }
  std::vector<int> holders(n);
  for (int s = 0; s < l.slots(); ++s)
    for (int t = 0; t < threads; ++t) ++holders[element(l, s, t)];
  for (int64_t e = 0; e < n; ++e) ASSERT_EQ(holders[e], 1 << zeros) << "element " << e << " in " << l.str();
}

TEST(Layout, BlockedLayoutsCoverEveryShape) {
  for (int threads : {32, 128, 256})
    for (std::vector<int64_t> shape : {std::vector<int64_t>{1},
                                       {16},
                                       {128},
                                       {1024},
                                       {4096},
                                       {64, 1},
                                       {1, 64},
                                       {128, 64},
                                       {64, 128},
                                       {8, 8},
                                       {2, 512},
                                       {256, 4}})
      expectCovers(blockedLayout(shape, threads), numel(shape), threads);
}

TEST(Layout, BlockedLayoutsAlongAnotherDimCoverEveryShape) {
  for (int threads : {32, 128, 256})
    for (std::vector<int64_t> shape : {std::vector<int64_t>{64, 1}, {128, 64}, {64, 128}, {8, 8}, {256, 4}, {4, 8, 16}})
      for (int d = 0; d + 1 < static_cast<int>(shape.size()); ++d)
        expectCovers(blockedLayout(shape, threads, 8, d), numel(shape), threads);
  Layout l = blockedLayout({64, 128}, 128, 8, 0);
  EXPECT_EQ(runDim(l, {64, 128}), 0) << l.str();
  EXPECT_EQ(vectorRun(l, 128), 8);  // runs of 8 rows
  EXPECT_EQ(l.thr[0], 8 * 128);     // consecutive threads on consecutive runs along dim 0
  EXPECT_EQ(runDim(blockedLayout({64, 128}, 128), {64, 128}), 1);
}

TEST(Layout, BlockedLayoutsGiveRunsOfEightAlongTheLastDim) {
  Layout l = blockedLayout({128, 64}, 128);
  ASSERT_GE(l.reg.size(), 3u);
  EXPECT_EQ(l.reg[0], 1);
  EXPECT_EQ(l.reg[1], 2);
  EXPECT_EQ(l.reg[2], 4);
  EXPECT_EQ(l.thr[0], 8);  // consecutive threads hold consecutive runs: coalesced
  Layout narrow = blockedLayout({64, 2}, 128);
  EXPECT_TRUE(narrow.reg.empty()) << narrow.str();  // 128 elements: one per thread
}

TEST(Layout, WgmmaAccumulatorMatchesTheFragment) {
  // m64n128 on one warpgroup: thread t = 32 w + l holds rows 16 w + l/4 (+8) and columns
  // 8 j + 2 (l % 4) (+1) in d[4 j + {0, 1, 2, 3}].
  WgmmaShape w{1, 1, 1, 1, 128};
  Layout l = wgmmaAccLayout(64, 128, w, 128);
  expectCovers(l, 64 * 128, 128);
  for (int t : {0, 5, 37, 127})
    for (int i : {0, 1, 2, 3, 6, 63}) {
      int lane = t % 32, warp = t / 32;
      int64_t row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
      int64_t col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
      EXPECT_EQ(element(l, i, t), row * 128 + col) << "thread " << t << " reg " << i;
    }
}

TEST(Layout, WgmmaLayoutsCoverEverySplit) {
  struct Case {
    int64_t m, n;
    WgmmaShape w;
    int threads;
  };
  for (const Case& c : {Case{128, 128, {1, 1, 2, 1, 128}, 128}, Case{128, 256, {2, 1, 1, 1, 256}, 256},
                        Case{64, 256, {1, 2, 1, 1, 128}, 256}, Case{256, 128, {2, 1, 2, 1, 128}, 256},
                        Case{64, 512, {1, 1, 1, 2, 256}, 128}})
    expectCovers(wgmmaAccLayout(c.m, c.n, c.w, c.threads), c.m * c.n, c.threads);
}

TEST(Layout, MmaAccumulatorMatchesTheFragment) {
  // m16n8 tiles: lane l holds rows l/4 (+8) and columns 2 (l % 4) (+1) in c[0..3];
  // four warps on a 32x16 tile: warps 0, 1 along M, then 2 along N.
  Layout l = mmaAccLayout(32, 16, 128);
  expectCovers(l, 32 * 16, 128);
  for (int t : {0, 5, 37, 70, 127})
    for (int i : {0, 1, 2, 3}) {
      int lane = t % 32, warp = t / 32;
      int64_t row = 16 * (warp % 2) + lane / 4 + 8 * (i / 2);
      int64_t col = 8 * (warp / 2) + 2 * (lane % 4) + i % 2;
      EXPECT_EQ(element(l, i, t), row * 16 + col) << "thread " << t << " reg " << i;
    }
}

TEST(Layout, MmaLayoutsCoverEveryShape) {
  // More tiles than warps (slots), fewer (replicated warps), one warp.
  for (auto [m, n, threads] : std::vector<std::tuple<int64_t, int64_t, int>>{
           {64, 64, 128}, {16, 8, 128}, {16, 32, 256}, {128, 16, 32}, {32, 256, 256}, {16, 16, 64}})
    expectCovers(mmaAccLayout(m, n, threads), m * n, threads);
}

// A K loop with a bf16 dot and an epilogue, as the frontend writes the tutorial matmul.
const char* kLoop = R"(
func @mm(%a_ptr: ptr<bf16>, %b_ptr: ptr<bf16>, %c_ptr: ptr<bf16>, %K: i32) {aligned16 = [0, 1, 2, 3], kernel = true} {
  %r = arange {end = 64, start = 0} : tile<64xi32>
  %0 = expand_dims %r {axis = 1} : tile<64x1xi32>
  %1 = constant {value = 64} : tile<64x1xi32>
  %2 = mul %0, %1 : tile<64x1xi32>
  %3 = expand_dims %r {axis = 0} : tile<1x64xi32>
  %4 = broadcast %2 : tile<64x64xi32>
  %5 = broadcast %3 : tile<64x64xi32>
  %offs = add %4, %5 : tile<64x64xi32>
  %6 = splat %a_ptr : tile<64x64xptr<bf16>>
  %pa = ptr_add %6, %offs : tile<64x64xptr<bf16>>
  %7 = splat %b_ptr : tile<64x64xptr<bf16>>
  %pb = ptr_add %7, %offs : tile<64x64xptr<bf16>>
  %acc0 = constant {value = 0.0} : tile<64x64xf32>
  %lo = constant {value = 0} : i32
  %step = constant {value = 64} : i32
  %pa_1, %acc, %pb_1 = for %lo, %K, %step, %pa, %acc0, %pb : tile<64x64xptr<bf16>>, tile<64x64xf32>, tile<64x64xptr<bf16>> {
  ^(%k: i32, %pa_2: tile<64x64xptr<bf16>>, %acc_2: tile<64x64xf32>, %pb_2: tile<64x64xptr<bf16>>):
    %a = load %pa_2 : tile<64x64xbf16>
    %b = load %pb_2 : tile<64x64xbf16>
    %acc_3 = dot %a, %b, %acc_2 : tile<64x64xf32>
    %8 = constant {value = 64} : tile<64x64xi32>
    %pa_3 = ptr_add %pa_2, %8 : tile<64x64xptr<bf16>>
    %pb_3 = ptr_add %pb_2, %8 : tile<64x64xptr<bf16>>
    yield %pa_3, %acc_3, %pb_3
  }
  %c = cast %acc {rounding = "rne"} : tile<64x64xbf16>
  %9 = splat %c_ptr : tile<64x64xptr<bf16>>
  %pc = ptr_add %9, %offs : tile<64x64xptr<bf16>>
  store %pc, %c
  return
}
)";

// kLoop with B [K, N] K contiguous: b_ptr + k + 64 n, still advanced by 64 per iteration.
std::string kLoopKContiguous() {
  std::string t = kLoop;
  const std::string pb = "  %pb = ptr_add %7, %offs : tile<64x64xptr<bf16>>\n";
  t.replace(t.find(pb), pb.size(),
            "  %t = constant {value = 64} : tile<1x64xi32>\n"
            "  %kn = mul %3, %t : tile<1x64xi32>\n"
            "  %bk = broadcast %0 : tile<64x64xi32>\n"
            "  %bn = broadcast %kn : tile<64x64xi32>\n"
            "  %offs_b = add %bk, %bn : tile<64x64xi32>\n"
            "  %pb = ptr_add %7, %offs_b : tile<64x64xptr<bf16>>\n");
  return t;
}

// The kernel's layout plan, by value name (coalesced by its axis analysis).
struct Planned {
  test::ParsedKernel kernel;
  AxisAnalysis axis;
  LayoutPlan plan;
  Planned(const char* text, const std::string& arch, int threads)
      : kernel(text), axis(*kernel.func), plan(planLayouts(*kernel.func, arch, threads, &axis)) {}
  const Layout& operator[](const std::string& name) const { return plan.at(kernel[name]); }
};

// What Lowering::exchange relies on, for every (slot, thread) of the layouts a conversion
// moves between: the swizzled byte of an element is the thread part's swizzle XOR the
// slot part's chunk bits, plus the rest of the slot part's swizzle (one register per
// distinct chunk, the rest an immediate); vector runs stay contiguous; the scratch is a
// permutation of whole 16-byte chunks of the tile's bytes, so a writer's and a reader's
// layouts meet.
void expectExchangeAlgebra(const Layout& l, const std::vector<int64_t>& shape, int64_t eb, int threads) {
  ASSERT_TRUE(disjointParts(l)) << l.str();
  ExchangeSwizzle swz = exchangeSwizzle(shape, eb);
  int64_t n = numel(shape), chunk = swz.chunkBits(), run = alignedRun(l, 16 / eb);
  std::set<int64_t> bytes;
  for (int t = 0; t < threads; ++t) {
    int64_t tp = element(l, 0, t) * eb;
    for (int s = 0; s < l.slots(); ++s) {
      int64_t c = swz(element(l, s, 0) * eb), at = swz(element(l, s, t) * eb);
      ASSERT_EQ(at, (swz(tp) ^ (c & chunk)) + (c & ~chunk)) << l.str() << " slot " << s << " thread " << t;
      ASSERT_TRUE(at >= 0 && at + eb <= n * eb) << at;
      bytes.insert(at);
      if (s % run) ASSERT_EQ(at, swz(element(l, s - s % run, t) * eb) + (s % run) * eb) << "run of " << run;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), n) << l.str();  // every element somewhere, none twice
}

TEST(Layout, ExchangeSwizzleSplitsIntoThreadAndSlotParts) {
  struct Case {
    int64_t m, n;
    WgmmaShape w;
    int threads;
  };
  for (const Case& c : {Case{64, 128, {1, 1, 1, 1, 128}, 128}, Case{128, 256, {2, 1, 1, 1, 256}, 256},
                        Case{64, 256, {1, 2, 1, 1, 128}, 256}, Case{128, 128, {1, 1, 2, 1, 128}, 128}})
    for (int64_t eb : {2, 4}) {
      expectExchangeAlgebra(wgmmaAccLayout(c.m, c.n, c.w, c.threads), {c.m, c.n}, eb, c.threads);
      expectExchangeAlgebra(blockedLayout({c.m, c.n}, c.threads), {c.m, c.n}, eb, c.threads);
    }
  for (auto [m, n, threads] : std::vector<std::tuple<int64_t, int64_t, int>>{{64, 64, 128}, {32, 256, 256}})
    for (int64_t eb : {1, 2, 4, 8}) {
      expectExchangeAlgebra(mmaAccLayout(m, n, threads), {m, n}, eb, threads);
      expectExchangeAlgebra(blockedLayout({m, n}, threads, 8, 0), {m, n}, eb, threads);
    }
  // Narrow rows (under 32 bytes) and 1-D tiles: no swizzle, the plain row-major bytes.
  EXPECT_FALSE(exchangeSwizzle({128, 8}, 2).on());
  EXPECT_FALSE(exchangeSwizzle({128, 4}, 2).on());
  expectExchangeAlgebra(blockedLayout({128, 4}, 128), {128, 4}, 2, 128);
  EXPECT_EQ(exchangeSwizzle({4096}, 4).rows, 8);  // one row: each chunk XORs 0
}

TEST(Layout, ExchangeSwizzleSpreadsAWarpsFragmentRowsOverTheBanks) {
  // A warp's 32-bit stores of a bf16 wgmma fragment (m64n256: 8 rows a pitch of 512
  // bytes apart, 4 lanes a row): 32 different banks once swizzled, 4 without.
  Layout l = wgmmaAccLayout(64, 256, {1, 1, 1, 1, 256}, 128);
  ExchangeSwizzle swz = exchangeSwizzle({64, 256}, 2), none;
  for (const ExchangeSwizzle* s : {&swz, &none}) {
    std::set<int64_t> banks;
    for (int lane = 0; lane < 32; ++lane) banks.insert((*s)(element(l, 0, lane) * 2) / 4 % 32);
    EXPECT_EQ(banks.size(), s->on() ? 32u : 4u);
  }
}

TEST(LayoutPlan, AccumulatorsStayInTheWgmmaLayoutThroughTheLoopAndTheEpilogue) {
  Planned p(kLoop, "sm_90a", 128);
  WgmmaShape w;
  ASSERT_TRUE(wgmmaApplies(*p.kernel["acc_3"]->definingOp(), "sm_90a", 128, &w));
  Layout acc = wgmmaAccLayout(64, 64, w, 128);
  for (const char* v : {"acc_3", "acc_2", "acc", "c"}) EXPECT_EQ(p[v], acc) << v;
  // Loads follow their pointers; pointers and the loop-carried pointers stay blocked.
  Layout blocked = blockedLayout({64, 64}, 128);
  for (const char* v : {"pa", "pa_2", "pa_3", "a", "b", "pc"}) EXPECT_EQ(p[v], blocked) << v;
}

TEST(LayoutPlan, LoadsContiguousAlongAnotherDimAreCoalescedAlongIt) {
  std::string text = kLoopKContiguous();
  Planned p(text.c_str(), "sm_90a", 128);
  // B's pointers, through the loop's carried value and its update, and the loaded tile.
  Layout alongK = blockedLayout({64, 64}, 128, 8, 0);
  for (const char* v : {"pb", "pb_2", "pb_3", "b"}) EXPECT_EQ(p[v], alongK) << v;
  Layout blocked = blockedLayout({64, 64}, 128);
  for (const char* v : {"pa", "pa_2", "a", "pc"}) EXPECT_EQ(p[v], blocked) << v;
}

TEST(LayoutPlan, WithoutWgmmaAccumulatorsStayInTheMmaLayout) {
  Planned p(kLoop, "sm_80", 128);
  Layout acc = mmaAccLayout(64, 64, 128);
  for (const char* v : {"acc_3", "acc_2", "acc", "c"}) EXPECT_EQ(p[v], acc) << v;
  Layout blocked = blockedLayout({64, 64}, 128);
  for (const char* v : {"a", "pa_2", "pc"}) EXPECT_EQ(p[v], blocked) << v;
}

}  // namespace
}  // namespace tilefuse::lower::detail
