// canonicalize: folds constants and applies algebraic identities until nothing changes.
//   %c = add %two, %three : i32                   =>   %c = constant {value = 5} : i32
//   %y = mul %x, %one : f32                       =>   (uses of %y use %x)
//   %r = if %true : f32 { A; yield %a } { B }     =>   A  (uses of %r use %a)
//   %r = for %c4, %c2, %st, %init ... { ... }     =>   (uses of %r use %init)
// Integers wrap at their bit width, division truncates and shr is arithmetic (on
// unsigned types: unsigned division, logical shr, unsigned min/max);
// float results are rounded to the dtype. Folds whose result the target could
// compute differently (division by zero, NaN in min/max/cmp, float-to-int
// rounding, signed views of i1) are left alone. Old ops that become unused stay
// for dce.
#include <algorithm>
#include <cmath>
#include <optional>

#include "tilefuse/ir/Builder.h"
#include "tilefuse/passes/Passes.h"

namespace tilefuse::passes {
namespace {

// --- Values of constants ---

// `v` at the bit width of `d`: sign-extended, except i1 which is 0 or 1 and unsigned
// types, zero-extended (u64 keeps its bits).
int64_t wrapInt(int64_t v, DType d) {
  int bits = bitWidth(d);
  if (bits == 1) return v & 1;
  if (bits == 64) return v;
  uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (u >> (bits - 1) && !isUnsigned(d)) u |= ~mask;
  return static_cast<int64_t>(u);
}

int64_t minInt(DType d) { return bitWidth(d) == 64 ? INT64_MIN : -(int64_t{1} << (bitWidth(d) - 1)); }

uint64_t asUnsigned(int64_t v, DType d) {
  int bits = bitWidth(d);
  return bits == 64 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(v) & ((uint64_t{1} << bits) - 1);
}

// Rounds to nearest even in a binary format with `p` significand bits and
// exponents [emin, emax], with gradual underflow and overflow to infinity.
double roundToFormat(double v, int p, int emin, int emax) {
  if (!std::isfinite(v) || v == 0) return v;
  double ulp = std::ldexp(1.0, std::max(std::ilogb(v), emin) - (p - 1));
  double r = std::nearbyint(v / ulp) * ulp;  // scaling by a power of two is exact
  double maxFinite = std::ldexp(2.0 - std::ldexp(1.0, 1 - p), emax);
  return std::fabs(r) > maxFinite ? std::copysign(INFINITY, v) : r;
}

// `v` rounded to dtype `d`; nullopt for the storage-only formats, which do no arithmetic.
std::optional<double> roundFloat(double v, DType d) {
  switch (d) {
    case DType::F64:
      return v;
    case DType::F32:
      return static_cast<double>(static_cast<float>(v));
    case DType::F16:
      return roundToFormat(v, 11, -14, 15);
    case DType::BF16:
      return roundToFormat(v, 8, -126, 127);
    default:
      return std::nullopt;
  }
}

const Attr* constAttr(const Value* v) {
  const Op* d = v->definingOp();
  return d && d->kind() == OpKind::Constant ? d->attr("value") : nullptr;
}

std::optional<int64_t> intConst(const Value* v) {
  const Attr* a = constAttr(v);
  if (!a || !std::holds_alternative<int64_t>(*a)) return std::nullopt;
  return wrapInt(std::get<int64_t>(*a), v->type().elem);
}

std::optional<double> floatConst(const Value* v) {
  const Attr* a = constAttr(v);
  if (!a || !std::holds_alternative<double>(*a)) return std::nullopt;
  return roundFloat(std::get<double>(*a), v->type().elem);
}

bool isIntConst(const Value* v, int64_t want) {
  auto c = intConst(v);
  return c && *c == wrapInt(want, v->type().elem);
}

// Matches the float value including the sign of zero.
bool isFloatConst(const Value* v, double want) {
  auto c = floatConst(v);
  return c && *c == want && std::signbit(*c) == std::signbit(want);
}

// --- Folding rules on plain numbers ---

std::optional<int64_t> foldInt(OpKind k, int64_t a, int64_t b, DType d) {
  auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  bool i1 = d == DType::I1;
  if (isUnsigned(d)) {
    switch (k) {
      case OpKind::Div:
      case OpKind::Rem:
        if (b == 0) return std::nullopt;
        return static_cast<int64_t>(k == OpKind::Div ? ua / ub : ua % ub);
      case OpKind::Shr:
        if (b < 0 || b >= bitWidth(d)) return std::nullopt;
        return static_cast<int64_t>(ua >> b);
      case OpKind::Min:
        return static_cast<int64_t>(std::min(ua, ub));
      case OpKind::Max:
        return static_cast<int64_t>(std::max(ua, ub));
      default:
        break;
    }
  }
  switch (k) {
    case OpKind::Add:
      return wrapInt(static_cast<int64_t>(ua + ub), d);
    case OpKind::Sub:
      return wrapInt(static_cast<int64_t>(ua - ub), d);
    case OpKind::Mul:
      return wrapInt(static_cast<int64_t>(ua * ub), d);
    case OpKind::Div:
    case OpKind::Rem:
      // Division by zero and MIN / -1 are undefined on the target.
      if (i1 || b == 0 || (b == -1 && a == minInt(d))) return std::nullopt;
      return k == OpKind::Div ? a / b : a % b;
    case OpKind::And:
      return a & b;
    case OpKind::Or:
      return a | b;
    case OpKind::Xor:
      return a ^ b;
    case OpKind::Shl:
      if (b < 0 || b >= bitWidth(d)) return std::nullopt;
      return wrapInt(static_cast<int64_t>(ua << b), d);
    case OpKind::Shr:
      if (i1 || b < 0 || b >= bitWidth(d)) return std::nullopt;
      return a >> b;
    case OpKind::Min:
      return i1 ? std::nullopt : std::optional(std::min(a, b));
    case OpKind::Max:
      return i1 ? std::nullopt : std::optional(std::max(a, b));
    default:
      return std::nullopt;
  }
}

std::optional<double> foldFloat(OpKind k, double a, double b) {
  switch (k) {
    case OpKind::Add:
      return a + b;
    case OpKind::Sub:
      return a - b;
    case OpKind::Mul:
      return a * b;
    case OpKind::Div:
      return a / b;
    case OpKind::Rem:
      return std::fmod(a, b);
    case OpKind::Min:
    case OpKind::Max:
      // NaN propagation and the order of signed zeros differ between min/max flavours.
      if (std::isnan(a) || std::isnan(b) || (a == b && std::signbit(a) != std::signbit(b))) return std::nullopt;
      return k == OpKind::Min ? std::min(a, b) : std::max(a, b);
    default:
      return std::nullopt;
  }
}

template <class T>
std::optional<bool> compare(std::string_view pred, T a, T b) {
  if (pred[0] == 'u') pred.remove_prefix(1);
  if (pred == "eq") return a == b;
  if (pred == "ne") return a != b;
  if (pred == "lt") return a < b;
  if (pred == "le") return a <= b;
  if (pred == "gt") return a > b;
  if (pred == "ge") return a >= b;
  return std::nullopt;
}

bool isBinaryArith(OpKind k) {
  switch (k) {
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
    case OpKind::Rem:
    case OpKind::And:
    case OpKind::Or:
    case OpKind::Xor:
    case OpKind::Shl:
    case OpKind::Shr:
    case OpKind::Min:
    case OpKind::Max:
      return true;
    default:
      return false;
  }
}

// --- The rewriter ---

class Canonicalizer {
 public:
  explicit Canonicalizer(Module& m) : b_(m) {}

