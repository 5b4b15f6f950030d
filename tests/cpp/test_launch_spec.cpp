// The launch spec's JSON form and the disk-cache entry that holds it (no GPU needed).
#include <gtest/gtest.h>

#include <filesystem>

#include "tilefuse/runtime/DiskCache.h"
#include "tilefuse/runtime/LaunchSpec.h"

using namespace tilefuse::runtime;

namespace {

LaunchSpec sample() {
  LaunchSpec s;
  s.kernel = "matmul_desc_kernel";
  s.arch = "sm_90a";
  s.numWarps = 8;
  s.numStages = 4;
  s.numThreads = 256;
  s.sharedBytes = 197632;
  s.params = {{"a_ptr", ParamKind::Ptr},
              {"M", ParamKind::I32},
              {"K", ParamKind::I64},
              {"alpha", ParamKind::F32},
              {"flag", ParamKind::I1},
              {"seed", ParamKind::U64},
              {"scale", ParamKind::F64},
              {"bits", ParamKind::U32},
              {"tag", ParamKind::I8}};
  // dim 0: M * K (a product the launch evaluates)
  s.tensorMaps = {{0, 2, {{1, 0, 2}, {2, 0}}, {{2, 0}, {-1, 1}}, {128, 64}, 128, "dir \"q\"\\x\t/k.py:32"}};
  return s;
}

std::filesystem::path tempDir(const char* name) {
  auto d = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace

TEST(LaunchSpec, JsonRoundTripsWithNamedKeys) {
  LaunchSpec s = sample();
  std::string j = toJson(s);
  EXPECT_EQ(launchSpecFromJson(j), s);
  for (const char* key :
       {"\"kernel\":", "\"arch\":\"sm_90a\"", "\"num_warps\":8", "\"num_stages\":4", "\"num_threads\":256",
        "\"shared_bytes\":197632", "\"params\":[{\"name\":\"a_ptr\"", "\"kind\":\"f32\"", "\"kind\":\"u64\"", "\"kind\":\"f64\"",
        "\"tensor_maps\":[{\"base\":0", "\"sizes\":[{\"param\":1,\"value\":0,\"factor\":2}", "\"swizzle_bytes\":128",
        "\"where\":\"dir \\\"q\\\"\\\\x\\u0009/k.py:32\""})
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
  EXPECT_EQ(launchSpecFromJson(toJson(LaunchSpec{})), LaunchSpec{});
}

TEST(LaunchSpec, MalformedJsonIsRejected) {
  std::string j = toJson(sample());
  std::string unknownKind = j, extraKey = j;
  unknownKind.replace(unknownKind.find("\"i64\""), 5, "\"q64\"");
  extraKey.insert(1, "\"spare\":1,");
  for (const std::string& bad :
       {j.substr(0, j.size() - 1), j + "x", unknownKind, extraKey, std::string("{}"), std::string("[]"), std::string()})
    EXPECT_THROW(launchSpecFromJson(bad), std::invalid_argument) << bad;
}

TEST(DiskCache, KernelEntryRoundTripsAndDamageReadsAsMissing) {
  auto dir = tempDir("tilefuse_test_kernel_entry");
  DiskCache cache(dir.string());
  CachedKernel k{sample(), ".version 8.0\n", std::string("ELF\0binary", 10)};
  EXPECT_FALSE(cache.getKernel("ab01"));
  cache.putKernel("ab01", k);
  auto got = cache.getKernel("ab01");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->spec, k.spec);
  EXPECT_EQ(got->ptx, k.ptx);
  EXPECT_EQ(got->image, k.image);
  // An entry of bytes that is not a kernel entry (another format) reads as missing.
  cache.put("ab02", "TFK0 something else");
  EXPECT_FALSE(cache.getKernel("ab02"));
  std::filesystem::remove_all(dir);
}
