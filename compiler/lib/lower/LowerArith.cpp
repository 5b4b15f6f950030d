// Elementwise arithmetic, libdevice math, casts and the rounding of number formats.
#include "Lowering.h"

#include <unordered_map>

namespace tilefuse::lower::detail {
namespace {

// The libdevice functions (f32, f64) of the math ops that are one call.
const std::pair<const char*, const char*>* libdeviceNames(OpKind k) {
  static const std::unordered_map<OpKind, std::pair<const char*, const char*>> names = {
      {OpKind::Exp, {"__nv_expf", "__nv_exp"}},       {OpKind::Exp2, {"__nv_exp2f", "__nv_exp2"}},
      {OpKind::Log, {"__nv_logf", "__nv_log"}},       {OpKind::Log2, {"__nv_log2f", "__nv_log2"}},
      {OpKind::Rsqrt, {"__nv_rsqrtf", "__nv_rsqrt"}}, {OpKind::Tanh, {"__nv_tanhf", "__nv_tanh"}},
      {OpKind::Erf, {"__nv_erff", "__nv_erf"}},       {OpKind::Sin, {"__nv_sinf", "__nv_sin"}},
      {OpKind::Cos, {"__nv_cosf", "__nv_cos"}},       {OpKind::Tan, {"__nv_tanf", "__nv_tan"}},
      {OpKind::Asin, {"__nv_asinf", "__nv_asin"}},    {OpKind::Acos, {"__nv_acosf", "__nv_acos"}},
      {OpKind::Atan, {"__nv_atanf", "__nv_atan"}},    {OpKind::Sinh, {"__nv_sinhf", "__nv_sinh"}},
      {OpKind::Cosh, {"__nv_coshf", "__nv_cosh"}},    {OpKind::Asinh, {"__nv_asinhf", "__nv_asinh"}},
      {OpKind::Acosh, {"__nv_acoshf", "__nv_acosh"}}, {OpKind::Atanh, {"__nv_atanhf", "__nv_atanh"}},
      {OpKind::Erfc, {"__nv_erfcf", "__nv_erfc"}},    {OpKind::Exp10, {"__nv_exp10f", "__nv_exp10"}},
      {OpKind::Expm1, {"__nv_expm1f", "__nv_expm1"}}, {OpKind::Log10, {"__nv_log10f", "__nv_log10"}},
      {OpKind::Log1p, {"__nv_log1pf", "__nv_log1p"}}, {OpKind::Cbrt, {"__nv_cbrtf", "__nv_cbrt"}},
      {OpKind::Atan2, {"__nv_atan2f", "__nv_atan2"}}, {OpKind::Pow, {"__nv_powf", "__nv_pow"}},
      {OpKind::Hypot, {"__nv_hypotf", "__nv_hypot"}},
  };
  auto it = names.find(k);
  return it == names.end() ? nullptr : &it->second;
}

}  // namespace

// A libdevice function; f16 and bf16 compute in f32 (one more rounding, within an ulp of theirs).
LVal* Lowering::mathCall(const Op& op, const char* f32name, const char* f64name, std::vector<LVal*> xs, DType d) {
  bool wide = d == DType::F64, narrow = d == DType::F16 || d == DType::BF16;
  llvm::Type* ft = wide ? b_.getDoubleTy() : b_.getFloatTy();
  if (narrow)
    for (LVal*& x : xs) x = b_.CreateFPExt(x, ft);
  std::vector<llvm::Type*> params(xs.size(), ft);
  auto callee = mod_.getOrInsertFunction(wide ? f64name : f32name, llvm::FunctionType::get(ft, params, false));
  LVal* r = b_.CreateCall(callee, xs);
  return narrow ? b_.CreateFPTrunc(r, elemType(d)) : r;
}

// An intrinsic whose result is exact (rounding to integers, copysign): f16 and bf16 go
// through f32, where it is the same value, so no target needs the narrow form.
LVal* Lowering::exactInF32(llvm::Intrinsic::ID id, std::vector<LVal*> xs, DType d) {
  if (d != DType::F16 && d != DType::BF16) return b_.CreateIntrinsic(id, {elemType(d)}, xs);
  for (LVal*& x : xs) x = b_.CreateFPExt(x, b_.getFloatTy());
  return b_.CreateFPTrunc(b_.CreateIntrinsic(id, {b_.getFloatTy()}, xs), elemType(d));
}

LVal* Lowering::arith(const Op& op, const std::vector<LVal*>& a, const Type& t) {
  bool f = isFloat(t.elem);
  DType d = t.elem;
  bool u = isUnsigned(d);
  llvm::Type* ty = elemType(d);
  auto intr = [&](llvm::Intrinsic::ID id, std::vector<LVal*> args) { return b_.CreateIntrinsic(id, {ty}, args); };
  switch (op.kind()) {
    case OpKind::Add:
      return f ? b_.CreateFAdd(a[0], a[1]) : b_.CreateAdd(a[0], a[1]);
    case OpKind::Sub:
      return f ? b_.CreateFSub(a[0], a[1]) : b_.CreateSub(a[0], a[1]);
    case OpKind::Mul:
      return f ? b_.CreateFMul(a[0], a[1]) : b_.CreateMul(a[0], a[1]);
    case OpKind::Div:
      return f ? b_.CreateFDiv(a[0], a[1]) : u ? b_.CreateUDiv(a[0], a[1]) : b_.CreateSDiv(a[0], a[1]);
    case OpKind::Rem:  // fmod, exact like the interpreter's (LLVM's frem is x - y * trunc(x / y) here)
      return f ? mathCall(op, "__nv_fmodf", "__nv_fmod", a, d) : u ? b_.CreateURem(a[0], a[1]) : b_.CreateSRem(a[0], a[1]);
    case OpKind::And:
      return b_.CreateAnd(a[0], a[1]);
    case OpKind::Or:
      return b_.CreateOr(a[0], a[1]);
    case OpKind::Xor:
      return b_.CreateXor(a[0], a[1]);
    case OpKind::Shl:
    case OpKind::Shr: {
      // Shifts by the width or more give 0 (or the sign) as in the interpreter, not poison;
      // unsigned types shift right logically.
      unsigned w = ty->getIntegerBitWidth();
      LVal* big = b_.CreateICmpUGE(a[1], llvm::ConstantInt::get(ty, w));
      LVal* amt = b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), a[1]);
      if (op.kind() == OpKind::Shl) return b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), b_.CreateShl(a[0], amt));
      if (u) return b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), b_.CreateLShr(a[0], amt));
      LVal* sign = b_.CreateAShr(a[0], llvm::ConstantInt::get(ty, w - 1));
      return b_.CreateSelect(big, sign, b_.CreateAShr(a[0], amt));
    }
    case OpKind::Min:
      return intr(f ? llvm::Intrinsic::minnum : u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, a);
    case OpKind::Max:
      return intr(f ? llvm::Intrinsic::maxnum : u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, a);
    case OpKind::Umulhi: {
      // mul.hi.u32 / mul.hi.u64; narrower widths multiply in 32 bits.
      unsigned w = ty->getIntegerBitWidth();
      if (w == 32) return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mulhi_ui, {}, a);
      if (w == 64) return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mulhi_ull, {}, a);
      LVal* p = b_.CreateMul(b_.CreateZExt(a[0], b_.getInt32Ty()), b_.CreateZExt(a[1], b_.getInt32Ty()));
      return b_.CreateTrunc(b_.CreateLShr(p, idx(w)), ty);
    }
    case OpKind::Neg:
      return f ? b_.CreateFNeg(a[0]) : b_.CreateNeg(a[0]);
    case OpKind::Fma:
      return intr(llvm::Intrinsic::fma, a);
    case OpKind::Abs:
      if (u) return a[0];
      return f ? intr(llvm::Intrinsic::fabs, a) : b_.CreateIntrinsic(llvm::Intrinsic::abs, {ty}, {a[0], b_.getFalse()});
    case OpKind::Sqrt:
      return intr(llvm::Intrinsic::sqrt, a);
    case OpKind::Floor:
      return intr(llvm::Intrinsic::floor, a);
    case OpKind::Ceil:
      return intr(llvm::Intrinsic::ceil, a);
    case OpKind::Trunc:
      return exactInF32(llvm::Intrinsic::trunc, a, d);
    case OpKind::Round:
      return exactInF32(llvm::Intrinsic::round, a, d);
    case OpKind::Rint:
      return exactInF32(llvm::Intrinsic::rint, a, d);
    case OpKind::Copysign:
      return exactInF32(llvm::Intrinsic::copysign, a, d);
    default:
      if (const auto* names = libdeviceNames(op.kind())) return mathCall(op, names->first, names->second, a, d);
      unsupported(op, "'" + std::string(op.mnemonic()) + "'");
  }
}