  // One sweep over `block` and the regions nested in it; true when anything changed.
  bool sweep(Block& block) {
    bool changed = false;
    for (auto it = block.ops().begin(); it != block.ops().end();) {
      Op* op = (it++)->get();  // `op` may be erased or replaced by ops inserted before it
      for (unsigned r = 0; r < op->numRegions(); ++r) changed |= sweep(op->region(r));
      changed |= simplify(op);
    }
    return changed;
  }

 private:
  bool simplify(Op* op) {
    switch (op->kind()) {
      case OpKind::If:
        return foldIf(op);
      case OpKind::For:
        return foldFor(op);
      case OpKind::Trans:
        if (composeTrans(op)) return true;
        break;
      default:
        break;
    }
    if (op->numResults() != 1 || op->kind() == OpKind::Constant) return false;
    Value* v = fold(op);
    if (!v) return false;
    op->result()->replaceAllUsesWith(v);
    op->erase();
    return true;
  }

  // A value equal to the single result of `op`, or null.
  Value* fold(Op* op) {
    if (op->numOperands() == 0) return nullptr;
    if (isBinaryArith(op->kind())) return foldBinary(op);
    Value* x = op->operand(0);
    const Type& t = op->result()->type();
    switch (op->kind()) {
      case OpKind::Neg:
        if (Op* inner = x->definingOp(); inner && inner->kind() == OpKind::Neg) return inner->operand(0);
        if (auto c = intConst(x)) return constant(op, foldInt(OpKind::Sub, 0, *c, t.elem).value());
        if (auto c = floatConst(x)) return constant(op, -*c);
        return nullptr;
      case OpKind::Cmp:
        return foldCmp(op);
      case OpKind::Select:
        if (op->operand(1) == op->operand(2)) return op->operand(1);
        if (auto c = intConst(x)) return op->operand(*c ? 1 : 2);
        return nullptr;
      case OpKind::Cast:
        return foldCast(op);
      case OpKind::PtrAdd:
        return isIntConst(op->operand(1), 0) ? x : nullptr;
      case OpKind::Broadcast:
      case OpKind::Reshape:
        if (x->type() == t) return x;
        [[fallthrough]];
      case OpKind::Splat:
      case OpKind::ExpandDims:
      case OpKind::Trans:
        // Constants of tile type are splats, so the value carries over to any shape.
        if (const Attr* a = constAttr(x)) return constant(op, *a);
        return nullptr;
      default:
        return nullptr;
    }
  }

