// dot and dot_scaled on the instruction plan-layouts chose (the result's layout):
// #wgmma (LowerWgmma.cpp), #mma (mma.sync: bf16/f16, int8 and fp8), FMAs otherwise.
#include "Lowering.h"

namespace tilefuse::lower::detail {

// A hint for a dot that misses the tensor-core path of its arch.
void Lowering::hintDot(const Op& op, const std::string& whyNotWgmma) {
  bool mma = onMmaLayout(op);
  std::string where = mma ? "runs on mma.sync, operands staged through shared memory each step"
                          : "runs on FMAs (no tensor-core form for these types and shapes on " + opts_.arch + ")";
  if (!whyNotWgmma.empty())
    hint(op, "dot not on wgmma: " + whyNotWgmma + "; " + where);
  else if (!mma)
    hint(op, "dot " + where);
}

void Lowering::lowerDot(const Op& op) {
  WgmmaShape w;
  std::string why;
  if (onWgmma(op, &w, &why))
    throw InternalError("lowering: a dot on wgmma that the GPU-stage passes did not write out as wgmma groups");
  hintDot(op, why);
  vals_[op.result()] = dotRegs(op, op.operand(0)->type(), get(op.operand(0)), op.operand(1)->type(), get(op.operand(1)),
                               in(op.operand(2), layoutOf(op.result())), op.result()->type());
}

// C = A B + acc for A (type at) and B (type bt) in registers; acc and C in the
// result's layout.
Regs Lowering::dotRegs(const Op& op, const Type& at, const Regs& aRegs, const Type& bt, const Regs& bRegs,
                       const Regs& acc, const Type& ct) {
  int64_t m = at.shape[0], k = at.shape[1], n = bt.shape[1];
  bool intDot = at.elem == DType::I8;
  bool f16Acc = ct.elem == DType::F16;
  llvm::Type* accTy = intDot ? b_.getInt32Ty() : b_.getFloatTy();
  // Operands go to shared memory in their own types; products accumulate in fp32 (i32).
  int64_t aBytes = m * k * storeBytes(at);
  if (onMmaLayout(op)) {
    // The accumulator in the mma layout (as planned; other layouts convert around it).
    Regs accM = convert(acc, ct, mmaAccLayout(m, n, threads_));
    barrier();
    toSmem(aRegs, at, 0);
    toSmem(bRegs, bt, aBytes);
    barrier();
    return convert(dotByMma(at, bt, ct, accM, aBytes), ct, layoutOf(op.result()));
  }
  barrier();
  toSmem(aRegs, at, 0);
  toSmem(bRegs, bt, aBytes);
  barrier();
  auto widen = [&](LVal* v, DType d) -> LVal* {
    if (intDot) return b_.CreateSExt(v, accTy);
    if (d == DType::F8E4M3 || d == DType::F8E5M2) return castElem(op, v, Type::scalar(d), Type::scalar(DType::F32));
    return d == DType::F32 ? v : b_.CreateFPExt(v, accTy);
  };
  const Layout& L = layoutOf(op.result());
  // An f16 accumulator sums in f32 and is rounded to f16 after every 32 bytes of K (the
  // K of one mma instruction), as the interpreter computes it.
  int64_t step = f16Acc ? std::min<int64_t>(k, 32 / storeBytes(at)) : k;
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) {
    LVal* e = flatIndex(L, s);
    LVal* row = coord(e, ct.shape, 0);
    LVal* col = coord(e, ct.shape, 1);
    using Carried = std::vector<LVal*>;
    auto fmaStep = [&](LVal* kk, const Carried& sum) -> Carried {
      LVal* x = widen(fromSmem(0, b_.CreateAdd(b_.CreateMul(row, idx(k)), kk), at), at.elem);
      LVal* y = widen(fromSmem(aBytes, b_.CreateAdd(b_.CreateMul(kk, idx(n)), col), bt), bt.elem);
      if (intDot) return {b_.CreateAdd(sum[0], b_.CreateMul(x, y))};
      return {b_.CreateIntrinsic(llvm::Intrinsic::fma, {accTy}, {x, y, sum[0]})};
    };
    Carried fin;
    if (!f16Acc) {
      fin = countedLoop(0, k, {acc.e[s]}, fmaStep);
    } else {
      fin = countedLoop(0, k / step, {b_.CreateFPExt(acc.e[s], accTy)}, [&](LVal* chunk, const Carried& start) {
        LVal* k0 = b_.CreateMul(chunk, idx(step));
        Carried part = countedLoop(0, step, start,
                                   [&](LVal* kc, const Carried& sum) { return fmaStep(b_.CreateAdd(k0, kc), sum); });
        return Carried{b_.CreateFPExt(b_.CreateFPTrunc(part[0], b_.getHalfTy()), accTy)};
      });
    }
    out.e.push_back(f16Acc ? b_.CreateFPTrunc(fin[0], b_.getHalfTy()) : fin[0]);
  }
  barrier();
  return out;
}

