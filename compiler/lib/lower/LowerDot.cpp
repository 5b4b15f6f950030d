// dot and dot_scaled: tensor cores (mma.sync) for bf16/f16, FMAs otherwise.
#include "Lowering.h"

namespace tilefuse::lower::detail {

void Lowering::lowerDot(const Op& op) {
  WgmmaShape w;
  if (onWgmma(op, &w)) return lowerWgmma(op, w);
  vals_[op.result()] = dotRegs(op, op.operand(0)->type(), get(op.operand(0)), op.operand(1)->type(), get(op.operand(1)),
                               in(op.operand(2), layoutOf(op.result())), op.result()->type());
}

// C = A B + acc for A (type at) and B (type bt) in registers; acc and C in the
// result's layout.
Regs Lowering::dotRegs(const Op& op, const Type& at, const Regs& aRegs, const Type& bt, const Regs& bRegs,
                       const Regs& acc, const Type& ct) {
  int64_t m = at.shape[0], k = at.shape[1], n = bt.shape[1];
  bool intDot = at.elem == DType::I8;
  llvm::Type* accTy = intDot ? b_.getInt32Ty() : b_.getFloatTy();
  // Operands go to shared memory in their own types; products accumulate in fp32 (i32).
  int64_t aBytes = m * k * storeBytes(at);
  barrier();
  toSmem(aRegs, at, 0);
  toSmem(bRegs, bt, aBytes);
  barrier();
  bool halfs = at.elem == bt.elem && (at.elem == DType::BF16 || at.elem == DType::F16);
  if (halfs && opts_.arch >= "sm_80") return dotByMma(at, bt, ct, acc, aBytes, layoutOf(op.result()));
  auto widen = [&](LVal* v, DType d) -> LVal* {
    if (intDot) return b_.CreateSExt(v, accTy);
    if (d == DType::F8E4M3 || d == DType::F8E5M2) return castElem(op, v, Type::scalar(d), Type::scalar(DType::F32));
    return d == DType::F32 ? v : b_.CreateFPExt(v, accTy);
  };
  const Layout& L = layoutOf(op.result());
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) {
    LVal* e = flatIndex(L, s);
    LVal* row = coord(e, ct.shape, 0);
    LVal* col = coord(e, ct.shape, 1);
    auto fin = countedLoop(0, k, {acc.e[s]}, [&](LVal* kk, const std::vector<LVal*>& sum) -> std::vector<LVal*> {
      LVal* x = widen(fromSmem(0, b_.CreateAdd(b_.CreateMul(row, idx(k)), kk), at), at.elem);
      LVal* y = widen(fromSmem(aBytes, b_.CreateAdd(b_.CreateMul(kk, idx(n)), col), bt), bt.elem);
      if (intDot) return {b_.CreateAdd(sum[0], b_.CreateMul(x, y))};
      return {b_.CreateIntrinsic(llvm::Intrinsic::fma, {accTy}, {x, y, sum[0]})};
    });
    out.e.push_back(fin[0]);
  }
  barrier();
  return out;
}

// dot_scaled: operands dequantized to f32 (element times 2^(scale-127) of its
// 32-wide K block), then the f32 product.
void Lowering::lowerDotScaled(const Op& op) {
  WgmmaShape w;
  if (onWgmma(op, &w)) return lowerWgmma(op, w);
  const Type& at = op.operand(0)->type();
  const Type& bt = op.operand(2)->type();
  Regs a = dequantize(op, at, get(op.operand(0)), op.operand(1)->type(), get(op.operand(1)), true);
  Regs b = dequantize(op, bt, get(op.operand(2)), op.operand(3)->type(), get(op.operand(3)), false);
  vals_[op.result()] = dotRegs(op, at.withElem(DType::F32), a, bt.withElem(DType::F32), b,
                               in(op.operand(4), layoutOf(op.result())), op.result()->type());
}

// `t` is [M, K] when kIsColumn (lhs), else [K, N] (rhs); scales `st` are [M or N, K/32].
Regs Lowering::dequantize(const Op& op, const Type& t, const Regs& vals, const Type& st, const Regs& scales,
                          bool kIsColumn) {
  barrier();
  toSmem(scales, st, 0);
  barrier();
  int64_t blocks = st.shape[1];
  Regs out{{}, vals.L};
  for (int s = 0; s < slots(vals.L); ++s) {
    LVal* e = flatIndex(vals.L, s);
    LVal* row = coord(e, t.shape, 0);
    LVal* col = coord(e, t.shape, 1);
    LVal* mn = kIsColumn ? row : col;
    LVal* k = kIsColumn ? col : row;
    LVal* scale = decodeE8M0(fromSmem(0, b_.CreateAdd(b_.CreateMul(mn, idx(blocks)), b_.CreateLShr(k, idx(5))), st));
    LVal* x = t.elem == DType::F4E2M1 ? decodeF4(vals.e[s])
                                      : castElem(op, vals.e[s], Type::scalar(t.elem), Type::scalar(DType::F32));
    out.e.push_back(b_.CreateFMul(x, scale));
  }
  barrier();
  return out;
}