LVal* Lowering::castElem(const Op& op, LVal* v, const Type& from, const Type& to) {
  DType s = from.elem, d = to.elem;
  llvm::Type* dt = elemType(d);
  bool fp8 = s == DType::F8E4M3 || s == DType::F8E5M2 || d == DType::F8E4M3 || d == DType::F8E5M2;
  bool exotic = s == DType::E8M0 || s == DType::F4E2M1 || d == DType::E8M0 || d == DType::F4E2M1;
  if (exotic) throw InternalError("castElem on e8m0/f4e2m1: castRounded handles those");
  if (fp8) {
    if (opts_.arch != "sm_89" && opts_.arch.rfind("sm_9", 0) != 0) unsupported(op, "fp8 casts before sm_89");
    const char* fmt = (s == DType::F8E4M3 || d == DType::F8E4M3) ? "e4m3x2" : "e5m2x2";
    if (d == DType::F8E4M3 || d == DType::F8E5M2) {
      LVal* x = isFloat(s) ? (s == DType::F32 ? v : b_.CreateFPCast(v, b_.getFloatTy()))
                           : b_.CreateSIToFP(v, b_.getFloatTy());
      auto* asmTy = llvm::FunctionType::get(b_.getInt16Ty(), {b_.getFloatTy()}, false);
      auto* ia = llvm::InlineAsm::get(
          asmTy, std::string("{ .reg .f32 z; mov.f32 z, 0f00000000; cvt.rn.satfinite.") + fmt + ".f32 $0, z, $1; }",
          "=h,f", false);
      return b_.CreateTrunc(b_.CreateCall(ia, {x}), b_.getInt8Ty());
    }
    auto* asmTy = llvm::FunctionType::get(b_.getInt32Ty(), {b_.getInt16Ty()}, false);
    auto* ia = llvm::InlineAsm::get(asmTy, std::string("cvt.rn.f16x2.") + fmt + " $0, $1;", "=r,h", false);
    LVal* pair = b_.CreateCall(ia, {b_.CreateZExt(v, b_.getInt16Ty())});
    LVal* h = b_.CreateBitCast(b_.CreateTrunc(pair, b_.getInt16Ty()), b_.getHalfTy());
    Type f16 = Type::scalar(DType::F16);
    return d == DType::F16 ? h : castElem(op, h, f16, to);
  }
  // Before sm_90 PTX has no cvt.rn.bf16 from f64 or integers and LLVM goes through f32,
  // rounding twice; castRounded rounds once (integers through f64, rounded to odd).
  bool viaF32 = d == DType::BF16 && (s == DType::F64 || (isInt(s) && s != DType::I1));
  if (viaF32 && opts_.arch.rfind("sm_9", 0) != 0) return castRounded(op, v, from, to, nullptr);
  // bf16 and f16 have the same width, so LLVM's FPCast would pick an invalid fpext:
  // through f32, which holds every bf16 exactly (one rounding, at the f16 end).
  if ((s == DType::BF16 && d == DType::F16) || (s == DType::F16 && d == DType::BF16))
    return b_.CreateFPTrunc(b_.CreateFPExt(v, b_.getFloatTy()), dt);
  if (isFloat(s) && isFloat(d)) return b_.CreateFPCast(v, dt);
  // Integers extend by the source's signedness (i1 and unsigned types zero-extend), as in C.
  bool zext = s == DType::I1 || isUnsigned(s);
  if (isInt(s) && isInt(d)) {
    if (d == DType::I1) return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    return zext ? b_.CreateZExtOrTrunc(v, dt) : b_.CreateSExtOrTrunc(v, dt);
  }
  if (isInt(s)) return zext ? b_.CreateUIToFP(v, dt) : b_.CreateSIToFP(v, dt);
  if (d == DType::I1) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
  auto sat = isUnsigned(d) ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat;
  return b_.CreateIntrinsic(sat, {dt, v->getType()}, {v});
}

