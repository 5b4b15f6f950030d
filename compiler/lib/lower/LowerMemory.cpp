// Loads, stores, atomics and tensor descriptors.
#include "Lowering.h"

namespace tilefuse::lower::detail {

namespace {
// The atomicrmw operation of an atomic op on element type d.
llvm::AtomicRMWInst::BinOp rmwOp(const Op& op, DType d) {
  using R = llvm::AtomicRMWInst;
  bool f = isFloat(d), u = isUnsigned(d);
  switch (op.kind()) {
    case OpKind::AtomicAdd: return f ? R::FAdd : R::Add;
    case OpKind::AtomicMax: return f ? R::FMax : u ? R::UMax : R::Max;
    case OpKind::AtomicMin: return f ? R::FMin : u ? R::UMin : R::Min;
    case OpKind::AtomicXchg: return R::Xchg;
    case OpKind::AtomicAnd: return R::And;
    case OpKind::AtomicOr: return R::Or;
    case OpKind::AtomicXor: return R::Xor;
    default: throw InternalError("rmwOp on " + std::string(op.mnemonic()));
  }
}

// Triton's sem as an LLVM ordering; an op without one is relaxed.
llvm::AtomicOrdering ordering(const Op& op) {
  std::string sem = op.hasAttr("sem") ? op.strAttr("sem") : "relaxed";
  if (sem == "acq_rel") return llvm::AtomicOrdering::AcquireRelease;
  if (sem == "acquire") return llvm::AtomicOrdering::Acquire;
  if (sem == "release") return llvm::AtomicOrdering::Release;
  return llvm::AtomicOrdering::Monotonic;
}

// The membar of an atomic's attr scope (absent: gpu).
llvm::Intrinsic::ID membar(const Op& op) {
  std::string scope = op.hasAttr("scope") ? op.strAttr("scope") : "gpu";
  if (scope == "cta") return llvm::Intrinsic::nvvm_membar_cta;
  return scope == "sys" ? llvm::Intrinsic::nvvm_membar_sys : llvm::Intrinsic::nvvm_membar_gl;
}
}  // namespace

void Lowering::lowerMemory(const Op& op) {
  const Type& pt = op.operand(0)->type();
  DType d = pt.elem;
  if (d == DType::F4E2M1) unsupported(op, "f4e2m1 memory accesses");
  llvm::Type* et = elemType(d);
  llvm::Type* mt = d == DType::I1 ? b_.getInt8Ty() : et;
  const Regs& p = get(op.operand(0));
  const Layout& L = p.L;
  bool load = op.kind() == OpKind::Load;
  bool cas = op.kind() == OpKind::AtomicCas;
  unsigned maskIdx = load ? 1 : cas ? 3 : 2;
  Regs maskRegs = op.numOperands() > maskIdx ? in(op.operand(maskIdx), L) : Regs{};
  const Regs* mask = maskRegs.e.empty() ? nullptr : &maskRegs;
  Regs otherRegs = load && op.numOperands() > 2 ? in(op.operand(2), L) : Regs{};
  const Regs* other = otherRegs.e.empty() ? nullptr : &otherRegs;
  Regs value = load ? Regs{} : in(op.operand(cas ? 2 : 1), L);
  Regs cmp = cas ? in(op.operand(1), L) : Regs{};
  Regs out{{}, L};
  if ((load || op.kind() == OpKind::Store) && d != DType::I1) {
    const Value* m = mask ? op.operand(maskIdx) : nullptr;
    int64_t width = accessWidth(op.operand(0), m);
    int64_t eb = static_cast<int64_t>(mod_.getDataLayout().getTypeAllocSize(mt));
    int rd = runDim(L, pt.shape);
    int64_t best = rd < 0 ? 1 : std::min<int64_t>(16 / eb, vectorRun(L, dimStride(pt.shape, rd)));
    if (pt.rank() > 0 && width < best)
      hint(op, std::string(load ? "load" : "store") + " of " + std::to_string(width * eb) + "-byte accesses where " +
                   std::to_string(best * eb) + " would fit: " + accessReason(op.operand(0), m));
    if (width > 1) {
      lowerVectorAccess(op, p, mask, other, value, width, out);
      if (load) vals_[op.result()] = std::move(out);
      return;
    }
  }
  for (int s = 0; s < slots(L); ++s) {
    LVal* ptr = p.e[s];
    if (load) {
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
    if (!slotOwned(L, s)) {
      out.e.push_back(llvm::Constant::getNullValue(et));  // atomics: only the owning copy returns the old value
      continue;
    }
    LVal* cond = owner(L);
    if (mask) cond = b_.CreateAnd(cond, mask->e[s]);
    LVal* v = value.e[s];
    if (op.kind() == OpKind::Store) {
      guarded(
          cond,
          [&]() -> LVal* {
            b_.CreateStore(d == DType::I1 ? b_.CreateZExt(v, b_.getInt8Ty()) : v, ptr);
            return nullptr;
          },
          nullptr);
      continue;
    }
    auto atomic = [&]() -> LVal* {
      // LLVM 19's NVPTX emits relaxed atom whatever the ordering and cannot select acquire
      // or release fences: membars at the op's scope carry the sem.
      using O = llvm::AtomicOrdering;
      O ord = ordering(op), relaxed = O::Monotonic;
      auto fence = [&] { b_.CreateIntrinsic(membar(op), {}, {}); };
      if (ord == O::Release || ord == O::AcquireRelease) fence();
      LVal* old = nullptr;
      if (cas) {  // cmpxchg takes integers: a float compares and swaps its bits
        llvm::Type* bits = b_.getIntNTy(static_cast<unsigned>(bitWidth(d)));
        auto asBits = [&](LVal* x) { return isFloat(d) ? b_.CreateBitCast(x, bits) : x; };
        old = b_.CreateExtractValue(
            b_.CreateAtomicCmpXchg(ptr, asBits(cmp.e[s]), asBits(v), llvm::MaybeAlign(), relaxed, relaxed), 0);
        if (isFloat(d)) old = b_.CreateBitCast(old, et);
      } else {
        old = b_.CreateAtomicRMW(rmwOp(op, d), ptr, v, llvm::MaybeAlign(), relaxed);
      }
      if (ord == O::Acquire || ord == O::AcquireRelease) fence();
      return old;
    };
    out.e.push_back(guarded(cond, atomic, llvm::Constant::getNullValue(et)));
  }
  if (op.numResults()) vals_[op.result()] = std::move(out);
}

// Loads or stores `width` consecutive slots (consecutive, aligned elements in memory,
// with one mask value: AxisAnalysis::vectorWidth) as one vector access.
void Lowering::lowerVectorAccess(const Op& op, const Regs& p, const Regs* mask, const Regs* other, const Regs& value,
                                 int64_t width, Regs& out) {
  DType d = op.operand(0)->type().elem;
  llvm::Type* et = elemType(d);
  auto* vt = llvm::FixedVectorType::get(et, static_cast<unsigned>(width));
  llvm::Align align(width * mod_.getDataLayout().getTypeAllocSize(et));
  auto pack = [&](const Regs& r, int s) { return packSlots(r, s, static_cast<int>(width)); };
  const Layout& L = p.L;
  for (int s = 0; s < slots(L); s += static_cast<int>(width)) {
    LVal* ptr = p.e[s];
    if (op.kind() == OpKind::Load) {
      auto doLoad = [&]() -> LVal* { return b_.CreateAlignedLoad(vt, ptr, align); };
      LVal* v =
          mask ? guarded(mask->e[s], doLoad, other ? pack(*other, s) : llvm::Constant::getNullValue(vt)) : doLoad();
      for (int i = 0; i < width; ++i) out.e.push_back(b_.CreateExtractElement(v, b_.getInt32(i)));
      continue;
    }
    if (!slotOwned(L, s)) continue;
    LVal* cond = owner(L);
    if (mask) cond = b_.CreateAnd(cond, mask->e[s]);
    LVal* v = pack(value, s);
    guarded(
        cond,
        [&]() -> LVal* {
          b_.CreateAlignedStore(v, ptr, align);
          return nullptr;
        },
        nullptr);
  }
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
  bool load = op.kind() == OpKind::DescLoad;
  if (int map = tensorMapOf(op.operand(0)); map >= 0) return load ? lowerTmaLoad(op, map) : lowerTmaStore(op, map);
  lowerCheckedDesc(op);
}

// desc_load / desc_store element by element, each access checked against the sizes.
void Lowering::lowerCheckedDesc(const Op& op) {
  bool load = op.kind() == OpKind::DescLoad;
  const Type& dt = op.operand(0)->type();
  const Regs& desc = get(op.operand(0));
  size_t rank = dt.shape.size();
  unsigned first = load ? 1 : 2;
  llvm::Type* et = elemType(dt.elem);
  const Layout& L = load ? layoutOf(op.result()) : get(op.operand(1)).L;
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) {
    if (!load && !slotOwned(L, s)) continue;
    LVal* e = flatIndex(L, s);
    LVal* inside = load ? b_.getTrue() : owner(L);
    LVal* elem = b_.getInt64(0);
    for (size_t a = 0; a < rank; ++a) {
      LVal* c = b_.CreateSExt(b_.CreateAdd(get(op.operand(first + a)).e[0], coord(e, dt.shape, a)), b_.getInt64Ty());
      inside =
          b_.CreateAnd(inside, b_.CreateAnd(b_.CreateICmpSGE(c, b_.getInt64(0)), b_.CreateICmpSLT(c, desc.e[1 + a])));
      elem = b_.CreateAdd(elem, b_.CreateMul(c, desc.e[1 + rank + a]));
    }
    LVal* ptr = b_.CreateGEP(et, desc.e[0], elem);
    if (load) {
      out.e.push_back(guarded(
          inside, [&]() -> LVal* { return b_.CreateLoad(et, ptr); }, llvm::Constant::getNullValue(et)));
    } else {
      LVal* v = get(op.operand(1)).e[s];
      guarded(
          inside,
          [&]() -> LVal* {
            b_.CreateStore(v, ptr);
            return nullptr;
          },
          nullptr);
    }
  }
  if (load) vals_[op.result()] = std::move(out);
}

}  // namespace tilefuse::lower::detail
