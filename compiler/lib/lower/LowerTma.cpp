// TMA on sm_90: a tensor descriptor whose base, sizes and strides are kernel
// arguments or constants becomes a CUDA tensor map that the launch encodes from the
// arguments and passes by value (a __grid_constant__ parameter, TensorMapSpec). Its
// loads and stores move whole tiles between global and shared memory with
// cp.async.bulk.tensor: loads complete on an mbarrier (the copy engine zero-fills
// what lies outside the tensor, as the descriptor semantics ask), stores in a bulk
// group. Other descriptors keep bounds-checked accesses (LowerMemory.cpp), as do the
// stores the copy engine would get wrong (lowerTmaStore).
//
// Tile layout in shared memory (the box layout of the tensor map): a tile of rank >= 2
// is the SharedTile (Lowering.h) of its flattened outer dims, split along its last dim
// into column blocks of R bytes, R-byte swizzled (one box per block); a rank-1 tile is
// stored plainly. R = min(128, row bytes), or less when a wgmma dot reads the loaded
// tiles as an N-major B with a narrower swizzle (split-N tilings), so that a pipelined
// dot reads what the copies wrote (plan-tma decides the box and swizzle).
//
// mbarriers live in shared bytes [0, kBarrierBytes) of kernels with tensor maps:
// slot 0 serves the loads outside pipelines, each pipeline takes num_stages slots.
#include "Lowering.h"
#include "TensorMaps.h"

namespace tilefuse::lower::detail {
// The tensor maps plan-tma gave the kernel's descriptors, in program order (the order
// of the kernel's extra parameters); the others' reasons become hints.
void Lowering::planTensorMaps(const Op& f) {
  std::function<void(const Block&)> walk = [&](const Block& b) {
    for (const auto& o : b.ops()) {
      for (unsigned r = 0; r < o->numRegions(); ++r) walk(o->region(r));
      if (o->kind() != OpKind::MakeDesc) continue;
      if (o->hasAttr("no_tma"))
        hint(*o, "descriptor not on TMA (bounds-checked accesses instead): " + o->strAttr("no_tma"));
      if (!o->hasAttr("tma_box")) continue;
      TensorMapSpec s;
      if (std::string why = tensorMapOperands(*o, f, &s); !why.empty())
        throw InternalError("lowering: plan-tma put a descriptor on TMA that cannot be: " + why);
      s.box = o->intsAttr("tma_box");
      s.swizzleBytes = static_cast<int>(o->intAttr("tma_swizzle"));
      tmaMaps_[o.get()] = static_cast<int>(tensorMaps_.size());
      tensorMaps_.push_back(std::move(s));
    }
  };
  walk(f.region(0));
  if (!tensorMaps_.empty()) barrierSlots_ = 1;
}

int Lowering::tensorMapOf(const Value* desc) const {
  const Op* def = desc->definingOp();
  auto it = def ? tmaMaps_.find(def) : tmaMaps_.end();
  return it == tmaMaps_.end() ? -1 : it->second;
}

LVal* Lowering::tensorMapAddr(int map) {
  return b_.CreatePtrToInt(fn_->getArg(fn_->arg_size() - tensorMaps_.size() + map), b_.getInt64Ty());
}

LVal* Lowering::barrierAddr(LVal* slot) {
  return b_.CreateAdd(b_.CreatePtrToInt(smem(), b_.getInt32Ty()), b_.CreateMul(slot, idx(8)));
}

// Thread 0 initializes every mbarrier (one arrival per phase) before any copy.
void Lowering::initBarriers() {
  if (!barrierSlots_) return;
  if (barrierSlots_ * 8 > kBarrierBytes) throw InternalError("lowering: too many mbarriers");
  std::string text = "{\n.reg .pred p;\nsetp.eq.u32 p, $0, 0;\n";
  for (int i = 0; i < barrierSlots_; ++i)
    text += "@p mbarrier.init.shared::cta.b64 [$1+" + std::to_string(8 * i) + "], 1;\n";
  text += "@p fence.mbarrier_init.release.cluster;\n}";
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt32Ty()}, false);
  b_.CreateCall(llvm::InlineAsm::get(ty, text, "r,r,~{memory}", true), {tid_, barrierAddr(idx(0))});
  barrier();
}

