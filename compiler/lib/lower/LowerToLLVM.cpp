// GPU-stage IR (plan-layouts) -> LLVM IR (nvptx64) in the layouts of its types, then
// libdevice linking, the O3 pipeline and PTX emission.
#include "tilefuse/lower/LowerToLLVM.h"

#include "Lowering.h"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "tilefuse/ir/Text.h"
#include "tilefuse/ir/Verifier.h"
#include "tilefuse/passes/Passes.h"
#include "tilefuse/target/NVPTX.h"

namespace tilefuse::lower {
namespace detail {

void Lowering::lowerKernel(const Op& f) {
  const Block& body = f.region(0);
  analyzeAxes(f);
  planTensorMaps(f);
  if (!tensorMaps_.empty()) floor_ = kBarrierBytes;
  reserveWgmmaOperands(body);
  std::vector<llvm::Type*> params;
  for (Value* a : body.args()) params.push_back(scalarType(a->type()));
  std::vector<unsigned> pointers;  // debug builds: each one's extent, then the error record
  if (opts_.debug) {
    for (unsigned i = 0; i < body.numArgs(); ++i)
      if (body.arg(i)->type().isPtr()) pointers.push_back(i);
    params.insert(params.end(), pointers.size(), b_.getInt64Ty());
    params.push_back(llvm::PointerType::get(ctx_, 1));
  }
  unsigned hidden = opts_.debug ? static_cast<unsigned>(pointers.size()) + 1 : 0;
  // Tensor maps come by value after the kernel's parameters (as __grid_constant__).
  for (size_t i = 0; i < tensorMaps_.size(); ++i) params.push_back(llvm::PointerType::get(ctx_, 0));
  auto* fnTy = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(fnTy, llvm::Function::ExternalLinkage, funcName(f), mod_);
  for (const auto& o : body.ops())
    if (o->kind() == OpKind::WarpSpecialize) {
      producerWarps_ = static_cast<int>(o->intAttr("producer_warps"));
      if (o->hasAttr("consumer_groups")) groups_ = static_cast<int>(o->intAttr("consumer_groups"));
    }
  if (const Attr* al = f.attr("aligned16"); al && std::holds_alternative<std::vector<int64_t>>(*al))
    for (int64_t i : std::get<std::vector<int64_t>>(*al))
      if (body.arg(static_cast<unsigned>(i))->type().isPtr())
        fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::getWithAlignment(ctx_, llvm::Align(16)));
  auto* md = mod_.getOrInsertNamedMetadata("nvvm.annotations");
  auto* i32 = b_.getInt32Ty();
  auto constant = [&](int v) { return llvm::ValueAsMetadata::get(llvm::ConstantInt::get(i32, v)); };
  md->addOperand(
      llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "kernel"), constant(1)}));
  md->addOperand(llvm::MDNode::get(
      ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "maxntidx"), constant(launchThreads())}));
  maxnreg_ = f.hasAttr("maxnreg");
  if (maxnreg_)
    md->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "maxnreg"),
                                            constant(static_cast<int>(f.intAttr("maxnreg")))}));
  if (!tensorMaps_.empty()) {
    std::vector<llvm::Metadata*> gridConstant;
    for (size_t i = 0; i < tensorMaps_.size(); ++i) {
      unsigned p = body.numArgs() + hidden + static_cast<unsigned>(i);
      fn_->addParamAttr(p, llvm::Attribute::getWithByValType(ctx_, llvm::ArrayType::get(b_.getInt8Ty(), 128)));
      fn_->addParamAttr(p, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(64)));
      fn_->getArg(p)->setName("tensor_map" + std::to_string(i));
      gridConstant.push_back(constant(static_cast<int>(p) + 1));  // 1-based
    }
    md->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "grid_constant"),
                                            llvm::MDNode::get(ctx_, gridConstant)}));
  }
  beginFunction(fn_);
  for (unsigned i = 0; i < body.numArgs(); ++i) {
    fn_->getArg(i)->setName(body.arg(i)->name());
    vals_[body.arg(i)] = Regs{{fn_->getArg(i)}, layoutOf(body.arg(i))};
  }
  if (opts_.debug) {
    kernelOp_ = &f;
    for (size_t k = 0; k < pointers.size(); ++k) {
      extents_[static_cast<int>(pointers[k])] = fn_->getArg(body.numArgs() + static_cast<unsigned>(k));
      fn_->getArg(body.numArgs() + static_cast<unsigned>(k))->setName("extent_" + body.arg(pointers[k])->name());
    }
    record_ = fn_->getArg(body.numArgs() + hidden - 1);
    record_->setName("debug_record");
  }
  initBarriers();
  lowerBlock(body);
  finishGroups();
  b_.CreateRetVoid();
  endFunction();
}

// The axis analysis of a function (its layouts are its types': nothing to plan).
void Lowering::analyzeAxes(const Op& f) { axis_ = std::make_unique<AxisAnalysis>(f); }

// An entry block for thread-invariant index math ahead of the body.
void Lowering::beginFunction(llvm::Function* fn) {
  fn_ = fn;
  entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  b_.SetInsertPoint(entry_);
  tid_ = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {});
  warpgroups_.clear();
  start_ = llvm::BasicBlock::Create(ctx_, "body", fn_);
  b_.SetInsertPoint(start_);
}

void Lowering::endFunction() {
  b_.SetInsertPoint(entry_);
  b_.CreateBr(start_);
}

// The thread's share of the flat index: the thread bases of the set bits of tid,
// computed once in the entry block. Runs of bits with consecutive bases are one
// shift-and-mask.
LVal* Lowering::threadPart(const Layout& l) {
  auto [it, fresh] = threadParts_.try_emplace(l.thr, nullptr);
  if (!fresh) return it->second;
  IRBuilder<> eb(entry_);
  LVal* sum = eb.getInt32(0);
  for (size_t j = 0; j < l.thr.size();) {
    if (!l.thr[j]) {
      ++j;
      continue;
    }
    size_t len = 1;
    while (j + len < l.thr.size() && l.thr[j + len] == l.thr[j] << len) ++len;
    LVal* bits = eb.CreateAnd(eb.CreateLShr(tid_, j), (1u << len) - 1);
    sum = eb.CreateOr(sum, eb.CreateShl(bits, __builtin_ctzll(l.thr[j])));
    j += len;
  }
  return it->second = sum;
}

