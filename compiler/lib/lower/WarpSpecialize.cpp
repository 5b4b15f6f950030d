#include "WarpSpecialize.h"

#include "tilefuse/Error.h"

namespace tilefuse::lower::detail {
namespace {

bool controlFlow(const Op& op) {
  return op.kind() == OpKind::For || op.kind() == OpKind::If || op.kind() == OpKind::While;
}

// Whether the producer warps can run `op`: control flow, or scalar work (pure ops, loads
// and descriptors on scalars only).
bool runnable(const Op& op) {
  if (controlFlow(op)) return true;
  if (consumerRole(op) || op.has(Terminator)) return false;
  auto scalar = [](const Value* v) { return !v->type().isTile() && !v->type().isSmem() && !v->type().isToken(); };
  for (const Value* r : op.results())
    if (!scalar(r)) return false;
  for (const Value* v : op.operands())  // a reduction to a scalar is tile work
    if (!scalar(v)) return false;
  return op.kind() == OpKind::Load || op.kind() == OpKind::MakeDesc || op.has(Pure);
}

class Slicer {
 public:
  explicit Slicer(const Op& ws) : ws_(ws) {}
  std::set<const Op*> ops;

  // `op` runs, and with it the control flow around it and what that needs.
  void add(const Op& op) {
    if (!ops.insert(&op).second) return;
    if (op.parentOp() != &ws_) add(*op.parentOp());
    switch (op.kind()) {
      case OpKind::For:  // its bounds; a carried value only where it is needed
        for (unsigned i = 0; i < 3; ++i) need(op.operand(i));
        return;
      case OpKind::If:
        return need(op.operand(0));
      case OpKind::While:
        return need(op.region(0).terminator()->operand(0));
      default:
        for (const Value* v : op.operands()) need(v);
    }
  }

  // `v` is computed: by its op, or as the loop-carried or if value it is.
  void need(const Value* v) {
    if (!seen_.insert(v).second) return;
    auto yielded = [](const Block& b, unsigned i) { return b.terminator()->operand(i); };
    if (const Op* d = v->definingOp()) {
      if (!ws_.isAncestorOf(d)) return;
      add(*d);
      unsigned i = v->index();
      switch (d->kind()) {
        case OpKind::For:
          need(d->operand(3 + i));
          return need(yielded(d->region(0), i));
        case OpKind::If:
          need(yielded(d->region(0), i));
          return need(yielded(d->region(1), i));
        case OpKind::While:
          return need(yielded(d->region(0), i + 1));
        default:
          return;
      }
    }
    const Op* p = v->ownerBlock()->parentOp();
    if (!p || !ws_.isAncestorOf(p)) return;  // a function argument
    add(*p);
    unsigned i = v->index();
    if (p->kind() == OpKind::For && i > 0) {
      need(p->operand(3 + i - 1));
      need(yielded(p->region(0), i - 1));
    } else if (p->kind() == OpKind::While && v->ownerBlock() == &p->region(0)) {
      need(p->operand(i));
      need(yielded(p->region(1), i));
    } else if (p->kind() == OpKind::While) {
      need(yielded(p->region(0), i + 1));
    }
  }

 private:
  const Op& ws_;
  std::set<const Value*> seen_;
};

}  // namespace

std::set<const Op*> producerSlice(const Op& ws, const std::function<bool(const Op&)>& root) {
  Slicer s(ws);
  std::set<const Op*> roots;
  const_cast<Op&>(ws).walk([&](Op* o) {
    if (o != &ws && root(*o)) roots.insert(o);
  });
  for (const Op* r : roots) s.add(*r);
  // Name the op at the slice's edge: the tile work whose result scalar work needs.
  auto edge = [&](const Op* o) {
    for (const Value* r : o->results())
      for (const Use& u : r->uses())
        if (s.ops.count(u.user) && (roots.count(u.user) || runnable(*u.user))) return true;
    return false;
  };
  const Op* bad = nullptr;
  const_cast<Op&>(ws).walk([&](Op* o) {
    if (o == &ws || !s.ops.count(o) || roots.count(o) || runnable(*o)) return;
    if (!bad || (edge(o) && !edge(bad))) bad = o;
  });
  if (bad) {
    const Op* o = bad;
    throw UserError(o->loc(), "warp_specialize: the producer warps need this '" + std::string(o->mnemonic()) +
                                  "' for the coordinates of their TMA copies or the loops around them, and they "
                                  "run only scalar work (scalar math and loads, descriptors, control flow); "
                                  "compute those from scalars, or leave the loop without warp_specialize");
  }
  return s.ops;
}

std::set<const Op*> turnSlice(const Op& ws, const Op& loop) {
  Slicer s(ws);
  for (const Value* v : loop.region(0).terminator()->operands()) s.need(v);
  for (const Op* o : s.ops)
    if (o != &loop && !runnable(*o))
      throw UserError(o->loc(), "warp_specialize with num_consumer_groups=2: the position of the loop's rings "
                                "after an iteration needs this '" +
                                    std::string(o->mnemonic()) + "', and a group skipping the other's iteration "
                                                                 "runs only scalar work");
  return s.ops;
}

}  // namespace tilefuse::lower::detail