// Casts with a rounding mode other than rne, and casts from or to e8m0 and f4e2m1:
// the rounding of formats::roundToFloat, written with integer and f64 operations,
// so the bits match the interpreter. Sources are widened to f32 (exact).
// Triton's float8e4b15 conversions (bit operations on f16, formats::roundToFloat's):
// from it, the f16 with its bits shifted left by 7; to it, the source rounded to f16
// in the cast's mode, its magnitude clamped to 1.75 and shifted right by 7 rounding half
// away from zero.
LVal* Lowering::castE4B15(const Op& op, LVal* v, const Type& from, const Type& to) {
  DType s = from.elem, d = to.elem;
  Type f16 = Type::scalar(DType::F16), f32 = Type::scalar(DType::F32);
  auto* i16 = b_.getInt16Ty();
  if (s == DType::F8E4B15) {
    LVal* w = b_.CreateZExt(v, i16);
    LVal* bits = b_.CreateOr(b_.CreateShl(b_.CreateAnd(w, b_.getInt16(0x80)), 8),
                             b_.CreateShl(b_.CreateAnd(w, b_.getInt16(0x7F)), 7));
    LVal* h = b_.CreateBitCast(bits, b_.getHalfTy());
    if (d == DType::F16) return h;
    if (d == DType::F8E4B15) return v;
    LVal* x = b_.CreateFPExt(h, b_.getFloatTy());  // exact, and every value is exact in d's float types
    if (d == DType::F32) return x;
    if (d == DType::E8M0 || d == DType::F4E2M1 || op.strAttr("rounding") != "rne") return castRounded(op, x, f32, to, nullptr);
    return castElem(op, x, f32, to);
  }
  LVal* h = s == DType::F16 ? v
            : (op.strAttr("rounding") == "rne" && s != DType::E8M0 && s != DType::F4E2M1)
                ? castElem(op, v, from, f16)
                : castRounded(op, v, from, f16, nullptr);
  LVal* bits = b_.CreateBitCast(h, i16);
  LVal* mag = b_.CreateIntrinsic(llvm::Intrinsic::umin, {i16}, {b_.CreateAnd(bits, b_.getInt16(0x7FFF)), b_.getInt16(0x3F00)});
  LVal* r = b_.CreateOr(b_.CreateAnd(b_.CreateLShr(bits, 8), b_.getInt16(0x80)), b_.CreateLShr(b_.CreateAdd(mag, b_.getInt16(0x40)), 7));
  return b_.CreateTrunc(r, b_.getInt8Ty());
}

