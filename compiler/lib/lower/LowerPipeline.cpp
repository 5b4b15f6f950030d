// The ops of software-pipelined K loops on sm_90a, which pipeline-expand and
// insert-waits wrote out in the GPU-stage IR (rings as smem_alloc with stages,
// async_copy / async_commit / async_wait, tma_load, mbarriers): each emitter takes its
// addresses from its buffer's #shared layout and allocate-shared's placement, and its
// instruction from its attributes. Pointer loads copy with cp.async (every thread its
// share), descriptor loads with TMA (thread 0 issues whole boxes that complete on the
// stage's mbarrier); every cp.async moves a run of 4, 8 or 16 contiguous, aligned bytes
// (pipeline-schedule's staged_width).
#include <map>

#include "Lowering.h"

namespace tilefuse::lower::detail {

// Shared byte (32-bit shared address) of stage `stage` of tile buffer `buf`.
LVal* Lowering::sharedStage(const Value* buf, const Value* stage) {
  LVal* smem32 = b_.CreatePtrToInt(smem(), b_.getInt32Ty());
  int64_t bytes = buf->type().shared()->stageBytes();
  return b_.CreateAdd(smem32, b_.CreateAdd(get(buf).e[0], b_.CreateMul(get(stage).e[0], idx(bytes))));
}

// The ops of an expanded pipeline (pipeline-expand, insert-waits): each takes its
// addresses from its buffer's #shared layout and allocate-shared's placement, and its
// instruction from its attributes. TMA loads and mbarrier updates are thread 0's.
void Lowering::lowerAsyncOp(const Op& op) {
  LVal* first = b_.CreateICmpEQ(tid_, idx(0));
  auto bar = [&](unsigned at) {
    return barrierAddr(b_.CreateAdd(get(op.operand(at)).e[0], get(op.operand(at + 1)).e[0]));
  };
  switch (op.kind()) {
    case OpKind::AsyncCopy:
      claimOperandSpace(false);
      cpAsyncInFlight_ = true;
      return asyncCopy(op);
    case OpKind::AsyncCommit:
      vals_[op.result()] = Regs{{}, layoutOf(op.result())};
      return ptx("cp.async.commit_group;");
    case OpKind::AsyncWait:
      if (op.intAttr("pending") == 0) cpAsyncInFlight_ = false;
      return ptx("cp.async.wait_group " + std::to_string(op.intAttr("pending")) + ";");
    case OpKind::TmaLoad: {
      claimOperandSpace(true);
      tmaInFlight_ = true;
      const Type& d = op.operand(0)->type();
      int map = tensorMapOf(op.operand(0));
      if (map < 0) throw InternalError("lowering: a tma_load of a descriptor not on TMA");
      return tmaCopy(map, Type::tile(d.elem, d.shape), sharedStage(op.operand(1), op.operand(2)), descCoords(op, 5),
                     bar(3), first);
    }
    case OpKind::MbarrierInit: {
      std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p mbarrier.init.shared::cta.b64 [$1], " +
                         std::to_string(op.intAttr("count")) + ";\n@p fence.mbarrier_init.release.cluster;\n}";
      auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt32Ty()}, false);
      b_.CreateCall(llvm::InlineAsm::get(ty, text, "r,r,~{memory}", true),
                    {b_.CreateZExt(first, b_.getInt32Ty()), bar(0)});
      return;
    }
    case OpKind::MbarrierExpect:
      return armBarrier(bar(0), op.intAttr("bytes"), first);
    case OpKind::MbarrierArrive: {
      // One arrival per warp, lane 0's once the whole warp is here (its reads done).
      ptx("bar.warp.sync -1;");
      LVal* lane0 = b_.CreateICmpEQ(b_.CreateAnd(tid_, idx(31)), idx(0));
      std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [$1];\n}";
      auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt32Ty()}, false);
      b_.CreateCall(llvm::InlineAsm::get(ty, text, "r,r,~{memory}", true),
                    {b_.CreateZExt(lane0, b_.getInt32Ty()), bar(0)});
      return;
    }
    case OpKind::MbarrierWait:
      return waitBarrier(bar(0), get(op.operand(2)).e[0]);
    default:
      throw InternalError("lowering: no emitter for " + std::string(op.mnemonic()));
  }
}

