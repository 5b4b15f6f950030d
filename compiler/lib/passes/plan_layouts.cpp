// plan-layouts: enters the GPU stage, which the LLVM lowering reads (compileKernel runs
// this pass). Every tile value's type takes the distributed layout of the layout plan
// (lib/lower/Layout.h, made with the axis analysis), named by who made it: #wgmma / #mma for dot accumulators
// and what follows them, #blocked otherwise. Where a user needs an operand in another
// layout (elementwise ops and memory ops compute in one layout, loop-carried and
// returned values keep theirs) a convert_layout follows the operand's definition (for a
// user in an if's branch, it opens the branch: only the path taking it converts); a
// constant or a splat (one value in every thread, a copy in any layout, as the lowering
// treats them) is made again in that layout instead. The lowering converts where the
// user reads: it recomputes index math (aranges and what follows) in the layout
// needed, other values move through shared memory. Functions are marked {gpu = true, arch, num_warps}.
//
// before:
//   %zero = constant {value = 0.0} : tile<128x128xf32>
//   %acc = for %lb, %n, %st, %zero : tile<128x128xf32> {
//   ^(%k: i32, %c: tile<128x128xf32>):
//     %d = dot %a, %b, %c : tile<128x128xf32>
//     yield %d
//   }
// after (arch=sm_90a, num_warps=8; W = #wgmma<reg=[1, 1024, 8, ...], lane=[...], warp=[...]>):
//   %zero = constant {value = 0.0} : tile<128x128xf32, W>
//   %acc = for %lb, %n, %st, %zero : tile<128x128xf32, W> {
//   ^(%k: i32, %c: tile<128x128xf32, W>):
//     %d = dot %a, %b, %c : tile<128x128xf32, W>
//     yield %d
//   }
#include <algorithm>
#include <charconv>
#include <iterator>

#include "../lower/Layout.h"
#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

struct Target {
  std::string arch;
  int threads;
};

// Names the plan's layouts: the accumulator layouts of the dots on wgmma and
// mma.sync, by shape; every other layout of the plan is blocked.
class Namer {
 public:
  Namer(Op& func, const Target& t) : threads_(t.threads) {
    func.walk([&](Op* o) {
      if (o->kind() != OpKind::Dot && o->kind() != OpKind::DotScaled) return;
      const Type& r = o->result()->type();
      L::WgmmaShape w;
      if (L::wgmmaApplies(*o, t.arch, t.threads, &w))
        dots_.push_back({r.shape, L::wgmmaAccLayout(r.shape[0], r.shape[1], w, t.threads), DistKind::Wgmma});
      else if (o->kind() == OpKind::Dot &&
               L::mmaApplies(o->operand(0)->type(), o->operand(1)->type(), r, t.arch, o->hasAttr("tf32")))
        dots_.push_back({r.shape, L::mmaAccLayout(r.shape[0], r.shape[1], t.threads), DistKind::Mma});
    });
  }

  DistLayout name(const L::Layout& l, const Type& t) const {
    DistLayout d;
    for (const auto& dot : dots_)
      if (dot.shape == t.shape && dot.layout == l) d.kind = dot.kind;
    d.reg = l.reg;
    d.lane.assign(l.thr.begin(), l.thr.begin() + 5);
    d.warp.assign(l.thr.begin() + 5, l.thr.end());
    return d;
  }
  DistLayout byDefault(const Type& t) const { return name(L::defaultLayout(t, threads_), t); }

 private:
  struct Dot {
    std::vector<int64_t> shape;
    L::Layout layout;
    DistKind kind;
  };
  std::vector<Dot> dots_;
  int threads_;
};

void annotate(Op& func, const Target& t) {
  if (isGpuStage(func))
    throw UserError(func.loc(), "plan-layouts: '@" + funcName(func) + "' is in the GPU stage already");
  lower::AxisAnalysis axis(func);
  L::LayoutPlan plan = L::planLayouts(func, t.arch, t.threads, &axis);
  Namer namer(func, t);
  auto set = [&](Value* v) {
    if (!v->type().isTile()) return;
    auto it = plan.find(v);
    DistLayout d = it == plan.end() ? namer.byDefault(v->type()) : namer.name(it->second, v->type());
    v->setType(v->type().withLayout(d));
  };
  func.walk([&](Op* o) {
    for (Value* r : o->results()) set(r);
    for (unsigned i = 0; i < o->numRegions(); ++i)
      for (Value* a : o->region(i).args()) set(a);
  });
  // Callers pass and receive tiles in the callee's default layouts, as the plan has them.
  std::vector<Type> results = funcResultTypes(func);
  for (Type& r : results)
    if (r.isTile()) r = r.withLayout(namer.byDefault(r));
  if (!results.empty()) func.setAttr("results", results);
  func.setAttr("gpu", true);
  func.setAttr("arch", t.arch);
  func.setAttr("num_warps", int64_t{t.threads / 32});
}

// Gives every operand the type its user needs, converting once per value and layout.
class Converter {
 public:
  explicit Converter(Module& m) : m_(m), b_(m) {}