// When `issue`: arms `bar` for `bytes` bytes of copies.
void Lowering::armBarrier(LVal* bar, int64_t bytes, LVal* issue) {
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [$1], " +
                     std::to_string(bytes) + ";\n}";
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt32Ty()}, false);
  b_.CreateCall(llvm::InlineAsm::get(ty, text, "r,r,~{memory}", true), {b_.CreateZExt(issue, b_.getInt32Ty()), bar});
}

// Until phase `parity` of `bar` completes.
void Lowering::waitBarrier(LVal* bar, LVal* parity) {
  std::string text =
      "{\n.reg .pred p;\ntf_wait_${:uid}:\nmbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n"
      "@!p bra tf_wait_${:uid};\n}";
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt32Ty()}, false);
  b_.CreateCall(llvm::InlineAsm::get(ty, text, "r,r,~{memory}", true), {bar, parity});
}

// When `issue`: copies tile t between shared address `smemAddr` (32-bit) and `coords`
// (outermost first) of tensor map `map`, one box per column block: into shared memory
// completing on `bar`, or (no `bar`) out of it in a bulk group, waited for until the
// writes are visible to ordinary loads.
void Lowering::tmaCopy(int map, const Type& t, LVal* smemAddr, const std::vector<LVal*>& coords, LVal* bar,
                       LVal* issue) {
  size_t rank = t.shape.size();
  const TensorMapSpec& spec = tensorMaps_[map];
  int64_t innerBox = spec.box.back(), blocks = t.shape.back() / innerBox;
  int64_t blockBytes = t.numel() / t.shape.back() * innerBox * spec.elemBytes;
  // Operands: issue, shared address, tensor map, the barrier of a load, then the s32
  // coordinates innermost first.
  unsigned first = bar ? 4 : 3;
  std::string box = "[$2, {";
  for (size_t a = 0; a < rank; ++a) box += (a ? ", $" : "$") + std::to_string(first + a);
  box += "}]";
  std::string copy = bar ? "d.shared::cluster.global.mbarrier::complete_tx::bytes [$1], " + box + ", [$3]"
                         : "d.global.shared::cta.bulk_group " + box + ", [$1]";
  std::string text =
      "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p cp.async.bulk.tensor." + std::to_string(rank) + copy + ";\n}";
  auto* i32 = b_.getInt32Ty();
  std::vector<llvm::Type*> tys = {i32, i32, b_.getInt64Ty()};
  tys.resize(first + rank, i32);
  std::string cons = bar ? "r,r,l,r" : "r,r,l";
  for (size_t a = 0; a < rank; ++a) cons += ",r";
  auto* asmFn =
      llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), tys, false), text, cons + ",~{memory}", true);
  LVal* on = b_.CreateZExt(issue, i32);
  LVal* tmap = tensorMapAddr(map);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    std::vector<LVal*> args = {on, b_.CreateAdd(smemAddr, idx(blk * blockBytes)), tmap};
    if (bar) args.push_back(bar);
    for (size_t a = rank; a-- > 0;)
      args.push_back(a + 1 == rank ? b_.CreateAdd(coords[a], idx(blk * innerBox)) : coords[a]);
    b_.CreateCall(asmFn, args);
  }
  if (bar) return;
  std::string done =
      "{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p cp.async.bulk.commit_group;\n@p cp.async.bulk.wait_group 0;\n"
      "@p fence.proxy.async.global;\n}";
  b_.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), {i32}, false), done, "r,~{memory}", true),
                {on});
}