LVal* Lowering::owner(const Layout& l) {
  uint32_t copies = 0;
  for (size_t j = 0; j < l.thr.size(); ++j)
    if (!l.thr[j]) copies |= 1u << j;
  if (!copies) return b_.getTrue();
  auto [it, fresh] = owners_.try_emplace(l.thr, nullptr);
  if (fresh) {
    IRBuilder<> eb(entry_);
    it->second = eb.CreateICmpEQ(eb.CreateAnd(tid_, copies), eb.getInt32(0));
  }
  return it->second;
}

namespace {

// For each slot of `to`, a slot of `from` holding the same element, when both spread
// the same bases over the same threads (the slots' bases permuted, or some of either
// replicating); else empty.
std::vector<int> relabeling(const Layout& from, const Layout& to) {
  if (from.thr != to.thr) return {};
  std::map<int64_t, int> slotOf;
  for (int s = from.slots(); s-- > 0;) slotOf[from.slotPart(s)] = s;
  std::vector<int> src(to.slots());
  for (int s = 0; s < to.slots(); ++s) {
    auto it = slotOf.find(to.slotPart(s));
    if (it == slotOf.end()) return {};
    src[s] = it->second;
  }
  return src;
}

}  // namespace

// Registers relabeled where each thread holds the same elements already, else a
// round trip through shared memory.
Regs Lowering::convert(const Regs& r, const Type& t, const Layout& to) {
  if (r.L == to) return r;
  std::vector<int> src = relabeling(r.L, to);
  if (src.empty()) return exchange(r, t, to);
  Regs out{{}, to};
  for (int s : src) out.e.push_back(r.e[s]);
  return out;
}

// convert's round trip through shared memory. Each thread's runs of consecutive elements
// move as one access of up to 16 bytes, and each row's 16-byte chunks are XOR-swizzled
// by the row's low bits: a warp writing a wgmma fragment (8 rows, 16 bytes each, one
// row pitch apart) hits 8 different bank groups instead of one.
Regs Lowering::exchange(const Regs& r, const Type& t, const Layout& to) {
  const int64_t e = storeBytes(t), base = scratchBase();
  ExchangeSwizzle swz;
  if (t.isTile() && base % 16 == 0 && disjointParts(r.L) && disjointParts(to)) swz = exchangeSwizzle(t.shape, e);
  // The swizzle is linear over XOR and a layout's thread and slot parts are disjoint
  // bits: the thread part is swizzled once, and each slot's part, a constant, XORs its
  // chunk bits (at most `rows` distinct registers) and adds the rest (an offset).
  auto addresses = [&](const Layout& l, int64_t run) {
    LVal* tp = b_.CreateMul(threadPart(l), idx(e));
    if (swz.on()) {
      LVal* row = b_.CreateAnd(b_.CreateLShr(tp, idx(__builtin_ctzll(swz.pitch))), idx(swz.rows - 1));
      tp = b_.CreateXor(tp, b_.CreateShl(row, idx(4)));
    }
    std::vector<LVal*> at;
    for (int s = 0; s < slots(l); s += run) {
      int64_t c = swz(l.slotPart(s) * e), chunk = swz.chunkBits();
      LVal* off = b_.CreateAdd(c & chunk ? b_.CreateXor(tp, idx(c & chunk)) : tp, idx(c & ~chunk));
      at.push_back(b_.CreateGEP(b_.getInt8Ty(), scratchSpace(), b_.CreateAdd(idx(base), off)));
    }
    return at;
  };
  // Vector accesses need an aligned base; pointers and bools go one by one.
  const int64_t maxRun = t.isPtr() || isBool(t) || base % 16 ? 1 : 16 / e;
  llvm::Type* ty = smemType(t);
  smemBytes_ = std::max<uint64_t>(smemBytes_, base + numel(t) * e);
  barrier();
  const int64_t wr = alignedRun(r.L, maxRun);
  std::vector<LVal*> wAt = addresses(r.L, wr);
  for (int s = 0; s < slots(r.L); s += wr) {
    if (!slotOwned(r.L, s)) continue;
    LVal* v = isBool(t) ? b_.CreateZExt(r.e[s], b_.getInt8Ty()) : r.e[s];
    if (wr > 1) {
      v = llvm::PoisonValue::get(llvm::FixedVectorType::get(ty, wr));
      for (int64_t i = 0; i < wr; ++i) v = b_.CreateInsertElement(v, r.e[s + i], i);
    }
    b_.CreateAlignedStore(v, wAt[s / wr], llvm::Align(wr * e));
  }
  barrier();
  const int64_t rd = alignedRun(to, maxRun);
  std::vector<LVal*> rAt = addresses(to, rd);
  Regs out{{}, to};
  for (int s = 0; s < slots(to); s += rd) {
    llvm::Type* vt = rd > 1 ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(ty, rd)) : ty;
    LVal* v = b_.CreateAlignedLoad(vt, rAt[s / rd], llvm::Align(rd * e));
    if (rd == 1) out.e.push_back(isBool(t) ? b_.CreateTrunc(v, b_.getInt1Ty()) : v);
    for (int64_t i = 0; rd > 1 && i < rd; ++i) out.e.push_back(b_.CreateExtractElement(v, i));
  }
  return out;
}

Regs Lowering::in(const Value* v, const Layout& l) {
  v = convertSource(v);
  const Regs& r = get(v);
  if (r.L == l) return r;
  if (r.undef) return undefRegs(v->type(), l);
  // Scalars, constants and splats hold one value everywhere: any layout is a copy.
  const Op* def = v->definingOp();
  if (!v->type().isTile() || (def && (def->kind() == OpKind::Constant || def->kind() == OpKind::Splat)))
    return Regs{std::vector<LVal*>(slots(l), r.e[0]), l};
  // Index math (aranges, masks, pointer offsets) is cheaper to recompute in the
  // layout wanted than to move through shared memory.
  int budget = 24;
  if (rematerializable(v, budget)) return remat(v, l);
  return convert(r, v->type(), l);
}

