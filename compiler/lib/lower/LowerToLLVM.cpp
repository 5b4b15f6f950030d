// Tile IR -> LLVM IR (nvptx64) with the cyclic layout of LowerToLLVM.h, then
// libdevice linking, the O3 pipeline and PTX emission.
#include "tilefuse/lower/LowerToLLVM.h"

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdlib>
#include <functional>
#include <unordered_map>

#include "tilefuse/interp/Formats.h"
#include "tilefuse/target/NVPTX.h"

namespace tilefuse::lower {
namespace {

using llvm::IRBuilder;
using LVal = llvm::Value;

// The per-thread registers of one tile-IR value: one LLVM value per slot.
// A tensor descriptor keeps [base, sizes..., strides...] (uniform scalars).
struct Regs {
  std::vector<LVal*> e;
};

class Lowering {
 public:
  Lowering(llvm::LLVMContext& ctx, llvm::Module& mod, const LowerOptions& opts)
      : ctx_(ctx), mod_(mod), b_(ctx), threads_(32 * opts.numWarps), arch_(opts.arch) {}

  int sharedBytes() const { return static_cast<int>(smemBytes_); }

  void lowerKernel(const Op& f) {
    const Block& body = f.region(0);
    std::vector<llvm::Type*> params;
    for (Value* a : body.args()) params.push_back(scalarType(a->type()));
    auto* fnTy = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(fnTy, llvm::Function::ExternalLinkage, funcName(f), mod_);
    if (const Attr* al = f.attr("aligned16"); al && std::holds_alternative<std::vector<int64_t>>(*al))
      for (int64_t i : std::get<std::vector<int64_t>>(*al))
        if (body.arg(static_cast<unsigned>(i))->type().isPtr())
          fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::getWithAlignment(ctx_, llvm::Align(16)));
    auto* md = mod_.getOrInsertNamedMetadata("nvvm.annotations");
    auto* i32 = b_.getInt32Ty();
    md->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "kernel"),
                                            llvm::ValueAsMetadata::get(llvm::ConstantInt::get(i32, 1))}));
    md->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "maxntidx"),
                                            llvm::ValueAsMetadata::get(llvm::ConstantInt::get(i32, threads_))}));
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    tid_ = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {});
    for (unsigned i = 0; i < body.numArgs(); ++i) {
      fn_->getArg(i)->setName(body.arg(i)->name());
      vals_[body.arg(i)] = Regs{{fn_->getArg(i)}};
    }
    lowerBlock(body);
    b_.CreateRetVoid();
  }

 private:
  // --- types and layout ---

  llvm::Type* elemType(DType d) {
    switch (d) {
      case DType::I1: return b_.getInt1Ty();
      case DType::I8: case DType::F8E4M3: case DType::F8E5M2: case DType::E8M0: case DType::F4E2M1:
        return b_.getInt8Ty();
      case DType::I16: return b_.getInt16Ty();
      case DType::I32: return b_.getInt32Ty();
      case DType::I64: return b_.getInt64Ty();
      case DType::F16: return b_.getHalfTy();
      case DType::BF16: return b_.getBFloatTy();
      case DType::F32: return b_.getFloatTy();
      case DType::F64: return b_.getDoubleTy();
    }
    throw InternalError("elemType");
  }
  llvm::Type* scalarType(const Type& t) {
    if (t.isPtr()) return llvm::PointerType::get(ctx_, 1);
    return elemType(t.elem);
  }
  static int64_t numel(const Type& t) { return t.isTile() ? t.numel() : 1; }
  int slots(const Type& t) const { return static_cast<int>((numel(t) + threads_ - 1) / threads_); }
  LVal* idx(int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); }
  // Flat element index of slot s in this thread (N is a power of two).
  LVal* flatIndex(const Type& t, int s) {
    LVal* i = b_.CreateAdd(idx(int64_t(s) * threads_), tid_);
    return numel(t) >= threads_ ? i : b_.CreateAnd(i, idx(numel(t) - 1));
  }
  LVal* owner(const Type& t, int s) { return b_.CreateICmpULT(b_.CreateAdd(idx(int64_t(s) * threads_), tid_), idx(numel(t))); }
  // Coordinate `d` of flat index e in a row-major shape of power-of-two dims.
  LVal* coord(LVal* e, const std::vector<int64_t>& shape, size_t d) {
    int64_t inner = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
    return b_.CreateAnd(b_.CreateLShr(e, idx(__builtin_ctzll(inner))), idx(shape[d] - 1));
  }
  LVal* flatten(const std::vector<LVal*>& c, const std::vector<int64_t>& shape) {
    LVal* e = idx(0);
    for (size_t d = 0; d < shape.size(); ++d) e = b_.CreateAdd(b_.CreateMul(e, idx(shape[d])), c[d]);
    return e;
  }

  const Regs& get(const Value* v) {
    auto it = vals_.find(v);
    if (it == vals_.end()) throw InternalError("lowering: value used before definition");
    return it->second;
  }
  [[noreturn]] void unsupported(const Op& op, const std::string& what) {
    throw UserError(op.loc(), "the GPU backend does not lower " + what + " yet (the interpreter runs it)");
  }

  // --- shared memory round trips ---

  llvm::GlobalVariable* smem() {
    if (!smem_) {
      auto* ty = llvm::ArrayType::get(b_.getInt8Ty(), 0);
      smem_ = new llvm::GlobalVariable(mod_, ty, false, llvm::GlobalValue::ExternalLinkage, nullptr, "tf_smem",
                                       nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      smem_->setAlignment(llvm::Align(16));
    }
    return smem_;
  }
  // The type an element of `t` takes in shared memory: i1 as a byte, pointers as pointers.
  llvm::Type* smemType(const Type& t) {
    if (t.isPtr()) return llvm::PointerType::get(ctx_, 1);
    return t.elem == DType::I1 ? b_.getInt8Ty() : elemType(t.elem);
  }
  int storeBytes(const Type& t) { return static_cast<int>(mod_.getDataLayout().getTypeAllocSize(smemType(t))); }
  LVal* smemAddr(int64_t base, LVal* index, const Type& t) {
    LVal* off = b_.CreateAdd(idx(base), b_.CreateMul(index, idx(storeBytes(t))));
    return b_.CreateGEP(b_.getInt8Ty(), smem(), off);
  }
  void barrier() { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }
  bool isBool(const Type& t) { return !t.isPtr() && t.elem == DType::I1; }
  // Writes every element of `r` (type t) at smem[base + flat * size]; duplicates write equal values.
  void toSmem(const Regs& r, const Type& t, int64_t base) {
    smemBytes_ = std::max<uint64_t>(smemBytes_, base + numel(t) * storeBytes(t));
    for (int s = 0; s < slots(t); ++s) {
      LVal* v = isBool(t) ? b_.CreateZExt(r.e[s], b_.getInt8Ty()) : r.e[s];
      b_.CreateStore(v, smemAddr(base, flatIndex(t, s), t));
    }
  }
  LVal* fromSmem(int64_t base, LVal* index, const Type& t) {
    LVal* v = b_.CreateLoad(smemType(t), smemAddr(base, index, t));
    return isBool(t) ? b_.CreateTrunc(v, b_.getInt1Ty()) : v;
  }
  // Result[e] = source element srcIndex(e), through shared memory.
  Regs gather(const Regs& src, const Type& srcT, const Type& dstT, const std::function<LVal*(LVal*)>& srcIndex) {
    barrier();
    toSmem(src, srcT, 0);
    barrier();
    Regs out;
    for (int s = 0; s < slots(dstT); ++s) out.e.push_back(fromSmem(0, srcIndex(flatIndex(dstT, s)), srcT));
    return out;
  }

  // --- blocks ---

  void lowerBlock(const Block& b) {
    for (const auto& o : b.ops())
      if (!o->has(Terminator)) lowerOp(*o);
  }
  std::vector<Regs> terminatorRegs(const Block& b) {
    std::vector<Regs> r;
    for (Value* v : b.terminator()->operands()) r.push_back(get(v));
    return r;
  }

  void lowerOp(const Op& op);
  LVal* arith(const Op& op, const std::vector<LVal*>& a, const Type& t);
  LVal* castElem(const Op& op, LVal* v, const Type& from, const Type& to);
  LVal* castRounded(const Op& op, LVal* v, const Type& from, const Type& to, LVal* rbits);
  LVal* roundToFormat(LVal* x, DType to, const std::string& mode, LVal* rbits);
  LVal* roundToE8M0(LVal* x, const std::string& mode, LVal* rbits);
  LVal* decodeE8M0(LVal* v);
  LVal* decodeF4(LVal* v);
  Regs dequantize(const Op& op, const Type& t, const Regs& vals, const Type& st, const Regs& scales, bool kIsColumn);
  void lowerDotScaled(const Op& op);
  LVal* mathCall(const Op& op, const char* f32name, const char* f64name, LVal* x, DType d);
  void lowerMemory(const Op& op);
  void lowerDesc(const Op& op);
  void lowerReduce(const Op& op);
  bool lowerReduceByShuffles(const Op& op);
  void lowerDot(const Op& op);
  Regs dotRegs(const Op& op, const Type& at, const Regs& aRegs, const Type& bt, const Regs& bRegs, const Regs& acc,
               const Type& ct);
  Regs dotByMma(const Type& at, const Type& bt, const Type& ct, const Regs& acc, int64_t aBytes);
  void lowerPrint(const Op& op);
  void lowerAssert(const Op& op);
  std::vector<Regs> loopPhis(const std::vector<Value*>& inits, llvm::BasicBlock* pre);
  void closeLoop(const std::vector<Regs>& phis, const std::vector<Regs>& yields);
  void lowerFor(const Op& op);
  void lowerIf(const Op& op);
  void lowerWhile(const Op& op);

  // Runs `body` only when `cond`; returns the phi of body's value and `otherwise`.
  LVal* guarded(LVal* cond, const std::function<LVal*()>& body, LVal* otherwise) {
    llvm::BasicBlock* from = b_.GetInsertBlock();
    auto* then = llvm::BasicBlock::Create(ctx_, "g.then", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "g.done", fn_);
    b_.CreateCondBr(cond, then, done);
    b_.SetInsertPoint(then);
    LVal* v = body();
    llvm::BasicBlock* thenEnd = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    if (!otherwise) return nullptr;
    auto* phi = b_.CreatePHI(otherwise->getType(), 2);
    phi->addIncoming(v, thenEnd);
    phi->addIncoming(otherwise, from);
    return phi;
  }

  // Emits `for (k = from; k < to; ++k) carried = step(k, carried)` as an LLVM loop
  // (not unrolled) and returns the final carried values. Needs from < to.
  std::vector<LVal*> countedLoop(int64_t from, int64_t to, std::vector<LVal*> carried,
                                 const std::function<std::vector<LVal*>(LVal*, const std::vector<LVal*>&)>& step) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "loop.done", fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    auto* k = b_.CreatePHI(b_.getInt32Ty(), 2);
    k->addIncoming(idx(from), pre);
    std::vector<llvm::PHINode*> phis;
    std::vector<LVal*> cur;
    for (LVal* v : carried) {
      phis.push_back(b_.CreatePHI(v->getType(), 2));
      phis.back()->addIncoming(v, pre);
      cur.push_back(phis.back());
    }
    std::vector<LVal*> next = step(k, cur);
    LVal* k1 = b_.CreateAdd(k, idx(1));
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    k->addIncoming(k1, latch);
    for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
    b_.CreateCondBr(b_.CreateICmpSLT(k1, idx(to)), loop, exit);
    b_.SetInsertPoint(exit);
    return next;  // defined in the loop block, which dominates the exit
  }

  llvm::LLVMContext& ctx_;
  llvm::Module& mod_;
  IRBuilder<> b_;
  int threads_;
  std::string arch_;
  llvm::Function* fn_ = nullptr;
  LVal* tid_ = nullptr;
  llvm::GlobalVariable* smem_ = nullptr;
  uint64_t smemBytes_ = 0;
  std::unordered_map<const Value*, Regs> vals_;
};