// async_copy: the runs of its pointer tile into its stage of the buffer, laid out by
// the buffer's #shared layout (the iteration's validity is and-ed into its mask).
void Lowering::asyncCopy(const Op& op) {
  const SharedLayout& sl = *op.operand(0)->type().shared();
  StagedCopy l;
  l.tile = SharedTile{sl.rows, sl.cols, sl.eb, sl.swizzle};
  l.width = op.hasAttr("width") ? op.intAttr("width") : 1;
  l.transposed = op.hasAttr("transposed") && op.boolAttr("transposed");
  l.prefix = op.hasAttr("prefix") && op.boolAttr("prefix");
  const Regs& ptrs = get(op.operand(2));
  Regs mask = op.numOperands() > 3 ? convert(get(op.operand(3)), op.operand(3)->type(), ptrs.L) : Regs{};
  LVal* base = sharedStage(op.operand(0), op.operand(1));
  cpAsyncRuns(l, ptrs, mask, op.operand(2)->type().shape, base, nullptr);
  vals_[op.result()] = Regs{{}, layoutOf(op.result())};
}

// One cp.async per owned run of l.width elements of `ptrs` (a 2-D tile of `shape`) to
// its address in l.tile from `base`, transposed for a K-major B; each copies its bytes,
// or its mask's valid prefix (l.prefix), zero-filling the rest; nothing where `mask` (in
// the pointers' layout; may be empty) or `valid` (may be null) is off.
void Lowering::cpAsyncRuns(const StagedCopy& l, const Regs& ptrs, const Regs& mask, const std::vector<int64_t>& shape,
                           LVal* base, LVal* valid) {
  const Layout& L = ptrs.L;
  int64_t bytes = l.width * l.tile.eb;
  std::string text = std::string("cp.async.") + (bytes == 16 ? "cg" : "ca") + ".shared.global [$0], [$1], " +
                     std::to_string(bytes) + ", $2;";
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt64Ty(), b_.getInt32Ty()}, false);
  auto* copy = llvm::InlineAsm::get(ty, text, "r,l,r,~{memory}", true);
  // A slot's index is the thread part OR its own (disjoint bits), so its row and column
  // are the thread's plus constants. Runs whose tile rows differ by a multiple of 8 share
  // the swizzle's XOR term: one offset per column and row mod 8, the rest immediates
  // (fewer registers live across a pipelined loop).
  LVal* t = threadPart(L);
  LVal *rowT = coord(t, shape, 0), *colT = coord(t, shape, 1);
  int64_t n = shape[1];
  std::map<std::pair<int64_t, int64_t>, LVal*> bases;
  for (int s = 0; s < slots(L); s += static_cast<int>(l.width)) {
    if (!slotOwned(L, s)) continue;
    int64_t sp = L.slotPart(s), r = sp / n, c = sp % n;
    int64_t tr = l.transposed ? c : r, tc = l.transposed ? r : c;
    LVal*& at = bases[{tc, tr % 8}];
    if (!at) {
      LVal* tileRow = b_.CreateAdd(l.transposed ? colT : rowT, idx(tr % 8));
      LVal* tileCol = b_.CreateAdd(l.transposed ? rowT : colT, idx(tc));
      at = swizzledOffset(tileRow, tileCol, l.tile);
    }
    LVal* dst = b_.CreateAdd(base, b_.CreateAdd(at, idx((tr - tr % 8) * l.tile.rowPitch())));
    LVal* size;
    if (l.prefix) {  // the bytes of the run's valid prefix
      LVal* n = idx(0);
      for (int i = 0; i < l.width; ++i) n = b_.CreateAdd(n, b_.CreateZExt(mask.e[s + i], b_.getInt32Ty()));
      size = b_.CreateMul(n, idx(l.tile.eb));
      if (valid) size = b_.CreateSelect(valid, size, idx(0));
    } else {
      LVal* ok = mask.e.empty() ? valid : valid ? b_.CreateAnd(valid, mask.e[s]) : mask.e[s];
      size = ok ? b_.CreateSelect(ok, idx(bytes), idx(0)) : idx(bytes);
    }
    b_.CreateCall(copy, {dst, b_.CreatePtrToInt(ptrs.e[s], b_.getInt64Ty()), size});
  }
}

}  // namespace tilefuse::lower::detail