bool Lowering::rematerializable(const Value* v, int& budget) {
  v = convertSource(v);
  if (!v->type().isTile()) return true;
  const Op* def = v->definingOp();
  if (!def || --budget < 0) return false;
  switch (def->kind()) {
    case OpKind::Constant:
    case OpKind::Splat:
    case OpKind::Arange:
      return true;
    case OpKind::Hint:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Broadcast:
      return rematerializable(def->operand(0), budget);
    default:
      break;
  }
  if (!def->has(Elementwise) || def->numResults() != 1) return false;
  for (Value* o : def->operands())
    if (!rematerializable(o, budget)) return false;
  return true;
}

// Lowers v's defining op again with result layout l (its operands follow through in()).
Regs Lowering::remat(const Value* v, const Layout& l) {
  Regs saved = get(v);
  Layout typed = layoutOf(v);
  layouts_[v] = l;
  lowerOp(*v->definingOp());
  Regs out = get(v);
  vals_[v] = std::move(saved);
  layouts_[v] = std::move(typed);
  return out;
}

Layout Lowering::sliceLayout(const Layout& l, const std::vector<int64_t>& to, const std::vector<int64_t>& from) {
  return broadcastSourceLayout(l, to, from);
}

// device_print: every owned element prints "pid (x, y, z) idx (flat) <prefix><value>" through vprintf.
void Lowering::lowerPrint(const Op& op) {
  auto* ptrTy = llvm::PointerType::get(ctx_, 0);
  auto vprintf = mod_.getOrInsertFunction("vprintf", llvm::FunctionType::get(b_.getInt32Ty(), {ptrTy, ptrTy}, false));
  static const llvm::Intrinsic::ID ctaid[3] = {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x,
                                               llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                                               llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
  for (Value* v : op.operands()) {
    const Type& t = v->type();
    if (t.isDesc() || t.elem == DType::E8M0 || t.elem == DType::F4E2M1)
      unsupported(op, "device_print of " + t.str() + " values");
    bool fl = t.isNumeric() && isFloat(t.elem);
    bool wide = t.isPtr() || t.elem == DType::I64 || t.elem == DType::U64;
    bool u = !t.isPtr() && isUnsigned(t.elem);
    const char* conv = fl ? "%f" : wide ? (u ? "%llu" : "%lld") : (u ? "%u" : "%d");
    std::string fmt = "pid (%d, %d, %d) idx (%d) " + op.strAttr("prefix") + conv + "\n";
    LVal* fmtPtr = b_.CreateGlobalStringPtr(fmt);
    llvm::Type* valTy = fl ? b_.getDoubleTy() : wide ? b_.getInt64Ty() : b_.getInt32Ty();
    auto* argsTy =
        llvm::StructType::get(ctx_, {b_.getInt32Ty(), b_.getInt32Ty(), b_.getInt32Ty(), b_.getInt32Ty(), valTy});
    const Regs& r = get(v);
    for (int s = 0; s < slots(r.L); ++s) {
      if (!slotOwned(r.L, s)) continue;
      guarded(
          owner(r.L),
          [&]() -> LVal* {
            llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
            LVal* buf = entry.CreateAlloca(argsTy);
            for (unsigned a = 0; a < 3; ++a)
              b_.CreateStore(b_.CreateIntrinsic(ctaid[a], {}, {}), b_.CreateStructGEP(argsTy, buf, a));
            b_.CreateStore(t.isTile() ? flatIndex(r.L, s) : idx(0), b_.CreateStructGEP(argsTy, buf, 3));
            LVal* x = r.e[s];
            if (fl && (t.elem == DType::F8E4M3 || t.elem == DType::F8E5M2))
              x = castElem(op, x, Type::scalar(t.elem), Type::scalar(DType::F32));
            if (t.elem == DType::F8E4B15) x = castE4B15(op, x, Type::scalar(t.elem), Type::scalar(DType::F32));
            if (fl)
              x = b_.CreateFPCast(x, b_.getDoubleTy());
            else if (t.isPtr())
              x = b_.CreatePtrToInt(x, b_.getInt64Ty());
            else
              x = t.elem == DType::I1 || u ? b_.CreateZExtOrTrunc(x, valTy) : b_.CreateSExtOrTrunc(x, valTy);
            b_.CreateStore(x, b_.CreateStructGEP(argsTy, buf, 4));
            b_.CreateCall(vprintf, {fmtPtr, buf});
            return nullptr;
          },
          nullptr);
    }
  }
}

// device_assert: a false element calls __assertfail, which stops the kernel; the
// launch then reports "device-side assert triggered" and the message is printed.
void Lowering::lowerAssert(const Op& op) {
  auto* ptrTy = llvm::PointerType::get(ctx_, 0);
  auto fail = mod_.getOrInsertFunction(
      "__assertfail",
      llvm::FunctionType::get(b_.getVoidTy(), {ptrTy, ptrTy, b_.getInt32Ty(), ptrTy, b_.getInt64Ty()}, false));
  const Regs& r = get(op.operand(0));
  LVal* msg = b_.CreateGlobalStringPtr(op.strAttr("message"));
  LVal* file = b_.CreateGlobalStringPtr(op.loc().known() ? *op.loc().file : "<unknown>");
  LVal* func = b_.CreateGlobalStringPtr(fn_->getName());
  for (int s = 0; s < slots(r.L); ++s) {
    if (!slotOwned(r.L, s)) continue;
    guarded(
        b_.CreateAnd(owner(r.L), b_.CreateNot(r.e[s])),
        [&]() -> LVal* {
          b_.CreateCall(fail, {msg, file, b_.getInt32(op.loc().line), func, b_.getInt64(1)});
          return nullptr;
        },
        nullptr);
  }
}

// The registers of `vals` in the layouts the plan gives `to` (one per value).
std::vector<Regs> Lowering::inLayouts(const std::vector<Value*>& vals, const std::vector<Value*>& to) {
  std::vector<Regs> out;
  for (size_t i = 0; i < vals.size(); ++i) out.push_back(in(vals[i], layoutOf(to[i])));
  return out;
}

std::vector<Value*> Lowering::yieldedValues(const Block& b, unsigned first) {
  const auto& ops = b.terminator()->operands();
  return std::vector<Value*>(ops.begin() + first, ops.end());
}

// One phi per register of each loop-carried value, entered from `pre`.
std::vector<Regs> Lowering::loopPhis(const std::vector<Regs>& inits, llvm::BasicBlock* pre) {
  std::vector<Regs> phis;
  for (const Regs& v : inits) {
    Regs r{{}, v.L};
    for (LVal* x : v.e) {
      auto* p = b_.CreatePHI(x->getType(), 2);
      p->addIncoming(x, pre);
      r.e.push_back(p);
    }
    phis.push_back(std::move(r));
  }
  return phis;
}

// Feeds the yielded registers back into the loop's phis from the current block.
void Lowering::closeLoop(const std::vector<Regs>& phis, const std::vector<Regs>& yields) {
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  for (size_t i = 0; i < phis.size(); ++i)
    for (size_t s = 0; s < phis[i].e.size(); ++s)
      llvm::cast<llvm::PHINode>(phis[i].e[s])->addIncoming(yields[i].e[s], latch);
}

void Lowering::lowerFor(const Op& op) {
  const Block& body = op.region(0);
  LVal* lb = get(op.operand(0)).e[0];
  LVal* ub = get(op.operand(1)).e[0];
  LVal* step = get(op.operand(2)).e[0];
  std::vector<Value*> carried = body.args();
  carried.erase(carried.begin());
  auto inits = inLayouts(std::vector<Value*>(op.operands().begin() + 3, op.operands().end()), carried);
  // An expanded pipeline's copies are in flight while it runs (scratchBase()).
  bool rings = std::any_of(body.ops().begin(), body.ops().end(), [](const auto& o) {
    return o->kind() == OpKind::Wgmma && o->operand(0)->type().shared()->stages > 1;
  });
  pipelinedLoops_ += rings;
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "for.header", fn_);
  auto* bodyBB = llvm::BasicBlock::Create(ctx_, "for.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "for.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  auto* iv = b_.CreatePHI(lb->getType(), 2);
  iv->addIncoming(lb, pre);
  std::vector<Regs> phis = loopPhis(inits, pre);
  vals_[body.arg(0)] = Regs{{iv}, layoutOf(body.arg(0))};
  for (size_t i = 0; i < phis.size(); ++i) vals_[carried[i]] = phis[i];
  std::vector<Value*> yielded = yieldedValues(body);
  b_.CreateCondBr(b_.CreateICmpSLT(iv, ub), bodyBB, exit);
  b_.SetInsertPoint(bodyBB);
  std::vector<Regs> yields;
  if (role_ == Role::Consumer && groups_ > 1 && op.hasAttr("ws_turns")) {
    yields = lowerTurn(op, iv, lb, ub, step);
  } else {
    lowerBlock(body);
    yields = inLayouts(yielded, carried);
  }
  iv->addIncoming(b_.CreateAdd(iv, step), b_.GetInsertBlock());
  closeLoop(phis, yields);
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  for (unsigned i = 0; i < op.numResults(); ++i) vals_[op.result(i)] = phis[i];
  pipelinedLoops_ -= rings;
  // Its iterations waited for every TMA load it and its prologue issued (invalid ones
  // are not issued); its cp.async zero-fills stay in flight until its async_wait.
  if (rings) tmaInFlight_ = false;
}

void Lowering::lowerIf(const Op& op) {
  LVal* c = get(op.operand(0)).e[0];
  auto* thenBB = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* elseBB = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
  auto* merge = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
  b_.CreateCondBr(c, thenBB, elseBB);
  std::vector<Value*> results = op.results();
  std::vector<std::vector<Regs>> outs;
  std::vector<llvm::BasicBlock*> ends;
  for (unsigned r = 0; r < 2; ++r) {
    b_.SetInsertPoint(r ? elseBB : thenBB);
    lowerBlock(op.region(r));
    outs.push_back(inLayouts(yieldedValues(op.region(r)), results));
    ends.push_back(b_.GetInsertBlock());
    b_.CreateBr(merge);
  }
  b_.SetInsertPoint(merge);
  std::vector<Regs> merged = mergeBranches(outs[0], ends[0], outs[1], ends[1]);
  for (unsigned i = 0; i < op.numResults(); ++i) vals_[op.result(i)] = merged[i];
}

// At the join of two branches: each value of `a` (from block aEnd) or `b` (bEnd), a phi
// per register.
std::vector<Regs> Lowering::mergeBranches(const std::vector<Regs>& a, llvm::BasicBlock* aEnd,
                                          const std::vector<Regs>& b, llvm::BasicBlock* bEnd) {
  std::vector<Regs> out;
  for (size_t i = 0; i < a.size(); ++i) {
    Regs r{{}, a[i].L};
    for (size_t s = 0; s < a[i].e.size(); ++s) {
      auto* p = b_.CreatePHI(a[i].e[s]->getType(), 2);
      p->addIncoming(a[i].e[s], aEnd);
      p->addIncoming(b[i].e[s], bEnd);
      r.e.push_back(p);
    }
    out.push_back(r);
  }
  return out;
}

void Lowering::lowerWhile(const Op& op) {
  const Block& before = op.region(0);
  const Block& after = op.region(1);
  std::vector<Value*> beforeArgs = before.args(), afterArgs = after.args(), results = op.results();
  auto inits = inLayouts(op.operands(), beforeArgs);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "while.before", fn_);
  auto* bodyBB = llvm::BasicBlock::Create(ctx_, "while.after", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "while.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  std::vector<Regs> phis = loopPhis(inits, pre);
  for (size_t i = 0; i < phis.size(); ++i) vals_[before.arg(i)] = phis[i];
  lowerBlock(before);
  LVal* cond = get(before.terminator()->operand(0)).e[0];
  auto passed = inLayouts(yieldedValues(before, 1), afterArgs);
  for (unsigned i = 0; i < after.numArgs(); ++i) vals_[after.arg(i)] = passed[i];
  for (unsigned i = 0; i < op.numResults(); ++i) vals_[op.result(i)] = passed[i];
  b_.CreateCondBr(cond, bodyBB, exit);
  b_.SetInsertPoint(bodyBB);
  lowerBlock(after);
  closeLoop(phis, inLayouts(yieldedValues(after), beforeArgs));
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
}

// warp_specialize: the consumer warps (threads 0 .. groups_ x threads_) run the body but
// its producer ops; the producer warpgroup after them runs its slice (WarpSpecialize.h),
// on its first warp (thread 0 issues the copies; the mbarriers order the rest). With two
// or more consumer warpgroups, setmaxnreg moves registers from the producer to them.
void Lowering::lowerWarpSpecialize(const Op& op) {
  auto* consumers = llvm::BasicBlock::Create(ctx_, "ws.consumers", fn_);
  auto* producer = llvm::BasicBlock::Create(ctx_, "ws.producer", fn_);
  auto* copier = llvm::BasicBlock::Create(ctx_, "ws.copier", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "ws.done", fn_);
  LVal* tid = tid_;
  int consumerThreads = groups_ * threads_;
  b_.CreateCondBr(b_.CreateICmpULT(tid, idx(consumerThreads)), consumers, producer);
  // setmaxnreg moves registers within the block's own allocation: ptxas gives each
  // thread the most .maxntid allows (in steps of 8); the consumers' count is what the
  // producer's release leaves for them (more would wait forever for registers).
  int producerRegs = 0, consumerRegs = 0;
  if (consumerThreads >= 256 && !maxnreg_) {
    int launched = std::min(255, 65536 / launchThreads()) / 8 * 8;
    producerRegs = consumerThreads >= 512 ? 24 : 40;
    int pool = launched * launchThreads() - 32 * producerWarps_ * producerRegs;
    consumerRegs = std::min(240, pool / consumerThreads / 8 * 8);
    if (consumerRegs <= launched) producerRegs = consumerRegs = 0;
  }
  b_.SetInsertPoint(consumers);
  if (consumerRegs) ptx("setmaxnreg.inc.sync.aligned.u32 " + std::to_string(consumerRegs) + ";");
  role_ = Role::Consumer;
  IRBuilder<> eb(entry_);
  cg_ = idx(0);
  if (groups_ > 1) {
    // Each group a block of threads_ of its own: its layouts' thread index, its scratch.
    cg_ = eb.CreateUDiv(tid, eb.getInt32(threads_), "consumer_group");
    tid_ = eb.CreateAnd(tid, eb.getInt32(threads_ - 1), "group_tid");
    threadParts_.clear();
    owners_.clear();
    groupStride_ = new llvm::GlobalVariable(mod_, b_.getInt32Ty(), true, llvm::GlobalValue::InternalLinkage,
                                            b_.getInt32(0), "tf_group_scratch");
    LVal* stride = b_.CreateLoad(b_.getInt32Ty(), groupStride_);
    groupBase_ = b_.CreateGEP(b_.getInt8Ty(), smem(), b_.CreateMul(cg_, stride));
    for (const auto& o : op.region(0).ops())
      if (o->hasAttr("ws_turns")) {
        skipOps_ = turnSlice(op, *o);
        // A group takes its turn before the body's first op that waits on a full
        // stage (its tile's schedule computed) and passes it on after the last (its
        // iteration's last wgmma issued).
        for (const auto& x : o->region(0).ops())
          x->walk([&](Op* w) {
            if (w->kind() != OpKind::MbarrierWait || !consumerRole(*w)) return;
            if (!orderStart_) orderStart_ = x.get();
            orderPoint_ = x.get();
          });
        if (!orderPoint_) throw InternalError("warp_specialize: a ping-pong loop without a pipelined loop");
      }
  }
  lowerBlock(op.region(0));
  b_.CreateBr(done);
  groupBase_ = nullptr;

  b_.SetInsertPoint(producer);
  if (producerRegs) ptx("setmaxnreg.dec.sync.aligned.u32 " + std::to_string(producerRegs) + ";");
  LVal* mine = eb.CreateSub(tid, eb.getInt32(consumerThreads), "producer_tid");
  b_.CreateCondBr(b_.CreateICmpULT(mine, idx(32)), copier, done);
  b_.SetInsertPoint(copier);
  role_ = Role::Producer;
  tid_ = mine;
  threadParts_.clear();
  owners_.clear();
  cpAsyncInFlight_ = tmaInFlight_ = false;
  producerOps_ = producerSlice(op, producerRole);
  lowerBlock(op.region(0));
  b_.CreateBr(done);
  role_ = Role::All;
  tid_ = tid;
  threadParts_.clear();
  owners_.clear();
  b_.SetInsertPoint(done);
}

// bar.sync / bar.arrive on named barrier `id` (a constant or a register) of `threads`.
void Lowering::namedBarrier(const std::string& op, LVal* id, int threads) {
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(id))
    return ptx(op + " " + std::to_string(c->getZExtValue()) + ", " + std::to_string(threads) + ";");
  auto* ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty()}, false);
  b_.CreateCall(llvm::InlineAsm::get(ty, op + " $0, " + std::to_string(threads) + ";", "r,~{memory}", true), {id});
}

