// pipeline-expand: rewrites each K loop that pipeline-schedule annotated into the
// explicit ring of its schedule. Every staged load gets a ring (an smem_alloc of
// `pipeline_stages` stages in the #shared layout the schedule chose); a loop with TMA
// copies gets one mbarrier per stage. The prologue copies iterations 0 .. S-2 into
// stages 0 .. S-2 (clones of the pointer / mask / offset slice under the loop's
// initial values, advanced an iteration at a time); the body runs its dots as wgmma
// groups on the current stage and then copies iteration j + S - 1 (its slice cloned
// with the loop-carried values advanced S - 1 times) into the stage iteration j - 1
// read. A copy past the last iteration copies nothing: cp.async masked off (zero
// fill, no access), TMA not issued; a scalar its coordinates load (a tile schedule) is
// read masked to iterations that run. The loop carries the stage index, the last copy
// group's token (cp.async), the mbarriers' phase bits (bit s: the parity stage s
// waits for next; TMA) and the last wgmma's token.
//
// The waits that order copies and reads are left to insert-waits (async_wait before
// the dots, wgmma_wait before a stage is overwritten and after the loop, the drain),
// except an mbarrier's wait, which belongs to the phase bookkeeping done here.
// allocate-shared then places the rings like any buffer. A load the dots read through
// a bitcast (fp8 operands loaded as bytes) fills a ring of the bitcast's type; a
// dot_scaled of fp8 operands becomes a wgmma that also takes the two scale tables and
// the K run it promotes at once (scale_chunk). A load staged for reading back
// (staged_read_back: a dot operand computed from it) becomes a local_load of its ring's
// current stage where it was; the computed operand is stored before its dot into one of
// the two stages of its own buffer (a carried parity alternates them, so one
// iteration's stores overlap the previous iteration's groups), then fence and barrier.
//
// before (pipeline-schedule, 3 stages):
//   %acc = for %lb, %n, %st, %zero, %ap0 : ... {pipeline_stage_bytes = 32768, pipeline_stages = 3} {
//   ^(%k: i32, %c: ..., %ap: ...):
//     %av = load %ap {staged_at = 0, staged_copy = "cp.async", staged_width = 8, ...}
//     %d = dot %av, %bv, %c
//     %ap_next = ptr_add %ap, %step
//     yield %d, %ap_next
// after:
//   %av_ring = smem_alloc : smem<128x64xbf16, #shared<swizzle=128, rows=128, cols=64, eb=2, stages=3>>
//   (stage 0 and 1: %v = cmp %k_i, %n; async_copy %av_ring, %s_i, %ap_i, splat %v {width = 8};
//    %g_i = async_commit ...)
//   %acc, %ap_out, %stage_out, %groups_out, %wgmma_out = for ..., %s0, %g_1, %g_1 {
//   ^(%k, %c, %ap, %stage, %groups, %wt):
//     %d, %t = wgmma %av_ring, %stage, %bv_ring, %stage, %c
//     (the slice of iteration k + 2: %ap_2 = ptr_add (ptr_add %ap, ..), ..)
//     async_copy %av_ring, %next, %ap_2, ... ; %g = async_commit ...
//     yield %d, %ap_next, %stage_next, %g, %t
#include <map>
#include <set>

#include "../lower/PipelinePlan.h"
#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

Type i32() { return Type::scalar(DType::I32); }

// Body block argument -> its value in the iteration being copied.
using Env = std::map<const Value*, Value*>;

struct Ring {
  Op* load;
  Value* buf;
};

// The op after `op` in its block (its block always ends in a terminator after it).
Op* nextOp(const Op* op) {
  auto& ops = op->parentBlock()->ops();
  for (auto it = ops.begin(); it != ops.end(); ++it)
    if (it->get() == op) return std::next(it)->get();
  throw InternalError("pipeline-expand: an op not in its block");
}