LVal* Lowering::mathCall(const Op& op, const char* f32name, const char* f64name, LVal* x, DType d) {
  bool wide = d == DType::F64;
  llvm::Type* ft = wide ? b_.getDoubleTy() : b_.getFloatTy();
  LVal* in = (d == DType::F16 || d == DType::BF16) ? b_.CreateFPExt(x, ft) : x;
  auto callee = mod_.getOrInsertFunction(wide ? f64name : f32name, llvm::FunctionType::get(ft, {ft}, false));
  LVal* r = b_.CreateCall(callee, {in});
  return (d == DType::F16 || d == DType::BF16) ? b_.CreateFPTrunc(r, elemType(d)) : r;
}

LVal* Lowering::arith(const Op& op, const std::vector<LVal*>& a, const Type& t) {
  bool f = isFloat(t.elem);
  DType d = t.elem;
  llvm::Type* ty = elemType(d);
  auto intr = [&](llvm::Intrinsic::ID id, std::vector<LVal*> args) { return b_.CreateIntrinsic(id, {ty}, args); };
  switch (op.kind()) {
    case OpKind::Add: return f ? b_.CreateFAdd(a[0], a[1]) : b_.CreateAdd(a[0], a[1]);
    case OpKind::Sub: return f ? b_.CreateFSub(a[0], a[1]) : b_.CreateSub(a[0], a[1]);
    case OpKind::Mul: return f ? b_.CreateFMul(a[0], a[1]) : b_.CreateMul(a[0], a[1]);
    case OpKind::Div: return f ? b_.CreateFDiv(a[0], a[1]) : b_.CreateSDiv(a[0], a[1]);
    case OpKind::Rem: return f ? b_.CreateFRem(a[0], a[1]) : b_.CreateSRem(a[0], a[1]);
    case OpKind::And: return b_.CreateAnd(a[0], a[1]);
    case OpKind::Or: return b_.CreateOr(a[0], a[1]);
    case OpKind::Xor: return b_.CreateXor(a[0], a[1]);
    case OpKind::Shl:
    case OpKind::Shr: {
      // Shifts by the width or more give 0 (or the sign) as in the interpreter, not poison.
      unsigned w = ty->getIntegerBitWidth();
      LVal* big = b_.CreateICmpUGE(a[1], llvm::ConstantInt::get(ty, w));
      LVal* amt = b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), a[1]);
      if (op.kind() == OpKind::Shl) return b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), b_.CreateShl(a[0], amt));
      LVal* sign = b_.CreateAShr(a[0], llvm::ConstantInt::get(ty, w - 1));
      return b_.CreateSelect(big, sign, b_.CreateAShr(a[0], amt));
    }
    case OpKind::Min: return f ? intr(llvm::Intrinsic::minnum, a) : intr(llvm::Intrinsic::smin, a);
    case OpKind::Max: return f ? intr(llvm::Intrinsic::maxnum, a) : intr(llvm::Intrinsic::smax, a);
    case OpKind::Neg: return f ? b_.CreateFNeg(a[0]) : b_.CreateNeg(a[0]);
    case OpKind::Fma: return intr(llvm::Intrinsic::fma, a);
    case OpKind::Abs: return f ? intr(llvm::Intrinsic::fabs, a) : b_.CreateIntrinsic(llvm::Intrinsic::abs, {ty}, {a[0], b_.getFalse()});
    case OpKind::Sqrt: return intr(llvm::Intrinsic::sqrt, a);
    case OpKind::Floor: return intr(llvm::Intrinsic::floor, a);
    case OpKind::Ceil: return intr(llvm::Intrinsic::ceil, a);
    case OpKind::Exp: return mathCall(op, "__nv_expf", "__nv_exp", a[0], d);
    case OpKind::Exp2: return mathCall(op, "__nv_exp2f", "__nv_exp2", a[0], d);
    case OpKind::Log: return mathCall(op, "__nv_logf", "__nv_log", a[0], d);
    case OpKind::Log2: return mathCall(op, "__nv_log2f", "__nv_log2", a[0], d);
    case OpKind::Rsqrt: return mathCall(op, "__nv_rsqrtf", "__nv_rsqrt", a[0], d);
    case OpKind::Tanh: return mathCall(op, "__nv_tanhf", "__nv_tanh", a[0], d);
    case OpKind::Erf: return mathCall(op, "__nv_erff", "__nv_erf", a[0], d);
    default: unsupported(op, "'" + std::string(op.mnemonic()) + "'");
  }
}

