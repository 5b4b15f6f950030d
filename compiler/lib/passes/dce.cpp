// dce: removes ops whose results nobody uses and that have no effect.
//   %a = add %x, %y : f32      (unused)      =>   (gone)
//   %r = for ... { pure body } (unused)      =>   (gone)
// In a module with a kernel, device functions no call reaches are removed too.
#include <iterator>
#include <set>

#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

// True when `op` and everything nested in it are free of side effects.
// A while loop may not terminate, so it is never considered removable.
bool removable(Op* op) {
  if (op->kind() == OpKind::While || op->kind() == OpKind::Call) return false;
  bool ok = true;
  op->walk([&](Op* o) {
    if (o->has(Terminator) || o->kind() == OpKind::For || o->kind() == OpKind::If) return;
    if (!o->isPure()) ok = false;
  });
  return ok;
}

bool allUnused(Op* op) {
  for (Value* r : op->results())
    if (!r->unused()) return false;
  return true;
}

// Erases dead ops of `b`, last to first so a chain of dead ops goes in one sweep.
bool sweep(Block& b) {
  bool changed = false;
  // A forward iterator: a reverse one refers to its element through the next
  // position, which erasing that next op would invalidate.
  for (auto it = b.ops().end(); it != b.ops().begin();) {
    Op* op = (--it)->get();
    for (unsigned r = 0; r < op->numRegions(); ++r) changed |= sweep(op->region(r));
    if (!op->has(Terminator) && allUnused(op) && removable(op)) {
      it = std::next(it);
      op->erase();
      changed = true;
    }
  }
  return changed;
}

void removeUncalledFunctions(Module& m) {
  bool hasKernel = false;
  for (Op* f : m.funcs()) hasKernel |= f->hasAttr("kernel") && f->boolAttr("kernel");
  if (!hasKernel) return;
  // Reachability from the kernels through calls.
  std::set<std::string> live;
  std::vector<Op*> work;
  for (Op* f : m.funcs())
    if (f->hasAttr("kernel") && f->boolAttr("kernel")) work.push_back(f);
  while (!work.empty()) {
    Op* f = work.back();
    work.pop_back();
    if (!live.insert(funcName(*f)).second) continue;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::Call)
        if (Op* callee = m.lookupFunc(o->strAttr("callee"))) work.push_back(callee);
    });
  }
  for (Op* f : m.funcs())
    if (!live.count(funcName(*f))) f->erase();
}

}  // namespace

void dce(Module& m) {
  for (Op* f : m.funcs())
    while (sweep(f->region(0))) {
    }
  removeUncalledFunctions(m);
}

}  // namespace tilefuse::passes