bool readBack(const Op& load) { return load.hasAttr("staged_read_back") && load.boolAttr("staged_read_back"); }

// The staged load a dot operand reads, directly or through a bitcast of its bytes;
// null for an operand computed in the loop (from loads read back from their rings).
const Op* stagedLoad(const Value* operand) {
  const Op* d = L::stagedBytes(operand)->definingOp();
  return d && d->hasAttr("staged_at") && !readBack(*d) ? d : nullptr;
}

// The element type a ring holds: the load's, or that of the bitcast its dots read.
DType ringElem(const Op& load) {
  const Value* v = load.result();
  if (!readBack(load) && v->uses().size() == 1 && v->uses().front().user->kind() == OpKind::Bitcast)
    return v->uses().front().user->result()->type().elem;
  return v->type().elem;
}

// The loop values the copies of `rings` depend on (copyLoopArgs).
std::vector<const Value*> copyArgs(const std::vector<Ring>& rings, const Block& body) {
  std::vector<const Op*> loads;
  for (const Ring& r : rings) loads.push_back(r.load);
  return L::copyLoopArgs(loads, body);
}

class Expander {
 public:
  Expander(Builder& b, Op& loop, const std::string& arch, int threads)
      : b_(b), loop_(loop), body_(loop.region(0)), arch_(arch), threads_(threads) {}

  void run();

 private:
  bool reused() const;
  Value* clone(Value* v, Env& env, std::map<const Value*, Value*>& memo);
  Env advance(const Env& env);
  Value* copies(Env& env, Value* stage, Value* valid, Op* before);
  void addCarried(Value* init, Value* next);
  void readBackLoads(Value* stage);
  Value* wrap(Value* stage);
  void handBack(unsigned position);
  void arriveIf(Value* cond, Value* stage);
  std::vector<Value*> threadIn();
  void threadOut(std::vector<Value*> out);
  Value* storedOperand(Value* v, const L::SharedTile& tile, bool transposed, Value* parity, Op* dot);

  Builder& b_;
  Op& loop_;
  Block& body_;
  std::string arch_;
  int threads_;
  int stages_ = 0;
  std::vector<Ring> rings_;
  Value* bars_ = nullptr;
  std::vector<const Value*> args_;         // the loop values the copies depend on
  std::map<const Value*, Value*> stored_;  // computed operand -> its buffer of two stages
  // Warp specialization (the loop in a warp_specialize body): the consumers arrive on
  // an empty mbarrier per stage when their wgmma groups are done reading it; the
  // producer waits for it before refilling the stage, on the parities in emptyPh_ (bit
  // s: stage s). The ring's position (stage, full and empty parities) is carried
  // through the loops and ifs between the body and the loop (levels_).
  struct Level {
    Op* op;
    std::vector<Value*> in;  // the position where the level starts
  };
  Op* ws_ = nullptr;
  Value* empty_ = nullptr;
  Value* emptyPh_ = nullptr;
  std::vector<Level> levels_;
};

Op* warpSpecializeAround(Op& loop) {
  for (Op* p = loop.parentOp(); p; p = p->parentOp())
    if (p->kind() == OpKind::WarpSpecialize) return p;
  return nullptr;
}

Op* role(Op* op, const char* who) {
  op->setAttr("ws_role", std::string(who));
  return op;
}

// Whether the loop may run after other users of shared memory: it is in a loop, or a
// buffer or pipelined loop comes before it.
bool Expander::reused() const {
  for (const Op* p = loop_.parentOp(); p; p = p->parentOp())
    if (p->kind() == OpKind::For || p->kind() == OpKind::While) return true;
  bool before = false, done = false;
  const Op* f = &loop_;
  while (f->parentOp()) f = f->parentOp();
  const_cast<Op*>(f)->walk([&](Op* o) {
    if (o == &loop_) done = true;
    if (done || o == &loop_) return;
    before = before || o->kind() == OpKind::SmemAlloc || (o->kind() == OpKind::For && o->hasAttr("pipeline_stages"));
  });
  return before;
}

