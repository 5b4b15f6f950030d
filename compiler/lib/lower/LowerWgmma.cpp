// dot on Hopper tensor cores: wgmma.mma_async (sm_90a) with both operands in
// swizzled shared memory and the fp32 accumulator in registers (Layout.h's wgmma
// layout), so a K loop keeps it there.
//
// Every dot on wgmma arrives here as GPU-stage ops (stage-dot-operands, pipeline-expand,
// insert-waits): local_store of computed operands into their buffers, copies into
// rings, wgmma on the buffers, wgmma_wait; their emitters (lowerSmemOp) read every
// address from the buffers' #shared layouts and decide nothing.
//
// Shared-memory operand layout (PTX ISA, "Shared Memory Matrix Layout"): a SharedTile
// (Lowering.h) of rows x cols elements stored as column blocks of R bytes (R = 32, 64
// or 128, the swizzle width), each block rows x R bytes, with the 16-byte chunks of a
// row XOR-swizzled by the row within its 8-row group (address bits [4,7) ^= bits
// [7,10), masked to the swizzle width). wgmmaOperandTile decides it once per operand;
// staging, the pipeline's copies, TMA boxes and the wgmma descriptors all read it.
// B is K-major (staged as its [N, K] transpose) for 8-bit types, which wgmma takes no
// other way, and when the program computes it as trans(x) of an [N, K] tile; 16-bit B
// is N-major otherwise. A is K-major but for trans(x) of a 16-bit [K, M] tile, which is
// staged as x, M-major (the instruction's transposed A).
#include "Lowering.h"

#include <algorithm>

namespace tilefuse::lower::detail {
namespace {

int swizzleMode(int64_t r) { return r == 128 ? 1 : r == 64 ? 2 : 3; }

// Accumulator slots per thread up to which a promoting wgmma keeps two partial sums in
// flight: 3 x 64 fp32 registers leave room under the 255 of a thread for addresses.
constexpr int64_t kOverlapSlots = 64;

}  // namespace

// Shared memory for wgmma operands as allocate-shared placed it above floor_: the
// rings of the pipelined loops, the buffers of staged operands (smem_alloc), then scratch.
void Lowering::reserveWgmmaOperands(const Block& body) {
  const Op& f = *body.parentOp();
  std::function<void(const Block&)> walk = [&](const Block& b) {
    for (const auto& o : b.ops()) {
      // Only hand-written GPU-stage IR can arrive scheduled but not expanded.
      if (o->hasAttr("pipeline_stages"))
        throw UserError(o->loc(), "a loop with a pipeline schedule: run pipeline-expand before lowering");
      if (o->hasAttr("no_pipeline")) hint(*o, "K loop not pipelined: " + o->strAttr("no_pipeline"));
      if (o->hasAttr("no_warp_specialize")) hint(*o, "not warp-specialized: " + o->strAttr("no_warp_specialize"));
      if (o->hasAttr("not_staged"))
        hint(*o, "load not copied ahead by its pipelined K loop: " + o->strAttr("not_staged"));
      for (unsigned r = 0; r < o->numRegions(); ++r) walk(o->region(r));
    }
  };
  walk(body);
  int64_t rings = f.hasAttr("smem_rings") ? f.intAttr("smem_rings") : 0;
  scratch_ = floor_ + rings + (f.hasAttr("smem_staged") ? f.intAttr("smem_staged") : 0);
  smemBytes_ = std::max<uint64_t>(smemBytes_, scratch_);
}

// Inline PTX with no results, ordered against memory accesses.
void Lowering::ptx(const std::string& text) {
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {}, false);
  b_.CreateCall(llvm::InlineAsm::get(ty, text, "~{memory}", true), {});
}

