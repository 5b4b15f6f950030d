// IR text -> parse -> verify -> the tile pass pipeline -> print, and the printed text must
// parse, verify and print to itself (Text.h's print(parse(t)) == t).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "FuzzCommon.h"
#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"
#include "tilefuse/passes/Passes.h"

using namespace tilefuse;

namespace {

void roundTrip(const Module& m, const char* after) {
  std::string once = printModule(m);
  std::unique_ptr<Module> again;
  try {
    again = parseModule(once, "<printed>");
    verifyModule(*again);
  } catch (const UserError& e) {
    fuzz::finding(std::string("the printed IR ") + after + " does not parse or verify: " + e.what() + "\n" + once);
  }
  if (printModule(*again) != once) fuzz::finding(std::string("print(parse(print(m))) != print(m) ") + after);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expectOnlyUserErrors([&] {
    auto m = parseModule(text, "<fuzz>");
    verifyModule(*m);
    roundTrip(*m, "after parsing");
    passes::runPipeline(*m);
    roundTrip(*m, "after the pipeline");
  });
  return 0;
}