// An iteration of the ping-pong loop, in a consumer group: its own (turn = iteration
// mod groups) runs the body, its waits on the ring after the previous turn's group
// passed the turn on (takeTurn, passTurn: named barrier 2 + groups + group, of both
// groups' threads; the groups' wgmma go in turns, and a group waits on a ring stage
// only once the stages before it were waited on, so an mbarrier's parity cannot name
// a fill two phases old); another's advances the ring's position only. Returns the
// yielded values, merged.
std::vector<Regs> Lowering::lowerTurn(const Op& loop, LVal* iv, LVal* lb, LVal* ub, LVal* step) {
  const Block& body = loop.region(0);
  std::vector<Value*> carried = body.args();
  carried.erase(carried.begin());
  LVal* index = b_.CreateSDiv(b_.CreateSub(iv, lb), step);
  LVal* mine = b_.CreateICmpEQ(b_.CreateURem(index, idx(groups_)), cg_);
  hasNext_ = b_.CreateICmpSLT(b_.CreateAdd(iv, step), ub);
  notFirst_ = b_.CreateICmpNE(iv, lb);
  auto* run = llvm::BasicBlock::Create(ctx_, "turn.run", fn_);
  auto* skip = llvm::BasicBlock::Create(ctx_, "turn.skip", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "turn.join", fn_);
  b_.CreateCondBr(mine, run, skip);
  b_.SetInsertPoint(run);
  lowerBlock(body);
  std::vector<Regs> a = inLayouts(yieldedValues(body), carried);
  llvm::BasicBlock* aEnd = b_.GetInsertBlock();
  b_.CreateBr(join);
  b_.SetInsertPoint(skip);
  role_ = Role::Skipper;
  lowerBlock(body);
  role_ = Role::Consumer;
  std::vector<Regs> c = inLayouts(yieldedValues(body), carried);
  llvm::BasicBlock* cEnd = b_.GetInsertBlock();
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  return mergeBranches(a, aEnd, c, cEnd);
}

