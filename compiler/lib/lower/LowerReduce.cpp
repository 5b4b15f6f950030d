// Reductions: warp shuffles for whole rank-1 tiles, shared memory otherwise.
#include "Lowering.h"

namespace tilefuse::lower::detail {

// A whole rank-1 tile of f32 or i32 reduced to a scalar (softmax, layernorm rows):
// each thread combines its slots, warps combine through butterfly shuffles, and
// the per-warp partials meet in shared memory, so every thread ends with the result.
bool Lowering::lowerReduceByShuffles(const Op& op) {
  const Type& in = op.operand(0)->type();
  if (in.rank() != 1 || op.kind() == OpKind::Argmax || (in.elem != DType::F32 && in.elem != DType::I32)) return false;
  bool f = in.elem == DType::F32;
  llvm::Type* ty = elemType(in.elem);
  auto combine = [&](LVal* a, LVal* x) -> LVal* {
    switch (op.kind()) {
      case OpKind::ReduceSum:
        return f ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x);
      case OpKind::ReduceMax:
        return b_.CreateIntrinsic(f ? llvm::Intrinsic::maxnum : llvm::Intrinsic::smax, {ty}, {a, x});
      default:
        return b_.CreateIntrinsic(f ? llvm::Intrinsic::minnum : llvm::Intrinsic::smin, {ty}, {a, x});
    }
  };
  // The identity stands in for the duplicates that threads past N hold.
  LVal* identity;
  if (op.kind() == OpKind::ReduceSum)
    identity = f ? llvm::ConstantFP::get(ty, 0.0) : llvm::ConstantInt::get(ty, 0);
  else if (f)
    identity = llvm::ConstantFP::getInfinity(ty, op.kind() == OpKind::ReduceMax);
  else
    identity = op.kind() == OpKind::ReduceMax ? b_.getInt32(INT32_MIN) : b_.getInt32(INT32_MAX);
  const Regs& r = get(op.operand(0));
  LVal* acc = nullptr;
  LVal* own = owner(r.L);
  for (int s = 0; s < slots(r.L); ++s) {
    if (!slotOwned(r.L, s)) continue;
    LVal* v = own == b_.getTrue() ? r.e[s] : b_.CreateSelect(own, r.e[s], identity);
    acc = acc ? combine(acc, v) : v;
  }
  LVal* mask = b_.getInt32(-1);
  for (int off = 16; off >= 1; off /= 2) {
    LVal* bits = f ? b_.CreateBitCast(acc, b_.getInt32Ty()) : acc;
    LVal* other = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {}, {mask, bits, idx(off), idx(31)});
    acc = combine(acc, f ? b_.CreateBitCast(other, ty) : other);
  }
  int warps = threads_ / 32;
  if (warps > 1) {
    Type partial = Type::tile(in.elem, {warps});
    barrier();
    smemBytes_ = std::max<uint64_t>(smemBytes_, warps * 4);
    LVal* lane = b_.CreateAnd(tid_, idx(31));
    LVal* warp = b_.CreateLShr(tid_, idx(5));
    LVal* addr = smemAddr(0, warp, partial);
    guarded(
        b_.CreateICmpEQ(lane, idx(0)),
        [&]() -> LVal* {
          b_.CreateStore(acc, addr);
          return nullptr;
        },
        nullptr);
    barrier();
    acc = fromSmem(0, idx(0), partial);
    for (int w = 1; w < warps; ++w) acc = combine(acc, fromSmem(0, idx(w), partial));
    barrier();
  }
  vals_[op.result()] = Regs{{acc}, layoutOf(op.result())};
  return true;
}

void Lowering::lowerReduce(const Op& op) {
  if (lowerReduceByShuffles(op)) return;
  const Type& in = op.operand(0)->type();
  const Type& outT = op.result()->type();
  int axis = static_cast<int>(op.intAttr("axis"));
  int64_t len = in.shape[axis];
  barrier();
  toSmem(get(op.operand(0)), in, 0);
  barrier();
  bool f = isFloat(in.elem), u = isUnsigned(in.elem);
  auto maxI = u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax,
       minI = u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin;
  const Layout& L = layoutOf(op.result());
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) {
    // Coordinates of this output element, with the reduced axis re-inserted at 0.
    LVal* e = outT.isTile() ? flatIndex(L, s) : idx(0);
    std::vector<LVal*> c;
    for (size_t d = 0; d < outT.shape.size(); ++d) c.push_back(coord(e, outT.shape, d));
    c.insert(c.begin() + axis, idx(0));
    auto at = [&](LVal* k) {
      c[axis] = k;
      return fromSmem(0, flatten(c, in.shape), in);
    };
    // A loop over the reduced axis (not unrolled: axes reach thousands of elements).
    LVal* acc = at(idx(0));
    LVal* best = idx(0);
    if (len > 1) {
      auto fin = countedLoop(1, len, {acc, best}, [&](LVal* k, const std::vector<LVal*>& cur) -> std::vector<LVal*> {
        LVal* x = at(k);
        llvm::Type* ty = x->getType();
        switch (op.kind()) {
          case OpKind::ReduceSum:
            return {f ? b_.CreateFAdd(cur[0], x) : b_.CreateAdd(cur[0], x), cur[1]};
          case OpKind::ReduceMax:
            return {b_.CreateIntrinsic(f ? llvm::Intrinsic::maxnum : maxI, {ty}, {cur[0], x}), cur[1]};
          case OpKind::ReduceMin:
            return {b_.CreateIntrinsic(f ? llvm::Intrinsic::minnum : minI, {ty}, {cur[0], x}), cur[1]};
          default: {
            LVal* better = f   ? b_.CreateFCmpOGT(x, cur[0])
                           : u ? b_.CreateICmpUGT(x, cur[0])
                               : b_.CreateICmpSGT(x, cur[0]);
            return {b_.CreateSelect(better, x, cur[0]), b_.CreateSelect(better, k, cur[1])};
          }
        }
      });
      acc = fin[0];
      best = fin[1];
    }
    out.e.push_back(op.kind() == OpKind::Argmax ? best : acc);
  }
  barrier();
  vals_[op.result()] = std::move(out);
}

}  // namespace tilefuse::lower::detail
