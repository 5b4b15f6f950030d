// The emitters of a staged dot's GPU-stage ops (LowerWgmma.cpp) decide nothing: the
// stores land where allocate-shared placed the buffers (smem_at), and the wgmma takes
// B's majorness from its b_kmajor attribute and its swizzle from B's #shared layout.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "tilefuse/ir/Text.h"
#include "tilefuse/lower/LowerToLLVM.h"

namespace tilefuse {
namespace {

const std::string kBlocked = "#blocked<reg=[1, 2, 4, 1024, 2048], lane=[8, 16, 32, 64, 128], warp=[256, 512]>";
const std::string kWgmma = "#wgmma<reg=[1, 512, 8, 16, 32], lane=[2, 4, 64, 128, 256], warp=[1024, 2048]>";

// One bf16 64x64x64 wgmma group, A at byte `a`, B at byte `b` in B's #shared `shared`.
std::string stagedDot(int a, int b, const std::string& kMajor, const std::string& shared) {
  return R"(func @k(%p: ptr<bf16>) {arch = "sm_90a", gpu = true, kernel = true, num_warps = 4, smem_staged = 32768} {
  %a = smem_alloc {smem_at = )" +
         std::to_string(a) + R"(} : smem<64x64xbf16, #shared<swizzle=128, rows=64, cols=64, eb=2, stages=1>>
  %b = smem_alloc {smem_at = )" +
         std::to_string(b) + R"(} : smem<64x64xbf16, )" + shared + R"(>
  %s = constant {value = 0} : i32
  %ps = splat %p : tile<64x64xptr<bf16>, BL>
  %v = load %ps : tile<64x64xbf16, BL>
  barrier
  local_store %a, %s, %v
  local_store %b, %s, %v
  fence_async_shared
  barrier
  %acc = constant {value = 0.0} : tile<64x64xf32, WG>
  %d, %t = wgmma %a, %s, %b, %s, %acc )" +
         kMajor + R"(: tile<64x64xf32, WG>, token
  %e = wgmma_wait %t, %d {pending = 0} : tile<64x64xf32, WG>
  %f = convert_layout %e : tile<64x64xf32, BL>
  %q = bitcast %p : ptr<f32>
  %qs = splat %q : tile<64x64xptr<f32>, BL>
  store %qs, %f
  return
}
)";
}

std::string ptxOf(std::string text) {
  for (auto [from, to] : {std::pair{std::string("BL"), kBlocked}, std::pair{std::string("WG"), kWgmma}})
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  auto m = parseModule(text);
  lower::LowerOptions o;
  o.arch = "sm_90a";
  o.keepIR = false;
  return lower::compileKernel(*m, "k", o).ptx;
}

// The constant byte offsets of the kernel's st.shared of 16 bytes.
std::set<std::string> storeOffsets(const std::string& ptx) {
  static const std::regex st(R"(st\.shared\.v4\.b32\s+\[%rd\d+(\+\d+)?\])");
  std::set<std::string> out;
  for (std::sregex_iterator it(ptx.begin(), ptx.end(), st), end; it != end; ++it) out.insert((*it)[1].str());
  return out;
}

// The swizzle modes (bits 62-63) of the wgmma descriptors' constant parts.
std::set<uint64_t> swizzleModes(const std::string& ptx) {
  static const std::regex orConst(R"(or\.b64\s+%rd\d+, %rd\d+, (-?\d+);)");
  std::set<uint64_t> out;
  for (std::sregex_iterator it(ptx.begin(), ptx.end(), orConst), end; it != end; ++it)
    if (uint64_t v = static_cast<uint64_t>(std::stoll((*it)[1].str())); v >> 62) out.insert(v >> 62);
  return out;
}

const std::string kB128 = "#shared<swizzle=128, rows=64, cols=64, eb=2, stages=1>";

TEST(LowerWgmma, StagedOperandsLandWhereAllocateSharedPlacedTheirBuffers) {
  EXPECT_EQ(storeOffsets(ptxOf(stagedDot(0, 8192, "", kB128))), (std::set<std::string>{"", "+8192"}));
  EXPECT_EQ(storeOffsets(ptxOf(stagedDot(16384, 24576, "", kB128))), (std::set<std::string>{"+16384", "+24576"}));
}

TEST(LowerWgmma, WgmmaTakesBsMajornessAndSwizzleFromTheIr) {
  std::string nMajor = ptxOf(stagedDot(0, 8192, "", kB128));
  std::string kMajor = ptxOf(stagedDot(0, 8192, "{b_kmajor = true} ", kB128));
  EXPECT_NE(nMajor.find("p, 1, 1, 0, 1;"), std::string::npos);  // B transposed: N-major
  EXPECT_NE(kMajor.find("p, 1, 1, 0, 0;"), std::string::npos);
  // B in 64-byte swizzled column blocks: its descriptors carry swizzle mode 2 (bits 62-63), A's mode 1.
  std::string sw64 = ptxOf(stagedDot(0, 8192, "", "#shared<swizzle=64, rows=64, cols=64, eb=2, stages=1>"));
  EXPECT_EQ(swizzleModes(nMajor), (std::set<uint64_t>{1}));
  EXPECT_EQ(swizzleModes(sw64), (std::set<uint64_t>{1, 2}));
}

}  // namespace
}  // namespace tilefuse