  Value* foldBinary(Op* op) {
    OpKind k = op->kind();
    Value *x = op->operand(0), *y = op->operand(1);
    DType d = op->result()->type().elem;
    if (isInt(d)) {
      auto a = intConst(x), b = intConst(y);
      if (a && b) {
        auto r = foldInt(k, *a, *b, d);
        return r ? constant(op, wrapInt(*r, d)) : nullptr;
      }
      return intIdentity(op, x, y);
    }
    auto a = floatConst(x), b = floatConst(y);
    if (a && b) {
      auto r = foldFloat(k, *a, *b);
      if (auto rounded = r ? roundFloat(*r, d) : std::nullopt) return constant(op, *rounded);
      return nullptr;
    }
    return floatIdentity(op, x, y);
  }

  Value* intIdentity(Op* op, Value* x, Value* y) {
    auto is = [](Value* v, int64_t c) { return isIntConst(v, c); };
    switch (op->kind()) {
      case OpKind::Add:
        if (is(y, 0)) return x;
        return is(x, 0) ? y : nullptr;
      case OpKind::Sub:
        if (is(y, 0)) return x;
        return x == y ? constant(op, int64_t{0}) : nullptr;
      case OpKind::Mul:
        if (is(y, 1) || is(x, 0)) return x;
        return is(x, 1) || is(y, 0) ? y : nullptr;
      case OpKind::Div:
        return is(y, 1) ? x : nullptr;
      case OpKind::And:
        if (is(y, -1) || is(x, 0) || x == y) return x;
        return is(x, -1) || is(y, 0) ? y : nullptr;
      case OpKind::Or:
        if (is(y, 0) || is(x, -1) || x == y) return x;
        return is(x, 0) || is(y, -1) ? y : nullptr;
      case OpKind::Xor:
        if (is(y, 0)) return x;
        if (is(x, 0)) return y;
        return x == y ? constant(op, int64_t{0}) : nullptr;
      case OpKind::Shl:
      case OpKind::Shr:
        return is(y, 0) ? x : nullptr;
      case OpKind::Min:
      case OpKind::Max:
        return x == y ? x : nullptr;
      default:
        return nullptr;
    }
  }

  // Only identities exact in IEEE arithmetic: x + 0.0 is not x when x is -0.0,
  // and x * 0.0 is not 0.0 when x is negative, infinite or NaN.
  Value* floatIdentity(Op* op, Value* x, Value* y) {
    switch (op->kind()) {
      case OpKind::Add:
        if (isFloatConst(y, -0.0)) return x;
        if (isFloatConst(x, -0.0)) return y;
        return nullptr;
      case OpKind::Sub:
        return isFloatConst(y, 0.0) ? x : nullptr;
      case OpKind::Mul:
        if (isFloatConst(y, 1.0)) return x;
        if (isFloatConst(x, 1.0)) return y;
        return nullptr;
      case OpKind::Div:
        return isFloatConst(y, 1.0) ? x : nullptr;
      case OpKind::Min:
      case OpKind::Max:
        return x == y ? x : nullptr;
      default:
        return nullptr;
    }
  }

  Value* foldCmp(Op* op) {
    Value *x = op->operand(0), *y = op->operand(1);
    const std::string& pred = op->strAttr("predicate");
    DType d = x->type().elem;
    bool signedOrder = pred != "eq" && pred != "ne" && pred[0] != 'u';
    std::optional<bool> r;
    if (x == y && x->type().isIntLike()) {
      r = pred == "eq" || pred.ends_with("le") || pred.ends_with("ge");
    } else if (auto a = intConst(x), b = intConst(y); a && b) {
      // A signed view of i1 is ambiguous (is true 1 or -1?), so only eq, ne and unsigned fold.
      if (pred[0] == 'u')
        r = compare(pred, asUnsigned(*a, d), asUnsigned(*b, d));
      else if (!(signedOrder && d == DType::I1))
        r = compare(pred, *a, *b);
    } else if (auto fa = floatConst(x), fb = floatConst(y); fa && fb && !std::isnan(*fa) && !std::isnan(*fb)) {
      r = compare(pred, *fa, *fb);
    }
    return r ? constant(op, int64_t{*r}) : nullptr;
  }