  void op(Op& o) {
    std::vector<Type> want = needed(o);
    for (unsigned i = 0; i < want.size(); ++i)
      if (!want[i].isNone() && o.operand(i)->type() != want[i]) o.setOperand(i, convert(o.operand(i), want[i], o));
  }

  // Constants and splats that every user now takes in another layout.
  void eraseUnused() {
    for (Op* o : remade_)
      if (o->result()->unused()) o->erase();
  }

 private:
  // The type each operand must have (none: any).
  std::vector<Type> needed(const Op& o) const {
    std::vector<Type> w(o.numOperands());
    auto typesOf = [](const std::vector<Value*>& vs) {
      std::vector<Type> t;
      for (Value* v : vs) t.push_back(v->type());
      return t;
    };
    const Op* parent = o.parentOp();
    switch (accessKind(o)) {
      case OpKind::Hint:
        w[0] = o.result()->type();
        break;
      case OpKind::Load:  // pointers, mask and other in the layout of the value loaded
        if (o.numResults() == 1 && o.result()->type().isTile()) {
          for (unsigned i = 0; i < o.numOperands(); ++i) w[i] = inLayoutOf(o.operand(i), o.result());
          break;
        }
        [[fallthrough]];
      case OpKind::Store:
        for (unsigned i = 1; i < o.numOperands(); ++i) w[i] = inLayoutOf(o.operand(i), o.operand(0));
        break;
      case OpKind::Dot:
      case OpKind::DotScaled:
        w.back() = o.result()->type();
        break;
      case OpKind::For:
        for (unsigned i = 3; i < o.numOperands(); ++i) w[i] = o.result(i - 3)->type();
        break;
      case OpKind::While:
        w = typesOf(o.region(0).args());
        break;
      case OpKind::Yield:
        w = parent->kind() == OpKind::While ? typesOf(parent->region(0).args()) : typesOf(parent->results());
        break;
      case OpKind::Condition:
        for (unsigned i = 1; i < o.numOperands(); ++i) w[i] = parent->result(i - 1)->type();
        break;
      case OpKind::Return:
        w = funcResultTypes(*parent);
        break;
      case OpKind::Call:
        w = typesOf(m_.lookupFunc(o.strAttr("callee"))->region(0).args());
        break;
      default:
        if (o.has(Elementwise) && o.result()->type().isTile())
          for (unsigned i = 0; i < o.numOperands(); ++i) w[i] = inLayoutOf(o.operand(i), o.result());
    }
    return w;
  }

  static Type inLayoutOf(const Value* v, const Value* ref) {
    return v->type().isTile() ? v->type().withLayout(ref->type().layout) : Type{};
  }

  // Where a conversion of v for `user` goes: after v's definition, or, for a user in a
  // branch of an `if` below it (no loop between), before the user, so that only the
  // iterations taking the branch convert (a flattened loop's epilogue).
  static Block* branchOf(const Value* v, const Op& user) {
    for (Block* b = user.parentBlock(); b && b != v->ownerBlock(); b = b->parentOp()->parentBlock())
      if (!b->parentOp() || b->parentOp()->kind() != OpKind::If) return nullptr;
    return user.parentBlock() == v->ownerBlock() ? nullptr : user.parentBlock();
  }

  Value* convert(Value* v, const Type& want, Op& user) {
    Block* branch = branchOf(v, user);
    Value*& done = done_[{v, want.str() + (branch ? "@" + std::to_string(reinterpret_cast<uintptr_t>(branch)) : "")}];
    if (done) return done;
    Op* def = v->definingOp();
    Block* block = v->ownerBlock();
    Op* next =
        branch ? branch->front()
        : def
            ? std::next(std::find_if(block->ops().begin(), block->ops().end(), [&](auto& p) { return p.get() == def; }))
                  ->get()
            : block->front();
    b_.setInsertionPointBefore(next);
    b_.setLoc(def ? def->loc() : block->parentOp()->loc());
    bool remake = def && (def->kind() == OpKind::Constant || def->kind() == OpKind::Splat);
    Op* c = remake ? b_.create(def->kind(), def->operands(), {want}, def->attrs())
                   : b_.create(OpKind::ConvertLayout, {v}, {want});
    if (remake && std::find(remade_.begin(), remade_.end(), def) == remade_.end()) remade_.push_back(def);
    c->result()->setName(v->name());
    return done = c->result();
  }

  Module& m_;
  Builder b_;
  std::map<std::pair<const Value*, std::string>, Value*> done_;
  std::vector<Op*> remade_;
};

int numWarps(const std::string& text) {
  int w = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), w);
  if (ec != std::errc() || p != text.data() + text.size() || w < 1 || w > 32 || (w & (w - 1)))
    throw UserError({}, "plan-layouts: num_warps must be a power of two from 1 to 32, got '" + text + "'");
  return w;
}

}  // namespace

void plan_layouts(Module& m, const PassOptions& opts) {
  Target t{opts.at("arch"), 32 * numWarps(opts.at("num_warps"))};
  for (Op* f : m.funcs()) annotate(*f, t);
  Converter c(m);
  for (Op* f : m.funcs()) f->walk([&](Op* o) { c.op(*o); });
  c.eraseUnused();
}

}  // namespace tilefuse::passes
