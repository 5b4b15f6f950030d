// The GPU stage's layout attributes (compiler/include/tilefuse/ir/Layouts.h): the
// shared-memory addressing against a reference written from the PTX ISA's picture of
// the swizzle modes, and the text form of #blocked / #wgmma / #mma / #shared.
// (tests/cpp/test_layout.cpp covers the lowering's layout plan.)
#include <gtest/gtest.h>

#include <set>

#include "tilefuse/ir/Layouts.h"

namespace tilefuse {
namespace {

// Element (row, col) of one stage, as the PTX ISA draws a swizzled tile: the row's
// bytes are cut into column blocks of R bytes stored one after another, each block
// holding all rows, R bytes per row; within a block the 16-byte chunk c of row r moves
// to chunk c ^ x, x = r % 8 (128-byte swizzle), (r / 2) % 4 (64) or (r / 4) % 2 (32).
int64_t reference(const SharedLayout& s, int64_t row, int64_t col) {
  int64_t R = s.swizzle;
  int64_t byte = col * s.eb;
  int64_t block = byte / R, inRow = byte % R;
  int64_t chunk = inRow / 16, inChunk = inRow % 16;
  int64_t x = R == 128 ? row % 8 : R == 64 ? (row / 2) % 4 : (row / 4) % 2;
  return block * s.rows * R + row * R + (chunk ^ x) * 16 + inChunk;
}

std::vector<SharedLayout> layouts() {
  std::vector<SharedLayout> out;
  for (int64_t eb : {1, 2, 4})
    for (int64_t R : {32, 64, 128})
      for (int64_t rows : {8, 16, 64, 128})
        for (int64_t cols : {16, 32, 64, 128, 256})
          if (cols * eb % R == 0) out.push_back({R, rows, cols, eb, 2});
  return out;
}

TEST(SharedLayout, OffsetsMatchTheSwizzlePicture) {
  for (const SharedLayout& s : layouts()) {
    SCOPED_TRACE(s.str());
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) ASSERT_EQ(s.offset(0, r, c), reference(s, r, c)) << r << ", " << c;
  }
}

// Each element has its own eb bytes, all inside the stage; the eb-byte elements of one
// 16-byte chunk of a row stay together, so 16-byte vector accesses remain possible.
TEST(SharedLayout, OffsetsAreABijectionThatKeepsChunks) {
  for (const SharedLayout& s : layouts()) {
    SCOPED_TRACE(s.str());
    std::set<int64_t> seen;
    int64_t perChunk = 16 / s.eb;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) {
        int64_t o = s.offset(0, r, c);
        ASSERT_EQ(o % s.eb, 0);
        ASSERT_LT(o, s.rows * s.cols * s.eb);
        ASSERT_TRUE(seen.insert(o).second) << "offset " << o << " twice";
        if (c % perChunk) {
          ASSERT_EQ(o, s.offset(0, r, c - 1) + s.eb);
        }
      }
  }
}

TEST(SharedLayout, StagesStartOnWholeSwizzleAtoms) {
  SharedLayout a{128, 64, 64, 2, 3};  // 8 KiB a stage
  EXPECT_EQ(a.stageBytes(), 8192);
  EXPECT_EQ(a.offset(2, 5, 9), 2 * 8192 + a.offset(0, 5, 9));
  SharedLayout small{32, 8, 16, 2, 2};  // 256 bytes, padded to an atom
  EXPECT_EQ(small.stageBytes(), 1024);
  EXPECT_EQ(small.offset(1, 0, 0), 1024);
}

// A few offsets worked out by hand.
TEST(SharedLayout, HandComputedOffsets) {
  SharedLayout a{128, 64, 64, 2, 1};  // bf16 [64, 64]: one column block of 128 bytes
  EXPECT_EQ(a.offset(0, 0, 0), 0);
  EXPECT_EQ(a.offset(0, 0, 8), 16);        // chunk 1 of row 0 stays
  EXPECT_EQ(a.offset(0, 1, 0), 128 + 16);  // row 1: chunk 0 -> 1
  EXPECT_EQ(a.offset(0, 3, 17), 3 * 128 + (2 ^ 3) * 16 + 2);
  EXPECT_EQ(a.offset(0, 9, 0), 9 * 128 + 16);  // the pattern repeats every 8 rows
  SharedLayout b{64, 16, 64, 2, 1};            // bf16 [16, 64] in 64-byte blocks: two blocks of 16 x 64 bytes
  EXPECT_EQ(b.offset(0, 0, 32), 16 * 64);      // column 32 starts the second block
  EXPECT_EQ(b.offset(0, 2, 0), 2 * 64 + 16);
  EXPECT_EQ(b.offset(0, 3, 8), 3 * 64 + 0);  // (3 / 2) % 4 = 1: chunk 1 -> 0
}

TEST(LayoutText, RoundTrips) {
  const char* cases[] = {
      "#blocked<reg=[1, 2, 4], lane=[8, 16, 32, 64, 128], warp=[256, 512]>",
      "#blocked<reg=[], lane=[1, 2, 4, 8, 16], warp=[32, 64, 0]>",
      "#wgmma<reg=[1, 512, 8, 16, 32], lane=[2, 4, 64, 128, 256], warp=[1024, 2048]>",
      "#mma<reg=[1, 128], lane=[2, 4, 16, 32, 64], warp=[]>",
      "#shared<swizzle=128, rows=64, cols=64, eb=2, stages=3>",
      "#shared<swizzle=32, rows=8, cols=16, eb=2, stages=1>",
  };
  for (const char* text : cases) {
    SCOPED_TRACE(text);
    auto l = parseLayout(text);
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(layoutStr(*l), text);
  }
  auto w = parseLayout(cases[2]);
  ASSERT_TRUE(std::holds_alternative<DistLayout>(*w));
  EXPECT_EQ(std::get<DistLayout>(*w).kind, DistKind::Wgmma);
  EXPECT_EQ(std::get<DistLayout>(*w).warp, (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(layoutStr(TypeLayout{}), "");
}

TEST(LayoutText, Malformed) {
  for (const char* bad : {
           "",
           "#",
           "blocked<reg=[], lane=[], warp=[]>",
           "#blocked",
           "#blocked<>",
           "#linear<reg=[], lane=[], warp=[]>",
           "#blocked<reg=[], lane=[]>",
           "#blocked<lane=[], reg=[], warp=[]>",
           "#blocked<reg=[1,], lane=[], warp=[]>",
           "#blocked<reg=[a], lane=[], warp=[]>",
           "#blocked<reg=[], lane=[], warp=[]",
           "#blocked<reg=[], lane=[], warp=[]>>",
           "#shared<swizzle=128, rows=64, cols=64, eb=2>",
           "#shared<swizzle=128, rows=64, cols=64, stages=1, eb=2>",
           "#shared<swizzle=x, rows=64, cols=64, eb=2, stages=1>",
           "#shared<reg=[], lane=[], warp=[]>",
       }) {
    SCOPED_TRACE(std::string("'") + bad + "'");
    EXPECT_FALSE(parseLayout(bad).has_value());
  }
}

}  // namespace
}  // namespace tilefuse
