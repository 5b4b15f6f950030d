#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

std::string_view envOr(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

#ifdef NDEBUG
constexpr bool kVerifyEach = false;
#else
constexpr bool kVerifyEach = true;
#endif

bool verifyEach() { return kVerifyEach || envOr("TILEFUSE_VERIFY_EACH") == "1"; }

}  // namespace

const std::vector<PassInfo>& registry() {
  static const std::vector<PassInfo> r = {
#define TF_PASS(Name, Description) {#Name, Description, &Name},
#include "tilefuse/passes/Passes.def"
  };
  return r;
}

const PassInfo* lookup(std::string_view name) {
  for (const auto& p : registry())
    if (p.name == name) return &p;
  return nullptr;
}

void runPass(const PassInfo& pass, Module& m, std::string_view stage, bool verify) {
  auto t0 = std::chrono::steady_clock::now();
  pass.run(m);
  auto t1 = std::chrono::steady_clock::now();
  if (envOr("TILEFUSE_TIME_PASSES") == "1")
    std::fprintf(stderr, "[tilefuse] %-14s %-12s %8.3f ms\n", std::string(stage).c_str(), std::string(pass.name).c_str(),
                 std::chrono::duration<double, std::milli>(t1 - t0).count());
  std::string_view dump = envOr("TILEFUSE_DUMP");
  if (dump == "all" || dump == pass.name || dump == stage)
    std::cerr << "// -----// IR after " << stage << "/" << pass.name << " //----- //\n" << printModule(m);
  if (verify) verifyModule(m);
}

// The pipeline, stage by stage. Stages of the backends (layouts, lowering)
// are added after "optimize".
void runPipeline(Module& m) {
  verifyModule(m);
  auto stage = [&](std::string_view name, std::initializer_list<std::string_view> passes) {
    for (auto p : passes) runPass(*lookup(p), m, name, verifyEach());
  };
  stage("inline", {"inliner"});
  stage("simplify", {"canonicalize", "cse", "dce"});
  stage("optimize", {"licm", "canonicalize", "cse", "dce"});
  verifyModule(m);
}

}  // namespace tilefuse::passes