// `v` (a value of the body) in the iteration of `env`: its slice of index math cloned
// at the insertion point.
Value* Expander::clone(Value* v, Env& env, std::map<const Value*, Value*>& memo) {
  if (auto it = env.find(v); it != env.end()) return it->second;
  if (v->ownerBlock() != &body_) return v;
  if (auto it = memo.find(v); it != memo.end()) return it->second;
  Op* def = v->definingOp();
  if (!def) throw UserError(loop_.loc(), "pipeline-expand: a staged copy depends on a loop value it cannot advance");
  std::vector<Value*> ins;
  for (Value* o : def->operands()) ins.push_back(clone(o, env, memo));
  if (def->kind() == OpKind::Load) {
    // A scalar the copies' coordinates read (pipeline-schedule admits no other load):
    // read only for an iteration that runs, 0 past the end.
    const Type& t = v->type();
    Value* runs = b_.cmp("lt", env.at(body_.arg(0)), loop_.operand(1));
    Value* mask = ins.size() > 1 ? b_.create(OpKind::And, {ins[1], runs}, {runs->type()})->result() : runs;
    Value* other = ins.size() > 2 ? ins[2] : isFloat(t.elem) ? b_.constFloat(0.0, t) : b_.constInt(0, t);
    ins = {ins[0], mask, other};
  }
  std::vector<Type> types;
  for (Value* r : def->results()) types.push_back(r->type());
  Op* c = b_.create(def->kind(), ins, types, def->attrs());
  for (unsigned i = 0; i < def->numResults(); ++i) memo[def->result(i)] = c->result(i);
  return memo.at(v);
}

// `env` one iteration ahead: the induction variable grows by the step, each carried
// value becomes what the body yields for it.
Env Expander::advance(const Env& env) {
  Env cur = env, next;
  std::map<const Value*, Value*> memo;
  for (const Value* a : args_) {
    if (a == body_.arg(0)) {
      next[a] = b_.binary(OpKind::Add, cur.at(a), loop_.operand(2));
      continue;
    }
    next[a] = clone(body_.terminator()->operand(a->index() - 1), cur, memo);
  }
  return next;
}