// Before the ping-pong body's first wait on a full stage: the previous iteration's group
// has issued its wgmma.
void Lowering::takeTurn() {
  auto* wait = llvm::BasicBlock::Create(ctx_, "turn.wait", fn_);
  auto* on = llvm::BasicBlock::Create(ctx_, "turn.taken", fn_);
  b_.CreateCondBr(notFirst_, wait, on);
  b_.SetInsertPoint(wait);
  namedBarrier("bar.sync", b_.CreateAdd(cg_, idx(2 + groups_)), 2 * threads_);
  b_.CreateBr(on);
  b_.SetInsertPoint(on);
}

// After the ping-pong body's last wgmma issue: the next iteration's group may start.
void Lowering::passTurn() {
  auto* pass = llvm::BasicBlock::Create(ctx_, "turn.pass", fn_);
  auto* on = llvm::BasicBlock::Create(ctx_, "turn.passed", fn_);
  b_.CreateCondBr(hasNext_, pass, on);
  b_.SetInsertPoint(pass);
  LVal* next = b_.CreateURem(b_.CreateAdd(cg_, idx(1)), idx(groups_));
  namedBarrier("bar.arrive", b_.CreateAdd(next, idx(2 + groups_)), 2 * threads_);
  b_.CreateBr(on);
  b_.SetInsertPoint(on);
}