// dot_scaled: operands dequantized to f32 (element times 2^(scale-127) of its
// 32-wide K block), then the f32 product.
void Lowering::lowerDotScaled(const Op& op) {
  WgmmaShape w;
  std::string why;
  if (onWgmma(op, &w, &why))
    throw InternalError("lowering: a dot on wgmma that the GPU-stage passes did not write out as wgmma groups");
  const Type& at = op.operand(0)->type();
  const Type& bt = op.operand(2)->type();
  hintDot(op, why);
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

// Products on the tensor cores with mma.sync: m16n8k16 for bf16/f16 (f32 or, for f16,
// f16 accumulators), m16n8k32 for fp8 (f32) and int8 (int32), m16n8k8 for tf32 (f32
// operands the builder rounded to tf32: one element per register, the same fragments). A [M,K] and B [K,N] are in shared memory
// (row-major). Fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16 /
// mma.m16n8k32": each 32-bit operand register holds 4/eb consecutive K elements of one
// row of A or column of B; `acc` and the result are in the mma layout (Layout.h), the
// accumulator of a tile in four consecutive slots.
Regs Lowering::dotByMma(const Type& at, const Type& bt, const Type& ct, const Regs& acc, int64_t aBytes) {
  int64_t k = at.shape[1], n = bt.shape[1];
  const Layout& M = acc.L;
  int64_t eb = storeBytes(at), per = 4 / eb, kStep = 32 / eb;
  bool ints = at.elem == DType::I8;
  // An f16 accumulator (out_dtype=float16) is two f16x2 registers: C[0..1], C[2..3].
  bool f16Acc = ct.elem == DType::F16;
  std::string acct = ints ? "s32" : f16Acc ? "f16" : "f32";
  auto* i32 = b_.getInt32Ty();
  llvm::Type* cty = ints || f16Acc ? i32 : static_cast<llvm::Type*>(b_.getFloatTy());
  int nc = f16Acc ? 2 : 4;
  std::vector<llvm::Type*> argTys(6, i32);
  argTys.insert(argTys.end(), nc, cty);
  auto* retTy = llvm::StructType::get(ctx_, std::vector<llvm::Type*>(nc, cty));
  auto* asmTy = llvm::FunctionType::get(retTy, argTys, false);
  std::string c = ints || f16Acc ? "r" : "f";
  std::string d = f16Acc ? "{$0,$1}, {$2,$3,$4,$5}, {$6,$7}, {$8,$9};"
                         : "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};";
  std::string cons;
  for (int i = 0; i < nc; ++i) cons += "=" + c + ",";
  cons += "r,r,r,r,r,r";
  for (int i = 0; i < nc; ++i) cons += "," + c;
  auto* mma = llvm::InlineAsm::get(asmTy,
                                   "mma.sync.aligned.m16n8k" + std::to_string(kStep) + ".row.col." + acct + "." +
                                       mmaTypeName(at.elem) + "." + mmaTypeName(bt.elem) + "." + acct + " " + d,
                                   cons, true);
  auto* half2 = llvm::FixedVectorType::get(b_.getHalfTy(), 2);
  auto pack = [&](LVal* lo, LVal* hi) {
    LVal* v = b_.CreateInsertElement(llvm::PoisonValue::get(half2), lo, uint64_t{0});
    return b_.CreateBitCast(b_.CreateInsertElement(v, hi, uint64_t{1}), i32);
  };
  auto unpack = [&](LVal* r, unsigned i) { return b_.CreateExtractElement(b_.CreateBitCast(r, half2), uint64_t{i}); };
  LVal* lane = b_.CreateAnd(tid_, idx(31));
  LVal* group = b_.CreateLShr(lane, idx(2));  // row of A and C within the 8-row half; column of B
  LVal* quad = b_.CreateAnd(lane, idx(3));    // which 4 bytes of K
  LVal* pair = b_.CreateShl(quad, idx(1));    // the first of C's two adjacent columns
  LVal* kq = b_.CreateMul(quad, idx(per));    // the first K element of the thread's registers
  auto* bitsTy = b_.getIntNTy(static_cast<unsigned>(8 * eb));
  // 4 bytes of A's row r from K element kk (aligned: rows are whole 32-byte steps).
  auto aReg = [&](LVal* r, LVal* kk) {
    LVal* off = b_.CreateAdd(idx(scratchBase()), b_.CreateMul(b_.CreateAdd(b_.CreateMul(r, idx(k)), kk), idx(eb)));
    return b_.CreateAlignedLoad(i32, b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), off), llvm::Align(4));
  };
  // K elements kk .. kk+per-1 of B's column col, the first in the low bits.
  auto bReg = [&](LVal* kk, LVal* col) {
    LVal* v = idx(0);
    for (int64_t i = 0; i < per; ++i) {
      LVal* e = fromSmem(aBytes, b_.CreateAdd(b_.CreateMul(b_.CreateAdd(kk, idx(i)), idx(n)), col), bt);
      v = b_.CreateOr(v, b_.CreateShl(b_.CreateZExt(b_.CreateBitCast(e, bitsTy), i32), idx(8 * eb * i)));
    }
    return v;
  };
  Regs out = acc;
  for (int s = 0; s < slots(M); s += 4) {
    // This thread's element of C[i] of the tile: row r0 (+8), column tile + pair (+1).
    LVal* e = flatIndex(M, s);
    LVal* r0 = coord(e, ct.shape, 0);
    LVal* r1 = b_.CreateAdd(r0, idx(8));
    LVal* bcol = b_.CreateAdd(b_.CreateSub(coord(e, ct.shape, 1), pair), group);
    std::vector<LVal*> cv(out.e.begin() + s, out.e.begin() + s + 4);
    if (f16Acc) cv = {pack(cv[0], cv[1]), pack(cv[2], cv[3])};
    for (int64_t kk = 0; kk < k; kk += kStep) {
      LVal* k0 = b_.CreateAdd(kq, idx(kk));
      LVal* k1 = b_.CreateAdd(k0, idx(kStep / 2));
      std::vector<LVal*> ops = {aReg(r0, k0), aReg(r1, k0), aReg(r0, k1), aReg(r1, k1), bReg(k0, bcol), bReg(k1, bcol)};
      ops.insert(ops.end(), cv.begin(), cv.end());
      LVal* res = b_.CreateCall(mma, ops);
      for (unsigned i = 0; i < cv.size(); ++i) cv[i] = b_.CreateExtractValue(res, i);
    }
    if (f16Acc) cv = {unpack(cv[0], 0), unpack(cv[0], 1), unpack(cv[1], 0), unpack(cv[1], 1)};
    std::copy(cv.begin(), cv.end(), out.e.begin() + s);
  }
  return out;
}

}  // namespace tilefuse::lower::detail