// Copies every staged operand of the iteration of `env` into `stage` when `valid`;
// returns the cp.async group's token (null for TMA copies only). Inserts before `before`.
Value* Expander::copies(Env& env, Value* stage, Value* valid, Op* before) {
  std::map<const Value*, Value*> memo;
  int64_t tmaBytes = 0;
  for (const Ring& r : rings_)
    if (r.load->kind() == OpKind::DescLoad) tmaBytes += r.load->result()->type().numel() * r.buf->type().shared()->eb;
  if (tmaBytes) {
    std::vector<std::vector<Value*>> coords;
    for (const Ring& r : rings_) {
      if (r.load->kind() != OpKind::DescLoad) continue;
      std::vector<Value*> c;
      for (unsigned i = 1; i < r.load->numOperands(); ++i) {
        Value* x = clone(r.load->operand(i), env, memo);
        c.push_back(x->type() == i32() ? x : b_.cast(x, DType::I32));
      }
      coords.push_back(std::move(c));
    }
    // Thread 0 of the emitters issues both; an iteration past the end issues nothing.
    // Specialized, the producer first waits until the consumers have read the stage.
    Op* when = b_.createIf(valid, {});
    b_.setInsertionPointToEnd(when->region(0));
    if (ws_) {
      Value* shifted = b_.binary(OpKind::Shr, emptyPh_, stage);  // one op a statement: a fixed order
      Value* parity = b_.binary(OpKind::And, shifted, b_.i32(1));
      role(b_.create(OpKind::MbarrierWait, {empty_, stage, parity}, {}), "producer");
    }
    Op* expect = b_.create(OpKind::MbarrierExpect, {bars_, stage}, {}, {{"bytes", tmaBytes}});
    if (ws_) role(expect, "producer");
    size_t at = 0;
    for (const Ring& r : rings_) {
      if (r.load->kind() != OpKind::DescLoad) continue;
      std::vector<Value*> ops = {r.load->operand(0), r.buf, stage, bars_, stage};
      ops.insert(ops.end(), coords[at].begin(), coords[at].end());
      ++at;
      Op* copy = b_.create(OpKind::TmaLoad, ops, {});
      if (ws_) role(copy, "producer");
    }
    b_.yield({});
    b_.setInsertionPointToEnd(when->region(1));
    b_.yield({});
    b_.setInsertionPointBefore(before);
    if (ws_) {
      Value* flipped = b_.binary(OpKind::Xor, emptyPh_, b_.binary(OpKind::Shl, b_.i32(1), stage));
      emptyPh_ = b_.select(valid, flipped, emptyPh_);
    }
  }
  std::vector<Value*> group;
  for (const Ring& r : rings_) {
    const Op& ld = *r.load;
    if (ld.kind() != OpKind::Load) continue;
    Value* ptrs = clone(ld.operand(0), env, memo);
    const Type& pt = ptrs->type();
    Value* mask = b_.create(OpKind::Splat, {valid}, {Type::tile(DType::I1, pt.shape).withLayout(pt.layout)})->result();
    if (ld.numOperands() > 1)
      mask = b_.create(OpKind::And, {clone(ld.operand(1), env, memo), mask}, {mask->type()})->result();
    std::map<std::string, Attr> attrs = {{"width", ld.intAttr("staged_width")}};
    for (const char* flag : {"prefix", "transposed"})
      if (std::string name = std::string("staged_") + flag; ld.hasAttr(name) && ld.boolAttr(name)) attrs[flag] = true;
    group.push_back(b_.create(OpKind::AsyncCopy, {r.buf, stage, ptrs, mask}, {Type::token()}, attrs)->result());
  }
  if (group.empty()) return nullptr;
  return b_.create(OpKind::AsyncCommit, group, {Type::token()})->result();
}

// A new loop-carried value: `init` into the loop, `next` yielded.
void Expander::addCarried(Value* init, Value* next) {
  loop_.addOperand(init);
  loop_.addResult(init->type())->setName(body_.arg(loop_.numResults())->name() + "_out");
  body_.terminator()->addOperand(next);
}

// Each staged load whose values the loop computes on becomes a read of its ring's
// current stage, where the load was.
void Expander::readBackLoads(Value* stage) {
  for (const Ring& r : rings_) {
    if (!readBack(*r.load)) continue;
    b_.setInsertionPointBefore(r.load);
    b_.setLoc(r.load->loc());
    Value* v = b_.create(OpKind::LocalLoad, {r.buf, stage}, {r.load->result()->type()})->result();
    v->setName(r.load->result()->name());
    r.load->result()->replaceAllUsesWith(v);
  }
}

// The buffer of two stages (alternating by iteration) that computed operand `v` is
// stored to before its dot; the store is made at the insertion point the first time.
Value* Expander::storedOperand(Value* v, const L::SharedTile& tile, bool transposed, Value* parity, Op* dot) {
  if (auto it = stored_.find(v); it != stored_.end()) return it->second;
  b_.setInsertionPointBefore(&loop_);
  SharedLayout s{.swizzle = tile.swizzle, .rows = tile.rows, .cols = tile.cols, .eb = tile.eb, .stages = 2};
  Value* buf = b_.create(OpKind::SmemAlloc, {}, {Type::smem(v->type().elem, {tile.rows, tile.cols}, s)})->result();
  buf->setName((v->name().empty() ? "operand" : v->name()) + "_smem");
  b_.setInsertionPointBefore(dot);
  Op* st = b_.create(OpKind::LocalStore, {buf, parity, v}, {});
  if (transposed) st->setAttr("transposed", true);
  stored_[v] = buf;
  return buf;
}