// wgmma.wait_group N, with `r`'s registers passing through so that no use of them
// moves above the wait. With `alone`, the wait ends its basic block: the asm also
// yields a zero that the block branches on (to a trap, never taken), so that LLVM
// cannot schedule other instructions between the loop and the wait (ptxas then
// serializes every wgmma group of the loop, warning C7514).
Regs Lowering::waitWgmma(const Regs& r, int pending, bool alone) {
  std::string text = "wgmma.wait_group.sync.aligned " + std::to_string(pending) + ";";
  if (r.e.empty() && !alone) {
    ptx(text);
    return r;
  }
  // An f16 accumulator passes through as the f16x2 registers wgmma wrote.
  if (!r.e.empty() && r.e[0]->getType()->isHalfTy()) return unpackHalves(waitWgmma(packHalves(r), pending, alone));
  std::vector<llvm::Type*> tys;
  std::string cons;
  for (LVal* x : r.e) {
    tys.push_back(x->getType());
    cons += x->getType()->isFloatTy() ? "=f," : "=r,";
  }
  size_t n = r.e.size();
  if (alone) {
    tys.push_back(b_.getInt32Ty());
    cons += "=r,";
    text += "\nmov.u32 $" + std::to_string(n) + ", 0;";
  }
  for (size_t i = 0; i < n; ++i) cons += std::to_string(i) + ",";
  cons += "~{memory}";
  auto* ret = llvm::StructType::get(ctx_, tys);
  std::vector<llvm::Type*> argTys(tys.begin(), tys.begin() + n);
  auto* call = b_.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(ret, argTys, false), text, cons, true), r.e);
  Regs out{{}, r.L};
  for (unsigned i = 0; i < n; ++i) out.e.push_back(b_.CreateExtractValue(call, i));
  if (alone) {
    auto* trap = llvm::BasicBlock::Create(ctx_, "wait.trap", fn_);
    auto* cont = llvm::BasicBlock::Create(ctx_, "wait.done", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(b_.CreateExtractValue(call, static_cast<unsigned>(n)), idx(0)), trap, cont);
    b_.SetInsertPoint(trap);
    b_.CreateIntrinsic(llvm::Intrinsic::trap, {}, {});
    b_.CreateUnreachable();
    b_.SetInsertPoint(cont);
  }
  return out;
}

// `r`'s fp32 registers through an empty asm with side effects: what computes them stays
// before it, and so before the next wgmma. Without it LLVM sinks a promotion past the
// next dot's wgmma group (into the loop's latch), and both partial sums stay live.
Regs Lowering::pinRegs(const Regs& r) {
  std::vector<llvm::Type*> tys(r.e.size(), b_.getFloatTy());
  std::string cons;
  for (size_t i = 0; i < r.e.size(); ++i) cons += "=f,";
  for (size_t i = 0; i < r.e.size(); ++i) cons += std::to_string(i) + (i + 1 < r.e.size() ? "," : "");
  auto* ret = llvm::StructType::get(ctx_, tys);
  auto* call = b_.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(ret, tys, false), "", cons, true), r.e);
  Regs out{{}, r.L};
  for (unsigned i = 0; i < r.e.size(); ++i) out.e.push_back(b_.CreateExtractValue(call, i));
  return out;
}

// Elements 2i and 2i+1 of `r` (f16 values) as the i32 holding them as an f16x2, and back.
// A pair unpacked from one i32 is that i32: a wgmma result reaches its wait without a
// move, which ptxas would otherwise guard with a wait of its own (C7517).
Regs Lowering::packHalves(const Regs& r) {
  auto* half2 = llvm::FixedVectorType::get(b_.getHalfTy(), 2);
  auto unpackedFrom = [](LVal* x, uint64_t i) -> LVal* {
    auto* ex = llvm::dyn_cast<llvm::ExtractElementInst>(x);
    auto* at = ex ? llvm::dyn_cast<llvm::ConstantInt>(ex->getIndexOperand()) : nullptr;
    auto* cast = ex ? llvm::dyn_cast<llvm::BitCastInst>(ex->getVectorOperand()) : nullptr;
    return at && at->getZExtValue() == i && cast ? cast->getOperand(0) : nullptr;
  };
  Regs out{{}, r.L};
  for (size_t i = 0; i + 1 < r.e.size(); i += 2) {
    LVal* whole = unpackedFrom(r.e[i], 0);
    if (whole && whole == unpackedFrom(r.e[i + 1], 1)) {
      out.e.push_back(whole);
      continue;
    }
    LVal* v = b_.CreateInsertElement(llvm::PoisonValue::get(half2), r.e[i], uint64_t{0});
    out.e.push_back(b_.CreateBitCast(b_.CreateInsertElement(v, r.e[i + 1], uint64_t{1}), b_.getInt32Ty()));
  }
  return out;
}

Regs Lowering::unpackHalves(const Regs& r) {
  auto* half2 = llvm::FixedVectorType::get(b_.getHalfTy(), 2);
  Regs out{{}, r.L};
  for (LVal* x : r.e)
    for (uint64_t i = 0; i < 2; ++i) out.e.push_back(b_.CreateExtractElement(b_.CreateBitCast(x, half2), i));
  return out;
}