  // Casts with rounding rne between integers, and to f32 or f64. i1 converts as
  // unsigned (true is 1, as intConst reads it). Float-to-int folds only integral
  // values, where the rounding convention does not matter.
  Value* foldCast(Op* op) {
    Value* x = op->operand(0);
    const Type& to = op->result()->type();
    if (op->numOperands() != 1) return nullptr;
    if (x->type() == to) return x;
    if (op->strAttr("rounding") != "rne") return nullptr;
    DType dst = to.elem;
    if (auto c = intConst(x)) {
      int64_t v = *c;
      if (dst == DType::I1) return v == 0 || v == 1 ? constant(op, v) : nullptr;
      if (isInt(dst)) return constant(op, wrapInt(v, dst));
      bool u64 = x->type().elem == DType::U64;  // its bits: convert as unsigned
      auto uv = static_cast<uint64_t>(v);
      if (dst == DType::F32)
        return constant(op, static_cast<double>(u64 ? static_cast<float>(uv) : static_cast<float>(v)));
      if (dst == DType::F64) return constant(op, u64 ? static_cast<double>(uv) : static_cast<double>(v));
      return nullptr;
    }
    auto f = floatConst(x);
    if (!f) return nullptr;
    if (dst == DType::F32 || dst == DType::F64) return constant(op, *roundFloat(*f, dst));
    if (!isInt(dst) || dst == DType::I1 || !std::isfinite(*f) || std::trunc(*f) != *f) return nullptr;
    if (isUnsigned(dst)) {
      if (*f < 0 || *f >= std::ldexp(1.0, bitWidth(dst))) return nullptr;
      return constant(op, static_cast<int64_t>(static_cast<uint64_t>(*f)));
    }
    double lo = static_cast<double>(minInt(dst));  // -2^(bits-1), exact in a double
    if (*f < lo || *f >= -lo) return nullptr;
    return constant(op, static_cast<int64_t>(*f));
  }

  // trans(trans(x, p), q) is trans(x, r) with r[i] = p[q[i]], and x itself when r is the identity.
  bool composeTrans(Op* op) {
    Op* inner = op->operand(0)->definingOp();
    const auto& outer = op->intsAttr("perm");
    std::vector<int64_t> perm = outer;
    if (inner && inner->kind() == OpKind::Trans) {
      const auto& p = inner->intsAttr("perm");
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = p[outer[i]];
    }
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
    Value* src = inner && inner->kind() == OpKind::Trans ? inner->operand(0) : op->operand(0);
    if (identity) {
      op->result()->replaceAllUsesWith(src);
      op->erase();
      return true;
    }
    if (src == op->operand(0)) return false;
    op->setOperand(0, src);
    op->setAttr("perm", perm);
    return true;
  }

  // if with a constant condition: the taken region's ops move before the if.
  bool foldIf(Op* op) {
    auto c = intConst(op->operand(0));
    if (!c) return false;
    Block& taken = op->region(*c ? 0 : 1);
    while (taken.front() != taken.terminator()) taken.front()->moveBefore(op);
    Op* yield = taken.terminator();
    for (unsigned i = 0; i < op->numResults(); ++i) op->result(i)->replaceAllUsesWith(yield->operand(i));
    op->erase();
    return true;
  }

  // for with constant bounds lb >= ub runs zero times: its results are the initial values.
  bool foldFor(Op* op) {
    auto lb = intConst(op->operand(0)), ub = intConst(op->operand(1));
    if (!lb || !ub || *lb < *ub) return false;
    for (unsigned i = 0; i < op->numResults(); ++i) op->result(i)->replaceAllUsesWith(op->operand(3 + i));
    op->erase();
    return true;
  }

  // A new constant of `op`'s result type, placed just before `op` and named after its result.
  Value* constant(Op* op, Attr value) {
    b_.setInsertionPointBefore(op);
    b_.setLoc(op->loc());
    Value* c = b_.create(OpKind::Constant, {}, {op->result()->type()}, {{"value", std::move(value)}})->result();
    c->setName(op->result()->name());
    return c;
  }

  Builder b_;
};

}  // namespace

void canonicalize(Module& m) {
  Canonicalizer c(m);
  bool changed = true;
  while (changed) {
    changed = false;
    for (Op* f : m.funcs()) changed |= c.sweep(f->region(0));
  }
}

}  // namespace tilefuse::passes