LVal* Lowering::castElem(const Op& op, LVal* v, const Type& from, const Type& to) {
  DType s = from.elem, d = to.elem;
  llvm::Type* dt = elemType(d);
  bool fp8 = s == DType::F8E4M3 || s == DType::F8E5M2 || d == DType::F8E4M3 || d == DType::F8E5M2;
  bool exotic = s == DType::E8M0 || s == DType::F4E2M1 || d == DType::E8M0 || d == DType::F4E2M1;
  if (exotic) throw InternalError("castElem on e8m0/f4e2m1: castRounded handles those");
  if (fp8) {
    if (arch_ != "sm_89" && arch_.rfind("sm_9", 0) != 0) unsupported(op, "fp8 casts before sm_89");
    const char* fmt = (s == DType::F8E4M3 || d == DType::F8E4M3) ? "e4m3x2" : "e5m2x2";
    if (d == DType::F8E4M3 || d == DType::F8E5M2) {
      LVal* x = isFloat(s) ? (s == DType::F32 ? v : b_.CreateFPCast(v, b_.getFloatTy())) : b_.CreateSIToFP(v, b_.getFloatTy());
      auto* asmTy = llvm::FunctionType::get(b_.getInt16Ty(), {b_.getFloatTy()}, false);
      auto* ia = llvm::InlineAsm::get(asmTy, std::string("{ .reg .f32 z; mov.f32 z, 0f00000000; cvt.rn.satfinite.") + fmt +
                                                 ".f32 $0, z, $1; }", "=h,f", false);
      return b_.CreateTrunc(b_.CreateCall(ia, {x}), b_.getInt8Ty());
    }
    auto* asmTy = llvm::FunctionType::get(b_.getInt32Ty(), {b_.getInt16Ty()}, false);
    auto* ia = llvm::InlineAsm::get(asmTy, std::string("cvt.rn.f16x2.") + fmt + " $0, $1;", "=r,h", false);
    LVal* pair = b_.CreateCall(ia, {b_.CreateZExt(v, b_.getInt16Ty())});
    LVal* h = b_.CreateBitCast(b_.CreateTrunc(pair, b_.getInt16Ty()), b_.getHalfTy());
    Type f16 = Type::scalar(DType::F16);
    return d == DType::F16 ? h : castElem(op, h, f16, to);
  }
  if (isFloat(s) && isFloat(d)) return b_.CreateFPCast(v, dt);
  if (isInt(s) && isInt(d)) {
    if (d == DType::I1) return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    return s == DType::I1 ? b_.CreateZExt(v, dt) : b_.CreateSExtOrTrunc(v, dt);
  }
  if (isInt(s)) return s == DType::I1 ? b_.CreateUIToFP(v, dt) : b_.CreateSIToFP(v, dt);
  if (d == DType::I1) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
  return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {dt, v->getType()}, {v});
}