// Byte offset of element (row, col) of `tile`.
LVal* Lowering::swizzledOffset(LVal* row, LVal* col, const SharedTile& tile) {
  int64_t R = tile.swizzle;
  LVal* byte = b_.CreateMul(col, idx(tile.eb));
  if (R == 0) return b_.CreateAdd(b_.CreateMul(row, idx(tile.rowPitch())), byte);
  LVal* block = b_.CreateLShr(byte, idx(__builtin_ctzll(R)));
  LVal* off = b_.CreateAdd(b_.CreateMul(block, idx(tile.blockBytes())),
                           b_.CreateAdd(b_.CreateMul(row, idx(R)), b_.CreateAnd(byte, idx(R - 1))));
  return b_.CreateXor(off, b_.CreateShl(b_.CreateAnd(b_.CreateLShr(off, idx(7)), idx(R / 16 - 1)), idx(4)));
}

// Writes `r` (a tile of t) at smem byte `base` as `tile`; runs of elements consecutive
// in the tile's rows go as one vector store. `transpose` writes element (i, j) at
// (j, i) of the transposed tile (runs of dim 0 of t, when its layout has them).
void Lowering::stageOperand(const Regs& r, const Type& t, LVal* base, bool transpose, const SharedTile& tile) {
  int64_t eb = tile.eb;
  // Consecutive slots along the dim that is contiguous in the tile's rows go as one store.
  int run = static_cast<int>(std::min<int64_t>(16 / eb, vectorRun(r.L, transpose ? dimStride(t.shape, 0) : 1)));
  for (int s = 0; s < slots(r.L); s += run) {
    if (!slotOwned(r.L, s)) continue;
    LVal* e = flatIndex(r.L, s);
    LVal* row = coord(e, t.shape, 0);
    LVal* col = coord(e, t.shape, 1);
    LVal* off = transpose ? swizzledOffset(col, row, tile) : swizzledOffset(row, col, tile);
    LVal* v = packSlots(r, s, run);
    LVal* addr = b_.CreateGEP(b_.getInt8Ty(), smem(), b_.CreateAdd(base, off));
    b_.CreateAlignedStore(v, addr, llvm::Align(eb * run));
  }
}

// Reads a tile of t in layout L from smem byte `base`, laid out as `tile` (the inverse
// of stageOperand); runs of elements consecutive in the tile's rows come as one vector
// load. Every slot is read, copies of an element included.
Regs Lowering::readStaged(const Type& t, const Layout& L, LVal* base, const SharedTile& tile) {
  int64_t eb = tile.eb;
  int run = static_cast<int>(std::min<int64_t>(16 / eb, vectorRun(L, 1)));
  auto* vt = llvm::FixedVectorType::get(elemType(t.elem), run);
  Regs out{{}, L};
  for (int s = 0; s < slots(L); s += run) {
    LVal* e = flatIndex(L, s);
    LVal* off = swizzledOffset(coord(e, t.shape, 0), coord(e, t.shape, 1), tile);
    LVal* addr = b_.CreateGEP(b_.getInt8Ty(), smem(), b_.CreateAdd(base, off));
    LVal* v = b_.CreateAlignedLoad(vt, addr, llvm::Align(eb * run));
    for (int i = 0; i < run; ++i) out.e.push_back(b_.CreateExtractElement(v, b_.getInt32(i)));
  }
  return out;
}

namespace {

SharedTile sharedTile(const Type& buf) {
  const SharedLayout& s = *buf.shared();
  return {s.rows, s.cols, s.eb, s.swizzle};
}

}  // namespace

// Shared byte of the stage, operand buf + 1, of the buffer operand `buf` of `op`.
LVal* Lowering::stageAddr(const Op& op, unsigned buf) {
  int64_t bytes = op.operand(buf)->type().shared()->stageBytes();
  return b_.CreateAdd(get(op.operand(buf)).e[0], b_.CreateMul(get(op.operand(buf + 1)).e[0], idx(bytes)));
}

