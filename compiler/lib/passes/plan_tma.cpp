// plan-tma: decides which tensor descriptors of a GPU-stage kernel (sm_90) move their
// tiles with the copy engine, and how. A make_desc whose block can be TMA boxes and
// whose base, sizes and strides can be encoded at launch (lib/lower/TensorMaps.h) gets
// the box one copy moves and its swizzle; the swizzle is at most that of the wgmma
// operands its loaded tiles become, so a pipelined dot reads what the copies wrote.
// Any other make_desc gets the reason, which TILEFUSE_PERF_HINTS prints; its accesses
// stay bounds-checked loads and stores. The lowering encodes one tensor map per
// make_desc with a box, from these attributes.
//
// before (sm_90a, 8 warps):
//   %d = make_desc %a, %m, %k, %k, %one : desc<128x64xbf16>
// after:
//   %d = make_desc %a, %m, %k, %k, %one {tma_box = [128, 64], tma_swizzle = 128} : desc<128x64xbf16>
// or, for a base computed in the kernel:
//   %d = make_desc %p, ... {no_tma = "its base is computed in the kernel"} : desc<128x64xbf16>
#include "../lower/Staging.h"
#include "../lower/TensorMaps.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

// The widest swizzle the tiles loaded through `md` may take: that of the wgmma
// operands they become (128 when none).
int64_t swizzleCap(const Op& md, const std::string& arch, int threads) {
  int64_t cap = 128;
  for (const Use& u : md.result()->uses()) {
    if (u.user->kind() != OpKind::DescLoad || u.index != 0) continue;
    for (const Use& d : u.user->result()->uses()) {
      L::WgmmaShape w;
      if (!L::wgmmaApplies(*d.user, arch, threads, &w)) continue;
      if (L::wgmmaB(*d.user, threads).value == u.user->result())
        cap = std::min(cap, L::wgmmaOperandTile(*d.user, 1, w, threads).swizzle);
      if (L::wgmmaA(*d.user).value == u.user->result())
        cap = std::min(cap, L::wgmmaOperandTile(*d.user, 0, w, threads).swizzle);
    }
  }
  return cap;
}

// Why `md` cannot be on TMA, or "" with its box and swizzle.
std::string plan(const Op& md, const Op& f, int threads, std::vector<int64_t>& box, int64_t& swizzle) {
  const Type& dt = md.result()->type();
  L::TmaView view = L::tmaView(dt, swizzleCap(md, f.strAttr("arch"), threads));
  if (!view.ok)
    return "its block " + dt.str() +
           " cannot be TMA boxes (rows of at least 32 bytes, the outer dims a multiple of 8 rows, each dim at most "
           "256)";
  lower::TensorMapSpec spec;
  if (std::string why = L::tensorMapOperands(md, f, &spec); !why.empty()) return why;
  box = dt.shape;
  box.back() = view.innerBox;
  swizzle = view.swizzle;
  return "";
}

}  // namespace

void plan_tma(Module& m) {
  for (Op* f : m.funcs()) {
    bool kernel = f->hasAttr("kernel") && f->boolAttr("kernel");
    if (!kernel || !isGpuStage(*f)) continue;
    const std::string& arch = f->strAttr("arch");
    if (arch != "sm_90a" && arch != "sm_90") continue;
    int threads = 32 * static_cast<int>(f->intAttr("num_warps"));
    f->walk([&](Op* o) {
      if (o->kind() != OpKind::MakeDesc || o->hasAttr("tma_box") || o->hasAttr("no_tma")) return;
      std::vector<int64_t> box;
      int64_t swizzle = 0;
      if (std::string why = plan(*o, *f, threads, box, swizzle); !why.empty()) {
        o->setAttr("no_tma", why);
        return;
      }
      o->setAttr("tma_box", box);
      o->setAttr("tma_swizzle", swizzle);
    });
  }
}

}  // namespace tilefuse::passes