// Casts with a rounding mode other than rne, and casts from or to e8m0 and f4e2m1:
// the rounding of formats::roundToFloat, written with integer and f64 operations,
// so the bits match the interpreter. Sources are widened to f32 (exact).
LVal* Lowering::castRounded(const Op& op, LVal* v, const Type& from, const Type& to, LVal* rbits) {
  DType s = from.elem, d = to.elem;
  const std::string& mode = op.strAttr("rounding");
  auto* f32 = b_.getFloatTy();
  if (s == DType::E8M0 || s == DType::F4E2M1) {
    LVal* x = s == DType::E8M0 ? decodeE8M0(v) : decodeF4(v);
    Type f32t = Type::scalar(DType::F32);
    if (d == DType::F32) return x;
    if (d == DType::E8M0) return roundToE8M0(x, mode, rbits);
    if (mode != "rne" || d == DType::F4E2M1) return roundToFormat(x, d, mode, rbits);
    return castElem(op, x, f32t, to);
  }
  if (!isFloat(s) || s == DType::F64) unsupported(op, "casts from " + from.elementType().str() + " with rounding '" + mode + "'");
  if (!isFloat(d)) unsupported(op, "float-to-int casts with rounding '" + mode + "'");
  LVal* x = s == DType::F32 ? v : (s == DType::F8E4M3 || s == DType::F8E5M2)
                                      ? castElem(op, v, from, Type::scalar(DType::F32))
                                      : b_.CreateFPExt(v, f32);
  if (d == DType::E8M0) return roundToE8M0(x, mode, rbits);
  if (d == DType::F32 || d == DType::F64) return d == DType::F64 ? b_.CreateFPExt(x, b_.getDoubleTy()) : x;
  return roundToFormat(x, d, mode, rbits);
}

LVal* Lowering::roundToFormat(LVal* x, DType to, const std::string& mode, LVal* rbits) {
  struct Fmt {
    int mant, emin;
    double maxFinite;
    bool ieeeInf;  // overflow may give inf (f16, bf16); the others saturate
  };
  Fmt f = to == DType::F16      ? Fmt{10, -14, 65504.0, true}
          : to == DType::BF16   ? Fmt{7, -126, 0x1.fep127, true}
          : to == DType::F8E4M3 ? Fmt{3, -6, 448.0, false}
          : to == DType::F8E5M2 ? Fmt{2, -14, 57344.0, false}
                                : Fmt{1, 0, 6.0, false};  // f4e2m1
  auto* f64 = b_.getDoubleTy();
  auto* i64 = b_.getInt64Ty();
  LVal* bits = b_.CreateBitCast(x, b_.getInt32Ty());
  LVal* neg = b_.CreateICmpSLT(bits, idx(0));
  LVal* isNan = b_.CreateFCmpUNO(x, x);
  LVal* ax = b_.CreateIntrinsic(llvm::Intrinsic::fabs, {x->getType()}, {x});
  LVal* isInf = b_.CreateFCmpOEQ(ax, llvm::ConstantFP::getInfinity(x->getType()));
  LVal* ad = b_.CreateFPExt(ax, f64);
  // The exponent of |x| (f32 subnormals are below every emin here), clamped to the format's emin.
  LVal* e = b_.CreateSub(b_.CreateAnd(b_.CreateLShr(bits, idx(23)), idx(0xFF)), idx(127));
  LVal* exp = b_.CreateIntrinsic(llvm::Intrinsic::smax, {b_.getInt32Ty()}, {e, idx(f.emin)});
  LVal* k = b_.CreateSExt(b_.CreateSub(idx(f.mant), exp), i64);  // |x| / quantum = |x| * 2^k
  auto pow2 = [&](LVal* p) { return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(p, b_.getInt64(1023)), b_.getInt64(52)), f64); };
  LVal* n = b_.CreateFMul(ad, pow2(k));  // exact
  LVal* fl = b_.CreateIntrinsic(llvm::Intrinsic::floor, {f64}, {n});
  LVal* r;
  if (mode == "rne") {
    r = b_.CreateIntrinsic(llvm::Intrinsic::rint, {f64}, {n});
  } else if (mode == "rtz") {
    r = fl;
  } else if (mode == "ru") {
    r = b_.CreateSelect(neg, fl, b_.CreateIntrinsic(llvm::Intrinsic::ceil, {f64}, {n}));
  } else {
    LVal* threshold = b_.CreateUIToFP(rbits, f64);
    LVal* up = b_.CreateFCmpOGT(b_.CreateFMul(b_.CreateFSub(n, fl), llvm::ConstantFP::get(f64, 0x1p32)), threshold);
    r = b_.CreateSelect(up, b_.CreateFAdd(fl, llvm::ConstantFP::get(f64, 1.0)), fl);
  }
  LVal* v = b_.CreateFMul(r, pow2(b_.CreateNeg(k)));
  LVal* maxv = llvm::ConstantFP::get(f64, f.maxFinite);
  LVal* inf = llvm::ConstantFP::getInfinity(f64);
  // Overflow: inf for f16/bf16 unless rounding toward zero (or up, for negative values); else the max.
  LVal* overTo = maxv;
  if (f.ieeeInf && mode != "rtz") overTo = mode == "ru" ? b_.CreateSelect(neg, maxv, inf) : inf;
  v = b_.CreateSelect(b_.CreateFCmpOGT(v, maxv), overTo, v);
  v = b_.CreateSelect(isInf, f.ieeeInf ? inf : maxv, v);
  v = b_.CreateSelect(neg, b_.CreateFNeg(v), v);
  if (to == DType::F16 || to == DType::BF16) {
    LVal* out = b_.CreateFPTrunc(v, elemType(to));  // exact: v is representable
    return b_.CreateSelect(isNan, llvm::ConstantFP::getNaN(elemType(to)), out);
  }
  if (to == DType::F4E2M1) {
    // Code = how many of the positive values .5 1 1.5 2 3 4 6 the magnitude reaches; NaN -> 0.
    LVal* mag = b_.CreateIntrinsic(llvm::Intrinsic::fabs, {f64}, {v});
    LVal* code = b_.getInt8(0);
    for (double t : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0})
      code = b_.CreateAdd(code, b_.CreateZExt(b_.CreateFCmpOGE(mag, llvm::ConstantFP::get(f64, t)), b_.getInt8Ty()));
    code = b_.CreateOr(code, b_.CreateSelect(neg, b_.getInt8(8), b_.getInt8(0)));  // -0 keeps its sign
    return b_.CreateSelect(isNan, b_.getInt8(0), code);
  }
  // fp8: the value is representable, so the saturating hardware conversion is exact.
  LVal* v32 = b_.CreateSelect(isNan, llvm::ConstantFP::getNaN(b_.getFloatTy()), b_.CreateFPTrunc(v, b_.getFloatTy()));
  const char* fmt = to == DType::F8E4M3 ? "e4m3x2" : "e5m2x2";
  auto* asmTy = llvm::FunctionType::get(b_.getInt16Ty(), {b_.getFloatTy()}, false);
  auto* ia = llvm::InlineAsm::get(asmTy, std::string("{ .reg .f32 z; mov.f32 z, 0f00000000; cvt.rn.satfinite.") + fmt +
                                             ".f32 $0, z, $1; }", "=h,f", false);
  return b_.CreateTrunc(b_.CreateCall(ia, {v32}), b_.getInt8Ty());
}