// smem_alloc, local_store, local_load, barrier, fence_async_shared, wgmma and wgmma_wait: each
// takes its addresses from its buffers' #shared layouts and allocate-shared's
// placement, and its instruction from their element types.
void Lowering::lowerSmemOp(const Op& op) {
  switch (op.kind()) {
    case OpKind::SmemAlloc:
      if (op.hasAttr("barrier_slot")) {  // mbarriers: their first slot
        vals_[op.result()] = Regs{{idx(op.intAttr("barrier_slot"))}, layoutOf(op.result())};
        return;
      }
      // Only hand-written GPU-stage IR lacks the placement (the pipeline always places).
      if (!op.hasAttr("smem_at"))
        throw UserError(op.loc(), "smem_alloc has no smem_at: run allocate-shared on GPU-stage IR before lowering");
      vals_[op.result()] = Regs{{idx(floor_ + op.intAttr("smem_at"))}, layoutOf(op.result())};
      return;
    case OpKind::LocalStore: {
      // Until the wait for their wgmma, conversions use the scratch space above them.
      claimOperandSpace(false);
      staging_ = true;
      bool transposed = op.hasAttr("transposed") && op.boolAttr("transposed");
      return stageOperand(get(op.operand(2)), op.operand(2)->type(), stageAddr(op, 0), transposed,
                          sharedTile(op.operand(0)->type()));
    }
    case OpKind::LocalLoad: {
      const Type& t = op.result()->type();
      if (t.rank() != 2 || t.elem == DType::I1)
        throw UserError(op.loc(), "local_load of " + t.str() + ": only 2-D tiles of non-boolean elements are lowered");
      vals_[op.result()] = readStaged(t, layoutOf(op.result()), stageAddr(op, 0), sharedTile(op.operand(0)->type()));
      return;
    }
    case OpKind::Barrier:
      return barrier();
    case OpKind::FenceAsyncShared:
      return ptx("fence.proxy.async.shared::cta;");
    case OpKind::Wgmma: {
      const Type &a = op.operand(0)->type(), &b = op.operand(2)->type();
      bool kMajor = op.hasAttr("b_kmajor") && op.boolAttr("b_kmajor");
      bool mMajor = op.hasAttr("a_mmajor") && op.boolAttr("a_mmajor");
      bool promote = wgmmaOpPromotes(op);
      WgmmaGroup g{.a = a.elem,
                   .b = b.elem,
                   .m = a.shape[mMajor ? 1 : 0],
                   .k = a.shape[mMajor ? 0 : 1],
                   .n = b.shape[kMajor ? 0 : 1],
                   .ta = sharedTile(a),
                   .tb = sharedTile(b),
                   .kMajor = kMajor,
                   .promote = promote,
                   .fresh = isFp8(a.elem) && !promote,  // a fresh fp8 sum (freshFp8)
                   .mMajor = mMajor};
      Regs acc = in(op.operand(4), layoutOf(op.result(0)));
      std::optional<ScaleTables> st;
      if (op.numOperands() == 7) st = stageScales(op.operand(5), op.operand(6), op.intAttr("scale_chunk"), acc.L, g.n);
      LVal* accumulate = op.numOperands() == 6 ? get(op.operand(5)).e[0] : nullptr;
      vals_[op.result(0)] = issueWgmma(g, wgmmaTiling(g.m, g.n, threads_), std::move(acc), stageAddr(op, 0),
                                       stageAddr(op, 2), st ? &*st : nullptr, accumulate);
      vals_[op.result(1)] = Regs{{}, layoutOf(op.result(1))};
      if (g.promote) staging_ = false;  // its groups were waited for as it promoted
      return;
    }
    case OpKind::WgmmaWait: {
      // One wait passes every waited value's registers through.
      Regs all;
      for (unsigned i = 1; i < op.numOperands(); ++i) {
        const Regs& r = get(op.operand(i));
        all.e.insert(all.e.end(), r.e.begin(), r.e.end());
        all.L = r.L;
      }
      // Right after a loop, the wait ends its block (waitWgmma's `alone`).
      const Op* prev = nullptr;
      for (const auto& o : op.parentBlock()->ops()) {
        if (o.get() == &op) break;
        prev = o.get();
      }
      bool alone = prev && prev->kind() == OpKind::For && !all.e.empty();
      Regs done = waitWgmma(all, static_cast<int>(op.intAttr("pending")), alone);
      size_t at = 0;
      for (unsigned i = 0; i < op.numResults(); ++i) {
        size_t n = get(op.operand(i + 1)).e.size();
        vals_[op.result(i)] = Regs{{done.e.begin() + at, done.e.begin() + at + n}, layoutOf(op.result(i))};
        at += n;
      }
      staging_ = false;
      return;
    }
    default:
      throw InternalError("lowering: no emitter for " + std::string(op.mnemonic()));
  }
}