// Once the kernel is lowered: each group's scratch space is the scratch's size apart.
void Lowering::finishGroups() {
  if (!groupStride_) return;
  int64_t used = std::max<int64_t>(0, static_cast<int64_t>(smemBytes_) - scratch_);
  int64_t stride = (used + 1023) / 1024 * 1024;
  groupStride_->setInitializer(b_.getInt32(static_cast<uint32_t>(stride)));
  smemBytes_ = static_cast<uint64_t>(scratch_ + groups_ * stride);
}

void Lowering::lowerOp(const Op& op) {
  // Its readers convert its operand (in()) where they read it, as they need it: index
  // math recomputed, anything else through shared memory.
  if (op.kind() == OpKind::ConvertLayout) return;
  const Type& t = op.numResults() ? op.result()->type() : Type{};
  static const Layout none;
  const Layout& L = op.numResults() ? layoutOf(op.result()) : none;
  auto perSlot = [&](const std::function<LVal*(int)>& f) {
    Regs r{{}, L};
    for (int s = 0; s < slots(L); ++s) r.e.push_back(f(s));
    vals_[op.result()] = std::move(r);
  };
  auto operand = [&](unsigned i) { return in(op.operand(i), L); };
  switch (accessKind(op)) {
    case OpKind::Constant: {
      const Attr& v = *op.attr("value");
      LVal* c;
      if (t.elem == DType::F16 || t.elem == DType::BF16 || t.elem == DType::F32 || t.elem == DType::F64)
        c = llvm::ConstantFP::get(elemType(t.elem), formats::roundToFloat(std::get<double>(v), t.elem));
      else if (isFloat(t.elem))
        c = llvm::ConstantInt::get(b_.getInt8Ty(),
                                   formats::encode(formats::roundToFloat(std::get<double>(v), t.elem), t.elem));
      else
        c = llvm::ConstantInt::get(elemType(t.elem), static_cast<uint64_t>(std::get<int64_t>(v)), true);
      return perSlot([&](int) { return c; });
    }
    case OpKind::ProgramId:
    case OpKind::NumPrograms: {
      static const llvm::Intrinsic::ID ids[2][3] = {
          {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
           llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z},
          {llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y,
           llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z}};
      LVal* v = b_.CreateIntrinsic(ids[op.kind() == OpKind::NumPrograms][op.intAttr("axis")], {}, {});
      return perSlot([&](int) { return v; });
    }
    case OpKind::Arange:
      return perSlot([&](int s) { return b_.CreateAdd(flatIndex(L, s), idx(op.intAttr("start"))); });
    case OpKind::Splat: {
      LVal* v = get(op.operand(0)).e[0];
      return perSlot([&](int) { return v; });
    }
    case OpKind::Hint:
      vals_[op.result()] = operand(0);
      return;
    case OpKind::ExpandDims:
    case OpKind::Reshape: {
      // Same row-major order: the operand in the result's layout is the result.
      Regs r = operand(0);
      r.L = L;
      vals_[op.result()] = std::move(r);
      return;
    }
    case OpKind::Broadcast: {
      // Registers of the operand in the sliced layout are already the result's; so are
      // those of its compact form (a reduction's result), each slot once.
      Layout sl = sliceLayout(L, t.shape, op.operand(0)->type().shape);
      const Regs& src = get(convertSource(op.operand(0)));
      if (!src.undef && op.operand(0)->type().isTile() && src.L == compactLayout(sl) && !(src.L == sl)) {
        Regs r{{}, L};
        for (int s = 0; s < slots(L); ++s) {
          int c = 0, bit = 0;
          for (size_t i = 0; i < sl.reg.size(); ++i)
            if (sl.reg[i]) c |= (s >> i & 1) << bit++;
          r.e.push_back(src.e[c]);
        }
        vals_[op.result()] = std::move(r);
        return;
      }
      Regs r = in(op.operand(0), sl);
      r.L = L;
      vals_[op.result()] = std::move(r);
      return;
    }
    case OpKind::Trans: {
      const Type& in = op.operand(0)->type();
      const auto& perm = op.intsAttr("perm");
      vals_[op.result()] = gather(get(op.operand(0)), in, L, [&](LVal* e) {
        std::vector<LVal*> c(in.shape.size());
        for (size_t d = 0; d < t.shape.size(); ++d) c[perm[d]] = coord(e, t.shape, d);
        return flatten(c, in.shape);
      });
      return;
    }
    case OpKind::Join: {
      const Type& in = op.operand(0)->type();
      barrier();
      toSmem(get(op.operand(0)), in, 0);
      toSmem(get(op.operand(1)), in, numel(in) * storeBytes(in));
      barrier();
      perSlot([&](int s) {
        LVal* e = flatIndex(L, s);
        LVal* src = b_.CreateAdd(b_.CreateMul(b_.CreateAnd(e, idx(1)), idx(numel(in))), b_.CreateLShr(e, idx(1)));
        return fromSmem(0, src, in);
      });
      barrier();
      return;
    }
    case OpKind::Split: {
      const Type& in = op.operand(0)->type();
      for (unsigned r = 0; r < 2; ++r) {
        vals_[op.result(r)] = gather(get(op.operand(0)), in, layoutOf(op.result(r)),
                                     [&](LVal* e) { return b_.CreateAdd(b_.CreateShl(e, idx(1)), idx(r)); });
      }
      barrier();
      return;
    }
    case OpKind::PtrAdd: {
      Regs p = operand(0), off = operand(1);
      llvm::Type* et = t.elem == DType::I1 ? b_.getInt8Ty() : elemType(t.elem);
      if (t.elem == DType::F4E2M1) unsupported(op, "f4e2m1 pointers");
      // Unsigned offsets zero-extend: a u32 offset of 2^31 or more stays positive.
      bool zext = isUnsigned(op.operand(1)->type().elem);
      return perSlot([&](int s) {
        LVal* o = zext ? b_.CreateZExt(off.e[s], b_.getInt64Ty()) : b_.CreateSExt(off.e[s], b_.getInt64Ty());
        return b_.CreateGEP(et, p.e[s], o);
      });
    }
    case OpKind::Cmp: {
      const Type& in = op.operand(0)->type();
      Regs a = operand(0), c = operand(1);
      const std::string& p = op.strAttr("predicate");
      bool f = in.isNumeric() && isFloat(in.elem);
      using P = llvm::CmpInst::Predicate;
      P pred = f ? (p == "eq"   ? P::FCMP_OEQ
                    : p == "ne" ? P::FCMP_UNE
                    : p == "lt" ? P::FCMP_OLT
                    : p == "le" ? P::FCMP_OLE
                    : p == "gt" ? P::FCMP_OGT
                                : P::FCMP_OGE)
                 : (p == "eq"    ? P::ICMP_EQ
                    : p == "ne"  ? P::ICMP_NE
                    : p == "lt"  ? P::ICMP_SLT
                    : p == "le"  ? P::ICMP_SLE
                    : p == "gt"  ? P::ICMP_SGT
                    : p == "ge"  ? P::ICMP_SGE
                    : p == "ult" ? P::ICMP_ULT
                    : p == "ule" ? P::ICMP_ULE
                    : p == "ugt" ? P::ICMP_UGT
                                 : P::ICMP_UGE);
      return perSlot(
          [&](int s) { return f ? b_.CreateFCmp(pred, a.e[s], c.e[s]) : b_.CreateICmp(pred, a.e[s], c.e[s]); });
    }
    case OpKind::Select: {
      Regs c = operand(0), x = operand(1), y = operand(2);
      return perSlot([&](int s) { return b_.CreateSelect(c.e[s], x.e[s], y.e[s]); });
    }
    case OpKind::Cast: {
      const Type& in = op.operand(0)->type();
      const std::string& mode = op.strAttr("rounding");
      auto exotic = [](DType d) { return d == DType::E8M0 || d == DType::F4E2M1 || d == DType::F8E4B15; };
      if (mode != "rne" || exotic(in.elem) || exotic(t.elem)) {
        Regs a = operand(0);
        Regs rb = op.numOperands() == 2 ? operand(1) : Regs{};
        return perSlot([&](int s) { return castRounded(op, a.e[s], in, t, rb.e.empty() ? nullptr : rb.e[s]); });
      }
      [[fallthrough]];
    }
    case OpKind::Bitcast: {
      const Type& in = op.operand(0)->type();
      Regs a = operand(0);
      if (op.kind() == OpKind::Bitcast) {
        // An address from an integer is global memory (as every tilefuse pointer): through
        // addrspace(1), so that LLVM's address-space inference emits ld.global / st.global.
        if (t.isPtr() && !in.isPtr())
          return perSlot([&](int s) {
            return b_.CreateAddrSpaceCast(b_.CreateIntToPtr(a.e[s], llvm::PointerType::get(ctx_, 1)), b_.getPtrTy());
          });
        if (in.isPtr() && !t.isPtr()) return perSlot([&](int s) { return b_.CreatePtrToInt(a.e[s], b_.getInt64Ty()); });
        if (t.isPtr()) return perSlot([&](int s) { return a.e[s]; });
        bool fp4 = in.elem == DType::F4E2M1 || t.elem == DType::F4E2M1;
        return perSlot([&](int s) -> LVal* {
          if (fp4) return b_.CreateAnd(a.e[s], b_.getInt8(0xF));
          return b_.CreateBitCast(a.e[s], elemType(t.elem));
        });
      }
      return perSlot([&](int s) { return castElem(op, a.e[s], in, t); });
    }
    case OpKind::Load:
    case OpKind::Store:
      return lowerMemory(op);
    case OpKind::MakeDesc:
    case OpKind::DescLoad:
    case OpKind::DescStore:
      return lowerDesc(op);
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::Argmax:
      return lowerReduce(op);
    case OpKind::Reduce:
    case OpKind::Scan:
      return lowerCombine(op);
    case OpKind::Gather:
      return lowerGather(op);
    case OpKind::Histogram:
      return lowerHistogram(op);
    case OpKind::Dot:
      return lowerDot(op);
    case OpKind::For:
      return lowerFor(op);
    case OpKind::If:
      return lowerIf(op);
    case OpKind::While:
      return lowerWhile(op);
    case OpKind::WarpSpecialize:
      return lowerWarpSpecialize(op);
    case OpKind::DotScaled:
      return lowerDotScaled(op);
    case OpKind::Call:
      return lowerCall(op);
    case OpKind::Print:
      return lowerPrint(op);
    case OpKind::DebugBarrier:
      return barrier();
    case OpKind::SmemAlloc:
    case OpKind::LocalStore:
    case OpKind::LocalLoad:
    case OpKind::Barrier:
    case OpKind::FenceAsyncShared:
    case OpKind::Wgmma:
    case OpKind::WgmmaWait:
      return lowerSmemOp(op);
    case OpKind::AsyncCopy:
    case OpKind::AsyncCommit:
    case OpKind::AsyncWait:
    case OpKind::TmaLoad:
    case OpKind::MbarrierInit:
    case OpKind::MbarrierExpect:
    case OpKind::MbarrierArrive:
    case OpKind::MbarrierWait:
      return lowerAsyncOp(op);
    case OpKind::Assert:
      return lowerAssert(op);
    default:
      break;
  }
  if (!op.has(Elementwise)) unsupported(op, "'" + std::string(op.mnemonic()) + "'");
  std::vector<Regs> ins;
  for (unsigned i = 0; i < op.numOperands(); ++i) ins.push_back(operand(i));
  perSlot([&](int s) {
    std::vector<LVal*> a;
    for (auto& r : ins) a.push_back(r.e[s]);
    return arith(op, a, t);
  });
}

}  // namespace detail

