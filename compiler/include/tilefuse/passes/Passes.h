// Pass entry points, the registry and the pipeline.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tilefuse/ir/IR.h"

namespace tilefuse::passes {

#define TF_PASS(Name, Description) void Name(Module& m);
#include "tilefuse/passes/Passes.def"

struct PassInfo {
  std::string_view name;
  std::string_view description;
  void (*run)(Module&);
};
const std::vector<PassInfo>& registry();
const PassInfo* lookup(std::string_view name);

// Runs one pass with the instrumentation of the pipeline: TILEFUSE_DUMP
// (a pass name, a stage name or "all") prints the IR after it, and
// TILEFUSE_TIME_PASSES=1 reports its time on stderr; `verify` checks the
// IR afterwards.
void runPass(const PassInfo& pass, Module& m, std::string_view stage, bool verify);

// The compiler pipeline (Pipeline.cpp lists its stages and passes in order).
void runPipeline(Module& m);

}  // namespace tilefuse::passes
