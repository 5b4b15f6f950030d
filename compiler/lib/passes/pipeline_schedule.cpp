// pipeline-schedule: the schedule of each software-pipelined K loop of a GPU-stage
// function on sm_90a (lib/lower/PipelinePlan.h): a for loop whose wgmma dots read loads
// of the loop copies the operand tiles of iteration j + S - 1 into a ring of S
// shared-memory stages while the tensor cores work on iteration j. The loop gets its
// stage count and the bytes of one stage; each staged load its byte offset in a stage,
// its layout there ([rows, cols, element bytes, swizzle], the one the dots' wgmma
// descriptors read) and its copy: TMA boxes (its descriptor is on TMA, plan-tma) or
// cp.async runs of `staged_width` elements (`staged_prefix`: each run copies the valid
// prefix of its mask; `staged_transposed`: a [K, N] tile stored K-major). A dot operand
// computed in the loop from what it loads (dequantized, unpacked) has its loads staged
// for reading back into registers (`staged_read_back`, in a layout of their own); the
// expander stores the operand for its dot; such a load cp.async cannot copy stays a
// load of each iteration, with the reason (`not_staged`). A loop with a
// wgmma dot that cannot pipeline gets the reason, which TILEFUSE_PERF_HINTS prints.
// pipeline-expand writes the loop out from these attributes.
//
// before (sm_90a, 8 warps, num_stages = 3):
//   %acc = for %lb, %n, %st, %zero : tile<128x128xf32, W> {
//   ^(%k: i32, %c: tile<128x128xf32, W>, %ap: ..., %bp: ...):
//     %av = load %ap : tile<128x64xbf16, A>
//     %bv = load %bp : tile<64x128xbf16, B>
//     %d = dot %av, %bv, %c : tile<128x128xf32, W>
//     ...
// after:
//   %acc = for ... {pipeline_stage_bytes = 32768, pipeline_stages = 3} : ...
//     %av = load %ap {staged_at = 0, staged_copy = "cp.async", staged_tile = [128, 64, 2, 128], staged_width = 8} : ...
//     %bv = load %bp {staged_at = 16384, staged_copy = "cp.async", staged_tile = [64, 128, 2, 128], staged_width = 8} :
//     ...
#include <charconv>

#include "../lower/PipelinePlan.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

int numStages(const std::string& text) {
  int s = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), s);
  if (ec != std::errc() || p != text.data() + text.size() || s < 1 || s > 8)
    throw UserError({}, "pipeline-schedule: num_stages must be from 1 to 8, got '" + text + "'");
  return s;
}

void schedule(Op& loop, const L::PipelinePlan& p) {
  loop.setAttr("pipeline_stages", static_cast<int64_t>(p.stages));
  loop.setAttr("pipeline_stage_bytes", p.stageBytes);
  for (const L::StagedCopy& l : p.loads) {
    Op& ld = const_cast<Op&>(*l.load);  // an op of `loop`, which the pass may change
    ld.setAttr("staged_at", l.offset);
    ld.setAttr("staged_tile", std::vector<int64_t>{l.tile.rows, l.tile.cols, l.tile.eb, l.tile.swizzle});
    ld.setAttr("staged_copy", std::string(l.tma ? "tma" : "cp.async"));
    if (l.readBack) ld.setAttr("staged_read_back", true);
    if (l.tma) continue;
    ld.setAttr("staged_width", l.width);
    if (l.prefix) ld.setAttr("staged_prefix", true);
    if (l.transposed) ld.setAttr("staged_transposed", true);
  }
  for (const auto& [ld, why] : p.unstaged) const_cast<Op*>(ld)->setAttr("not_staged", why);
}

}  // namespace

void pipeline_schedule(Module& m, const PassOptions& opts) {
  int stages = numStages(opts.at("num_stages"));
  for (Op* f : m.funcs()) {
    if (!isGpuStage(*f) || f->strAttr("arch") != "sm_90a") continue;
    int threads = 32 * static_cast<int>(f->intAttr("num_warps"));
    lower::AxisAnalysis axis(*f);
    std::vector<Op*> loops;
    f->walk([&](Op* o) {
      if (o->kind() == OpKind::For && !o->hasAttr("pipeline_stages") && !o->hasAttr("no_pipeline")) loops.push_back(o);
    });
    for (Op* loop : loops) {
      L::PipelinePlan p;
      std::string why;
      if (L::planPipeline(*loop, axis, threads, stages, &p, &why))
        schedule(*loop, p);
      else if (!why.empty())
        loop->setAttr("no_pipeline", why);
    }
  }
}

}  // namespace tilefuse::passes
