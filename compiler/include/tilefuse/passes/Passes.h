// Pass entry points, the registry and the pipeline.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tilefuse/ir/IR.h"

namespace tilefuse::passes {

// Options of a pass by name.
using PassOptions = std::map<std::string, std::string>;

#define TF_PASS(Name, Description) void Name(Module& m);
#define TF_PASS_OPTS(Name, Description, Options) void Name(Module& m, const PassOptions& opts);
#include "tilefuse/passes/Passes.def"

struct PassInfo {
  std::string_view name;
  std::string_view description;
  std::string_view options;  // "key=default,..."; empty: none
  void (*run)(Module&, const PassOptions&);
};
const std::vector<PassInfo>& registry();
const PassInfo* lookup(std::string_view name);  // '-' reads as '_'

// "key=value,..." (keys: '-' reads as '_'); throws UserError on malformed text.
PassOptions parsePassOptions(std::string_view text);
// `given` over the defaults of `pass`; throws UserError on keys the pass does not take.
PassOptions completeOptions(const PassInfo& pass, const PassOptions& given);

// Runs one pass with the instrumentation of the pipeline: TILEFUSE_DUMP
// (a pass name, a stage name or "all") prints the IR after it, and
// TILEFUSE_TIME_PASSES=1 reports its time on stderr; `verify` checks the
// IR afterwards.
void runPass(const PassInfo& pass, Module& m, std::string_view stage, bool verify, const PassOptions& opts = {});

// The compiler pipeline (Pipeline.cpp lists its stages and passes in order).
void runPipeline(Module& m);

// The GPU stage of a copy of the optimized module `m`, which the interpreter and the
// LLVM lowering keep reading (TILEFUSE_DUMP=gpu prints it).
std::unique_ptr<Module> runGpuStage(const Module& m, const std::string& arch, int numWarps, int numStages = 3);

}  // namespace tilefuse::passes
