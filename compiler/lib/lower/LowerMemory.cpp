// Loads, stores, atomics and tensor descriptors.
#include "Lowering.h"

namespace tilefuse::lower::detail {

void Lowering::lowerMemory(const Op& op) {
  const Type& pt = op.operand(0)->type();
  DType d = pt.elem;
  if (d == DType::F4E2M1) unsupported(op, "f4e2m1 memory accesses");
  llvm::Type* et = elemType(d);
  llvm::Type* mt = d == DType::I1 ? b_.getInt8Ty() : et;
  const Regs& p = get(op.operand(0));
  bool load = op.kind() == OpKind::Load;
  unsigned maskIdx = load ? 1 : 2;
  const Regs* mask = op.numOperands() > maskIdx ? &get(op.operand(maskIdx)) : nullptr;
  Regs out;
  for (int s = 0; s < slots(pt); ++s) {
    LVal* ptr = p.e[s];
    if (load) {
      const Regs* other = op.numOperands() > 2 ? &get(op.operand(2)) : nullptr;
      auto doLoad = [&]() -> LVal* {
        LVal* v = b_.CreateLoad(mt, ptr);
        return d == DType::I1 ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
      };
      if (!mask) {
        out.e.push_back(doLoad());
      } else {
        LVal* dflt = other ? other->e[s] : llvm::Constant::getNullValue(et);
        out.e.push_back(guarded(mask->e[s], doLoad, dflt));
      }
      continue;
    }
    LVal* cond = owner(pt, s);
    if (mask) cond = b_.CreateAnd(cond, mask->e[s]);
    LVal* v = get(op.operand(1)).e[s];
    if (op.kind() == OpKind::Store) {
      guarded(cond, [&]() -> LVal* {
        b_.CreateStore(d == DType::I1 ? b_.CreateZExt(v, b_.getInt8Ty()) : v, ptr);
        return nullptr;
      }, nullptr);
      continue;
    }
    bool f = isFloat(d);
    llvm::AtomicRMWInst::BinOp rmw = op.kind() == OpKind::AtomicAdd ? (f ? llvm::AtomicRMWInst::FAdd : llvm::AtomicRMWInst::Add)
                                                                   : (f ? llvm::AtomicRMWInst::FMax : llvm::AtomicRMWInst::Max);
    out.e.push_back(guarded(cond, [&]() -> LVal* {
      return b_.CreateAtomicRMW(rmw, ptr, v, llvm::MaybeAlign(), llvm::AtomicOrdering::Monotonic);
    }, llvm::Constant::getNullValue(et)));
  }
  if (op.numResults()) vals_[op.result()] = std::move(out);
}

void Lowering::lowerDesc(const Op& op) {
  if (op.kind() == OpKind::MakeDesc) {
    Regs r;
    for (Value* v : op.operands()) {
      LVal* x = get(v).e[0];
      r.e.push_back(v == op.operand(0) ? x : b_.CreateSExt(x, b_.getInt64Ty()));
    }
    vals_[op.result()] = std::move(r);
    return;
  }
  const Type& dt = op.operand(0)->type();
  const Regs& desc = get(op.operand(0));
  size_t rank = dt.shape.size();
  bool load = op.kind() == OpKind::DescLoad;
  unsigned first = load ? 1 : 2;
  Type tile = Type::tile(dt.elem, dt.shape);
  llvm::Type* et = elemType(dt.elem);
  Regs out;
  for (int s = 0; s < slots(tile); ++s) {
    LVal* e = flatIndex(tile, s);
    LVal* inside = load ? b_.getTrue() : owner(tile, s);
    LVal* elem = b_.getInt64(0);
    for (size_t a = 0; a < rank; ++a) {
      LVal* c = b_.CreateSExt(b_.CreateAdd(get(op.operand(first + a)).e[0], coord(e, dt.shape, a)), b_.getInt64Ty());
      inside = b_.CreateAnd(inside, b_.CreateAnd(b_.CreateICmpSGE(c, b_.getInt64(0)), b_.CreateICmpSLT(c, desc.e[1 + a])));
      elem = b_.CreateAdd(elem, b_.CreateMul(c, desc.e[1 + rank + a]));
    }
    LVal* ptr = b_.CreateGEP(et, desc.e[0], elem);
    if (load) {
      out.e.push_back(guarded(inside, [&]() -> LVal* { return b_.CreateLoad(et, ptr); }, llvm::Constant::getNullValue(et)));
    } else {
      LVal* v = get(op.operand(1)).e[s];
      guarded(inside, [&]() -> LVal* {
        b_.CreateStore(v, ptr);
        return nullptr;
      }, nullptr);
    }
  }
  if (load) vals_[op.result()] = std::move(out);
}

}  // namespace tilefuse::lower::detail