// (stage + 0 .. stages - 1) mod stages, for a stage below 2 * stages.
Value* Expander::wrap(Value* stage) {
  Value* less = b_.binary(OpKind::Sub, stage, b_.i32(stages_));
  return b_.select(b_.cmp("uge", stage, b_.i32(stages_)), less, stage);
}

// Carries the ring's position (stage, full parities, empty parities; all stages free)
// from the start of the warp_specialize body down to the loop; returns it there.
std::vector<Value*> Expander::threadIn() {
  std::vector<Op*> chain;
  for (Op* p = loop_.parentOp(); p != ws_; p = p->parentOp()) chain.insert(chain.begin(), p);
  Op* first = ws_->region(0).ops().front().get();
  b_.setInsertionPointBefore(first);
  // Empty parities start at 1: the phase before the first counts as complete, so the
  // first round of copies does not wait.
  std::vector<Value*> cur = {b_.i32(0), b_.i32(0), b_.i32(-1)};
  for (Op* p : chain) {
    levels_.push_back({p, cur});
    if (p->kind() == OpKind::While)
      throw UserError(loop_.loc(), "warp_specialize: a pipelined loop inside a while loop (a loop with break or "
                                   "return) cannot carry its ring's position");
    if (p->kind() != OpKind::For) continue;
    const char* names[] = {"ring_stage", "full_phases", "empty_phases"};
    for (size_t i = 0; i < cur.size(); ++i) {
      p->addOperand(cur[i]);
      p->addResult(i32())->setName(std::string(names[i]) + "_out");
      cur[i] = p->region(0).addArg(i32());
      cur[i]->setName(names[i]);
    }
  }
  return cur;
}

// The position after the loop, `out`, carried back up to the warp_specialize body.
void Expander::threadOut(std::vector<Value*> out) {
  for (auto l = levels_.rbegin(); l != levels_.rend(); ++l) {
    Op* p = l->op;
    if (p->kind() == OpKind::For) {
      unsigned first = p->numResults() - static_cast<unsigned>(out.size());
      for (size_t i = 0; i < out.size(); ++i) {
        p->region(0).terminator()->addOperand(out[i]);
        out[i] = p->result(first + static_cast<unsigned>(i));
      }
      continue;
    }
    bool inThen = false;  // an if: the other branch passes the position through
    for (const Op* q = &loop_; q; q = q->parentOp())
      inThen = inThen || q->parentBlock() == &p->region(0);
    for (size_t i = 0; i < out.size(); ++i) {
      p->region(inThen ? 0 : 1).terminator()->addOperand(out[i]);
      p->region(inThen ? 1 : 0).terminator()->addOperand(l->in[i]);
      out[i] = p->addResult(i32());
    }
  }
}

// After the loop (and the wgmma_wait insert-waits places right after it): the consumers
// hand back the stage its last iteration read; the position goes up to the body.
void Expander::handBack(unsigned position) {
  b_.setInsertionPointBefore(nextOp(&loop_));
  Value* stage = loop_.result(position);
  Value* full = loop_.result(position + 1);
  Value* empty = loop_.result(position + 2);
  Value* last = wrap(b_.binary(OpKind::Add, stage, b_.i32(stages_ - 1)));
  arriveIf(b_.cmp("lt", loop_.operand(0), loop_.operand(1)), last);
  threadOut({stage, full, empty});
}

// The consumers' arrival on stage `stage`'s empty mbarrier, under `if cond`.
void Expander::arriveIf(Value* cond, Value* stage) {
  Op* guard = b_.createIf(cond, {});
  b_.setInsertionPointToEnd(guard->region(0));
  role(b_.create(OpKind::MbarrierArrive, {empty_, stage}, {}), "consumer");
  b_.yield({});
  b_.setInsertionPointToEnd(guard->region(1));
  b_.yield({});
}

