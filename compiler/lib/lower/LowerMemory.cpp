// Loads, stores, atomics and tensor descriptors.
#include "Lowering.h"

namespace tilefuse::lower::detail {

namespace {
// The atomicrmw operation of an atomic op on element type d.
llvm::AtomicRMWInst::BinOp rmwOp(const Op& op, DType d) {
  using R = llvm::AtomicRMWInst;
  bool f = isFloat(d), u = isUnsigned(d);
  switch (op.kind()) {
    case OpKind::AtomicAdd:
      return f ? R::FAdd : R::Add;
    case OpKind::AtomicMax:
      return f ? R::FMax : u ? R::UMax : R::Max;
    case OpKind::AtomicMin:
      return f ? R::FMin : u ? R::UMin : R::Min;
    case OpKind::AtomicXchg:
      return R::Xchg;
    case OpKind::AtomicAnd:
      return R::And;
    case OpKind::AtomicOr:
      return R::Or;
    case OpKind::AtomicXor:
      return R::Xor;
    default:
      throw InternalError("rmwOp on " + std::string(op.mnemonic()));
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

// The operation and type of the one PTX atom that does `op` on element type d for arch,
// e.g. "add.f32"; empty where PTX has none (bf16 add before sm_90), which LLVM's atomicrmw
// then expands. Float min/max: the two integer atoms "X|Y" of ptxAtomic, without widths.
std::string atomSuffix(const Op& op, DType d, const std::string& arch) {
  int w = bitWidth(d);
  bool f = isFloat(d), sm90 = arch.rfind("sm_9", 0) == 0;
  std::string bits = "b" + std::to_string(w);
  switch (op.kind()) {
    case OpKind::AtomicAdd:
      if (d == DType::F16) return "add.noftz.f16";
      if (d == DType::BF16) return sm90 ? "add.noftz.bf16" : "";
      if (w < 32) return "";
      return std::string("add.") + (f ? "f" : "u") + std::to_string(w);
    case OpKind::AtomicMax:
    case OpKind::AtomicMin:
      if (w < 32) return "";
      if (f) return op.kind() == OpKind::AtomicMax ? "max.s|min.u" : "min.s|max.u";  // see ptxAtomic
      return std::string(op.kind() == OpKind::AtomicMax ? "max." : "min.") + (isUnsigned(d) ? "u" : "s") +
             std::to_string(w);
    case OpKind::AtomicXchg:
      return w < 32 ? "" : "exch." + bits;
    case OpKind::AtomicAnd:
      return w < 32 ? "" : "and." + bits;
    case OpKind::AtomicOr:
      return w < 32 ? "" : "or." + bits;
    case OpKind::AtomicXor:
      return w < 32 ? "" : "xor." + bits;
    case OpKind::AtomicCas:
      return w < 16 ? "" : "cas." + bits;
    default:
      return "";
  }
}

// A load's or store's PTX qualifiers from its hints, e.g. ".cg" or ".L1::evict_first.L2::cache_hint"
// (the verifier and the frontend let at most one kind through); empty without hints.
std::string hintQualifiers(const Op& op) {
  if (op.hasAttr("cache")) return "." + op.strAttr("cache");
  if (op.hasAttr("evict")) return ".L1::" + op.strAttr("evict") + ".L2::cache_hint";
  return "";
}

bool hasHints(const Op& op) { return op.hasAttr("cache") || op.hasAttr("evict") || op.hasAttr("volatile"); }

}  // namespace

// One atomic as Triton writes it in PTX, its sem and scope in the instruction:
// atom.global.gpu.acq_rel.add.f32 (a CAS: atom.global.acq_rel.gpu.cas.b32), operands as
// bits. Null where PTX has no single instruction for it (atomSuffix).
LVal* Lowering::ptxAtomic(const Op& op, DType d, LVal* ptr, LVal* v, LVal* cmp) {
  std::string suffix = atomSuffix(op, d, opts_.arch);
  if (suffix.empty()) return nullptr;
  std::string sem = op.hasAttr("sem") ? op.strAttr("sem") : "relaxed";
  std::string scope = op.hasAttr("scope") ? op.strAttr("scope") : "gpu";
  bool cas = op.kind() == OpKind::AtomicCas;
  std::string qual = cas ? sem + "." + scope : scope + "." + sem;
  int w = bitWidth(d);
  llvm::Type* bits = b_.getIntNTy(static_cast<unsigned>(w));
  const char* reg = w == 16 ? "h" : w == 32 ? "r" : "l";
  auto asBits = [&](LVal* x) { return isFloat(d) ? b_.CreateBitCast(x, bits) : x; };
  std::vector<llvm::Type*> types = {llvm::PointerType::get(ctx_, 1), bits};
  std::vector<LVal*> args = {b_.CreateAddrSpaceCast(ptr, llvm::PointerType::get(ctx_, 1))};
  if (cas) {
    types.push_back(bits);
    args.push_back(asBits(cmp));
  }
  args.push_back(asBits(v));
  std::string at = "atom.global." + qual + ".", text;
  if (size_t bar = suffix.find('|'); bar != std::string::npos) {
    // Float max (min) as Triton does it, on the bits: a value with its sign bit clear is
    // the larger (smaller) by signed max (min) of its bits, one with it set by unsigned min
    // (max): IEEE order is sign-magnitude.
    std::string ws = std::to_string(w);
    text = "{ .reg .pred neg; setp.lt.s" + ws + " neg, $2, 0; @!neg " + at + suffix.substr(0, bar) + ws +
           " $0, [$1], $2; @neg " + at + suffix.substr(bar + 1) + ws + " $0, [$1], $2; }";
  } else {
    text = at + suffix + " $0, [$1], $2" + (cas ? ", $3;" : ";");
  }
  std::string constraints = std::string("=") + reg + ",l," + reg + (cas ? std::string(",") + reg : "") + ",~{memory}";
  auto* ia = llvm::InlineAsm::get(llvm::FunctionType::get(bits, types, false), text, constraints, true);
  LVal* old = b_.CreateCall(ia, args);
  return isFloat(d) ? b_.CreateBitCast(old, elemType(d)) : old;
}

void Lowering::lowerMemory(const Op& op) {
  const Type& pt = op.operand(0)->type();
  DType d = pt.elem;
  if (d == DType::F4E2M1) unsupported(op, "f4e2m1 memory accesses");
  llvm::Type* et = elemType(d);
  llvm::Type* mt = d == DType::I1 ? b_.getInt8Ty() : et;
  bool load = op.kind() == OpKind::Load;
  // A load whose pointers plan-layouts converted reads in the pointers' own layout (the
  // value converts after), unless they are index math to recompute in the value's.
  Regs p = get(op.operand(0));
  if (load && pt.isTile() && p.L != layoutOf(op.result())) {
    int budget = 24;
    if (rematerializable(op.operand(0), budget)) p = in(op.operand(0), layoutOf(op.result()));
  }
  const Layout& L = p.L;
  bool cas = op.kind() == OpKind::AtomicCas;
  unsigned maskIdx = load ? 1 : cas ? 3 : 2;
  Regs maskRegs = op.numOperands() > maskIdx ? in(op.operand(maskIdx), L) : Regs{};
  const Regs* mask = maskRegs.e.empty() ? nullptr : &maskRegs;
  Regs otherRegs = load && op.numOperands() > 2 ? in(op.operand(2), L) : Regs{};
  const Regs* other = otherRegs.e.empty() ? nullptr : &otherRegs;
  Regs value = load ? Regs{} : in(op.operand(cas ? 2 : 1), L);
  Regs cmp = cas ? in(op.operand(1), L) : Regs{};
  Regs out{{}, L};
  int check = debugCheck(op, op.operand(0));
  auto elemBytes = static_cast<int64_t>(mod_.getDataLayout().getTypeAllocSize(mt));
  bool hints = hasHints(op);
  if ((load || op.kind() == OpKind::Store) && d != DType::I1) {
    const Value* m = mask ? op.operand(maskIdx) : nullptr;
    int rd = runDim(L, pt.shape);
    int64_t best = rd < 0 ? 1 : std::min<int64_t>(16 / elemBytes, vectorRun(L, dimStride(pt.shape, rd)));
    // In the layout the access runs in (the pointers' own, or the value's they recompute
    // in): a vector never spans more slots than that layout's run.
    int64_t width = rd < 0 ? 1 : std::min(best, axis_->vectorWidth(op.operand(0), m, 16, rd));
    if (pt.rank() > 0 && width < best)
      hint(op, std::string(load ? "load" : "store") + " of " + std::to_string(width * elemBytes) +
                   "-byte accesses where " + std::to_string(best * elemBytes) +
                   " would fit: " + accessReason(op.operand(0), m));
    if (width > 1 && check < 0) {  // a checked access goes element by element
      lowerVectorAccess(op, p, mask, other, value, width, out);
      if (load) vals_[op.result()] = std::move(out);
      return;
    }
  }
  for (int s = 0; s < slots(L); ++s) {
    LVal* ptr = p.e[s];
    if (load) {
      auto doLoad = [&]() -> LVal* {
        LVal* v = hints ? hintedAccess(op, mt, ptr, nullptr, elemBytes) : b_.CreateLoad(mt, ptr);
        return d == DType::I1 ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
      };
      LVal* cond = mask ? mask->e[s] : nullptr;
      if (check >= 0) {
        LVal* ok = inBounds(check, ptr, L, s, cond);
        cond = cond ? b_.CreateAnd(cond, ok) : ok;
      }
      if (!cond) {
        out.e.push_back(doLoad());
      } else {
        LVal* dflt = other ? other->e[s] : llvm::Constant::getNullValue(et);
        out.e.push_back(guarded(cond, doLoad, dflt));
      }
      continue;
    }
    if (!slotOwned(L, s)) {
      out.e.push_back(llvm::Constant::getNullValue(et));  // atomics: only the owning copy returns the old value
      continue;
    }
    LVal* cond = owner(L);
    if (mask) cond = b_.CreateAnd(cond, mask->e[s]);
    if (check >= 0) cond = b_.CreateAnd(cond, inBounds(check, ptr, L, s, cond));
    LVal* v = value.e[s];
    if (op.kind() == OpKind::Store) {
      guarded(
          cond,
          [&]() -> LVal* {
            LVal* m = d == DType::I1 ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
            if (hints) return hintedAccess(op, mt, ptr, m, elemBytes);
            b_.CreateStore(m, ptr);
            return nullptr;
          },
          nullptr);
      continue;
    }
    auto atomic = [&]() -> LVal* {
      if (LVal* old = ptxAtomic(op, d, ptr, v, cas ? cmp.e[s] : nullptr)) return old;
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
  if (!op.numResults()) return;
  if (!load && !op.result()->unused()) out = shareOwned(out, op.result()->type());
  vals_[op.result()] = std::move(out);
}

// `r` with the value of each element's owning copy in every copy, through shared memory
// (r itself unless its layout has copies). An atomic runs in the owning copy only, so the
// others hold 0 until this: a spin lock's loop condition must be the same in every thread.
Regs Lowering::shareOwned(const Regs& r, const Type& t) {
  const Layout& L = r.L;
  bool copies = std::any_of(L.thr.begin(), L.thr.end(), [](int64_t b) { return b == 0; }) ||
                std::any_of(L.reg.begin(), L.reg.end(), [](int64_t b) { return b == 0; });
  if (!copies) return r;
  barrier();  // readers of the scratch space before: done
  guarded(
      owner(L),
      [&]() -> LVal* {
        toSmem(r, t, 0);
        return nullptr;
      },
      nullptr);
  barrier();
  Regs out{{}, L};
  for (int s = 0; s < slots(L); ++s) out.e.push_back(fromSmem(0, flatIndex(L, s), t));
  return out;
}

// A hinted load (value null) or store of `ty` (a scalar or vector of `bytes` bytes) at
// ptr, as Triton writes it: ld.global.cg.v4.b32 {...}, [a]; an eviction priority comes with
// an L2 policy of the same priority (createpolicy.fractional ... 1.0).
LVal* Lowering::hintedAccess(const Op& op, llvm::Type* ty, LVal* ptr, LVal* value, int64_t bytes) {
  bool load = value == nullptr;
  int64_t words = bytes >= 4 ? bytes / 4 : 1;
  unsigned bits = bytes >= 4 ? 32 : static_cast<unsigned>(bytes * 8);
  llvm::Type* word = b_.getIntNTy(bits);
  const char* reg = bits == 32 ? "r" : "h";  // b8 and b16 live in 16-bit registers
  std::string qual = hintQualifiers(op), vec = words > 1 ? ".v" + std::to_string(words) : "";
  std::string regs;
  for (int64_t i = 0; i < words; ++i) regs += (i ? ", $" : "$") + std::to_string(load ? i : i + 1);
  if (words > 1) regs = "{" + regs + "}";
  std::string addr = "[$" + std::to_string(load ? words : 0) + "]";
  bool policy = op.hasAttr("evict");
  std::string text = load ? std::string("ld") + (op.hasAttr("volatile") ? ".volatile" : "") + ".global" + qual + vec +
                                ".b" + std::to_string(bits) + " " + regs + ", " + addr
                          : "st.global" + qual + vec + ".b" + std::to_string(bits) + " " + addr + ", " + regs;
  if (policy)
    text = "{ .reg .b64 policy; createpolicy.fractional.L2::" + op.strAttr("evict") + ".b64 policy, 1.0; " + text +
           ", policy; }";
  else
    text += ";";
  std::string constraints;
  for (int64_t i = 0; i < words; ++i) constraints += std::string(load ? "=" : "") + reg + ",";
  constraints = load ? constraints + "l" : "l," + constraints.substr(0, constraints.size() - 1);
  constraints += ",~{memory}";
  // Words to and from the access's type (bytes < 4: one integer of that width).
  llvm::Type* asInts = words > 1 ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(word, words)) : word;
  llvm::Type* regTy = bits == 8 ? b_.getInt16Ty() : word;
  auto* ptr1 = b_.CreateAddrSpaceCast(ptr, llvm::PointerType::get(ctx_, 1));
  if (load) {
    std::vector<llvm::Type*> outs(static_cast<size_t>(words), regTy);
    llvm::Type* ret = words > 1 ? static_cast<llvm::Type*>(llvm::StructType::get(ctx_, outs)) : regTy;
    auto* ia = llvm::InlineAsm::get(llvm::FunctionType::get(ret, {ptr1->getType()}, false), text, constraints, true);
    LVal* r = b_.CreateCall(ia, {ptr1});
    LVal* ints = llvm::PoisonValue::get(asInts);
    if (words == 1) ints = bits == 8 ? b_.CreateTrunc(r, word) : r;
    for (int64_t i = 0; words > 1 && i < words; ++i)
      ints = b_.CreateInsertElement(ints, b_.CreateExtractValue(r, static_cast<unsigned>(i)), b_.getInt64(i));
    return b_.CreateBitCast(ints, ty);
  }
  LVal* ints = b_.CreateBitCast(value, asInts);
  std::vector<llvm::Type*> ins = {ptr1->getType()};
  std::vector<LVal*> args = {ptr1};
  for (int64_t i = 0; i < words; ++i) {
    LVal* w = words > 1 ? b_.CreateExtractElement(ints, b_.getInt64(i)) : ints;
    args.push_back(bits == 8 ? b_.CreateZExt(w, regTy) : w);
    ins.push_back(regTy);
  }
  auto* ia = llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), ins, false), text, constraints, true);
  b_.CreateCall(ia, args);
  return nullptr;
}

// Loads or stores `width` consecutive slots (consecutive, aligned elements in memory,
// with one mask value: AxisAnalysis::vectorWidth) as one vector access.
void Lowering::lowerVectorAccess(const Op& op, const Regs& p, const Regs* mask, const Regs* other, const Regs& value,
                                 int64_t width, Regs& out) {
  DType d = op.operand(0)->type().elem;
  llvm::Type* et = elemType(d);
  auto* vt = llvm::FixedVectorType::get(et, static_cast<unsigned>(width));
  int64_t bytes = width * static_cast<int64_t>(mod_.getDataLayout().getTypeAllocSize(et));
  llvm::Align align(bytes);
  bool hints = hasHints(op);
  auto pack = [&](const Regs& r, int s) { return packSlots(r, s, static_cast<int>(width)); };
  const Layout& L = p.L;
  for (int s = 0; s < slots(L); s += static_cast<int>(width)) {
    LVal* ptr = p.e[s];
    if (op.kind() == OpKind::Load) {
      auto doLoad = [&]() -> LVal* {
        return hints ? hintedAccess(op, vt, ptr, nullptr, bytes) : b_.CreateAlignedLoad(vt, ptr, align);
      };
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
          if (hints) return hintedAccess(op, vt, ptr, v, bytes);
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
  int check = debugCheck(op, op.operand(0));
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
    if (check >= 0) inside = b_.CreateAnd(inside, inBounds(check, ptr, L, s, inside));
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

// The kernel parameter whose buffer every value of pointer (or descriptor) `v` points
// into: -1 when none is known, -2 while `v` is being traced (a loop-carried pointer).
int Lowering::rootParam(const Value* v, std::set<const Value*>& seen) const {
  if (!seen.insert(v).second) return -2;
  auto meet = [](int a, int b) { return a == -2 ? b : b == -2 || a == b ? a : -1; };
  const Op* def = v->definingOp();
  if (!def) {
    const Op* parent = v->ownerBlock()->parentOp();
    if (parent->kind() == OpKind::Func) return parent == kernelOp_ ? static_cast<int>(v->index()) : -1;
    if (parent->kind() != OpKind::For || v->index() == 0) return -1;  // while loops: not traced
    unsigned k = v->index() - 1;  // carried value k: its init and what the body yields
    return meet(rootParam(parent->operand(3 + k), seen), rootParam(v->ownerBlock()->terminator()->operand(k), seen));
  }
  switch (def->kind()) {
    case OpKind::PtrAdd:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Trans:
    case OpKind::ConvertLayout:
    case OpKind::Hint:
    case OpKind::MakeDesc:
      return rootParam(def->operand(0), seen);
    case OpKind::Select:
      return meet(rootParam(def->operand(1), seen), rootParam(def->operand(2), seen));
    case OpKind::For: {
      unsigned k = v->index();
      return meet(rootParam(def->operand(3 + k), seen), rootParam(def->region(0).terminator()->operand(k), seen));
    }
    case OpKind::If: {
      int r = -2;
      for (unsigned i = 0; i < def->numRegions(); ++i)
        r = meet(r, rootParam(def->region(i).terminator()->operand(v->index()), seen));
      return r;
    }
    default:
      return -1;
  }
}

int Lowering::debugCheck(const Op& op, const Value* ptr) {
  if (!record_) return -1;  // not a debug build, or a noinline callee (no buffers to check against)
  if (auto it = checkOf_.find(&op); it != checkOf_.end()) return it->second;
  std::set<const Value*> seen;
  int param = rootParam(ptr, seen);
  int id = -1;
  if (param >= 0) {
    const Type& t = ptr->type();
    id = static_cast<int>(checks_.size());
    std::string what = op.kind() == OpKind::DescLoad    ? "descriptor load"
                       : op.kind() == OpKind::DescStore ? "descriptor store"
                                                        : std::string(op.mnemonic());  // the interpreter's words
    checks_.push_back({op.loc(), what, param, static_cast<int>(mod_.getDataLayout().getTypeAllocSize(elemType(t.elem))),
                       t.isTile() || t.isDesc() ? t.shape : std::vector<int64_t>{}});
  } else {
    hint(op, "TILEFUSE_DEBUG: this access is not bounds-checked: its pointer does not derive from one argument");
  }
  return checkOf_[&op] = id;
}

LVal* Lowering::inBounds(int check, LVal* addr, const Layout& L, int s, LVal* active) {
  const DebugCheck& c = checks_[check];
  llvm::Type* i64 = b_.getInt64Ty();
  LVal* off = b_.CreateSub(b_.CreatePtrToInt(addr, i64), b_.CreatePtrToInt(fn_->getArg(c.param), i64));
  LVal* ok = b_.CreateAnd(b_.CreateICmpSGE(off, b_.getInt64(0)),
                          b_.CreateICmpSLE(b_.CreateAdd(off, b_.getInt64(c.elemBytes)), extents_.at(c.param)));
  LVal* bad = b_.CreateNot(ok);
  if (active) bad = b_.CreateAnd(bad, active);
  LVal* lane = flatIndex(L, s);
  guarded(
      bad,
      [&]() -> LVal* {
        b_.CreateCall(reportFn(), {record_, b_.getInt32(check), lane, b_.CreateSDiv(off, b_.getInt64(c.elemBytes))});
        return nullptr;
      },
      nullptr);
  return ok;
}

// tf_debug_report(record, check, lane, index): the first caller of a launch fills the
// error record (LowerToLLVM.h: DebugCheck); the others leave it. Inlined at each check.
llvm::Function* Lowering::reportFn() {
  if (llvm::Function* f = mod_.getFunction("tf_debug_report")) return f;
  auto* ptrTy = llvm::PointerType::get(ctx_, 1);
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {ptrTy, b_.getInt32Ty(), b_.getInt32Ty(), b_.getInt64Ty()}, false);
  auto* f = llvm::Function::Create(ty, llvm::Function::InternalLinkage, "tf_debug_report", mod_);
  f->addFnAttr(llvm::Attribute::AlwaysInline);  // PTX calls under divergent branches would need care
  auto* entry = llvm::BasicBlock::Create(ctx_, "entry", f);
  auto* first = llvm::BasicBlock::Create(ctx_, "first", f);
  auto* done = llvm::BasicBlock::Create(ctx_, "done", f);
  IRBuilder<> b(entry);
  LVal* rec = f->getArg(0);
  using O = llvm::AtomicOrdering;
  LVal* old = b.CreateExtractValue(
      b.CreateAtomicCmpXchg(rec, b.getInt64(0), b.getInt64(1), llvm::MaybeAlign(8), O::Monotonic, O::Monotonic), 0);
  b.CreateCondBr(b.CreateICmpEQ(old, b.getInt64(0)), first, done);
  b.SetInsertPoint(first);
  auto word = [&](int i, LVal* v) {
    b.CreateStore(b.CreateZExt(v, b.getInt64Ty()), b.CreateConstGEP1_32(b.getInt64Ty(), rec, i));
  };
  word(1, f->getArg(1));
  word(2, b.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, {}, {}));
  word(3, b.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y, {}, {}));
  word(4, b.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z, {}, {}));
  word(5, f->getArg(2));
  word(6, f->getArg(3));
  b.CreateBr(done);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
  return f;
}

}  // namespace tilefuse::lower::detail