// Code c is 2^(c-127): the f32 with biased exponent c; c = 0 is the subnormal 2^-127, 255 is NaN.
LVal* Lowering::decodeE8M0(LVal* v) {
  LVal* c = b_.CreateZExt(v, b_.getInt32Ty());
  LVal* bits = b_.CreateSelect(b_.CreateICmpEQ(c, idx(0)), idx(0x00400000),
                               b_.CreateSelect(b_.CreateICmpEQ(c, idx(255)), idx(0x7FC00000), b_.CreateShl(c, idx(23))));
  return b_.CreateBitCast(bits, b_.getFloatTy());
}

// Magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 by the low three bits; bit 3 is the sign.
LVal* Lowering::decodeF4(LVal* v) {
  static const float kMag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  auto* f32 = b_.getFloatTy();
  LVal* code = b_.CreateAnd(b_.CreateZExt(v, b_.getInt32Ty()), idx(7));
  LVal* mag = llvm::ConstantFP::get(f32, 0.0);
  for (int i = 1; i < 8; ++i) mag = b_.CreateSelect(b_.CreateICmpEQ(code, idx(i)), llvm::ConstantFP::get(f32, kMag[i]), mag);
  LVal* neg = b_.CreateICmpNE(b_.CreateAnd(v, b_.getInt8(8)), b_.getInt8(0));
  return b_.CreateSelect(neg, b_.CreateFNeg(mag), mag);
}