// Byte offset of flat element e of tile t in the box layout of tensor map `map`.
LVal* Lowering::tileOffset(LVal* e, const Type& t, int map) {
  int64_t eb = tmaElemBytes(t.elem);
  if (t.shape.size() == 1) return b_.CreateMul(e, idx(eb));
  int64_t cols = t.shape.back();
  LVal* row = b_.CreateLShr(e, idx(__builtin_ctzll(cols)));
  LVal* col = b_.CreateAnd(e, idx(cols - 1));
  return swizzledOffset(row, col, descTile(t, eb, tensorMaps_[map].swizzleBytes));
}

// Registers in layout L of the tile t at shared byte `base` (box layout of `map`).
Regs Lowering::readTile(int64_t base, const Type& t, const Layout& L, int map) {
  int64_t eb = tmaElemBytes(t.elem);
  llvm::Type* et = elemType(t.elem);
  int run = static_cast<int>(std::min<int64_t>(16 / eb, vectorRun(L)));
  Regs out{{}, L};
  for (int s = 0; s < slots(L); s += run) {
    LVal* addr = b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), b_.CreateAdd(idx(base), tileOffset(flatIndex(L, s), t, map)));
    LVal* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(et, run), addr, llvm::Align(eb * run));
    for (int i = 0; i < run; ++i) out.e.push_back(b_.CreateExtractElement(v, b_.getInt32(i)));
  }
  return out;
}

void Lowering::writeTile(int64_t base, const Type& t, const Regs& r, int map) {
  int64_t eb = tmaElemBytes(t.elem);
  int run = static_cast<int>(std::min<int64_t>(16 / eb, vectorRun(r.L)));
  for (int s = 0; s < slots(r.L); s += run) {
    if (!slotOwned(r.L, s)) continue;
    LVal* addr = b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), b_.CreateAdd(idx(base), tileOffset(flatIndex(r.L, s), t, map)));
    b_.CreateAlignedStore(packSlots(r, s, run), addr, llvm::Align(eb * run));
  }
}

std::vector<LVal*> Lowering::descCoords(const Op& op, unsigned first) {
  std::vector<LVal*> c;
  for (unsigned a = first; a < op.numOperands(); ++a)
    c.push_back(b_.CreateSExtOrTrunc(get(op.operand(a)).e[0], b_.getInt32Ty()));
  return c;
}

// desc_load outside a pipeline: copy into scratch, wait, read in the planned layout.
void Lowering::lowerTmaLoad(const Op& op, int map) {
  if (groupBase_)  // its mbarrier is the block's one
    throw UserError(op.loc(), "warp_specialize with num_consumer_groups=2: a desc_load outside the pipelined loops "
                              "(load it with pointers, or use one consumer group)");
  const Type& t = op.result()->type();
  int64_t base = scratchBase(), bytes = t.numel() * tmaElemBytes(t.elem);
  smemBytes_ = std::max<uint64_t>(smemBytes_, base + bytes);
  if (!tmaPhase_) {
    IRBuilder<> eb(entry_);
    tmaPhase_ = eb.CreateAlloca(b_.getInt32Ty());
    eb.CreateStore(eb.getInt32(0), tmaPhase_);
  }
  std::vector<LVal*> coords = descCoords(op, 1);
  // Earlier ordinary accesses of the scratch space come before the copy engine's writes.
  ptx("fence.proxy.async.shared::cta;");
  barrier();
  LVal* bar = barrierAddr(idx(0));
  LVal* issue = b_.CreateICmpEQ(tid_, idx(0));
  armBarrier(bar, bytes, issue);
  tmaCopy(map, t, b_.CreateAdd(b_.CreatePtrToInt(scratchSpace(), b_.getInt32Ty()), idx(base)), coords, bar, issue);
  LVal* phase = b_.CreateLoad(b_.getInt32Ty(), tmaPhase_);
  waitBarrier(bar, phase);
  b_.CreateStore(b_.CreateXor(phase, idx(1)), tmaPhase_);
  vals_[op.result()] = readTile(base, t, layoutOf(op.result()), map);
}