LVal* Lowering::castRounded(const Op& op, LVal* v, const Type& from, const Type& to, LVal* rbits) {
  DType s = from.elem, d = to.elem;
  if (s == DType::F8E4B15 || d == DType::F8E4B15) return castE4B15(op, v, from, to);
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
  if (!isFloat(d)) unsupported(op, "float-to-int casts with rounding '" + mode + "'");
  auto* f64 = b_.getDoubleTy();
  LVal* x;
  if (!isFloat(s)) {
    // Integers go through f64 like the interpreter's: exact up to 2^53, beyond that
    // rounded to odd, so that rounding to the target afterwards is still correct.
    if (s == DType::I1) return castRounded(op, b_.CreateUIToFP(v, f64), Type::scalar(DType::F64), to, rbits);
    if (d == DType::F64) {
      // One conversion in the cast's mode (cvt.rz / cvt.rp), from the value widened to 64 bits.
      LVal* w = isUnsigned(s) ? b_.CreateZExt(v, b_.getInt64Ty()) : b_.CreateSExt(v, b_.getInt64Ty());
      std::string cvt = std::string("cvt.") + (mode == "ru" ? "rp" : "rz") + ".f64." + (isUnsigned(s) ? "u64" : "s64");
      auto* fnTy = llvm::FunctionType::get(f64, {b_.getInt64Ty()}, false);
      auto* ia = llvm::InlineAsm::get(fnTy, cvt + " $0, $1;", "=d,l", false);
      return b_.CreateCall(ia, {w});
    }
    if (s == DType::U64) return castRounded(op, u64ToOddDouble(v), Type::scalar(DType::F64), to, rbits);
    LVal* w = isUnsigned(s) ? b_.CreateZExt(v, b_.getInt64Ty()) : b_.CreateSExt(v, b_.getInt64Ty());
    x = b_.CreateSIToFP(w, f64);
    if (d == DType::F64) return x;
    if (s == DType::I64) {
      // d - v as a sign: +1 when the conversion went up (d >= 2^63 always has).
      LVal* big = b_.CreateFCmpOGE(x, llvm::ConstantFP::get(f64, 0x1p63));
      LVal* back = b_.CreateFPToSI(b_.CreateSelect(big, llvm::ConstantFP::get(f64, 0.0), x), b_.getInt64Ty());
      LVal* up = b_.CreateOr(big, b_.CreateICmpSGT(back, w));
      LVal* inexact = b_.CreateOr(big, b_.CreateICmpNE(back, w));
      LVal* bits = b_.CreateBitCast(x, b_.getInt64Ty());
      LVal* even = b_.CreateICmpEQ(b_.CreateAnd(bits, b_.getInt64(1)), b_.getInt64(0));
      // Step the magnitude toward v: down when the conversion moved away from zero.
      LVal* away = b_.CreateICmpEQ(up, b_.CreateICmpSGE(w, b_.getInt64(0)));
      LVal* stepped = b_.CreateSelect(away, b_.CreateSub(bits, b_.getInt64(1)), b_.CreateAdd(bits, b_.getInt64(1)));
      x = b_.CreateBitCast(b_.CreateSelect(b_.CreateAnd(inexact, even), stepped, bits), f64);
    }
  } else if (s == DType::F64) {
    x = v;
  } else {
    x = s == DType::F32                              ? v
        : (s == DType::F8E4M3 || s == DType::F8E5M2) ? castElem(op, v, from, Type::scalar(DType::F32))
                                                     : b_.CreateFPExt(v, f32);
  }
  bool wide = x->getType()->isDoubleTy();
  if (d == DType::E8M0) return wide ? roundWideToE8M0(x, mode, rbits) : roundToE8M0(x, mode, rbits);
  if (d == DType::F64) return wide ? x : b_.CreateFPExt(x, f64);
  if (d == DType::F32 && !wide) return x;
  return roundToFormat(x, d, mode, rbits);
}