// dot_scaled on fp8: writes both scale tables ([M, K/32] and [N, K/32] e8m0 codes)
// decoded to fp32 powers of two to shared memory, where the promotion reads each
// accumulator row's and column's scale; returns their shared byte offset. Decoding
// here costs a code or two per thread, in the promotion one per row and column read.
ScaleTables Lowering::stageScales(const Value* sa, const Value* sb, int64_t chunk, const Layout& acc, int64_t n) {
  // Tables already in (or, splats, free to copy into) the layout of the thread's own
  // rows and columns (plan-layouts gives it to per-row scales) stay in registers.
  auto held = [&](const Value* v, const Layout& l) {
    const Op* def = v->definingOp();
    return get(v).L == l || (def && (def->kind() == OpKind::Constant || def->kind() == OpKind::Splat));
  };
  int64_t kb = sa->type().shape[1];
  Layout la = scaleTableLayout(acc, n, kb, true), lb = scaleTableLayout(acc, n, kb, false);
  if (held(sa, la) && held(sb, lb)) return {0, sa->type(), sb->type(), chunk, true, in(sa, la), in(sb, lb)};
  auto decoded = [&](const Value* v) {
    Regs r = get(v);
    for (LVal*& e : r.e) e = decodeE8M0(e);
    return r;
  };
  const Type &ta = sa->type(), &tb = sb->type();
  // Above the operand stages and rings, which a wgmma in flight may still read.
  barrier();
  toSmemAt(decoded(sa), ta.withElem(DType::F32), scratch_);
  toSmemAt(decoded(sb), tb.withElem(DType::F32), scratch_ + 4 * ta.numel());
  barrier();
  return {scratch_, ta, tb, chunk};
}

// The decoded scale of K block `block` of row `row` in the fp32 table at byte `table`.
LVal* Lowering::scaleOf(int64_t table, const Type& t, LVal* row, int64_t block) {
  LVal* off =
      b_.CreateAdd(idx(table), b_.CreateMul(b_.CreateAdd(b_.CreateMul(row, idx(t.shape[1])), idx(block)), idx(4)));
  return b_.CreateLoad(b_.getFloatTy(), b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), off));
}

LVal* Lowering::scaleInRegs(const Regs& table, int64_t kb, int64_t line, int64_t block) {
  int64_t want = line * kb + block;
  for (int s = 0; s < slots(table.L); ++s)
    if (table.L.slotPart(s) == want) return decodeE8M0(table.e[s]);
  throw InternalError("lowering: a scale table in registers lacks line " + std::to_string(line));
}

// The rows and columns of an [*, n] tile that layout `l`'s slots hold in this thread.
// Its bases are distinct powers of two (Layout.h), so an element's flat index is the
// thread part OR the slot part: row and column split the same way, and a slot's row is
// the thread's row part plus a constant of the slot.
Lowering::FragmentLines Lowering::fragmentLines(const Layout& l, int64_t n) {
  FragmentLines f;
  LVal* t = threadPart(l);
  LVal* rowT = b_.CreateLShr(t, idx(__builtin_ctzll(n)));
  LVal* colT = b_.CreateAnd(t, idx(n - 1));
  std::map<int64_t, int> rowIdx, colIdx;
  for (int s = 0; s < slots(l); ++s) {
    int64_t c = l.slotPart(s);
    auto [r, newRow] = rowIdx.try_emplace(c / n, static_cast<int>(f.rows.size()));
    if (newRow) {
      f.rows.push_back(b_.CreateAdd(rowT, idx(c / n)));
      f.rowConst.push_back(c / n);
    }
    auto [k, newCol] = colIdx.try_emplace(c % n, static_cast<int>(f.cols.size()));
    if (newCol) {
      f.cols.push_back(b_.CreateAdd(colT, idx(c % n)));
      f.colConst.push_back(c % n);
    }
    f.rowOf.push_back(r->second);
    f.colOf.push_back(k->second);
  }
  return f;
}