// desc_store: write the tile to scratch, copy it out. The copy engine faults on
// stores at negative coordinates, and clips the last dim only to 16-byte chunks (it
// would write past a row that does not end on one): such stores copy the tile out of
// scratch element by element, checked against the sizes, in a loop (small code for
// what only edge tiles take).
void Lowering::lowerTmaStore(const Op& op, int map) {
  const Type& t = op.operand(1)->type();
  size_t rank = t.shape.size();
  int64_t eb = tmaElemBytes(t.elem), base = scratchBase();
  smemBytes_ = std::max<uint64_t>(smemBytes_, base + t.numel() * eb);
  std::vector<LVal*> coords = descCoords(op, 2);
  const Regs& desc = get(op.operand(0));  // [base, sizes..., strides...] as i64
  LVal* inside = b_.getTrue();
  for (LVal* c : coords) inside = b_.CreateAnd(inside, b_.CreateICmpSGE(c, idx(0)));
  LVal* size = desc.e[rank];
  LVal* end = b_.CreateAdd(b_.CreateSExt(coords.back(), b_.getInt64Ty()), b_.getInt64(t.shape.back()));
  LVal* wholeChunks =
      b_.CreateICmpEQ(b_.CreateAnd(b_.CreateMul(size, b_.getInt64(eb)), b_.getInt64(15)), b_.getInt64(0));
  inside = b_.CreateAnd(inside, b_.CreateOr(b_.CreateICmpSLE(end, size), wholeChunks));
  barrier();
  writeTile(base, t, get(op.operand(1)), map);
  ptx("fence.proxy.async.shared::cta;");
  barrier();
  auto* tma = llvm::BasicBlock::Create(ctx_, "tma.store", fn_);
  auto* checked = llvm::BasicBlock::Create(ctx_, "checked.store", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "store.done", fn_);
  b_.CreateCondBr(inside, tma, checked);
  b_.SetInsertPoint(tma);
  tmaCopy(map, t, b_.CreateAdd(b_.CreatePtrToInt(scratchSpace(), b_.getInt32Ty()), idx(base)), coords, nullptr,
          b_.CreateICmpEQ(tid_, idx(0)));
  b_.CreateBr(done);
  b_.SetInsertPoint(checked);
  llvm::Type* et = elemType(t.elem);
  int64_t n = t.numel(), rounds = (n + threads_ - 1) / threads_;
  countedLoop(0, rounds, {}, [&](LVal* r, const std::vector<LVal*>&) -> std::vector<LVal*> {
    LVal* e = b_.CreateAdd(b_.CreateMul(r, idx(threads_)), tid_);
    LVal* ok = b_.CreateICmpSLT(e, idx(n));
    LVal* elem = b_.getInt64(0);
    for (size_t a = 0; a < rank; ++a) {
      LVal* c = b_.CreateSExt(b_.CreateAdd(coords[a], coord(e, t.shape, a)), b_.getInt64Ty());
      ok = b_.CreateAnd(ok, b_.CreateAnd(b_.CreateICmpSGE(c, b_.getInt64(0)), b_.CreateICmpSLT(c, desc.e[1 + a])));
      elem = b_.CreateAdd(elem, b_.CreateMul(c, desc.e[1 + rank + a]));
    }
    guarded(
        ok,
        [&]() -> LVal* {
          LVal* from = b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), b_.CreateAdd(idx(base), tileOffset(e, t, map)));
          b_.CreateStore(b_.CreateLoad(et, from), b_.CreateGEP(et, desc.e[0], elem));
          return nullptr;
        },
        nullptr);
    return {};
  });
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  barrier();  // the scratch space is free again
}

}  // namespace tilefuse::lower::detail
