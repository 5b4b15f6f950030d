// inliner: replaces calls of device functions by a copy of the callee's body.
//   func @sq(%a: f32) -> (f32) { %s = mul %a, %a : f32; return %s }
//   %r = call @sq(%x) : f32          =>   %s = mul %x, %x : f32
//   store %p, %r                          store %p, %s
// Kernels and functions marked {noinline = true} are never inlined; callees stay in
// the module (dce removes the ones no call reaches). Recursion is a UserError.
#include <algorithm>
#include <map>
#include <string>

#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

bool flag(const Op& f, const std::string& name) { return f.hasAttr(name) && f.boolAttr(name); }

class Inliner {
 public:
  explicit Inliner(Module& m) : module_(m) {}

  // Inlines every inlinable call in `f`, after doing the same in its callees so that
  // each callee body is copied once it is already flat.
  void process(Op* f) {
    if (state_[f] == State::Done) return;
    state_[f] = State::Active;
    std::vector<Op*> calls;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::Call && inlinable(*o)) calls.push_back(o);
    });
    for (Op* call : calls) {
      Op* callee = module_.lookupFunc(call->strAttr("callee"));
      if (state_[callee] == State::Active)
        throw UserError(call->loc(), "recursive call of '@" + funcName(*callee) + "' cannot be inlined");
      process(callee);
      inlineCall(call, *callee);
    }
    state_[f] = State::Done;
  }

 private:
  enum class State { New, Active, Done };

  bool inlinable(const Op& call) const {
    const Op* callee = module_.lookupFunc(call.strAttr("callee"));
    return callee && !flag(*callee, "kernel") && !flag(*callee, "noinline");
  }

  static void inlineCall(Op* call, const Op& callee) {
    const Block& body = callee.region(0);
    std::map<const Value*, Value*> map;
    for (unsigned i = 0; i < body.numArgs(); ++i) map[body.arg(i)] = call->operand(i);
    Block& dst = *call->parentBlock();
    auto pos = std::find_if(dst.ops().begin(), dst.ops().end(), [&](auto& p) { return p.get() == call; });
    for (auto& o : body.ops()) {
      if (o->kind() == OpKind::Return) {
        // The callee is isolated from above, so every returned value was mapped.
        for (unsigned i = 0; i < o->numOperands(); ++i) call->result(i)->replaceAllUsesWith(map.at(o->operand(i)));
        break;
      }
      dst.insert(pos, cloneOp(*o, map));
    }
    call->erase();
  }

  Module& module_;
  std::map<const Op*, State> state_;
};

}  // namespace

void inliner(Module& m) {
  Inliner in(m);
  for (Op* f : m.funcs()) in.process(f);
}

}  // namespace tilefuse::passes
