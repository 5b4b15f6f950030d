// warp-specialize: a kernel with a loop marked {warp_specialize} (tl.range(...,
// warp_specialize=True)) on sm_90a runs on two groups of warps. Its body moves into a
// warp_specialize op: the kernel's num_warps consumer warps run it all but the TMA copies,
// one producer warpgroup after them runs the copies, the mbarrier waits that keep them
// within the ring, and the scalar work those need (lower/WarpSpecialize.h). The pass
// checks what specialization needs and wraps the body; pipeline-expand then writes each
// pipelined loop's ring for two roles (full and empty mbarriers, its position carried
// through the loops around it), and the lowering emits the body once per role.
//
// It needs every pipelined loop of the kernel to copy by TMA (tensor descriptors), the
// producer's slice to be scalar work (a tile schedule read from memory is; a copy
// coordinate computed from a tile is not), no calls, and num_warps of at most 16. A
// marked loop with no pipelined loop in or below it has nothing to specialize: the flag
// is then dropped, as on other targets (a hint, as in Triton), and the loop says why
// ({no_warp_specialize}, the lowering's performance hint).
//
// {consumer_groups = 2} on the marked loop (num_consumer_groups=2): two groups of
// num_warps consumer warps take its iterations in turns (ping-pong), each with its own
// scratch space; the op gets {consumer_groups = 2} and the loop {ws_turns}. The loop
// must be the kernel body's, carry no values (each group sees only its own iterations)
// and stage no operand outside the rings (one buffer, two groups).
//
// before:
//   func @k(...) {gpu = true, arch = "sm_90a", num_warps = 8} {
//     for %t = ... {warp_specialize = true} { ... for ... {pipeline_stages = 4} { desc_load ... } ... }
//     return
//   }
// after:
//   func @k(...) {...} {
//     warp_specialize {producer_warps = 4} {
//       for %t = ... { ... }
//       yield
//     }
//     return
//   }
#include "../lower/WarpSpecialize.h"
#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

constexpr int64_t kProducerWarps = 4;  // one warpgroup: setmaxnreg works per warpgroup

bool stagedTma(const Op& op) {
  return op.kind() == OpKind::DescLoad && op.hasAttr("staged_copy") && op.strAttr("staged_copy") == "tma";
}

// Ping-pong consumers: what taking turns over the marked loop's iterations needs.
void turns(Op& f, const std::vector<Op*>& marked) {
  Op* l = marked.front();
  auto refuse = [&](const Op& at, const std::string& why) {
    throw UserError(at.loc(), "warp_specialize with num_consumer_groups=2: " + why);
  };
  if (marked.size() > 1) refuse(*marked[1], "one loop per kernel may take turns");
  if (l->parentOp() != &f) refuse(*l, "the loop must be the kernel body's, not nested in another loop or an if");
  if (l->numResults()) refuse(*l, "the loop carries values from one iteration to the next; each group runs only "
                                  "every other iteration");
  l->walk([&](Op* o) {
    if (o->kind() == OpKind::LocalStore || o->kind() == OpKind::SmemAlloc)
      refuse(*o, "this operand is staged in shared memory outside a pipeline ring, one buffer for both groups");
  });
  l->removeAttr("consumer_groups");
  l->setAttr("ws_turns", true);
}

void specialize(Builder& b, Op& f, const std::vector<Op*>& marked) {
  std::vector<Op*> loops;
  for (Op* l : marked)
    l->walk([&](Op* o) {
      if (o->kind() == OpKind::For && o->hasAttr("pipeline_stages")) loops.push_back(o);
    });
  if (loops.empty()) {
    for (Op* l : marked) {
      l->removeAttr("consumer_groups");
      l->setAttr("no_warp_specialize",
                 std::string("no pipelined K loop (tl.dot on tensor-descriptor loads) in or below it"));
    }
    return;
  }
  f.walk([&](Op* o) {
    if (o->kind() == OpKind::Call)
      throw UserError(o->loc(), "warp_specialize: the kernel calls a device function; specialized kernels inline "
                                "every call (leave noinline off)");
    if (o->kind() != OpKind::For || !o->hasAttr("pipeline_stages")) return;
    for (const auto& x : o->region(0).ops())
      if (x->hasAttr("staged_at") && !stagedTma(*x))
        throw UserError(x->loc(), "warp_specialize: this pipelined load copies with cp.async; the producer warps "
                                  "issue TMA copies only: load the loop's operands through tensor descriptors");
  });
  int64_t groups = 1;
  for (Op* l : marked)
    if (l->hasAttr("consumer_groups")) groups = std::max(groups, l->intAttr("consumer_groups"));
  if (f.intAttr("num_warps") * groups > 16)
    throw UserError(f.loc(), "warp_specialize: num_warps " + std::to_string(f.intAttr("num_warps")) +
                                 (groups > 1 ? " x " + std::to_string(groups) + " consumer groups" : std::string()) +
                                 " leaves no room for the producer warpgroup (at most 16 consumer warps)");
  if (groups > 1) turns(f, marked);
  Block& body = f.region(0);
  Op* ret = body.terminator();
  b.setLoc(f.loc());
  b.setInsertionPointBefore(ret);
  Op* ws = b.create(OpKind::WarpSpecialize, {}, {}, {{"producer_warps", kProducerWarps}});
  if (groups > 1) ws->setAttr("consumer_groups", groups);
  b.setInsertionPointToEnd(ws->region(0));
  b.yield({});
  Op* end = ws->region(0).terminator();
  std::vector<Op*> moved;
  for (auto& o : body.ops())
    if (o.get() != ws && o.get() != ret) moved.push_back(o.get());
  for (Op* o : moved) o->moveBefore(end);
  lower::detail::producerSlice(*ws, [](const Op& o) {
    return stagedTma(o) && o.parentOp()->kind() == OpKind::For && o.parentOp()->hasAttr("pipeline_stages");
  });
}

}  // namespace

void warp_specialize(Module& m) {
  Builder b(m);
  for (Op* f : m.funcs()) {
    if (!isGpuStage(*f)) continue;
    std::vector<Op*> marked;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::For && o->hasAttr("warp_specialize")) marked.push_back(o);
    });
    if (marked.empty()) continue;
    for (Op* l : marked) {
      l->removeAttr("warp_specialize");
      if (f->strAttr("arch") != "sm_90a") l->removeAttr("consumer_groups");
      if (f->strAttr("arch") != "sm_90a") l->setAttr("no_warp_specialize", std::string("needs sm_90a"));
    }
    if (f->strAttr("arch") == "sm_90a") specialize(b, *f, marked);
  }
}

}  // namespace tilefuse::passes
