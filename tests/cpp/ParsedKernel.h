// A parsed, verified one-function module and its values by name, for tests that
// check what an analysis says about named values.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "tilefuse/ir/IR.h"
#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"

namespace tilefuse::test {

struct ParsedKernel {
  std::unique_ptr<Module> module;
  Op* func = nullptr;
  std::map<std::string, const Value*> named;  // op results and block arguments

  explicit ParsedKernel(const std::string& text) : module(parseModule(text)) {
    verifyModule(*module);
    func = module->funcs().at(0);
    func->walk([&](Op* op) {
      for (Value* v : op->results())
        if (!v->name().empty()) named[v->name()] = v;
      for (unsigned r = 0; r < op->numRegions(); ++r)
        for (Value* a : op->region(r).args())
          if (!a->name().empty()) named[a->name()] = a;
    });
  }
  const Value* operator[](const std::string& name) const { return named.at(name); }
};

}  // namespace tilefuse::test
