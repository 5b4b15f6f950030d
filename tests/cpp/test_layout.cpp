// Distributed layouts (compiler/lib/lower/Layout.h): every layout the lowering builds
// must be a map of (slot, thread) onto the tile in which every element has at least
// one holder and replicated bits hold exact copies.
#include <gtest/gtest.h>

#include <set>

#include "../../compiler/lib/lower/Layout.h"

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

}  // namespace
}  // namespace tilefuse::lower::detail
