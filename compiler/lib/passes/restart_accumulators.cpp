// restart-accumulators: a loop-carried wgmma accumulator that a branch resets to zero
// (a flattened persistent loop, whose epilogue at a tile's last K step stores the sum
// and starts the next tile's from 0) keeps its registers: the branch yields the sum
// itself, and the next iteration's wgmma takes a carried flag, false after the reset,
// as its scale-d predicate (D = A B instead of D = A B + C). Zeros written into the
// registers at the loop's head would be writes ptxas must order after the group in
// flight: it waits for every group there and serializes the loop (C7514).
//
// Only where the accumulator's one reader in the loop is that wgmma (not promoting,
// no scale tables), the reset is a +0.0 constant yielded by a branch of an `if` in the
// loop's body whose other branch yields the wgmma's result, and the loop's result for
// it is unused (after the loop, the registers would not hold the reset value).
//
// before (pipeline-expand):
//   %acc_out, ... = for ..., %zero, ... {
//   ^(%k: i32, %acc: tile<...>, ...):
//     %d, %t = wgmma %a_ring, %s, %b_ring, %s, %acc
//     %r = if %last { store ...(%d); %z = constant {value = 0.0}; yield %z } { yield %d }
//     yield %r, ...
//   }
// after:
//   %acc_out, ..., %use_out = for ..., %zero, ..., %true {
//   ^(%k: i32, %acc: tile<...>, ..., %use: i1):
//     %d, %t = wgmma %a_ring, %s, %b_ring, %s, %acc, %use
//     %r = if %last { store ...(%d); yield %d } { yield %d }
//     %use_next = xor %last, %true
//     yield %r, ..., %use_next
//   }
#include <cmath>

#include "../lower/Staging.h"
#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

bool isPositiveZero(const Value* v) {
  const Op* d = v->definingOp();
  if (!d || d->kind() != OpKind::Constant) return false;
  const Attr* a = d->attr("value");
  const double* f = a ? std::get_if<double>(a) : nullptr;
  return f && *f == 0.0 && !std::signbit(*f);
}

// The wgmma that is carried argument `arg`'s only reader, as its accumulator.
Op* soleWgmma(const Value* arg, const Block& body) {
  if (arg->uses().size() != 1) return nullptr;
  const Use& u = arg->uses().front();
  Op* w = u.user;
  if (w->kind() != OpKind::Wgmma || u.index != 4 || w->numOperands() != 5 || w->parentBlock() != &body) return nullptr;
  if (L::isFp8(w->operand(0)->type().elem)) return nullptr;
  return w;
}

void restart(Builder& b, Op& loop) {
  Block& body = loop.region(0);
  Op& y = *body.terminator();
  unsigned carried = y.numOperands();
  for (unsigned i = 0; i < carried; ++i) {
    Op* w = soleWgmma(body.arg(1 + i), body);
    Op* f = w ? y.operand(i)->definingOp() : nullptr;
    if (!f || f->kind() != OpKind::If || f->parentBlock() != &body || !loop.result(i)->unused()) continue;
    unsigned j = 0;
    while (f->result(j) != y.operand(i)) ++j;
    int reset = -1;
    for (unsigned r = 0; r < 2; ++r) {
      Value* here = f->region(r).terminator()->operand(j);
      Value* there = f->region(1 - r).terminator()->operand(j);
      if (isPositiveZero(here) && there == w->result(0)) reset = static_cast<int>(r);
    }
    if (reset < 0) continue;
    Op& resetYield = *f->region(reset).terminator();
    Op* zero = resetYield.operand(j)->definingOp();
    resetYield.setOperand(j, w->result(0));
    if (zero->result()->unused()) zero->erase();
    Type i1 = Type::scalar(DType::I1);
    b.setInsertionPointBefore(&loop);
    Value* yes = b.constInt(1, i1);
    loop.addOperand(yes);
    loop.addResult(i1)->setName("use_out");
    Value* use = body.addArg(i1);
    use->setName("use");
    b.setInsertionPointBefore(&y);
    Value* cond = f->operand(0);
    Value* next = reset == 0 ? b.create(OpKind::Xor, {cond, b.constInt(1, i1)}, {i1})->result() : cond;
    next->setName("use_next");
    y.addOperand(next);
    w->addOperand(use);
  }
}

}  // namespace

void restart_accumulators(Module& m) {
  Builder b(m);
  for (Op* f : m.funcs()) {
    if (!isGpuStage(*f)) continue;
    std::vector<Op*> loops;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::For) loops.push_back(o);
    });
    for (Op* loop : loops) restart(b, *loop);
  }
}

}  // namespace tilefuse::passes
