// The text form of the tile IR. print(parse(t)) == t for text the printer wrote.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tilefuse/ir/IR.h"

namespace tilefuse {

struct PrintOptions {
  bool locations = false;  // append loc("file":line:col) to each op
};

std::string printModule(const Module& m, const PrintOptions& opts = {});
std::string printOp(const Op& op, const PrintOptions& opts = {});

// Parses IR text. Ops without an explicit loc(...) get their position in the
// text as location; `firstLine` numbers the text's first line (for split files).
// Malformed text raises UserError at the offending token.
std::unique_ptr<Module> parseModule(std::string_view text, std::string_view filename = "<string>",
                                    int firstLine = 1);

}  // namespace tilefuse