// Issues wgmma group `g` (operands at smem bytes aBase and bBase, visible to the async
// proxy) accumulating into `acc`; returns the new accumulator. `scaled`: the fp8
// dot_scaled whose scale tables start at shared byte `scales`.
LVal* Lowering::warpgroupIndex() {
  LVal*& g = warpgroups_[tid_];
  if (!g) {
    IRBuilder<> eb(entry_);  // tid_ is defined there; the entry runs converged
    g = eb.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_idx_i32, {},
                           {eb.getInt32(-1), eb.CreateLShr(tid_, eb.getInt32(7)), eb.getInt32(0), eb.getInt32(31)});
  }
  return g;
}

Regs Lowering::issueWgmma(const WgmmaGroup& g, const WgmmaShape& w, Regs acc, LVal* aBase, LVal* bBase,
                          const ScaleTables* scaled, LVal* accumulate) {
  int64_t m = g.m, k = g.k, n = g.n;
  int64_t eb = g.ta.eb, kStep = 32 / eb;
  bool ints = g.a == DType::I8;
  // An f16 accumulator (out_dtype=float16) is instrN/4 f16x2 registers per instruction,
  // holding the elements the f32 form holds in pairs of registers.
  bool f16Acc = !acc.e.empty() && acc.e[0]->getType()->isHalfTy();
  if (f16Acc) acc = packHalves(acc);
  auto* i64 = b_.getInt64Ty();
  ptx("wgmma.fence.sync.aligned;");
  LVal* smem0 = b_.CreateTrunc(b_.CreatePtrToInt(smem(), i64), b_.getInt32Ty());
  LVal* group = warpgroupIndex();
  LVal* wgm = b_.CreateAnd(group, idx(w.wgM - 1));
  LVal* wgn = b_.CreateLShr(group, idx(__builtin_ctzll(w.wgM)));
  const SharedTile &ta = g.ta, &tb = g.tb;
  int64_t rA = ta.swizzle, rB = tb.swizzle;
  // Descriptor: start >> 4 (bits 0-13), leading byte offset >> 4 (16-29), stride
  // byte offset >> 4 (32-45), swizzle mode (62-63). Shared addresses are below 2^18 and
  // 16-byte aligned, so the descriptor of base + c (c a multiple of 16) is the base's
  // low word + c / 16: an instruction's descriptors are two 32-bit adds to low words
  // computed once per group, whose thread-dependent part is warp-uniform (the
  // warpgroup's band), not per-instruction 64-bit address math.
  auto descLo = [&](LVal* byteOff, int64_t lbo) {
    LVal* d = b_.CreateLShr(b_.CreateAnd(b_.CreateAdd(smem0, byteOff), idx(0x3FFFF)), idx(4));
    return b_.CreateOr(d, idx((lbo >> 4) << 16));
  };
  auto desc = [&](LVal* lo, int64_t c, int64_t sbo, int64_t r) {
    uint64_t hi = uint64_t(sbo >> 4) | (uint64_t(swizzleMode(r)) << 30);
    LVal* l = c ? b_.CreateAdd(lo, idx(c >> 4)) : lo;
    return b_.CreateOr(b_.CreateZExt(l, i64), b_.getInt64(hi << 32));
  };
  int64_t nregs = w.instrN / (f16Acc ? 4 : 2);
  // `accumulate` false: D = A B (scale-d off), for a fresh partial sum; `flagged`: the
  // predicate from a last i32 operand (restart-accumulators' flag).
  auto instr = [&](bool accumulate, bool flagged = false) {
    std::string pred = flagged ? "$" + std::to_string(2 * nregs + 2) : accumulate ? "1" : "0";
    std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, " + pred + ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                       std::to_string(w.instrN) + "k" + std::to_string(kStep) +
                       (ints     ? ".s32."
                        : f16Acc ? ".f16."
                                 : ".f32.") +
                       mmaTypeName(g.a) + "." + mmaTypeName(g.b) + " {";
    std::string cons;
    bool intRegs = ints || f16Acc;
    for (int64_t i = 0; i < nregs; ++i) {
      text += (i ? ",$" : "$") + std::to_string(i);
      cons += intRegs ? "=r," : "=f,";
    }
    // 16-bit types also take the operands' majorness.
    text += "}, $" + std::to_string(2 * nregs) + ", $" + std::to_string(2 * nregs + 1) + ", p";
    if (!ints) text += ", 1, 1";
    if (eb == 2) text += std::string(g.mMajor ? ", 1" : ", 0") + (g.kMajor ? ", 0" : ", 1");
    text += ";\n}";
    for (int64_t i = 0; i < nregs; ++i) cons += std::to_string(i) + ",";
    cons += flagged ? "l,l,r,~{memory}" : "l,l,~{memory}";
    std::vector<llvm::Type*> argTys(nregs, intRegs ? b_.getInt32Ty() : b_.getFloatTy());
    auto* retTy = llvm::StructType::get(ctx_, argTys);
    argTys.push_back(i64);
    argTys.push_back(i64);
    if (flagged) argTys.push_back(b_.getInt32Ty());
    return llvm::InlineAsm::get(llvm::FunctionType::get(retTy, argTys, false), text, cons, true);
  };
  auto* mma = instr(true);
  auto* fresh = instr(false);
  auto* flagged = accumulate ? instr(true, true) : nullptr;
  LVal* flag = accumulate ? b_.CreateZExt(accumulate, b_.getInt32Ty()) : nullptr;
  // fp8 tensor cores add with fewer bits than fp32: every 128 of K goes into a fresh
  // partial sum that is then added to the accumulator in fp32 — for dot_scaled every
  // 32-wide K block, times its two scales (powers of two: the products are exact), or
  // every run of blocks (up to 128 of K) over which both scales are known equal: one
  // promotion instead of four for FP8-block's 128-blocks. One chunk per dot is never
  // slower than several overlapped (each chunk's promotion costs the same), so the
  // chunk is as long as the scales allow.
  bool promote = g.promote;
  int64_t chunk = 128;
  if (scaled) chunk = scaled->chunk;
  Regs sum = acc;
  FragmentLines lines = scaled ? fragmentLines(acc.L, n) : FragmentLines{};
  // Adds the partial sum of the chunk from K index `start` to `sum` (times its scales),
  // in chunk order. Each row's and column's scale is decoded once: a thread's slots
  // share few of them.
  // One B scale for the whole table (a splat: FP8-block's 128-block).
  bool oneB = scaled && scaled->inRegs &&
              std::all_of(scaled->rb.e.begin(), scaled->rb.e.end(), [&](LVal* e) { return e == scaled->rb.e[0]; });
  auto addChunk = [&](const Regs& part, int64_t start) {
    std::vector<LVal*> ra, cb;
    if (scaled && scaled->inRegs) {
      int64_t kb = scaled->a.shape[1];
      for (int64_t r : lines.rowConst) ra.push_back(scaleInRegs(scaled->ra, kb, r, start / 32));
      for (int64_t c : lines.colConst) cb.push_back(scaleInRegs(scaled->rb, kb, c, start / 32));
    } else if (scaled) {
      for (LVal* r : lines.rows) ra.push_back(scaleOf(scaled->at, scaled->a, r, start / 32));
      for (LVal* c : lines.cols) cb.push_back(scaleOf(scaled->at + 4 * scaled->a.numel(), scaled->b, c, start / 32));
    }
    // sum + (p cb) ra in one FMUL and one FFMA: both products are exact (powers of
    // two), so the FFMA rounds once, as sum + p (ra cb) does. With one B scale for the
    // whole table (oneB), ra cb is one FMUL per row and each slot one FFMA.
    if (oneB)
      for (LVal*& r : ra) r = b_.CreateFMul(r, cb[0]);
    for (size_t i = 0; i < sum.e.size(); ++i) {
      LVal* p = part.e[i];
      LVal* fma = nullptr;
      if (oneB)
        fma = b_.CreateIntrinsic(llvm::Intrinsic::fma, {b_.getFloatTy()}, {p, ra[lines.rowOf[i]], sum.e[i]});
      else if (scaled)
        fma = b_.CreateIntrinsic(llvm::Intrinsic::fma, {b_.getFloatTy()},
                                 {b_.CreateFMul(p, cb[lines.colOf[i]]), ra[lines.rowOf[i]], sum.e[i]});
      sum.e[i] = fma ? fma : b_.CreateFAdd(sum.e[i], p);
    }
  };
  // With room for two partial sums besides the accumulator (64 fp32 slots each at
  // most), chunk c + 1's wgmma group is issued before chunk c is promoted, so that the
  // tensor cores work while the promotion's FMULs run; otherwise each chunk waits.
  bool overlap = promote && k > chunk && static_cast<int64_t>(acc.e.size()) <= kOverlapSlots;
  Regs prev;
  int64_t prevStart = -1;

  // Each operand's offset is a warp-uniform band term plus a constant per instruction.
  // The band of an M- or N-major operand starts a column block (bands are multiples of
  // 64 rows, instructions of the block's width), so its block index splits likewise.
  LVal* rowBand = b_.CreateMul(wgm, idx(m / w.wgM));
  LVal* colBand = b_.CreateMul(wgn, idx(n / w.wgN));
  auto blockOf = [&](LVal* band, int64_t r, int64_t blockBytes) {  // band * eb / r column blocks
    return b_.CreateMul(b_.CreateLShr(b_.CreateMul(band, idx(eb)), idx(__builtin_ctzll(r))), idx(blockBytes));
  };
  LVal* loA = g.mMajor ? descLo(b_.CreateAdd(aBase, blockOf(rowBand, rA, ta.blockBytes())), ta.blockBytes())
                       : descLo(b_.CreateAdd(aBase, b_.CreateMul(rowBand, idx(rA))), 16);
  LVal* loB = g.kMajor ? descLo(b_.CreateAdd(bBase, b_.CreateMul(colBand, idx(rB))), 16)
                       : descLo(b_.CreateAdd(bBase, blockOf(colBand, rB, tb.blockBytes())), tb.blockBytes());
  if (g.mMajor && (64 * eb) % rA)
    throw InternalError("wgmma: an M-major A of 64-row instructions within a column block");
  if (!g.kMajor && (w.instrN * eb) % rB)
    throw InternalError("wgmma: an N-major B whose instructions start within a column block");
  for (int64_t kk = 0; kk < k; kk += kStep) {
    int64_t kb = kk * eb;  // byte offset along K
    bool chunkStart = (promote && kk % chunk == 0) || (g.fresh && kk == 0);
    for (int64_t rm = 0; rm < w.repM; ++rm) {
      // M-major: like an N-major B, the instruction's 64 rows one column block;
      // K-major: rows SBO = 8 rows apart, K steps move within the swizzled row.
      LVal* da = g.mMajor ? desc(loA, (rm * 64 * eb / rA) * ta.blockBytes() + kk * rA, 8 * rA, rA)
                          : desc(loA, rm * 64 * rA + (kb / rA) * ta.blockBytes() + kb % rA, 8 * rA, rA);
      for (int64_t rn = 0; rn < w.repN; ++rn) {
        // K-major: like A, with N rows; N-major: column blocks LBO = k * R bytes apart,
        // 8-row groups SBO = 8 R.
        int64_t col = rn * w.instrN;
        LVal* db = g.kMajor ? desc(loB, col * rB + (kb / rB) * tb.blockBytes() + kb % rB, 8 * rB, rB)
                            : desc(loB, (col * eb / rB) * tb.blockBytes() + kk * rB, 8 * rB, rB);
        int64_t first = (rn + w.repN * rm) * nregs;
        std::vector<LVal*> args(acc.e.begin() + first, acc.e.begin() + first + nregs);
        if (chunkStart) std::fill(args.begin(), args.end(), llvm::PoisonValue::get(b_.getFloatTy()));
        args.push_back(da);
        args.push_back(db);
        bool restart = flagged && kk == 0;
        if (restart) args.push_back(flag);
        LVal* res = b_.CreateCall(chunkStart ? fresh : restart ? flagged : mma, args);
        for (int64_t i = 0; i < nregs; ++i) acc.e[first + i] = b_.CreateExtractValue(res, static_cast<unsigned>(i));
      }
    }
    if (promote && ((kk + kStep) % chunk == 0 || kk + kStep == k)) {
      ptx("wgmma.commit_group.sync.aligned;");
      if (overlap) {  // this chunk runs while the previous one is promoted
        if (prevStart >= 0) addChunk(waitWgmma(prev, 1), prevStart);
        prev = acc;
        prevStart = kk - kk % chunk;
      } else {
        addChunk(waitWgmma(acc, 0), kk - kk % chunk);
      }
    }
  }
  if (prevStart >= 0) addChunk(waitWgmma(prev, 0), prevStart);  // the overlap's last chunk
  if (promote) return pinRegs(sum);
  ptx("wgmma.commit_group.sync.aligned;");
  return f16Acc ? unpackHalves(acc) : acc;
}

}  // namespace tilefuse::lower::detail