// A u64 as an f64 rounded to odd like the interpreter's, so that a later rounding to a
// narrower float is one correct rounding.
LVal* Lowering::u64ToOddDouble(LVal* v) {
  auto* f64 = b_.getDoubleTy();
  auto* i64 = b_.getInt64Ty();
  LVal* x = b_.CreateUIToFP(v, f64);
  // Which way the conversion rounded: 2^64 lies above every u64; below it, convert back.
  LVal* top = b_.CreateFCmpOGE(x, llvm::ConstantFP::get(f64, 0x1p64));
  LVal* back = b_.CreateFPToUI(b_.CreateSelect(top, llvm::ConstantFP::get(f64, 0.0), x), i64);
  LVal* up = b_.CreateOr(top, b_.CreateICmpUGT(back, v));
  LVal* inexact = b_.CreateOr(top, b_.CreateICmpNE(back, v));
  LVal* bits = b_.CreateBitCast(x, i64);
  LVal* even = b_.CreateICmpEQ(b_.CreateAnd(bits, b_.getInt64(1)), b_.getInt64(0));
  // Magnitudes are non-negative: step down when the conversion went up, else up.
  LVal* stepped = b_.CreateSelect(up, b_.CreateSub(bits, b_.getInt64(1)), b_.CreateAdd(bits, b_.getInt64(1)));
  return b_.CreateBitCast(b_.CreateSelect(b_.CreateAnd(inexact, even), stepped, bits), f64);
}