// e8m0 code = the f32 biased exponent of |x|, plus one when the mode rounds the
// discarded mantissa up; f32 subnormals in [2^-127, 2^-126) start from code 0.
LVal* Lowering::roundToE8M0(LVal* x, const std::string& mode, LVal* rbits) {
  LVal* bits = b_.CreateBitCast(x, b_.getInt32Ty());
  LVal* isNan = b_.CreateFCmpUNO(x, x);
  LVal* E = b_.CreateAnd(b_.CreateLShr(bits, idx(23)), idx(0xFF));
  LVal* M = b_.CreateAnd(bits, idx(0x7FFFFF));
  LVal* sub = b_.CreateICmpEQ(E, idx(0));
  LVal* tiny = b_.CreateAnd(sub, b_.CreateICmpULT(M, idx(0x400000)));  // below 2^-127: code 0 in every mode
  LVal* frac = b_.CreateSelect(sub, b_.CreateAnd(b_.CreateShl(M, idx(1)), idx(0x7FFFFF)), M);
  LVal* up;
  if (mode == "rtz") up = b_.getFalse();
  else if (mode == "ru") up = b_.CreateICmpNE(frac, idx(0));
  else if (mode == "rne") up = b_.CreateICmpUGE(frac, idx(0x400000));  // ties up: the significand 1 is odd
  else up = b_.CreateICmpUGT(b_.CreateShl(frac, idx(9)), rbits);
  LVal* code = b_.CreateAdd(E, b_.CreateZExt(b_.CreateAnd(up, b_.CreateNot(tiny)), b_.getInt32Ty()));
  code = b_.CreateIntrinsic(llvm::Intrinsic::umin, {b_.getInt32Ty()}, {code, idx(254)});
  code = b_.CreateSelect(isNan, idx(255), code);
  return b_.CreateTrunc(code, b_.getInt8Ty());
}

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
      case OpKind::ReduceSum: return f ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x);
      case OpKind::ReduceMax:
        return b_.CreateIntrinsic(f ? llvm::Intrinsic::maxnum : llvm::Intrinsic::smax, {ty}, {a, x});
      default: return b_.CreateIntrinsic(f ? llvm::Intrinsic::minnum : llvm::Intrinsic::smin, {ty}, {a, x});
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
  for (int s = 0; s < slots(in); ++s) {
    LVal* v = numel(in) < threads_ ? b_.CreateSelect(owner(in, s), r.e[s], identity) : r.e[s];
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
    guarded(b_.CreateICmpEQ(lane, idx(0)), [&]() -> LVal* {
      b_.CreateStore(acc, addr);
      return nullptr;
    }, nullptr);
    barrier();
    acc = fromSmem(0, idx(0), partial);
    for (int w = 1; w < warps; ++w) acc = combine(acc, fromSmem(0, idx(w), partial));
    barrier();
  }
  vals_[op.result()] = Regs{{acc}};
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
  bool f = isFloat(in.elem);
  Regs out;
  for (int s = 0; s < slots(outT); ++s) {
    // Coordinates of this output element, with the reduced axis re-inserted at 0.
    LVal* e = flatIndex(outT, s);
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
          case OpKind::ReduceSum: return {f ? b_.CreateFAdd(cur[0], x) : b_.CreateAdd(cur[0], x), cur[1]};
          case OpKind::ReduceMax:
            return {b_.CreateIntrinsic(f ? llvm::Intrinsic::maxnum : llvm::Intrinsic::smax, {ty}, {cur[0], x}), cur[1]};
          case OpKind::ReduceMin:
            return {b_.CreateIntrinsic(f ? llvm::Intrinsic::minnum : llvm::Intrinsic::smin, {ty}, {cur[0], x}), cur[1]};
          default: {
            LVal* better = f ? b_.CreateFCmpOGT(x, cur[0]) : b_.CreateICmpSGT(x, cur[0]);
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

void Lowering::lowerDot(const Op& op) {
  vals_[op.result()] = dotRegs(op, op.operand(0)->type(), get(op.operand(0)), op.operand(1)->type(),
                               get(op.operand(1)), get(op.operand(2)), op.result()->type());
}

// C = A B + acc for A (type at) and B (type bt) in registers of the cyclic layout.
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
  if (halfs && arch_ >= "sm_80") return dotByMma(at, bt, ct, acc, aBytes);
  auto widen = [&](LVal* v, DType d) -> LVal* {
    if (intDot) return b_.CreateSExt(v, accTy);
    if (d == DType::F8E4M3 || d == DType::F8E5M2) return castElem(op, v, Type::scalar(d), Type::scalar(DType::F32));
    return d == DType::F32 ? v : b_.CreateFPExt(v, accTy);
  };
  Regs out;
  for (int s = 0; s < slots(ct); ++s) {
    LVal* e = flatIndex(ct, s);
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
  const Type& at = op.operand(0)->type();
  const Type& bt = op.operand(2)->type();
  Regs a = dequantize(op, at, get(op.operand(0)), op.operand(1)->type(), get(op.operand(1)), true);
  Regs b = dequantize(op, bt, get(op.operand(2)), op.operand(3)->type(), get(op.operand(3)), false);
  vals_[op.result()] = dotRegs(op, at.withElem(DType::F32), a, bt.withElem(DType::F32), b, get(op.operand(4)),
                               op.result()->type());
}

// `t` is [M, K] when kIsColumn (lhs), else [K, N] (rhs); scales `st` are [M or N, K/32].
Regs Lowering::dequantize(const Op& op, const Type& t, const Regs& vals, const Type& st, const Regs& scales,
                          bool kIsColumn) {
  barrier();
  toSmem(scales, st, 0);
  barrier();
  int64_t blocks = st.shape[1];
  Regs out;
  for (int s = 0; s < slots(t); ++s) {
    LVal* e = flatIndex(t, s);
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
Regs Lowering::dotByMma(const Type& at, const Type& bt, const Type& ct, const Regs& acc, int64_t aBytes) {
  int64_t m = at.shape[0], k = at.shape[1], n = bt.shape[1];
  int64_t cBase = aBytes + k * n * storeBytes(bt);
  toSmem(acc, ct, cBase);
  barrier();
  const char* ty = at.elem == DType::BF16 ? "bf16" : "f16";
  auto* f32 = b_.getFloatTy();
  auto* i32 = b_.getInt32Ty();
  auto* retTy = llvm::StructType::get(ctx_, {f32, f32, f32, f32});
  auto* asmTy = llvm::FunctionType::get(retTy, {i32, i32, i32, i32, i32, i32, f32, f32, f32, f32}, false);
  auto* mma = llvm::InlineAsm::get(asmTy, std::string("mma.sync.aligned.m16n8k16.row.col.f32.") + ty + "." + ty +
                                              ".f32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                                   "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", true);
  LVal* lane = b_.CreateAnd(tid_, idx(31));
  LVal* warp = b_.CreateLShr(tid_, idx(5));
  LVal* group = b_.CreateLShr(lane, idx(2));                  // row within the 8-row half
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
      auto aAt = [&](LVal* r, int64_t dk) { return half(0, b_.CreateAdd(b_.CreateMul(r, idx(k)), b_.CreateAdd(pair, idx(kk + dk)))); };
      auto bAt = [&](int64_t dk) {
        LVal* row = b_.CreateAdd(pair, idx(kk + dk));
        return b_.CreateBitCast(fromSmem(aBytes, b_.CreateAdd(b_.CreateMul(row, idx(n)), bcol), bt), b_.getInt16Ty());
      };
      std::vector<LVal*> ops = {pack(aAt(r0, 0), aAt(r0, 1)), pack(aAt(r1, 0), aAt(r1, 1)),
                                pack(aAt(r0, 8), aAt(r0, 9)), pack(aAt(r1, 8), aAt(r1, 9)),
                                pack(bAt(0), bAt(1)),         pack(bAt(8), bAt(9)),
                                c[0], c[1], c[2], c[3]};
      LVal* res = b_.CreateCall(mma, ops);
      for (unsigned i = 0; i < 4; ++i) c[i] = b_.CreateExtractValue(res, i);
    }
    LVal* dst[4] = {cIdx(r0, 0), cIdx(r0, 1), cIdx(r1, 0), cIdx(r1, 1)};
    for (int i = 0; i < 4; ++i) b_.CreateStore(c[i], smemAddr(cBase, dst[i], ft));
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
  barrier();
  Regs out;
  for (int s = 0; s < slots(ct); ++s) out.e.push_back(fromSmem(cBase, flatIndex(ct, s), ct));
  return out;
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
    bool wide = t.isPtr() || t.elem == DType::I64;
    std::string fmt = "pid (%d, %d, %d) idx (%d) " + op.strAttr("prefix") + (fl ? "%f" : wide ? "%lld" : "%d") + "\n";
    LVal* fmtPtr = b_.CreateGlobalStringPtr(fmt);
    llvm::Type* valTy = fl ? b_.getDoubleTy() : wide ? b_.getInt64Ty() : b_.getInt32Ty();
    auto* argsTy = llvm::StructType::get(ctx_, {b_.getInt32Ty(), b_.getInt32Ty(), b_.getInt32Ty(), b_.getInt32Ty(), valTy});
    const Regs& r = get(v);
    for (int s = 0; s < slots(t); ++s) {
      guarded(owner(t, s), [&]() -> LVal* {
        llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
        LVal* buf = entry.CreateAlloca(argsTy);
        for (unsigned a = 0; a < 3; ++a) b_.CreateStore(b_.CreateIntrinsic(ctaid[a], {}, {}), b_.CreateStructGEP(argsTy, buf, a));
        b_.CreateStore(t.isTile() ? flatIndex(t, s) : idx(0), b_.CreateStructGEP(argsTy, buf, 3));
        LVal* x = r.e[s];
        if (fl && (t.elem == DType::F8E4M3 || t.elem == DType::F8E5M2))
          x = castElem(op, x, Type::scalar(t.elem), Type::scalar(DType::F32));
        if (fl) x = b_.CreateFPCast(x, b_.getDoubleTy());
        else if (t.isPtr()) x = b_.CreatePtrToInt(x, b_.getInt64Ty());
        else x = t.elem == DType::I1 ? b_.CreateZExt(x, valTy) : b_.CreateSExtOrTrunc(x, valTy);
        b_.CreateStore(x, b_.CreateStructGEP(argsTy, buf, 4));
        b_.CreateCall(vprintf, {fmtPtr, buf});
        return nullptr;
      }, nullptr);
    }
  }
}

// device_assert: a false element calls __assertfail, which stops the kernel; the
// launch then reports "device-side assert triggered" and the message is printed.
void Lowering::lowerAssert(const Op& op) {
  auto* ptrTy = llvm::PointerType::get(ctx_, 0);
  auto fail = mod_.getOrInsertFunction(
      "__assertfail", llvm::FunctionType::get(b_.getVoidTy(), {ptrTy, ptrTy, b_.getInt32Ty(), ptrTy, b_.getInt64Ty()}, false));
  const Type& t = op.operand(0)->type();
  const Regs& r = get(op.operand(0));
  LVal* msg = b_.CreateGlobalStringPtr(op.strAttr("message"));
  LVal* file = b_.CreateGlobalStringPtr(op.loc().known() ? *op.loc().file : "<unknown>");
  LVal* func = b_.CreateGlobalStringPtr(fn_->getName());
  for (int s = 0; s < slots(t); ++s) {
    guarded(b_.CreateAnd(owner(t, s), b_.CreateNot(r.e[s])), [&]() -> LVal* {
      b_.CreateCall(fail, {msg, file, b_.getInt32(op.loc().line), func, b_.getInt64(1)});
      return nullptr;
    }, nullptr);
  }
}

// One phi per register of each loop-carried value, entered from `pre`.
std::vector<Regs> Lowering::loopPhis(const std::vector<Value*>& inits, llvm::BasicBlock* pre) {
  std::vector<Regs> phis;
  for (Value* v : inits) {
    Regs r;
    for (LVal* x : get(v).e) {
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
    for (size_t s = 0; s < phis[i].e.size(); ++s) llvm::cast<llvm::PHINode>(phis[i].e[s])->addIncoming(yields[i].e[s], latch);
}

void Lowering::lowerFor(const Op& op) {
  const Block& body = op.region(0);
  LVal* lb = get(op.operand(0)).e[0];
  LVal* ub = get(op.operand(1)).e[0];
  LVal* step = get(op.operand(2)).e[0];
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "for.header", fn_);
  auto* bodyBB = llvm::BasicBlock::Create(ctx_, "for.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "for.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  auto* iv = b_.CreatePHI(lb->getType(), 2);
  iv->addIncoming(lb, pre);
  std::vector<Value*> inits(op.operands().begin() + 3, op.operands().end());
  std::vector<Regs> phis = loopPhis(inits, pre);
  vals_[body.arg(0)] = Regs{{iv}};
  for (size_t i = 0; i < phis.size(); ++i) vals_[body.arg(i + 1)] = phis[i];
  b_.CreateCondBr(b_.CreateICmpSLT(iv, ub), bodyBB, exit);
  b_.SetInsertPoint(bodyBB);
  lowerBlock(body);
  auto yields = terminatorRegs(body);
  iv->addIncoming(b_.CreateAdd(iv, step), b_.GetInsertBlock());
  closeLoop(phis, yields);
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  for (unsigned i = 0; i < op.numResults(); ++i) vals_[op.result(i)] = phis[i];
}

void Lowering::lowerIf(const Op& op) {
  LVal* c = get(op.operand(0)).e[0];
  auto* thenBB = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* elseBB = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
  auto* merge = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
  b_.CreateCondBr(c, thenBB, elseBB);
  std::vector<std::vector<Regs>> outs;
  std::vector<llvm::BasicBlock*> ends;
  for (unsigned r = 0; r < 2; ++r) {
    b_.SetInsertPoint(r ? elseBB : thenBB);
    lowerBlock(op.region(r));
    outs.push_back(terminatorRegs(op.region(r)));
    ends.push_back(b_.GetInsertBlock());
    b_.CreateBr(merge);
  }
  b_.SetInsertPoint(merge);
  for (unsigned i = 0; i < op.numResults(); ++i) {
    Regs r;
    for (size_t s = 0; s < outs[0][i].e.size(); ++s) {
      auto* p = b_.CreatePHI(outs[0][i].e[s]->getType(), 2);
      p->addIncoming(outs[0][i].e[s], ends[0]);
      p->addIncoming(outs[1][i].e[s], ends[1]);
      r.e.push_back(p);
    }
    vals_[op.result(i)] = r;
  }
}

void Lowering::lowerWhile(const Op& op) {
  const Block& before = op.region(0);
  const Block& after = op.region(1);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "while.before", fn_);
  auto* bodyBB = llvm::BasicBlock::Create(ctx_, "while.after", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "while.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  std::vector<Regs> phis = loopPhis(op.operands(), pre);
  for (size_t i = 0; i < phis.size(); ++i) vals_[before.arg(i)] = phis[i];
  lowerBlock(before);
  auto cond = terminatorRegs(before);
  for (unsigned i = 0; i < after.numArgs(); ++i) vals_[after.arg(i)] = cond[i + 1];
  for (unsigned i = 0; i < op.numResults(); ++i) vals_[op.result(i)] = cond[i + 1];
  b_.CreateCondBr(cond[0].e[0], bodyBB, exit);
  b_.SetInsertPoint(bodyBB);
  lowerBlock(after);
  closeLoop(phis, terminatorRegs(after));
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
}

void Lowering::lowerOp(const Op& op) {
  const Type& t = op.numResults() ? op.result()->type() : Type{};
  auto perSlot = [&](const std::function<LVal*(int)>& f) {
    Regs r;
    for (int s = 0; s < slots(t); ++s) r.e.push_back(f(s));
    vals_[op.result()] = std::move(r);
  };
  switch (op.kind()) {
    case OpKind::Constant: {
      const Attr& v = *op.attr("value");
      LVal* c;
      if (t.elem == DType::F16 || t.elem == DType::BF16 || t.elem == DType::F32 || t.elem == DType::F64)
        c = llvm::ConstantFP::get(elemType(t.elem), formats::roundToFloat(std::get<double>(v), t.elem));
      else if (isFloat(t.elem))
        c = llvm::ConstantInt::get(b_.getInt8Ty(), formats::encode(formats::roundToFloat(std::get<double>(v), t.elem), t.elem));
      else
        c = llvm::ConstantInt::get(elemType(t.elem), static_cast<uint64_t>(std::get<int64_t>(v)), true);
      return perSlot([&](int) { return c; });
    }
    case OpKind::ProgramId:
    case OpKind::NumPrograms: {
      static const llvm::Intrinsic::ID ids[2][3] = {
          {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z},
          {llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z}};
      LVal* v = b_.CreateIntrinsic(ids[op.kind() == OpKind::NumPrograms][op.intAttr("axis")], {}, {});
      return perSlot([&](int) { return v; });
    }
    case OpKind::Arange:
      return perSlot([&](int s) { return b_.CreateAdd(flatIndex(t, s), idx(op.intAttr("start"))); });
    case OpKind::Splat: {
      LVal* v = get(op.operand(0)).e[0];
      return perSlot([&](int) { return v; });
    }
    case OpKind::ExpandDims:
    case OpKind::Reshape:
      vals_[op.result()] = get(op.operand(0));  // same element count: same registers
      return;
    case OpKind::Broadcast: {
      const Type& in = op.operand(0)->type();
      vals_[op.result()] = gather(get(op.operand(0)), in, t, [&](LVal* e) {
        std::vector<LVal*> c;
        for (size_t d = 0; d < t.shape.size(); ++d) c.push_back(in.shape[d] == 1 ? idx(0) : coord(e, t.shape, d));
        return flatten(c, in.shape);
      });
      return;
    }
    case OpKind::Trans: {
      const Type& in = op.operand(0)->type();
      const auto& perm = op.intsAttr("perm");
      vals_[op.result()] = gather(get(op.operand(0)), in, t, [&](LVal* e) {
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
        LVal* e = flatIndex(t, s);
        LVal* src = b_.CreateAdd(b_.CreateMul(b_.CreateAnd(e, idx(1)), idx(numel(in))), b_.CreateLShr(e, idx(1)));
        return fromSmem(0, src, in);
      });
      barrier();
      return;
    }
    case OpKind::Split: {
      const Type& in = op.operand(0)->type();
      for (unsigned r = 0; r < 2; ++r) {
        vals_[op.result(r)] = gather(get(op.operand(0)), in, op.result(r)->type(), [&](LVal* e) {
          return b_.CreateAdd(b_.CreateShl(e, idx(1)), idx(r));
        });
      }
      barrier();
      return;
    }
    case OpKind::PtrAdd: {
      const Regs& p = get(op.operand(0));
      const Regs& off = get(op.operand(1));
      llvm::Type* et = t.elem == DType::I1 ? b_.getInt8Ty() : elemType(t.elem);
      if (t.elem == DType::F4E2M1) unsupported(op, "f4e2m1 pointers");
      return perSlot([&](int s) { return b_.CreateGEP(et, p.e[s], b_.CreateSExt(off.e[s], b_.getInt64Ty())); });
    }
    case OpKind::Cmp: {
      const Type& in = op.operand(0)->type();
      const Regs& a = get(op.operand(0));
      const Regs& c = get(op.operand(1));
      const std::string& p = op.strAttr("predicate");
      bool f = in.isNumeric() && isFloat(in.elem);
      using P = llvm::CmpInst::Predicate;
      P pred = f ? (p == "eq" ? P::FCMP_OEQ : p == "ne" ? P::FCMP_UNE : p == "lt" ? P::FCMP_OLT : p == "le" ? P::FCMP_OLE
                    : p == "gt" ? P::FCMP_OGT : P::FCMP_OGE)
                 : (p == "eq" ? P::ICMP_EQ : p == "ne" ? P::ICMP_NE : p == "lt" ? P::ICMP_SLT : p == "le" ? P::ICMP_SLE
                    : p == "gt" ? P::ICMP_SGT : p == "ge" ? P::ICMP_SGE : p == "ult" ? P::ICMP_ULT : p == "ule" ? P::ICMP_ULE
                    : p == "ugt" ? P::ICMP_UGT : P::ICMP_UGE);
      return perSlot([&](int s) { return f ? b_.CreateFCmp(pred, a.e[s], c.e[s]) : b_.CreateICmp(pred, a.e[s], c.e[s]); });
    }
    case OpKind::Select: {
      const Regs &c = get(op.operand(0)), &x = get(op.operand(1)), &y = get(op.operand(2));
      return perSlot([&](int s) { return b_.CreateSelect(c.e[s], x.e[s], y.e[s]); });
    }
    case OpKind::Cast: {
      const Type& in = op.operand(0)->type();
      const std::string& mode = op.strAttr("rounding");
      auto exotic = [](DType d) { return d == DType::E8M0 || d == DType::F4E2M1; };
      if (mode != "rne" || exotic(in.elem) || exotic(t.elem)) {
        const Regs& a = get(op.operand(0));
        const Regs* rb = op.numOperands() == 2 ? &get(op.operand(1)) : nullptr;
        return perSlot([&](int s) { return castRounded(op, a.e[s], in, t, rb ? rb->e[s] : nullptr); });
      }
      [[fallthrough]];
    }
    case OpKind::Bitcast: {
      const Type& in = op.operand(0)->type();
      const Regs& a = get(op.operand(0));
      if (op.kind() == OpKind::Bitcast) {
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
    case OpKind::AtomicAdd:
    case OpKind::AtomicMax: return lowerMemory(op);
    case OpKind::MakeDesc:
    case OpKind::DescLoad:
    case OpKind::DescStore: return lowerDesc(op);
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::Argmax: return lowerReduce(op);
    case OpKind::Dot: return lowerDot(op);
    case OpKind::For: return lowerFor(op);
    case OpKind::If: return lowerIf(op);
    case OpKind::While: return lowerWhile(op);
    case OpKind::DotScaled: return lowerDotScaled(op);
    case OpKind::Call: unsupported(op, "calls of noinline device functions");
    case OpKind::Print: return lowerPrint(op);
    case OpKind::Assert: return lowerAssert(op);
    default: break;
  }
  if (!op.has(Elementwise)) unsupported(op, "'" + std::string(op.mnemonic()) + "'");
  std::vector<const Regs*> ins;
  for (Value* v : op.operands()) ins.push_back(&get(v));
  perSlot([&](int s) {
    std::vector<LVal*> a;
    for (auto* r : ins) a.push_back(r->e[s]);
    return arith(op, a, t);
  });
}

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

}  // namespace

LoweredKernel compileKernel(const Module& m, const std::string& kernel, const LowerOptions& opts) {
  Op* f = m.lookupFunc(kernel);
  if (!f) throw InternalError("no kernel '" + kernel + "' to lower");
  if (opts.numWarps < 1 || opts.numWarps > 32 || (opts.numWarps & (opts.numWarps - 1)))
    throw UserError(f->loc(), "num_warps must be a power of two from 1 to 32, got " + std::to_string(opts.numWarps));
  llvm::LLVMContext ctx;
  llvm::Module mod("tilefuse", ctx);
  mod.setTargetTriple("nvptx64-nvidia-cuda");
  mod.setDataLayout("e-i64:64-i128:128-v16:16-v32:32-n16:32:64");
  Lowering low(ctx, mod, opts);
  low.lowerKernel(*f);
  std::string err;
  llvm::raw_string_ostream es(err);
  if (llvm::verifyModule(mod, &es)) throw InternalError("lowering produced invalid LLVM IR: " + es.str());
  linkLibdevice(mod, opts);
  LoweredKernel out;
  out.name = kernel;
  out.numThreads = 32 * opts.numWarps;
  out.sharedBytes = low.sharedBytes();
  std::string text;
  llvm::raw_string_ostream os(text);
  mod.print(os, nullptr);
  os.flush();
  auto emitted = target::optimizeAndEmitPTX(text, {opts.arch, 3});
  out.llir = std::move(emitted.optimizedIR);
  out.ptx = std::move(emitted.ptx);
  return out;
}

}  // namespace tilefuse::lower