namespace {

std::string libdevicePath(const LowerOptions& opts) {
  if (!opts.libdevice.empty()) return opts.libdevice;
  const char* home = std::getenv("CUDA_HOME");
  return std::string(home ? home : "/usr/local/cuda") + "/nvvm/libdevice/libdevice.10.bc";
}

void linkLibdevice(llvm::Module& mod, const LowerOptions& opts) {
  bool needed = false;
  for (auto& f : mod.functions()) needed |= f.isDeclaration() && f.getName().starts_with("__nv_");
  if (!needed) return;
  std::string path = libdevicePath(opts);
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf) throw UserError(Location{}, "cannot read libdevice at " + path + " (set CUDA_HOME)");
  auto lib = llvm::parseBitcodeFile((*buf)->getMemBufferRef(), mod.getContext());
  if (!lib) throw InternalError("libdevice does not parse: " + llvm::toString(lib.takeError()));
  (*lib)->setTargetTriple(mod.getTargetTriple());
  (*lib)->setDataLayout(mod.getDataLayout());
  if (llvm::Linker::linkModules(mod, std::move(*lib), llvm::Linker::LinkOnlyNeeded))
    throw InternalError("linking libdevice failed");
  for (auto& f : mod.functions())
    if (!f.isDeclaration() && f.getName().starts_with("__nv_")) f.setLinkage(llvm::GlobalValue::InternalLinkage);
  mod.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
}

