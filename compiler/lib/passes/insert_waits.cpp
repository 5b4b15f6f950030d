// insert-waits: the waits of the loops pipeline-expand rewrote, placed from the
// tokens that link their copies and wgmma groups (the expander places none but the
// mbarriers', which go with their phases). In a loop body that reads ring stages (the
// buffers its copies fill) by wgmma groups or local_load:
//   - copies in: before the first reader, `async_wait` on the loop-carried token of
//     the last copy group, leaving pending the groups of the iterations still ahead:
//     (groups per iteration) x (stages - 1) - 1; then the fence that shows the copied
//     bytes to the tensor cores (when wgmma reads them) and a barrier (cp.async bytes
//     are only this thread's until then; an mbarrier's wait shows TMA bytes to each
//     waiting thread).
//   - an operand the loop computes, stored to one of the two stages of its buffer: the
//     wgmma groups of two iterations back read that stage, so before the first store a
//     `wgmma_wait` leaves only the groups issued since in flight, followed by a barrier
//     (shared with the one before the ring reads when no group comes between).
//   - a stage overwritten: before the first copy into a ring after the groups,
//     `wgmma_wait` on the last group's token leaving this iteration's groups in flight
//     (the previous iteration's read the stage being refilled), and a barrier, as every
//     warpgroup must be done with it (warp-specialized: each warp's mbarrier arrival). fp8 groups complete as they promote: not counted.
//   - a wgmma result read by other ops (a fresh fp8 partial sum a kernel promotes
//     itself): `wgmma_wait` before the first reader in its iteration, or, carried, in
//     the next one, leaving the groups issued since in flight (resultWaits).
//   - after the loop: one `wgmma_wait {pending = 0}` on the carried wgmma token passing
//     every accumulator the loop yields (their uses read the waited values), then the
//     drain of the copies, `async_wait {pending = 0}` on the carried group token.
//
// before (pipeline-expand, 3 stages):
//   %acc, ..., %groups_out, %tok_out = for ..., %g1, %g1 {
//   ^(%k, %c, ..., %stage, %groups, %wt):
//     %d, %t = wgmma %a_ring, %stage, %b_ring, %stage, %c
//     ...
//     %n = async_copy %a_ring, %next, ... ; %g = async_commit %n, ...
//     yield %d, ..., %g, %t
//   }
//   %out = cast %acc
// after:
//     async_wait %groups {pending = 1}
//     fence_async_shared
//     barrier
//     %d, %t = wgmma %a_ring, %stage, %b_ring, %stage, %c
//     wgmma_wait %t {pending = 1}
//     barrier
//     %n = async_copy ...
//   }
//   %acc_done = wgmma_wait %tok_out, %acc {pending = 0}
//   async_wait %groups_out {pending = 0}
//   %out = cast %acc_done
#include <algorithm>
#include <set>

#include "../lower/Staging.h"
#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

// The buffers of a loop body, by who writes them: rings (stages the loop's copies
// fill ahead) and the two-stage buffers of operands the loop computes (local_store).
struct Buffers {
  std::set<const Value*> rings, stored;
  bool ring(const Value* v) const { return rings.count(v); }
  // A wgmma or a local_load reading a ring stage.
  bool readsRing(const Op& op) const {
    if (op.kind() == OpKind::LocalLoad) return ring(op.operand(0));
    return op.kind() == OpKind::Wgmma && (ring(op.operand(0)) || ring(op.operand(2)));
  }
  bool storesOperand(const Op& op) const { return op.kind() == OpKind::LocalStore && stored.count(op.operand(0)); }
};

Buffers buffersOf(Block& body) {
  Buffers b;
  for (auto& o : body.ops()) {
    o->walk([&](Op* x) {
      if (x->kind() == OpKind::AsyncCopy) b.rings.insert(x->operand(0));
      if (x->kind() == OpKind::TmaLoad) b.rings.insert(x->operand(1));
    });
    const SharedLayout* s = o->kind() == OpKind::LocalStore ? o->operand(0)->type().shared() : nullptr;
    if (s && s->stages > 1) b.stored.insert(o->operand(0));
  }
  return b;
}

// The op of `body` that is or holds a copy into a ring (a TMA load under its `if`).
bool copiesIntoRing(Op& op) {
  bool found = false;
  op.walk([&](Op* o) { found = found || o->kind() == OpKind::AsyncCopy || o->kind() == OpKind::TmaLoad; });
  return found;
}

