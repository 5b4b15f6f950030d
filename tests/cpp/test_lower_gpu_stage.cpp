// The LLVM lowering takes its layouts from GPU-stage IR (compileKernel): a copy of 512
// f32 runs 4 (16-byte) or 2 (8-byte) consecutive elements per thread as its types say,
// a convert_layout recomputes index math, relabels registers or moves a loaded value
// through shared memory, and IR whose layouts disagree without a convert_layout is rejected by the
// verifier before anything is lowered.
#include <gtest/gtest.h>

#include <string>

#include "tilefuse/ir/Text.h"
#include "tilefuse/lower/LowerToLLVM.h"

namespace tilefuse {
namespace {

// 128 threads: runs of 4 (the plan's default for 512 f32), and runs of 2.
const std::string kRun4 = "#blocked<reg=[1, 2], lane=[4, 8, 16, 32, 64], warp=[128, 256]>";
const std::string kRun2 = "#blocked<reg=[1, 256], lane=[2, 4, 8, 16, 32], warp=[64, 128]>";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// @copy with the load side in layout `load` and the store side in layout `store`;
// `tail` computes the stored pointers and value and stores (convert_layouts first).
std::string copyKernel(const std::string& load, const std::string& store, const std::string& tail,
                       const std::string& arch = "sm_90a") {
  std::string t =
      R"(func @copy(%x: ptr<f32>, %y: ptr<f32>) {aligned16 = [0, 1], arch = "ARCH", gpu = true, kernel = true, num_warps = 4} {
  %r = arange {end = 512, start = 0} : tile<512xi32, LD>
  %xs = splat %x : tile<512xptr<f32>, LD>
  %xp = ptr_add %xs, %r : tile<512xptr<f32>, LD>
  %v = load %xp : tile<512xf32, LD>
  %ys = splat %y : tile<512xptr<f32>, ST>
TAIL  return
}
)";
  return replaced(replaced(replaced(replaced(t, "TAIL", tail), "LD", load), "ST", store), "ARCH", arch);
}

// The store side reads %r and %v in its own layout directly.
const std::string kSameLayout = R"(  %yp = ptr_add %ys, %r : tile<512xptr<f32>, ST>
  store %yp, %v
)";
const std::string kConverted = R"(  %r_1 = convert_layout %r : tile<512xi32, ST>
  %yp = ptr_add %ys, %r_1 : tile<512xptr<f32>, ST>
  %v_1 = convert_layout %v : tile<512xf32, ST>
  store %yp, %v_1
)";

std::string ptxOf(const std::string& text, const std::string& arch = "sm_90a") {
  auto m = parseModule(text);
  lower::LowerOptions o;
  o.arch = arch;
  o.keepIR = false;
  return lower::compileKernel(*m, "copy", o).ptx;
}

bool has(const std::string& ptx, const std::string& what) { return ptx.find(what) != std::string::npos; }

TEST(LowerGpuStage, AccessesTakeTheVectorWidthOfTheTypesLayout) {
  std::string run4 = ptxOf(copyKernel(kRun4, kRun4, kSameLayout));
  EXPECT_TRUE(has(run4, "ld.global.v4.f32")) << run4;
  EXPECT_TRUE(has(run4, "st.global.v4.f32")) << run4;
  std::string run2 = ptxOf(copyKernel(kRun2, kRun2, kSameLayout));
  EXPECT_TRUE(has(run2, "ld.global.v2.f32")) << run2;
  EXPECT_TRUE(has(run2, "st.global.v2.f32")) << run2;
  EXPECT_FALSE(has(run2, ".v4.")) << run2;
  EXPECT_FALSE(has(run2, "bar.sync")) << run2;
}

TEST(LowerGpuStage, ConvertLayoutRecomputesIndexMathAndMovesOtherValuesThroughSharedMemory) {
  std::string ptx = ptxOf(copyKernel(kRun2, kRun4, kConverted));
  EXPECT_TRUE(has(ptx, "ld.global.v2.f32")) << ptx;
  EXPECT_TRUE(has(ptx, "st.global.v4.f32")) << ptx;
  EXPECT_TRUE(has(ptx, "st.shared")) << ptx;
  EXPECT_TRUE(has(ptx, "bar.sync")) << ptx;
  // Only the arange converted: it is made again in the store's layout, no shared memory.
  std::string remat = ptxOf(copyKernel(kRun2, kRun4, R"(  %r_1 = convert_layout %r : tile<512xi32, ST>
  %yp = ptr_add %ys, %r_1 : tile<512xptr<f32>, ST>
  %one = constant {value = 1.0} : tile<512xf32, ST>
  store %yp, %one
)"));
  EXPECT_TRUE(has(remat, "st.global.v4.f32")) << remat;
  EXPECT_FALSE(has(remat, "bar.sync")) << remat;
  EXPECT_FALSE(has(remat, ".shared")) << remat;
}

TEST(LowerGpuStage, ConvertLayoutRelabelsRegistersWhereEachThreadHoldsItsElements) {
  // Each thread's two elements in the other slot order: no data moves.
  std::string swapped = "#blocked<reg=[256, 1], lane=[2, 4, 8, 16, 32], warp=[64, 128]>";
  std::string ptx = ptxOf(copyKernel(kRun2, swapped, kConverted));
  EXPECT_TRUE(has(ptx, "ld.global.v2.f32")) << ptx;
  EXPECT_FALSE(has(ptx, "bar.sync")) << ptx;
  EXPECT_FALSE(has(ptx, ".shared")) << ptx;
}

TEST(LowerGpuStage, LayoutsThatDisagreeWithoutAConvertAreRejectedBeforeLowering) {
  try {
    ptxOf(copyKernel(kRun2, kRun4, R"(  %yp = ptr_add %ys, %r : tile<512xptr<f32>, ST>
  store %yp, %v
)"));
    FAIL() << "lowered IR whose layouts disagree";
  } catch (const UserError& e) {
    EXPECT_TRUE(has(e.message(), "must be in the result's layout " + kRun4)) << e.message();
  }
}

TEST(LowerGpuStage, IrStagedForAnotherTargetIsRejected) {
  try {
    ptxOf(copyKernel(kRun4, kRun4, kSameLayout, "sm_80"), "sm_90a");
    FAIL() << "lowered sm_80 IR for sm_90a";
  } catch (const UserError& e) {
    EXPECT_EQ(e.message(), "'@copy' is in the GPU stage for sm_80 with num_warps 4, not for sm_90a with 4");
  }
}

}  // namespace
}  // namespace tilefuse