// The GPU stage of `m` for `opts`: tile IR goes through plan-layouts on a copy; IR in
// the GPU stage already (marked for this arch and num_warps) is verified as it is.
const Module& gpuStage(const Module& m, const Op& f, const LowerOptions& opts, std::unique_ptr<Module>& copy) {
  if (!isGpuStage(f) && opts.debug) {  // every access on the checked path: no TMA, no pipelining
    auto marked = cloneModule(m);
    for (Op* g : marked->funcs())
      g->walk([](Op* o) {
        if (o->kind() == OpKind::MakeDesc) o->setAttr("no_tma", std::string("TILEFUSE_DEBUG=1 checks every access"));
      });
    return *(copy = passes::runGpuStage(*marked, opts.arch, opts.numWarps, 1));
  }
  if (!isGpuStage(f)) return *(copy = passes::runGpuStage(m, opts.arch, opts.numWarps, opts.numStages));
  if (f.strAttr("arch") != opts.arch || f.intAttr("num_warps") != opts.numWarps)
    throw UserError(f.loc(), "'@" + funcName(f) + "' is in the GPU stage for " + f.strAttr("arch") +
                                 " with num_warps " + std::to_string(f.intAttr("num_warps")) + ", not for " +
                                 opts.arch + " with " + std::to_string(opts.numWarps));
  verifyModule(m);
  return m;
}

}  // namespace

LoweredKernel compileKernel(const Module& tile, const std::string& kernel, const LowerOptions& opts) {
  Op* f = tile.lookupFunc(kernel);
  if (!f) throw InternalError("no kernel '" + kernel + "' to lower");
  if (opts.numWarps < 1 || opts.numWarps > 32 || (opts.numWarps & (opts.numWarps - 1)))
    throw UserError(f->loc(), "num_warps must be a power of two from 1 to 32, got " + std::to_string(opts.numWarps));
  if (opts.numStages < 1 || opts.numStages > 8)
    throw UserError(f->loc(), "num_stages must be from 1 to 8, got " + std::to_string(opts.numStages));
  std::unique_ptr<Module> copy;
  const Module& m = gpuStage(tile, *f, opts, copy);
  f = m.lookupFunc(kernel);
  llvm::LLVMContext ctx;
  llvm::Module mod("tilefuse", ctx);
  mod.setTargetTriple("nvptx64-nvidia-cuda");
  mod.setDataLayout("e-i64:64-i128:128-v16:16-v32:32-n16:32:64");
  auto t0 = std::chrono::steady_clock::now();
  detail::Lowering low(ctx, mod, opts, m);
  low.lowerKernel(*f);
  if (const char* v = std::getenv("TILEFUSE_TIME_PASSES"); v && std::string(v) == "1")
    std::fprintf(stderr, "[tilefuse] lower to LLVM IR: %.1f ms, %u instructions\n",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                 mod.getInstructionCount());
  std::string err;
  llvm::raw_string_ostream es(err);
  if (llvm::verifyModule(mod, &es)) throw InternalError("lowering produced invalid LLVM IR: " + es.str());
  linkLibdevice(mod, opts);
  LoweredKernel out;
  out.name = kernel;
  out.numThreads = low.launchThreads();
  out.sharedBytes = low.sharedBytes();
  out.tensorMaps = low.tensorMaps();
  out.hints = low.hints();
  out.checks = low.checks();
  if (opts.keepIR) out.gpuIR = printModule(m);
  auto emitted = target::optimizeAndEmitPTX(mod, {opts.arch, 3, opts.keepIR});
  out.llir = std::move(emitted.optimizedIR);
  out.ptx = std::move(emitted.ptx);
  return out;
}

}  // namespace tilefuse::lower