// The loop-carried value (block argument, and the loop's result) whose yielded value
// `kind` produces; null when none.
int carriedOf(const Op& loop, OpKind kind) {
  const Op& y = *loop.region(0).terminator();
  for (unsigned i = 0; i < y.numOperands(); ++i) {
    const Op* d = y.operand(i)->definingOp();
    if (d && d->kind() == kind && y.operand(i)->type().isToken()) return static_cast<int>(i);
  }
  return -1;
}

// Whether any op of `body` (at any depth) is of `kind`.
bool holds(Block& body, OpKind kind) {
  bool found = false;
  for (auto& o : body.ops()) o->walk([&](Op* x) { found = found || x->kind() == kind; });
  return found;
}

// Whether op (or an op nested in it) reads v.
bool reads(Op& op, const Value* v) {
  bool found = false;
  op.walk([&](Op* o) {
    for (Value* x : o->operands()) found = found || x == v;
  });
  return found;
}

// Replaces v by r in the ops of `body` after `from` (and nested in them).
void replaceAfter(Block& body, const Op* from, Value* v, Value* r) {
  bool after = false;
  for (auto& o : body.ops()) {
    if (after)
      o->walk([&](Op* x) {
        for (unsigned k = 0; k < x->numOperands(); ++k)
          if (x->operand(k) == v) x->setOperand(k, r);
      });
    after = after || o.get() == from;
  }
}

// The first op of `body` after `start` (null: from the top) that reads v and is neither
// a wgmma (which takes an accumulator in flight), a wait (already placed: the pass may
// run again) nor the yield; with the wgmma groups left in flight that were issued before
// it (`inFlight`) and the last one's token.
struct Reader {
  Op* op = nullptr;
  int inFlight = 0;
  Value* last = nullptr;
};
Reader firstReader(Block& body, const Op* start, const Value* v) {
  Reader r;
  bool on = start == nullptr;
  for (auto& o : body.ops()) {
    if (o.get() == start) {
      on = true;
      continue;
    }
    if (!on) continue;
    bool reader = o->kind() != OpKind::Wgmma && o->kind() != OpKind::WgmmaWait && o.get() != body.terminator();
    if (reader && reads(*o, v)) {
      r.op = o.get();
      return r;
    }
    if (o->kind() == OpKind::Wgmma && !L::wgmmaOpPromotes(*o)) {
      ++r.inFlight;
      r.last = o->result(1);
    }
  }
  return r;
}

Op* waitFor(Builder& b, Op* before, Value* token, Value* v, int pending) {
  b.setInsertionPointBefore(before);
  Op* wait = b.create(OpKind::WgmmaWait, {token, v}, {v->type()}, {{"pending", int64_t{pending}}});
  wait->result(0)->setName(v->name().empty() ? "" : v->name() + "_done");
  return wait;
}

// A first reader that is an `if` not branching on v (a flattened persistent loop's
// epilogue at a tile's last K step): the wait goes into each branch before its first
// reader, so that the iterations that do not take it keep their groups in flight. Only
// where the if's results carrying v go to the loop's yield alone (the next iteration's
// wgmma, or the wait after the loop: inFlightYield).
bool waitInBranches(Builder& b, Op& op, Value* v, Value* token, int inFlight) {
  if (op.kind() != OpKind::If) return false;
  for (Value* x : op.operands())
    if (x == v) return false;
  for (unsigned r = 0; r < op.numRegions(); ++r) {
    const Op& t = *op.region(r).terminator();
    for (unsigned i = 0; i < t.numOperands(); ++i) {
      if (t.operand(i) != v) continue;
      for (const Use& u : op.result(i)->uses())
        if (u.user->kind() != OpKind::Yield || u.user->parentBlock() != op.parentBlock()) return false;
    }
  }
  for (unsigned r = 0; r < op.numRegions(); ++r) {
    Block& region = op.region(r);
    Reader in = firstReader(region, nullptr, v);
    if (!in.op) continue;
    Op* w = waitFor(b, in.op, in.last ? in.last : token, v, inFlight + in.inFlight);
    replaceAfter(region, w, v, w->result(0));
  }
  return true;
}

// A value the loop yields whose registers a wgmma group may still write: a group's
// result, or that of an `if` one of whose branches yields one (waitInBranches).
bool inFlightYield(const Value* v) {
  const Op* d = v->definingOp();
  if (!d) return false;
  if (d->kind() == OpKind::Wgmma) return v == d->result(0) && !L::wgmmaOpPromotes(*d);
  if (d->kind() != OpKind::If) return false;
  unsigned i = 0;
  while (d->result(i) != v) ++i;
  for (unsigned r = 0; r < d->numRegions(); ++r)
    if (inFlightYield(d->region(r).terminator()->operand(i))) return true;
  return false;
}

