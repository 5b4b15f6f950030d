// IR text -> parse -> verify -> the pipeline -> the GPU stage and the LLVM NVPTX lowering
// to PTX for sm_90a, for each function of the module.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "FuzzCommon.h"
#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"
#include "tilefuse/lower/LowerToLLVM.h"
#include "tilefuse/passes/Passes.h"

using namespace tilefuse;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expectOnlyUserErrors([&] {
    auto m = parseModule(text, "<fuzz>");
    verifyModule(*m);
    passes::runPipeline(*m);
    for (Op* f : m->funcs()) {
      // Each function on its own: a helper the lowering refuses must not hide a kernel's crash.
      fuzz::expectOnlyUserErrors([&] {
        lower::compileKernel(*m, funcName(*f), lower::LowerOptions{"sm_90a", 4, 3, false, ""});
      });
    }
  });
  return 0;
}
