#include <algorithm>
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

std::string underscored(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (c == '-') c = '_';
  return r;
}

}  // namespace

const std::vector<PassInfo>& registry() {
  static const std::vector<PassInfo> r = {
#define TF_PASS(Name, Description) {#Name, Description, "", [](Module& m, const PassOptions&) { Name(m); }},
#define TF_PASS_OPTS(Name, Description, Options) {#Name, Description, Options, &Name},
#include "tilefuse/passes/Passes.def"
  };
  return r;
}

const PassInfo* lookup(std::string_view name) {
  for (const auto& p : registry())
    if (p.name == underscored(name)) return &p;
  return nullptr;
}

PassOptions parsePassOptions(std::string_view text) {
  PassOptions o;
  while (!text.empty()) {
    std::string_view item = text.substr(0, text.find(','));
    text.remove_prefix(std::min(text.size(), item.size() + 1));
    size_t eq = item.find('=');
    if (eq == 0 || eq == std::string_view::npos || eq + 1 == item.size())
      throw UserError({}, "pass option '" + std::string(item) + "' is not key=value");
    o[underscored(item.substr(0, eq))] = std::string(item.substr(eq + 1));
  }
  return o;
}

PassOptions completeOptions(const PassInfo& pass, const PassOptions& given) {
  PassOptions o = parsePassOptions(pass.options);
  for (const auto& [k, v] : given) {
    if (!o.count(k))
      throw UserError({}, "pass '" + std::string(pass.name) + "' has no option '" + k + "'" +
                              (pass.options.empty() ? "" : " (options: " + std::string(pass.options) + ")"));
    o[k] = v;
  }
  return o;
}

void runPass(const PassInfo& pass, Module& m, std::string_view stage, bool verify, const PassOptions& opts) {
  PassOptions all = completeOptions(pass, opts);
  auto t0 = std::chrono::steady_clock::now();
  pass.run(m, all);
  auto t1 = std::chrono::steady_clock::now();
  if (envOr("TILEFUSE_TIME_PASSES") == "1")
    std::fprintf(stderr, "[tilefuse] %-14s %-12s %8.3f ms\n", std::string(stage).c_str(),
                 std::string(pass.name).c_str(), std::chrono::duration<double, std::milli>(t1 - t0).count());
  std::string_view dump = envOr("TILEFUSE_DUMP");
  if (dump == "all" || dump == pass.name || dump == stage)
    std::cerr << "// -----// IR after " << stage << "/" << pass.name << " //----- //\n" << printModule(m);
  if (verify) verifyModule(m);
}

// The pipeline of the tile IR, stage by stage; runGpuStage continues it for the GPU.
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

std::unique_ptr<Module> runGpuStage(const Module& m, const std::string& arch, int numWarps, int numStages) {
  auto gpu = cloneModule(m);
  PassOptions target = {{"arch", arch}, {"num_warps", std::to_string(numWarps)}};
  runPass(*lookup("decompose_dot_scaled"), *gpu, "gpu", verifyEach());
  runPass(*lookup("plan_layouts"), *gpu, "gpu", verifyEach(), target);
  runPass(*lookup("plan_tma"), *gpu, "gpu", verifyEach());
  runPass(*lookup("pipeline_schedule"), *gpu, "gpu", verifyEach(), {{"num_stages", std::to_string(numStages)}});
  runPass(*lookup("stage_dot_operands"), *gpu, "gpu", verifyEach());
  runPass(*lookup("warp_specialize"), *gpu, "gpu", verifyEach());
  runPass(*lookup("pipeline_expand"), *gpu, "gpu", verifyEach());
  runPass(*lookup("restart_accumulators"), *gpu, "gpu", verifyEach());
  runPass(*lookup("insert_waits"), *gpu, "gpu", verifyEach());
  runPass(*lookup("allocate_shared"), *gpu, "gpu", verifyEach());
  verifyModule(*gpu);
  return gpu;
}

}  // namespace tilefuse::passes
