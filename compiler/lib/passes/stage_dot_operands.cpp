// stage-dot-operands: a dot on wgmma (sm_90a, its result in a #wgmma layout) that is
// not pipelined takes its operands from registers; this pass makes the staging
// explicit. Each operand goes to a buffer of one stage whose #shared layout is the one
// the wgmma descriptors read (Staging.h's wgmmaOperandTile: B K-major for 8-bit types
// and for trans(x) of an [N, K] tile, whose operand is stored instead; an 8-bit [K, N]
// B is stored transposed; a 16-bit A = trans(x) of a [K, M] tile stores x, M-major).
// The block synchronizes before the stores (another warpgroup may still read the
// buffers' bytes) and after the fence that shows them to the tensor cores; the dot becomes a wgmma group on the buffers and a wait for it
// (fp8 dots, which promote every 128 of K in fp32, complete their groups themselves).
// allocate-shared places the buffers. A dot_scaled (of fp8 operands: one of fp4 is a
// bf16 dot by now, decompose-dot-scaled) becomes a wgmma that also takes its two scale
// tables (it promotes, so it waits for itself).
//
// before (sm_90a, 4 warps):
//   %d = dot %a, %b, %c : tile<64x64xf32, W>
// after:
//   %a_smem = smem_alloc : smem<64x32xbf16, #shared<swizzle=64, rows=64, cols=32, eb=2, stages=1>>
//   %b_smem = smem_alloc : smem<32x64xbf16, #shared<swizzle=128, rows=32, cols=64, eb=2, stages=1>>
//   %stage = constant {value = 0} : i32
//   barrier
//   local_store %a_smem, %stage, %a
//   local_store %b_smem, %stage, %b
//   fence_async_shared
//   barrier
//   %d_acc, %d_token = wgmma %a_smem, %stage, %b_smem, %stage, %c : tile<64x64xf32, W>, token
//   %d = wgmma_wait %d_token, %d_acc {pending = 0} : tile<64x64xf32, W>
#include "../lower/Staging.h"
#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

namespace L = lower::detail;

bool pipelined(const Op& dot) {
  const Op* loop = dot.parentOp();
  return loop && loop->kind() == OpKind::For && loop->hasAttr("pipeline_stages");
}

Type bufferType(DType elem, const L::SharedTile& t) {
  return Type::smem(elem, {t.rows, t.cols}, SharedLayout{t.swizzle, t.rows, t.cols, t.eb, 1});
}

void stage(Builder& b, Op& dot, const std::string& arch, int threads) {
  L::WgmmaShape w;
  if (!L::wgmmaApplies(dot, arch, threads, &w))
    throw InternalError("stage-dot-operands: a dot in a #wgmma layout that wgmma cannot run");
  L::WgmmaB bs = L::wgmmaB(dot, threads);
  L::WgmmaA as = L::wgmmaA(dot);
  bool scaled = dot.kind() == OpKind::DotScaled;
  Value* a = const_cast<Value*>(as.value);  // an operand of `dot` or of the trans feeding it
  Op* transA = as.mMajor ? dot.operand(0)->definingOp() : nullptr;
  Value* bIn = dot.operand(scaled ? 2 : 1);
  Value* bv = const_cast<Value*>(bs.value);  // an operand of `dot` or of the trans feeding it
  Op* trans = bv != bIn ? bIn->definingOp() : nullptr;
  std::string name = dot.result()->name().empty() ? "dot" : dot.result()->name();
  b.setInsertionPointBefore(&dot);
  b.setLoc(dot.loc());
  auto alloc = [&](unsigned which, DType elem, const char* suffix) {
    Value* buf =
        b.create(OpKind::SmemAlloc, {}, {bufferType(elem, L::wgmmaOperandTile(dot, which, w, threads))})->result();
    buf->setName(name + suffix);
    return buf;
  };
  Value* sa = alloc(0, a->type().elem, "_a_smem");
  Value* sb = alloc(1, bv->type().elem, "_b_smem");
  Value* s = b.i32(0);
  s->setName("stage");
  b.create(OpKind::Barrier, {}, {});
  b.create(OpKind::LocalStore, {sa, s, a}, {});
  Op* storeB = b.create(OpKind::LocalStore, {sb, s, bv}, {});
  if (bs.transposeOnStage) storeB->setAttr("transposed", true);
  b.create(OpKind::FenceAsyncShared, {}, {});
  b.create(OpKind::Barrier, {}, {});
  std::vector<Value*> ins = {sa, s, sb, s, dot.operand(L::accOperand(dot))};
  if (scaled) {
    ins.push_back(dot.operand(1));
    ins.push_back(dot.operand(3));
  }
  Op* mma = b.create(OpKind::Wgmma, ins, {dot.result()->type(), Type::token()});
  if (as.mMajor) mma->setAttr("a_mmajor", true);
  if (bs.kMajor) mma->setAttr("b_kmajor", true);
  if (scaled) mma->setAttr("scale_chunk", L::scaleChunk(dot.operand(1), dot.operand(3)));
  Value* out = mma->result(0);
  if (!L::wgmmaPromotes(dot)) {
    Op* wait = b.create(OpKind::WgmmaWait, {mma->result(1), out}, {out->type()}, {{"pending", int64_t{0}}});
    mma->result(0)->setName(name + "_acc");
    out = wait->result();
  }
  mma->result(1)->setName(name + "_token");
  out->setName(name);
  dot.result()->replaceAllUsesWith(out);
  dot.erase();
  if (trans && trans->result()->unused()) trans->erase();
  if (transA && transA->result()->unused()) transA->erase();
}

}  // namespace

void stage_dot_operands(Module& m) {
  Builder b(m);
  for (Op* f : m.funcs()) {
    if (!isGpuStage(*f) || f->strAttr("arch") != "sm_90a") continue;
    int threads = 32 * static_cast<int>(f->intAttr("num_warps"));
    std::vector<Op*> dots;
    f->walk([&](Op* o) {
      if (L::onWgmmaLayout(*o) && !pipelined(*o)) dots.push_back(o);
    });
    for (Op* d : dots) stage(b, *d, f->strAttr("arch"), threads);
  }
}

}  // namespace tilefuse::passes
