// allocate-shared: places the shared memory of each GPU-stage function (sm_90a), relative
// to where its shared memory starts (after the mbarriers of a kernel with tensor maps,
// or above its caller's operands for a device function): first the rings of the
// pipelined loops (pipeline-schedule), then the staged operand buffers, then the
// scratch space of layout conversions and reductions.
// A ring is live only while its loop runs (the lowering drains its copies and waits for
// its wgmma groups after the loop; the prologue of a ring used before synchronizes
// the block first: `ring_sync`), so
// every ring starts at the same byte and the function needs the largest one; rings of a
// loop entered again (an outer loop) are simply reused. A loop whose copies are TMA
// boxes gets its first mbarrier slot, one per stage; slot 0 of a kernel with tensor
// maps serves its loads outside pipelines.
// The smem_alloc buffers (stage-dot-operands) come after those, each at `smem_at`: a
// buffer is live from its first use to its last, or to the wgmma_wait of a wgmma that
// reads it (in program order; a use inside a loop or if below the buffer's block
// counts as that whole op), and buffers whose live ranges overlap get disjoint bytes,
// the others reuse them; `smem_staged` holds the bytes all of them need. The rings of
// loops pipeline-expand rewrote are such buffers: live to the wgmma_wait after their
// loop (a token the loop yields), so a later buffer (an epilogue's) reuses their bytes;
// their mbarriers (smem<Nxi64>) get `barrier_slot`, after those of the loops above.
// A warp-specialized ring ({ws_ring}) is live for the whole kernel: the producer fills
// it while the consumers run their epilogues.
//
// before: two pipelined K loops of 3 x 32768 and 2 x 16384 bytes, then two dots
// staged by stage-dot-operands
//   for ... {pipeline_stage_bytes = 32768, pipeline_stages = 3} ...
//   for ... {pipeline_stage_bytes = 16384, pipeline_stages = 2} ...
// after:
//   func @k(...) {..., smem_rings = 98304, smem_staged = 16384}
//   for ... {pipeline_stage_bytes = 32768, pipeline_stages = 3, ring_at = 0} ...
//   for ... {pipeline_stage_bytes = 16384, pipeline_stages = 2, ring_at = 0} ...
//   %a_smem = smem_alloc {smem_at = 98304} : ...    two staged dots one after the other:
//   %b_smem = smem_alloc {smem_at = 106496} : ...   the second's buffers reuse the
//   %a2_smem = smem_alloc {smem_at = 98304} : ...   first's bytes
//   %b2_smem = smem_alloc {smem_at = 106496} : ...
#include <map>

#include "../lower/Staging.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

// Whether `op` lies in a loop (which may enter its pipelined loop again).
bool inLoop(const Op& op) {
  for (const Op* p = op.parentOp(); p; p = p->parentOp())
    if (p->kind() == OpKind::For || p->kind() == OpKind::While) return true;
  return false;
}

bool copiesByTma(const Op& loop) {
  for (const auto& o : loop.region(0).ops())
    if (o->hasAttr("staged_copy") && o->strAttr("staged_copy") == "tma") return true;
  return false;
}

// The op of `block` that holds `op` (itself, or a loop or if around it).
const Op* inBlock(const Op* op, const Block* block) {
  while (op && op->parentBlock() != block) op = op->parentOp();
  return op;
}

// Places the function's smem_alloc buffers from `base` on; returns the bytes they need.
int64_t placeBuffers(Op& f, int64_t base) {
  std::map<const Op*, int> order;  // program order of every op
  f.walk([&](Op* o) { order.emplace(o, static_cast<int>(order.size())); });
  struct Live {
    Op* alloc;
    int from, to;
    int64_t bytes;
  };
  std::vector<Live> live;
  f.walk([&](Op* o) {
    if (o->kind() != OpKind::SmemAlloc || o->hasAttr("smem_at") || !o->result()->type().shared()) return;
    const SharedLayout& s = *o->result()->type().shared();
    Live l{o, order.at(o), order.at(o), s.stages * s.stageBytes()};
    if (o->hasAttr("ws_ring")) {  // a warp-specialized ring: filled while anything else runs
      l.from = 0;
      l.to = static_cast<int>(order.size());
      live.push_back(l);
      return;
    }
    auto reach = [&](const Op* user) {
      const Op* at = inBlock(user, o->parentBlock());
      if (!at) throw InternalError("allocate-shared: a buffer used outside the block of its smem_alloc");
      l.to = std::max(l.to, order.at(at));
    };
    for (const Use& u : o->result()->uses()) {
      reach(u.user);
      if (u.user->kind() != OpKind::Wgmma) continue;
      for (const Use& t : u.user->result(1)->uses()) {
        reach(t.user);
        // A token a loop yields is waited for after it (insert-waits).
        if (t.user->kind() == OpKind::Yield && t.user->parentOp()->kind() == OpKind::For)
          for (const Use& w : t.user->parentOp()->result(t.index)->uses()) reach(w.user);
      }
    }
    live.push_back(l);
  });
  int64_t end = 0;
  std::vector<std::pair<const Live*, int64_t>> placed;
  for (const Live& l : live) {
    // The lowest offset past every placed buffer that is live at the same time and
    // would overlap (buffers start on 1024-byte swizzle atoms).
    int64_t at = base;
    for (bool moved = true; moved;) {
      moved = false;
      for (auto [p, off] : placed)
        if (p->from <= l.to && l.from <= p->to && off < at + l.bytes && at < off + p->bytes) {
          at = L::swizzleAtoms(off + p->bytes);
          moved = true;
        }
    }
    l.alloc->setAttr("smem_at", at);
    placed.push_back({&l, at});
    end = std::max(end, at + l.bytes - base);
  }
  return end;
}

void allocate(Op& f) {
  int64_t rings = 0, slot = 0;
  f.walk([&](Op* o) {
    if (o->kind() == OpKind::MakeDesc && o->hasAttr("tma_box")) slot = 1;
  });
  f.walk([&](Op* o) {
    // The mbarriers of an expanded pipeline (pipeline-expand).
    if (o->kind() == OpKind::SmemAlloc && !o->result()->type().shared() && !o->hasAttr("barrier_slot")) {
      o->setAttr("barrier_slot", slot);
      slot += o->result()->type().shape[0];
      return;
    }
    if (o->kind() == OpKind::For && o->hasAttr("pipeline_stages")) {
      int64_t stages = o->intAttr("pipeline_stages");
      o->setAttr("ring_at", int64_t{0});
      // The ring was used before (an earlier loop, or this one entered again): the
      // prologue synchronizes the block so that no warpgroup still reads it.
      if (rings || inLoop(*o)) o->setAttr("ring_sync", true);
      rings = std::max(rings, stages * o->intAttr("pipeline_stage_bytes"));
      if (copiesByTma(*o)) {
        o->setAttr("barrier_slot", slot);
        slot += stages;
      }
    }
  });
  if (slot * 8 > 1024) throw UserError(f.loc(), "allocate-shared: more mbarriers than the 128 the kernel reserves");
  if (rings) f.setAttr("smem_rings", rings);
  if (int64_t staged = placeBuffers(f, rings)) f.setAttr("smem_staged", staged);
}

}  // namespace

void allocate_shared(Module& m) {
  for (Op* f : m.funcs())
    if (isGpuStage(*f) && f->strAttr("arch") == "sm_90a" && !f->hasAttr("smem_rings") && !f->hasAttr("smem_staged"))
      allocate(*f);
}

}  // namespace tilefuse::passes
