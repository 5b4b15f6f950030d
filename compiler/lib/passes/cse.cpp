// cse: merges identical pure ops when the first one dominates the other.
//   %a = mul %x, %y : f32                  %a = mul %x, %y : f32
//   %b = mul %y, %x : f32        =>        %s = add %a, %a : f32
//   %s = add %a, %b : f32
// An op is visible in the rest of its block and in the regions nested there, never
// outside its own region. Memory ops, calls and ops with regions are left alone.
#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

using Scope = std::unordered_map<std::string, Op*>;

bool candidate(const Op& op) { return op.isPure() && op.numRegions() == 0 && op.numResults() > 0; }

// Two candidates compute the same value exactly when their keys are equal.
// Operands of commutative ops are sorted so that add(x, y) matches add(y, x).
std::string key(const Op& op) {
  std::ostringstream k;
  k << op.mnemonic();
  std::vector<Value*> operands = op.operands();
  if (op.has(Commutative)) std::sort(operands.begin(), operands.end(), std::less<>());
  for (Value* v : operands) k << ' ' << v;
  for (const auto& [name, a] : op.attrs()) k << ' ' << name << '=' << attrToString(a);
  for (Value* r : op.results()) k << " : " << r->type().str();
  return k.str();
}

Op* lookup(const std::vector<Scope>& scopes, const std::string& k) {
  for (auto s = scopes.rbegin(); s != scopes.rend(); ++s)
    if (auto it = s->find(k); it != s->end()) return it->second;
  return nullptr;
}

void cseBlock(Block& b, std::vector<Scope>& scopes) {
  scopes.emplace_back();
  for (auto it = b.ops().begin(); it != b.ops().end();) {
    Op* op = (it++)->get();
    if (candidate(*op)) {
      std::string k = key(*op);
      if (Op* first = lookup(scopes, k)) {
        for (unsigned i = 0; i < op->numResults(); ++i) op->result(i)->replaceAllUsesWith(first->result(i));
        op->erase();
        continue;
      }
      scopes.back().emplace(std::move(k), op);
    }
    for (unsigned r = 0; r < op->numRegions(); ++r) cseBlock(op->region(r), scopes);
  }
  scopes.pop_back();
}

}  // namespace

void cse(Module& m) {
  for (Op* f : m.funcs()) {
    std::vector<Scope> scopes;
    cseBlock(f->region(0), scopes);
  }
}

}  // namespace tilefuse::passes