// Reads of a wgmma group's result by ops other than a wgmma (a fresh fp8 partial sum,
// which a kernel promotes itself): in its iteration, a wgmma_wait before the first
// reader, leaving the groups issued after it in flight; carried to the next iteration,
// one before the first reader there, leaving that iteration's groups so far in flight
// (the step's group runs while the last one's sum is promoted), or, when no group comes
// before that reader, one before the yield.
void resultWaits(Builder& b, Op& loop) {
  Block& body = loop.region(0);
  Op& y = *body.terminator();
  std::vector<Op*> groups;
  for (auto& o : body.ops())
    if (o->kind() == OpKind::Wgmma && !L::wgmmaOpPromotes(*o)) groups.push_back(o.get());
  for (Op* g : groups) {
    Value* v = g->result(0);
    Reader r = firstReader(body, g, v);
    if (r.op && !waitInBranches(b, *r.op, v, r.last ? r.last : g->result(1), r.inFlight)) {
      Op* w = waitFor(b, r.op, r.last ? r.last : g->result(1), v, r.inFlight);
      replaceAfter(body, w, v, w->result(0));
    }
    for (unsigned i = 0; i < y.numOperands(); ++i) {
      if (y.operand(i) != v) continue;
      Value* arg = body.arg(1 + i);
      Reader next = firstReader(body, nullptr, arg);
      if (!next.op) continue;
      if (next.last) {
        Op* w = waitFor(b, next.op, next.last, arg, next.inFlight);
        replaceAfter(body, w, arg, w->result(0));
      } else {
        Op* w = waitFor(b, &y, g->result(1), v, 0);
        y.setOperand(i, w->result(0));
      }
    }
  }
}

// Before the first store of an operand the loop computes: the groups of two iterations
// back, which read the stage being written, complete in every warpgroup. With no group
// of this iteration before it, the wait joins the barrier before the ring reads.
void storeWaits(Builder& b, Block& body, const Buffers& bufs, Value* carriedToken) {
  int perIteration = 0;
  for (auto& o : body.ops()) perIteration += o->kind() == OpKind::Wgmma && !L::wgmmaOpPromotes(*o);
  int before = 0;
  Value* last = carriedToken;
  Op* barrier = nullptr;
  for (auto& o : body.ops()) {
    if (o->kind() == OpKind::Barrier) barrier = o.get();
    if (o->kind() == OpKind::Wgmma) {
      barrier = nullptr;
      if (!L::wgmmaOpPromotes(*o)) {
        ++before;
        last = o->result(1);
      }
    }
    if (!bufs.storesOperand(*o)) continue;
    b.setInsertionPointBefore(barrier ? barrier : o.get());
    b.create(OpKind::WgmmaWait, {last}, {}, {{"pending", int64_t{perIteration + before}}});
    if (!barrier) b.create(OpKind::Barrier, {}, {});
    return;
  }
}

