// allocate-shared: places the shared memory of each GPU-stage function (sm_90a), relative
// to where its shared memory starts (after the mbarriers of a kernel with tensor maps,
// or above its caller's operands for a device function): first the rings of the
// pipelined loops (pipeline-schedule), then the two stages the other wgmma dots
// alternate between, then the scratch space of layout conversions and reductions.
// A ring is live only while its loop runs (the lowering drains its copies and waits for
// its wgmma groups after the loop; the prologue of a ring used before synchronizes
// the block first: `ring_sync`), so
// every ring starts at the same byte and the function needs the largest one; rings of a
// loop entered again (an outer loop) are simply reused. A loop whose copies are TMA
// boxes gets its first mbarrier slot, one per stage; slot 0 of a kernel with tensor
// maps serves its loads outside pipelines.
//
// before: two pipelined K loops of 3 x 32768 and 2 x 16384 bytes, one other wgmma dot
//   for ... {pipeline_stage_bytes = 32768, pipeline_stages = 3} ...
//   for ... {pipeline_stage_bytes = 16384, pipeline_stages = 2} ...
// after:
//   func @k(...) {..., smem_rings = 98304, smem_wgmma_stage = 16384}
//   for ... {pipeline_stage_bytes = 32768, pipeline_stages = 3, ring_at = 0} ...
//   for ... {pipeline_stage_bytes = 16384, pipeline_stages = 2, ring_at = 0} ...
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

void allocate(Op& f) {
  int threads = 32 * static_cast<int>(f.intAttr("num_warps"));
  int64_t rings = 0, stage = 0, slot = 0;
  f.walk([&](Op* o) {
    if (o->kind() == OpKind::MakeDesc && o->hasAttr("tma_box")) slot = 1;
  });
  f.walk([&](Op* o) {
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
      return;
    }
    if (!L::onWgmmaLayout(*o)) return;
    const Op* loop = o->parentOp();
    bool pipelined = loop && loop->kind() == OpKind::For && loop->hasAttr("pipeline_stages");
    if (pipelined) return;
    L::WgmmaOperandBytes b = L::wgmmaOperandBytes(*o, threads);
    stage = std::max(stage, b.a + b.b);
  });
  if (slot * 8 > 1024) throw UserError(f.loc(), "allocate-shared: more mbarriers than the 128 the kernel reserves");
  if (rings) f.setAttr("smem_rings", rings);
  if (stage) f.setAttr("smem_wgmma_stage", stage);
}

}  // namespace

void allocate_shared(Module& m) {
  for (Op* f : m.funcs())
    if (isGpuStage(*f) && f->strAttr("arch") == "sm_90a" && !f->hasAttr("smem_rings") &&
        !f->hasAttr("smem_wgmma_stage"))
      allocate(*f);
}

}  // namespace tilefuse::passes