// bf16/f16 products on the tensor cores: mma.sync.m16n8k16 with fp32 accumulators.
// A [M,K] and B [K,N] are in shared memory (row-major); the accumulator goes there
// too, each warp takes 16x8 output tiles round robin, and the results return to
// the cyclic layout through shared memory. Fragment layouts: PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type".
Regs Lowering::dotByMma(const Type& at, const Type& bt, const Type& ct, const Regs& acc, int64_t aBytes,
                        const Layout& L) {
  int64_t m = at.shape[0], k = at.shape[1], n = bt.shape[1];
  int64_t cBase = aBytes + k * n * storeBytes(bt);
  toSmem(acc, ct, cBase);
  barrier();
  const char* ty = at.elem == DType::BF16 ? "bf16" : "f16";
  auto* f32 = b_.getFloatTy();
  auto* i32 = b_.getInt32Ty();
  auto* retTy = llvm::StructType::get(ctx_, {f32, f32, f32, f32});
  auto* asmTy = llvm::FunctionType::get(retTy, {i32, i32, i32, i32, i32, i32, f32, f32, f32, f32}, false);
  auto* mma = llvm::InlineAsm::get(asmTy,
                                   std::string("mma.sync.aligned.m16n8k16.row.col.f32.") + ty + "." + ty +
                                       ".f32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                                   "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", true);
  LVal* lane = b_.CreateAnd(tid_, idx(31));
  LVal* warp = b_.CreateLShr(tid_, idx(5));
  LVal* group = b_.CreateLShr(lane, idx(2));                      // row within the 8-row half
  LVal* pair = b_.CreateShl(b_.CreateAnd(lane, idx(3)), idx(1));  // first of two adjacent columns
  Type ft = Type::scalar(DType::F32);
  auto half = [&](int64_t base, LVal* index) { return b_.CreateBitCast(fromSmem(base, index, at), b_.getInt16Ty()); };
  // Two consecutive 16-bit elements, the first in the low half.
  auto pack = [&](LVal* lo, LVal* hi) {
    return b_.CreateOr(b_.CreateZExt(lo, i32), b_.CreateShl(b_.CreateZExt(hi, i32), b_.getInt32(16)));
  };
  int warps = threads_ / 32;
  int64_t tiles = (m / 16) * (n / 8);
  for (int64_t first = 0; first < tiles; first += warps) {
    // Warp w takes tile first + w (when it exists).
    LVal* tile = b_.CreateAdd(idx(first), warp);
    auto* body = llvm::BasicBlock::Create(ctx_, "mma.tile", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "mma.next", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(tile, idx(tiles)), body, done);
    b_.SetInsertPoint(body);
    LVal* r0 = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(tile, idx(n / 8)), idx(16)), group);
    LVal* r1 = b_.CreateAdd(r0, idx(8));
    LVal* col = b_.CreateAdd(b_.CreateMul(b_.CreateURem(tile, idx(n / 8)), idx(8)), pair);
    LVal* bcol = b_.CreateAdd(b_.CreateMul(b_.CreateURem(tile, idx(n / 8)), idx(8)), group);
    auto cIdx = [&](LVal* r, int dc) { return b_.CreateAdd(b_.CreateMul(r, idx(n)), b_.CreateAdd(col, idx(dc))); };
    std::vector<LVal*> c = {fromSmem(cBase, cIdx(r0, 0), ft), fromSmem(cBase, cIdx(r0, 1), ft),
                            fromSmem(cBase, cIdx(r1, 0), ft), fromSmem(cBase, cIdx(r1, 1), ft)};
    for (int64_t kk = 0; kk < k; kk += 16) {
      auto aAt = [&](LVal* r, int64_t dk) {
        return half(0, b_.CreateAdd(b_.CreateMul(r, idx(k)), b_.CreateAdd(pair, idx(kk + dk))));
      };
      auto bAt = [&](int64_t dk) {
        LVal* row = b_.CreateAdd(pair, idx(kk + dk));
        return b_.CreateBitCast(fromSmem(aBytes, b_.CreateAdd(b_.CreateMul(row, idx(n)), bcol), bt), b_.getInt16Ty());
      };
      std::vector<LVal*> ops = {pack(aAt(r0, 0), aAt(r0, 1)),
                                pack(aAt(r1, 0), aAt(r1, 1)),
                                pack(aAt(r0, 8), aAt(r0, 9)),
                                pack(aAt(r1, 8), aAt(r1, 9)),
                                pack(bAt(0), bAt(1)),
                                pack(bAt(8), bAt(9)),
                                c[0],
                                c[1],
                                c[2],
                                c[3]};
      LVal* res = b_.CreateCall(mma, ops);
      for (unsigned i = 0; i < 4; ++i) c[i] = b_.CreateExtractValue(res, i);
    }
    LVal* dst[4] = {cIdx(r0, 0), cIdx(r0, 1), cIdx(r1, 0), cIdx(r1, 1)};
    for (int i = 0; i < 4; ++i) b_.CreateStore(c[i], smemAddr(cBase, dst[i], ft));
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
  barrier();
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) out.e.push_back(fromSmem(cBase, flatIndex(L, s), ct));
  return out;
}

}  // namespace tilefuse::lower::detail