void Expander::run() {
  stages_ = static_cast<int>(loop_.intAttr("pipeline_stages"));
  ws_ = warpSpecializeAround(loop_);
  bool sync = !ws_ && reused();
  b_.setLoc(loop_.loc());
  // Specialized, the rings and mbarriers live for the whole kernel (the producer fills
  // a ring while the consumers are elsewhere): made and initialized before the body.
  b_.setInsertionPointBefore(ws_ ? ws_ : &loop_);
  // The ring of every staged load, in body order.
  bool tma = false;
  for (const auto& o : body_.ops()) {
    if (!o->hasAttr("staged_at")) continue;
    const std::vector<int64_t>& t = o->intsAttr("staged_tile");
    SharedLayout s{.swizzle = t[3], .rows = t[0], .cols = t[1], .eb = t[2], .stages = stages_};
    Op* alloc = b_.create(OpKind::SmemAlloc, {}, {Type::smem(ringElem(*o), {t[0], t[1]}, s)});
    if (ws_) alloc->setAttr("ws_ring", true);
    Value* buf = alloc->result();
    buf->setName((o->result()->name().empty() ? "staged" : o->result()->name()) + "_ring");
    rings_.push_back({o.get(), buf});
    tma = tma || o->kind() == OpKind::DescLoad;
  }
  // Shared memory used before (this loop entered again, or earlier buffers whose bytes
  // the ring may reuse): no warpgroup may still read what the first copies overwrite,
  // nor wait on an mbarrier initialized again.
  if (sync) b_.create(OpKind::Barrier, {}, {});
  if (tma) {
    bars_ = b_.create(OpKind::SmemAlloc, {}, {Type::smem(DType::I64, {stages_})})->result();
    bars_->setName("bars");
    for (int s = 0; s < stages_; ++s) b_.create(OpKind::MbarrierInit, {bars_, b_.i32(s)}, {}, {{"count", int64_t{1}}});
    if (ws_) {  // one arrival per consumer warp
      empty_ = b_.create(OpKind::SmemAlloc, {}, {Type::smem(DType::I64, {stages_})})->result();
      empty_->setName("empty_bars");
      int64_t warps = threads_ / 32;
      for (int s = 0; s < stages_; ++s) b_.create(OpKind::MbarrierInit, {empty_, b_.i32(s)}, {}, {{"count", warps}});
    }
    b_.create(OpKind::Barrier, {}, {});  // every thread sees them initialized
  }
  if (ws_ && !tma) throw InternalError("pipeline-expand: a specialized loop without TMA copies");
  std::vector<Value*> at = ws_ ? threadIn() : std::vector<Value*>{b_.i32(0), b_.i32(0)};
  b_.setInsertionPointBefore(&loop_);
  if (ws_) emptyPh_ = at[2];
  args_ = copyArgs(rings_, body_);

  // Prologue: iterations 0 .. S-2, into the stages from the ring's position on.
  Env env;
  for (const Value* a : args_) env[a] = a == body_.arg(0) ? loop_.operand(0) : loop_.operand(3 + a->index() - 1);
  Value* groups = nullptr;
  for (int d = 0; d + 1 < stages_; ++d) {
    if (d) env = advance(env);
    Value* valid = b_.cmp("lt", env.at(body_.arg(0)), loop_.operand(1));
    Value* stage = ws_ ? (d ? wrap(b_.binary(OpKind::Add, at[0], b_.i32(d))) : at[0]) : b_.i32(d);
    if (Value* g = copies(env, stage, valid, &loop_)) groups = g;
  }
  Value* emptyInit = emptyPh_;
  // The carried wgmma token needs a value before the first group: an empty copy group.
  Value* noWgmma = groups ? groups : b_.create(OpKind::AsyncCommit, {}, {Type::token()})->result();

  // The body: the dots on the current stage, then the copy of iteration j + S - 1.
  Value* stage = body_.addArg(i32());
  stage->setName("stage");
  if (groups) body_.addArg(Type::token())->setName("groups");
  Value* phases = tma ? body_.addArg(i32()) : nullptr;
  if (phases) phases->setName("phases");
  if (ws_) {
    emptyPh_ = body_.addArg(i32());
    emptyPh_->setName("empty_phases");
  }
  body_.addArg(Type::token())->setName("wgmma_token");
  std::map<const Op*, Value*> ringOf;
  for (const Ring& r : rings_) ringOf[r.load] = r.buf;
  std::vector<Op*> dots;
  for (const auto& o : body_.ops())
    if (L::onWgmmaLayout(*o)) dots.push_back(o.get());
  // Operands computed in the loop alternate between the two stages of their buffers, so
  // that one iteration's stores overlap the previous iteration's wgmma groups.
  bool computed = std::any_of(dots.begin(), dots.end(), [&](const Op* d) {
    return !stagedLoad(L::wgmmaA(*d).value) || !stagedLoad(L::wgmmaB(*d, threads_).value);
  });
  Value* opStage = computed ? body_.addArg(i32()) : nullptr;
  if (opStage) opStage->setName("operand_stage");
  readBackLoads(stage);
  Op* afterDots = nextOp(dots.back());
  b_.setInsertionPointBefore(dots.front());
  Value* phasesNext = nullptr;
  if (tma) {
    // One builder call per statement where a call has two: C++ leaves the order of arguments
    // open, and the order of the ops made must not depend on the compiler.
    Value* one = b_.i32(1);
    Value* parity = b_.binary(OpKind::And, b_.binary(OpKind::Shr, phases, stage), one);
    Op* wait = b_.create(OpKind::MbarrierWait, {bars_, stage, parity}, {});
    if (ws_) role(wait, "consumer");
    phasesNext = b_.binary(OpKind::Xor, phases, b_.binary(OpKind::Shl, b_.i32(1), stage));
  }
  Value* tok = nullptr;
  for (Op* dot : dots) {
    bool scaled = dot->kind() == OpKind::DotScaled;
    L::WgmmaB bs = L::wgmmaB(*dot, threads_);
    L::WgmmaA as = L::wgmmaA(*dot);
    Value* bIn = dot->operand(scaled ? 2 : 1);
    Op* trans = bs.value != bIn ? bIn->definingOp() : nullptr;
    Op* transA = as.mMajor ? dot->operand(0)->definingOp() : nullptr;
    Value* aVal = const_cast<Value*>(as.value);
    b_.setInsertionPointBefore(dot);
    b_.setLoc(dot->loc());
    L::WgmmaShape w;
    if (!L::wgmmaApplies(*dot, arch_, threads_, &w))
      throw InternalError("pipeline-expand: a dot in a #wgmma layout that wgmma cannot run");
    const Op* la = stagedLoad(aVal);
    const Op* lb = stagedLoad(bs.value);
    size_t storedBefore = stored_.size();
    Value* aBuf =
        la ? ringOf.at(la) : storedOperand(aVal, L::wgmmaOperandTile(*dot, 0, w, threads_), false, opStage, dot);
    Value* bBuf = lb ? ringOf.at(lb)
                     : storedOperand(const_cast<Value*>(bs.value), L::wgmmaOperandTile(*dot, 1, w, threads_),
                                     bs.transposeOnStage, opStage, dot);
    if (stored_.size() != storedBefore) {  // the stores shown to the tensor cores, of every thread
      b_.setInsertionPointBefore(dot);
      b_.create(OpKind::FenceAsyncShared, {}, {});
      b_.create(OpKind::Barrier, {}, {});
    }
    std::vector<Value*> ins = {aBuf, la ? stage : opStage, bBuf, lb ? stage : opStage,
                               dot->operand(L::accOperand(*dot))};
    if (scaled) {
      ins.push_back(dot->operand(1));
      ins.push_back(dot->operand(3));
    }
    Op* mma = b_.create(OpKind::Wgmma, ins, {dot->result()->type(), Type::token()});
    if (as.mMajor) mma->setAttr("a_mmajor", true);
    if (bs.kMajor) mma->setAttr("b_kmajor", true);
    if (scaled) mma->setAttr("scale_chunk", L::scaleChunk(dot->operand(1), dot->operand(3)));
    mma->result(0)->setName(dot->result()->name());
    tok = mma->result(1);
    dot->result()->replaceAllUsesWith(mma->result(0));
    Value* bRead = trans ? trans->operand(0) : bIn;  // bs.value, as the loop's own value
    std::set<Op*> reads = {aVal->definingOp(), bRead->definingOp()};
    dot->erase();
    if (trans && trans->result()->unused()) trans->erase();
    if (transA && transA->result()->unused()) transA->erase();
    for (Op* r : reads)  // the bitcasts of staged bytes
      if (r && r->kind() == OpKind::Bitcast && r->result()->unused()) r->erase();
  }
  b_.setLoc(loop_.loc());
  b_.setInsertionPointBefore(afterDots);
  Env ahead;
  for (const Value* a : args_) ahead[a] = const_cast<Value*>(a);
  for (int s = 1; s < stages_; ++s) ahead = advance(ahead);
  Value* valid = b_.cmp("lt", ahead.at(body_.arg(0)), loop_.operand(1));
  Value* later = b_.binary(OpKind::Add, stage, b_.i32(stages_ - 1));
  Value* less = b_.binary(OpKind::Sub, later, b_.i32(stages_));
  Value* wrapped = b_.select(b_.cmp("uge", later, b_.i32(stages_)), less, later);
  Value* groupsNext = copies(ahead, wrapped, valid, afterDots);
  if (ws_) {
    // The stage of the previous iteration is read: after the wgmma_wait insert-waits
    // places before the copy, the consumers hand it back (the first iteration's
    // previous stage was handed back after the loop before).
    arriveIf(b_.cmp("ne", body_.arg(0), loop_.operand(0)), wrapped);
    b_.setInsertionPointBefore(afterDots);
  }
  Value* next = b_.binary(OpKind::Add, stage, b_.i32(1));
  Value* zero = b_.i32(0);
  Value* stageNext = b_.select(b_.cmp("eq", next, b_.i32(stages_)), zero, next);
  b_.setInsertionPointBefore(&loop_);
  unsigned position = loop_.numResults();
  addCarried(at[0], stageNext);
  if (groups) addCarried(groups, groupsNext);
  if (tma) addCarried(at[1], phasesNext);
  if (ws_) addCarried(emptyInit, emptyPh_);
  addCarried(noWgmma, tok);
  if (opStage) {  // block arguments and carried values in the same order
    b_.setInsertionPointBefore(body_.terminator());
    Value* flipped = b_.binary(OpKind::Xor, opStage, b_.i32(1));
    b_.setInsertionPointBefore(&loop_);
    addCarried(b_.i32(0), flipped);
  }
  for (const Ring& r : rings_) {
    if (!r.load->result()->unused())
      throw UserError(r.load->loc(), "pipeline-expand: a staged load is read by other ops than its loop's wgmma dots");
    r.load->erase();
  }
  loop_.removeAttr("pipeline_stages");
  loop_.removeAttr("pipeline_stage_bytes");
  if (ws_) handBack(position);
}

}  // namespace

void pipeline_expand(Module& m) {
  Builder b(m);
  for (Op* f : m.funcs()) {
    if (!isGpuStage(*f) || f->strAttr("arch") != "sm_90a") continue;
    int threads = 32 * static_cast<int>(f->intAttr("num_warps"));
    std::vector<Op*> loops;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::For && o->hasAttr("pipeline_stages")) loops.push_back(o);
    });
    for (Op* loop : loops) Expander(b, *loop, f->strAttr("arch"), threads).run();
  }
}

}  // namespace tilefuse::passes