void loopWaits(Builder& b, Op& loop) {
  Block& body = loop.region(0);
  Buffers bufs = buffersOf(body);
  std::vector<Op*> readers, groups;  // ops reading ring stages; the wgmma groups among them
  bool staged = false;               // a wgmma reads a buffer of several stages
  for (auto& o : body.ops()) {
    if (o->kind() == OpKind::Wgmma)
      for (unsigned i : {0u, 2u}) staged = staged || o->operand(i)->type().shared()->stages > 1;
    if (!bufs.readsRing(*o)) continue;
    readers.push_back(o.get());
    if (o->kind() == OpKind::Wgmma) groups.push_back(o.get());
  }
  if (!staged && readers.empty()) return;
  b.setLoc(loop.loc());
  int stages = 0;
  for (const Value* r : bufs.rings) stages = std::max<int>(stages, static_cast<int>(r->type().shared()->stages));
  int copyToken = carriedOf(loop, OpKind::AsyncCommit);
  int wgmmaToken = carriedOf(loop, OpKind::Wgmma);
  if (wgmmaToken < 0)
    throw UserError(loop.loc(), "insert-waits: a loop whose wgmma groups read ring stages must carry their token");
  bool placed = holds(body, OpKind::AsyncWait) || holds(body, OpKind::WgmmaWait);  // the pass may run again
  if (copyToken >= 0 && !placed && !readers.empty()) {
    int perIteration = 0;
    for (auto& o : body.ops()) perIteration += o->kind() == OpKind::AsyncCommit;
    // The first consumer: an mbarrier wait before the readers, if any, else the first reader.
    Op* first = readers.front();
    for (auto& o : body.ops()) {
      if (o.get() == first) break;
      if (o->kind() == OpKind::MbarrierWait) {
        first = o.get();
        break;
      }
    }
    b.setInsertionPointBefore(first);
    b.create(OpKind::AsyncWait, {body.arg(1 + copyToken)}, {}, {{"pending", int64_t{perIteration * (stages - 1) - 1}}});
    if (!groups.empty()) b.create(OpKind::FenceAsyncShared, {}, {});  // cp.async bytes read by the async proxy
    b.setInsertionPointBefore(readers.front());
    b.create(OpKind::Barrier, {}, {});
  }
  if (!placed && !bufs.stored.empty()) storeWaits(b, body, bufs, body.arg(1 + wgmmaToken));
  if (!placed && !groups.empty()) {
    // A ring stage the groups read is refilled: they complete first. (Stages read back
    // into registers were read before the barrier that precedes every refill.)
    Op* refill = nullptr;
    bool past = false;
    int inFlight = 0;
    Value* last = nullptr;
    for (auto& o : body.ops()) {
      if (o.get() == groups.front()) past = true;
      if (o->kind() == OpKind::Wgmma) {
        last = o->result(1);
        inFlight += !L::wgmmaOpPromotes(*o);
      }
      if (past && copiesIntoRing(*o)) {
        refill = o.get();
        break;
      }
    }
    if (refill) {
      b.setInsertionPointBefore(refill);
      b.create(OpKind::WgmmaWait, {last}, {}, {{"pending", int64_t{inFlight}}});
      // Warp-specialized, each consumer warp hands the stage back on its own (an
      // mbarrier arrival per warp): no barrier.
      bool specialized = false;
      refill->walk([&](Op* o) { specialized = specialized || o->hasAttr("ws_role"); });
      if (!specialized) b.create(OpKind::Barrier, {}, {});
    }
  }
  resultWaits(b, loop);
  // After the loop: the accumulators, then the drain.
  Op* after = nullptr;
  for (auto it = loop.parentBlock()->ops().begin(); it != loop.parentBlock()->ops().end(); ++it)
    if (it->get() == &loop) after = std::next(it)->get();
  b.setInsertionPointBefore(after);
  const Op& y = *body.terminator();
  std::vector<Value*> accs = {loop.result(wgmmaToken)};
  std::vector<Type> types;
  for (unsigned i = 0; i < y.numOperands(); ++i) {
    bool inFlight = inFlightYield(y.operand(i)) && !loop.result(i)->unused();
    bool waited = std::any_of(loop.result(i)->uses().begin(), loop.result(i)->uses().end(),
                              [](const Use& u) { return u.user->kind() == OpKind::WgmmaWait; });
    if (!inFlight || waited) continue;
    accs.push_back(loop.result(i));
    types.push_back(loop.result(i)->type());
  }
  // With no accumulator used after the loop (a flattened loop stores its own), the
  // groups still in flight are waited for all the same: ptxas would otherwise wait at
  // the loop's exit and keep the loop's groups from overlapping (C7514).
  bool tokenWaited = std::any_of(accs[0]->uses().begin(), accs[0]->uses().end(),
                                 [](const Use& u) { return u.user->kind() == OpKind::WgmmaWait; });
  bool async = false;  // a group the loop leaves in flight (promoting ones wait for themselves)
  for (auto& o : body.ops()) async = async || (o->kind() == OpKind::Wgmma && !L::wgmmaOpPromotes(*o));
  if (accs.size() == 1 && !tokenWaited && async)
    b.create(OpKind::WgmmaWait, accs, {}, {{"pending", int64_t{0}}});
  if (accs.size() > 1) {
    Op* wait = b.create(OpKind::WgmmaWait, accs, types, {{"pending", int64_t{0}}});
    for (unsigned i = 0; i < wait->numResults(); ++i) {
      Value* r = accs[i + 1];
      wait->result(i)->setName(r->name().empty() ? "" : r->name() + "_done");
      std::vector<Use> uses = r->uses();
      for (const Use& u : uses)
        if (u.user != wait) u.user->setOperand(u.index, wait->result(i));
    }
  }
  if (copyToken >= 0) {
    Value* g = loop.result(copyToken);
    bool drained = std::any_of(g->uses().begin(), g->uses().end(),
                               [](const Use& u) { return u.user->kind() == OpKind::AsyncWait; });
    if (!drained) b.create(OpKind::AsyncWait, {g}, {}, {{"pending", int64_t{0}}});
  }
}

}  // namespace

void insert_waits(Module& m) {
  Builder b(m);
  for (Op* f : m.funcs()) {
    if (!isGpuStage(*f)) continue;
    std::vector<Op*> loops;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::For) loops.push_back(o);
    });
    for (Op* loop : loops) loopWaits(b, *loop);
  }
}

}  // namespace tilefuse::passes
