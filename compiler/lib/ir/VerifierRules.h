// Shared by the verifier of tile ops (Verifier.cpp) and of the GPU stage (VerifierGpu.cpp).
#pragma once

#include <string>
#include <vector>

#include "tilefuse/ir/IR.h"

namespace tilefuse::verifier {

inline std::string opName(const Op& op) { return std::string("'").append(op.mnemonic()).append("'"); }

[[noreturn]] inline void fail(const Op& op, const std::string& msg) {
  throw UserError(op.loc(), opName(op) + " " + msg);
}

inline bool isPow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

inline std::string shapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// `index` is the Attr alternative: 0 bool, 1 integer, 2 float, 3 string, 4 integer list, 5 type list.
inline void requireAttr(const Op& op, const std::string& name, size_t index) {
  const Attr* a = op.attr(name);
  if (!a || a->index() != index) {
    static const char* kinds[] = {"a boolean", "an integer", "a float", "a string", "an integer list", "a type list"};
    fail(op, "needs attribute '" + name + "' (" + kinds[index] + ")");
  }
}

const Op* enclosingFunc(const Op& op);

// The GPU stage (VerifierGpu.cpp).
void verifyGpuFunc(const Op& func);  // its attributes: arch, num_warps
// The types of `op`'s results and region arguments belong to the stage of `func`
// (none: tile-level); GPU ops appear only in the GPU stage.
void checkStage(const Op& op, const Op* func);
void verifyGpuOp(const Op& op);
// In the GPU stage: the operands of tile ops whose lowering needs them in one layout.
void verifyTileOpLayouts(const Op& op);

}  // namespace tilefuse::verifier