LVal* Lowering::roundToFormat(LVal* x, DType to, const std::string& mode, LVal* rbits) {
  struct Fmt {
    int mant, emin;
    double maxFinite;
    bool ieeeInf;  // overflow may give inf (f16, bf16); the others saturate
  };
  Fmt f = to == DType::F32      ? Fmt{23, -126, 0x1.fffffep127, true}
          : to == DType::F16    ? Fmt{10, -14, 65504.0, true}
          : to == DType::BF16   ? Fmt{7, -126, 0x1.fep127, true}
          : to == DType::F8E4M3 ? Fmt{3, -6, 448.0, false}
          : to == DType::F8E5M2 ? Fmt{2, -14, 57344.0, false}
                                : Fmt{1, 0, 6.0, false};  // f4e2m1
  auto* f64 = b_.getDoubleTy();
  auto* i64 = b_.getInt64Ty();
  // x is f32 or f64; the rounding below is exact in f64 either way.
  bool wide = x->getType()->isDoubleTy();
  LVal* bits = b_.CreateBitCast(x, wide ? i64 : b_.getInt32Ty());
  LVal* neg = b_.CreateICmpSLT(bits, llvm::ConstantInt::get(bits->getType(), 0));
  LVal* isNan = b_.CreateFCmpUNO(x, x);
  LVal* ax = b_.CreateIntrinsic(llvm::Intrinsic::fabs, {x->getType()}, {x});
  LVal* isInf = b_.CreateFCmpOEQ(ax, llvm::ConstantFP::getInfinity(x->getType()));
  LVal* ad = wide ? ax : b_.CreateFPExt(ax, f64);
  // The exponent of |x| (subnormals of the source are below every emin here), clamped to the format's emin.
  LVal* e = wide ? b_.CreateSub(b_.CreateTrunc(b_.CreateAnd(b_.CreateLShr(bits, b_.getInt64(52)), b_.getInt64(0x7FF)),
                                               b_.getInt32Ty()),
                                idx(1023))
                 : b_.CreateSub(b_.CreateAnd(b_.CreateLShr(bits, idx(23)), idx(0xFF)), idx(127));
  LVal* exp = b_.CreateIntrinsic(llvm::Intrinsic::smax, {b_.getInt32Ty()}, {e, idx(f.emin)});
  LVal* k = b_.CreateSExt(b_.CreateSub(idx(f.mant), exp), i64);  // |x| / quantum = |x| * 2^k
  auto pow2 = [&](LVal* p) {
    return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(p, b_.getInt64(1023)), b_.getInt64(52)), f64);
  };
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
  if (to == DType::F32 || to == DType::F16 || to == DType::BF16) {
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
  auto* ia = llvm::InlineAsm::get(
      asmTy, std::string("{ .reg .f32 z; mov.f32 z, 0f00000000; cvt.rn.satfinite.") + fmt + ".f32 $0, z, $1; }", "=h,f",
      false);
  return b_.CreateTrunc(b_.CreateCall(ia, {v32}), b_.getInt8Ty());
}

