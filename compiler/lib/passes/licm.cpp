// licm: hoists loop-invariant pure ops out of for and while loops.
//   %r = for %lb, %ub, %st, %a0 : f32 {          %s = mul %x, %y : f32
//   ^(%i: i32, %a: f32):                          %r = for %lb, %ub, %st, %a0 : f32 {
//     %s = mul %x, %y : f32              =>       ^(%i: i32, %a: f32):
//     %n = add %a, %s : f32                         %n = add %a, %s : f32
//     yield %n                                      yield %n
//   }                                             }
// Only ops directly in a loop region move; inner loops are done first, so an op can
// climb out of a whole nest. Integer division is hoisted only by a constant divisor
// other than 0 and -1: the loop may run zero times, and hoisting must not add a trap.
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

bool definedInside(const Value* v, const Op* loop) {
  if (const Op* d = v->definingOp()) return loop->isAncestorOf(d);
  const Op* owner = v->ownerBlock()->parentOp();
  return owner == loop || loop->isAncestorOf(owner);
}

bool safeToSpeculate(const Op& op) {
  bool intDivision = (op.kind() == OpKind::Div || op.kind() == OpKind::Rem) && isInt(op.result()->type().elem);
  if (!intDivision) return true;
  const Op* d = op.operand(1)->definingOp();
  if (!d || d->kind() != OpKind::Constant) return false;
  // Compare at the dtype's width, where -1 is all ones.
  int bits = bitWidth(op.result()->type().elem);
  uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  uint64_t divisor = static_cast<uint64_t>(d->intAttr("value")) & mask;
  return divisor != 0 && divisor != mask;
}

bool hoistable(const Op& op, const Op* loop) {
  if (!op.isPure() || op.numRegions() != 0 || !safeToSpeculate(op)) return false;
  for (const Value* v : op.operands())
    if (definedInside(v, loop)) return false;
  return true;
}

// One forward sweep suffices for chains: an op's operands come before it, so by the
// time it is reached the invariant ones among them have already left the loop.
void hoist(Op* loop) {
  for (unsigned r = 0; r < loop->numRegions(); ++r) {
    Block& body = loop->region(r);
    for (auto it = body.ops().begin(); it != body.ops().end();) {
      Op* op = (it++)->get();
      if (hoistable(*op, loop)) op->moveBefore(loop);
    }
  }
}

}  // namespace

void licm(Module& m) {
  std::vector<Op*> loops;
  walkModule(m, [&](Op* o) {
    if (o->has(Loop)) loops.push_back(o);
  });
  // The walk is pre-order (outer before inner); visit loops inner first.
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) hoist(*it);
}

}  // namespace tilefuse::passes