// Code c is 2^(c-127): the f32 with biased exponent c; c = 0 is the subnormal 2^-127, 255 is NaN.
LVal* Lowering::decodeE8M0(LVal* v) {
  LVal* c = b_.CreateZExt(v, b_.getInt32Ty());
  LVal* bits =
      b_.CreateSelect(b_.CreateICmpEQ(c, idx(0)), idx(0x00400000),
                      b_.CreateSelect(b_.CreateICmpEQ(c, idx(255)), idx(0x7FC00000), b_.CreateShl(c, idx(23))));
  return b_.CreateBitCast(bits, b_.getFloatTy());
}

// Magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 by the low three bits; bit 3 is the sign.
LVal* Lowering::decodeF4(LVal* v) {
  static const float kMag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  auto* f32 = b_.getFloatTy();
  LVal* code = b_.CreateAnd(b_.CreateZExt(v, b_.getInt32Ty()), idx(7));
  LVal* mag = llvm::ConstantFP::get(f32, 0.0);
  for (int i = 1; i < 8; ++i)
    mag = b_.CreateSelect(b_.CreateICmpEQ(code, idx(i)), llvm::ConstantFP::get(f32, kMag[i]), mag);
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
  if (mode == "rtz")
    up = b_.getFalse();
  else if (mode == "ru")
    up = b_.CreateICmpNE(frac, idx(0));
  else if (mode == "rne")
    up = b_.CreateICmpUGE(frac, idx(0x400000));  // ties up: the significand 1 is odd
  else
    up = b_.CreateICmpUGT(b_.CreateShl(frac, idx(9)), rbits);
  LVal* code = b_.CreateAdd(E, b_.CreateZExt(b_.CreateAnd(up, b_.CreateNot(tiny)), b_.getInt32Ty()));
  code = b_.CreateIntrinsic(llvm::Intrinsic::umin, {b_.getInt32Ty()}, {code, idx(254)});
  code = b_.CreateSelect(isNan, idx(255), code);
  return b_.CreateTrunc(code, b_.getInt8Ty());
}

// The same from f64: below 2^-127 code 0, from 2^127 (and inf) code 254, otherwise the
// exponent of |x| plus one when the mode rounds its 52 discarded mantissa bits up.
LVal* Lowering::roundWideToE8M0(LVal* x, const std::string& mode, LVal* rbits) {
  auto* i64 = b_.getInt64Ty();
  auto* f64 = b_.getDoubleTy();
  LVal* bits = b_.CreateBitCast(x, i64);
  LVal* ax = b_.CreateIntrinsic(llvm::Intrinsic::fabs, {f64}, {x});
  LVal* E = b_.CreateTrunc(b_.CreateAnd(b_.CreateLShr(bits, b_.getInt64(52)), b_.getInt64(0x7FF)), b_.getInt32Ty());
  LVal* M = b_.CreateAnd(bits, b_.getInt64((int64_t(1) << 52) - 1));
  LVal* up;
  if (mode == "rtz")
    up = b_.getFalse();
  else if (mode == "ru")
    up = b_.CreateICmpNE(M, b_.getInt64(0));
  else if (mode == "rne")
    up = b_.CreateICmpUGE(M, b_.getInt64(int64_t(1) << 51));  // ties up, as from f32
  else                                                        // fraction * 2^32 > rbits, with fraction = M / 2^52
    up = b_.CreateICmpUGT(M, b_.CreateShl(b_.CreateZExt(rbits, i64), b_.getInt64(20)));
  LVal* code = b_.CreateAdd(b_.CreateSub(E, idx(1023 - 127)), b_.CreateZExt(up, b_.getInt32Ty()));
  code = b_.CreateIntrinsic(llvm::Intrinsic::smin, {b_.getInt32Ty()}, {code, idx(254)});
  code = b_.CreateSelect(b_.CreateFCmpOLT(ax, llvm::ConstantFP::get(f64, 0x1p-127)), idx(0), code);
  code = b_.CreateSelect(b_.CreateFCmpOGE(ax, llvm::ConstantFP::get(f64, 0x1p127)), idx(254), code);
  code = b_.CreateSelect(b_.CreateFCmpUNO(x, x), idx(255), code);
  return b_.CreateTrunc(code, b_.getInt8Ty());
}

}  // namespace tilefuse::lower::detail
