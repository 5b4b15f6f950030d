// Executes tile IR on the CPU. Every value is a tile (a scalar is a tile of one
// element) stored row-major: floats as doubles rounded to their dtype after each
// op, integers, booleans and pointers as int64 wrapped to their width (unsigned types
// zero-extended, u64 as its bit pattern).
#include "tilefuse/interp/Interpreter.h"

#include <Eigen/Dense>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "tilefuse/interp/Formats.h"

namespace tilefuse::interp {
namespace {

using ArrF = Eigen::ArrayXd;
using ArrI = Eigen::Array<int64_t, Eigen::Dynamic, 1>;
using formats::Rounding;

struct DescData {
  uint64_t base;
  std::vector<int64_t> sizes, strides;
};

struct TV {
  Type type;
  ArrF f;
  ArrI i;
  std::shared_ptr<DescData> desc;
  bool isF() const { return type.isNumeric() && isFloat(type.elem); }
  int64_t size() const { return isF() ? f.size() : i.size(); }
};

TV makeLike(const Type& t) {
  TV v;
  v.type = t;
  int64_t n = t.isDesc() ? 0 : t.numel();
  if (v.isF())
    v.f.resize(n);
  else
    v.i.resize(n);
  return v;
}

int elemBytes(DType d) { return d == DType::I1 ? 1 : bitWidth(d) / 8; }

std::string idxStr(const std::vector<int64_t>& shape, int64_t flat) {
  if (shape.empty()) return "";
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  std::string s = "[";
  for (size_t k = 0; k < idx.size(); ++k) s += (k ? ", " : "") + std::to_string(idx[k]);
  return s + "]";
}

void roundInPlace(TV& v) {
  DType d = v.type.elem;
  if (!v.isF() || d == DType::F64) return;
  if (d == DType::F32) {
    v.f = v.f.cast<float>().cast<double>();
    return;
  }
  for (Eigen::Index k = 0; k < v.f.size(); ++k) v.f[k] = formats::roundToFloat(v.f[k], d);
}

// a*b + c for f32/f16/bf16 operands, rounded to odd in double (the last bit set when
// inexact), so that rounding it to the result dtype is one correct rounding, like
// fma.rn (53 >= 2*24 + 2 bits). a*b is exact in double for these operands and
// TwoSum gives the exact error of the addition.
double fmaRoundToOdd(double a, double b, double c) {
  double p = a * b, s = p + c;
  if (!std::isfinite(s)) return std::fma(a, b, c);
  double bb = s - p, err = (p - (s - bb)) + (c - bb);
  uint64_t bits;
  std::memcpy(&bits, &s, 8);
  if (err == 0 || (bits & 1)) return s;
  return std::nextafter(s, err > 0 ? INFINITY : -INFINITY);
}

// An int64 as a double rounded to odd: exact below 2^53, and rounding it again to a
// narrower float is one correct rounding (a plain conversion could round twice).
double intToOddDouble(int64_t v) {
  double d = static_cast<double>(v);
  if (std::fabs(d) < 0x1p53) return d;
  int above = d >= 0x1p63 ? 1 : (static_cast<int64_t>(d) > v) - (static_cast<int64_t>(d) < v);  // sign of d - v
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  if (above == 0 || (bits & 1)) return d;
  return std::nextafter(d, above > 0 ? -INFINITY : INFINITY);
}

// The libm function of a unary math op (not Eigen's vectorized ones: its exp of -inf is
// not 0). Computed in double and then rounded to the result's dtype, f32/f16/bf16
// results are correctly rounded but for rare near-ties.
double (*mathFn(const Op& op))(double) {
  switch (op.kind()) {
    case OpKind::Exp: return [](double v) { return std::exp(v); };
    case OpKind::Exp2: return [](double v) { return std::exp2(v); };
    case OpKind::Log: return [](double v) { return std::log(v); };
    case OpKind::Log2: return [](double v) { return std::log2(v); };
    case OpKind::Tanh: return [](double v) { return std::tanh(v); };
    case OpKind::Erf: return [](double v) { return std::erf(v); };
    case OpKind::Sin: return [](double v) { return std::sin(v); };
    case OpKind::Cos: return [](double v) { return std::cos(v); };
    case OpKind::Tan: return [](double v) { return std::tan(v); };
    case OpKind::Asin: return [](double v) { return std::asin(v); };
    case OpKind::Acos: return [](double v) { return std::acos(v); };
    case OpKind::Atan: return [](double v) { return std::atan(v); };
    case OpKind::Sinh: return [](double v) { return std::sinh(v); };
    case OpKind::Cosh: return [](double v) { return std::cosh(v); };
    case OpKind::Asinh: return [](double v) { return std::asinh(v); };
    case OpKind::Acosh: return [](double v) { return std::acosh(v); };
    case OpKind::Atanh: return [](double v) { return std::atanh(v); };
    case OpKind::Erfc: return [](double v) { return std::erfc(v); };
    case OpKind::Exp10: return [](double v) { return ::exp10(v); };
    case OpKind::Expm1: return [](double v) { return std::expm1(v); };
    case OpKind::Log10: return [](double v) { return std::log10(v); };
    case OpKind::Log1p: return [](double v) { return std::log1p(v); };
    case OpKind::Cbrt: return [](double v) { return std::cbrt(v); };
    case OpKind::Trunc: return [](double v) { return std::trunc(v); };
    case OpKind::Round: return [](double v) { return std::round(v); };
    case OpKind::Rint: return [](double v) { return std::nearbyint(v); };
    default: throw InternalError("interpreter: unary " + std::string(op.mnemonic()));
  }
}

// A u64 (held as its bits) as a double rounded to odd, as intToOddDouble.
double u64ToOddDouble(uint64_t v) {
  double d = static_cast<double>(v);
  if (d < 0x1p53) return d;
  int above = d >= 0x1p64 ? 1 : (static_cast<uint64_t>(d) > v) - (static_cast<uint64_t>(d) < v);
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  if (above == 0 || (bits & 1)) return d;
  return std::nextafter(d, above > 0 ? -INFINITY : INFINITY);
}

// An integer as an f64 rounded in `mode` (rne, rtz or ru): the cast's own rounding.
double intToF64(int64_t v, DType from, Rounding mode) {
  bool u = from == DType::U64;
  double d = u ? static_cast<double>(static_cast<uint64_t>(v)) : static_cast<double>(v);  // nearest
  int above;  // the sign of d - v, exactly: d is 2^64 (2^63 when signed) or converts back
  if (u) {
    uint64_t x = static_cast<uint64_t>(v);
    above = d >= 0x1p64 ? 1 : (static_cast<uint64_t>(d) > x) - (static_cast<uint64_t>(d) < x);
  } else {
    above = d >= 0x1p63 ? 1 : (static_cast<int64_t>(d) > v) - (static_cast<int64_t>(d) < v);
  }
  bool awayFromZero = (d < 0 && above < 0) || (d > 0 && above > 0);
  if (mode == Rounding::TowardZero && awayFromZero) return std::nextafter(d, 0.0);
  if (mode == Rounding::Up && above < 0) return std::nextafter(d, INFINITY);
  return d;
}

// An integer element as a double for a cast to `to` in `mode`: f64 targets rounded once
// in the mode, others exact to 2^53 and rounded to odd beyond, for their own rounding.
double intToDouble(int64_t v, DType from, DType to, Rounding mode) {
  if (to == DType::F64) return intToF64(v, from, mode);
  return from == DType::U64 ? u64ToOddDouble(v) : intToOddDouble(v);
}

// Integer order: unsigned values compare as unsigned (narrower ones are non-negative anyway).
inline bool lessInt(int64_t x, int64_t y, bool u) {
  return u ? static_cast<uint64_t>(x) < static_cast<uint64_t>(y) : x < y;
}

// The high half of the unsigned product of two `width`-bit values.
int64_t umulhi(int64_t x, int64_t y, int width) {
  if (width == 64) {
    unsigned __int128 p = static_cast<unsigned __int128>(static_cast<uint64_t>(x)) * static_cast<uint64_t>(y);
    return static_cast<int64_t>(static_cast<uint64_t>(p >> 64));
  }
  uint64_t mask = (uint64_t{1} << width) - 1;
  return static_cast<int64_t>(((static_cast<uint64_t>(x) & mask) * (static_cast<uint64_t>(y) & mask)) >> width);
}

void wrapInPlace(TV& v) {
  DType d = v.type.elem;
  if (v.isF() || d == DType::I64 || v.type.isPtr()) return;
  for (Eigen::Index k = 0; k < v.i.size(); ++k) v.i[k] = formats::wrapInt(v.i[k], d);
}

class Machine {
 public:
  Machine(const Module& m, std::array<int64_t, 3> grid, const std::vector<Buffer>& buffers)
      : module_(m), grid_(grid), buffers_(buffers) {}

  void runProgram(const Op& kernel, const std::vector<Arg>& args, std::array<int64_t, 3> pid) {
    pid_ = pid;
    env_.clear();
    const Block& body = kernel.region(0);
    for (unsigned k = 0; k < body.numArgs(); ++k) {
      const Type& t = body.arg(k)->type();
      TV v = makeLike(t);
      const Arg& a = args[k];
      if (t.isPtr())
        v.i[0] = static_cast<int64_t>(a.ptr);
      else if (v.isF())
        v.f[0] = formats::roundToFloat(a.kind == Arg::Kind::Float ? a.f : static_cast<double>(a.i), t.elem);
      else
        v.i[0] = formats::wrapInt(a.kind == Arg::Kind::Int ? a.i : static_cast<int64_t>(a.f), t.elem);
      env_[body.arg(k)] = std::move(v);
    }
    runBlock(body);
  }

 private:
  const TV& get(const Value* v) const {
    auto it = env_.find(v);
    if (it == env_.end()) throw InternalError("interpreter: value used before definition");
    return it->second;
  }
  void set(const Value* v, TV t) { env_[v] = std::move(t); }

  [[noreturn]] void fail(const Op& op, const std::string& msg) const {
    throw UserError(op.loc(), msg + " (program " + std::to_string(pid_[0]) + ", " + std::to_string(pid_[1]) + ", " +
                                  std::to_string(pid_[2]) + ")");
  }

  // Runs the ops of `b`; returns the operands of its terminator.
  std::vector<TV> runBlock(const Block& b) {
    for (const auto& o : b.ops()) {
      const Op& op = *o;
      if (op.has(Terminator)) {
        std::vector<TV> out;
        for (Value* v : op.operands()) out.push_back(get(v));
        return out;
      }
      exec(op);
    }
    return {};
  }

  void bindArgs(const Block& b, std::vector<TV> vals) {
    for (unsigned k = 0; k < b.numArgs(); ++k) env_[b.arg(k)] = std::move(vals[k]);
  }

  void exec(const Op& op);
  void execArith(const Op& op);
  void execCmp(const Op& op);
  void execCast(const Op& op);
  void execShape(const Op& op);
  void execMemory(const Op& op);
  void execDesc(const Op& op);
  void execReduce(const Op& op);
  void execCombine(const Op& op);
  void execGather(const Op& op);
  void execHistogram(const Op& op);
  void execDot(const Op& op);
  void execControl(const Op& op);
  void execDebug(const Op& op);

  // Memory access with bounds checking against the argument buffers.
  // `shape` and `flat` name the element; its index is formatted only for the error.
  void checkAccess(const Op& op, uint64_t addr, int bytes, const char* what, const std::vector<int64_t>& shape,
                   int64_t flat, bool write = false) const {
    for (const Buffer& b : buffers_) {
      if (addr < b.base || addr + bytes > b.base + b.size) continue;
      if (write && b.readOnly)
        fail(op, std::string(what) + " at element " + idxStr(shape, flat) + " into '" + b.name +
                     "', which is read-only (pass a writeable array)");
      return;
    }
    // Name the nearest buffer (usually the one whose index went out of range), in the
    // words of the GPU's TILEFUSE_DEBUG=1 report (frontend/tilefuse/gpu.py).
    const Buffer* near = nullptr;
    uint64_t best = ~0ull;
    for (const Buffer& b : buffers_) {
      uint64_t dist = addr >= b.base ? addr - (b.base + b.size) : b.base - addr;
      if (dist < best) best = dist, near = &b;
    }
    std::string msg =
        "out-of-bounds " + std::string(what) + (shape.empty() ? "" : " at element " + idxStr(shape, flat));
    if (!near) fail(op, msg + ": there are no argument buffers");
    int64_t index = addr >= near->base ? static_cast<int64_t>((addr - near->base) / bytes)
                                       : -static_cast<int64_t>((near->base - addr + bytes - 1) / bytes);
    fail(op, msg + ": index " + std::to_string(index) + " of '" + near->name + "', which holds " +
                 std::to_string(near->size / bytes) + " elements");
  }

  double readF(uint64_t addr, DType d) const {
    uint64_t bits = 0;
    std::memcpy(&bits, reinterpret_cast<const void*>(addr), elemBytes(d));
    return formats::decode(bits, d);
  }
  int64_t readI(uint64_t addr, DType d) const {
    switch (d) {
      case DType::I1: return *reinterpret_cast<const uint8_t*>(addr) != 0;
      case DType::I8: return *reinterpret_cast<const int8_t*>(addr);
      case DType::I16: return *reinterpret_cast<const int16_t*>(addr);
      case DType::I32: return *reinterpret_cast<const int32_t*>(addr);
      case DType::U8: return *reinterpret_cast<const uint8_t*>(addr);
      case DType::U16: return *reinterpret_cast<const uint16_t*>(addr);
      case DType::U32: return *reinterpret_cast<const uint32_t*>(addr);
      default: return *reinterpret_cast<const int64_t*>(addr);
    }
  }
  void writeF(uint64_t addr, DType d, double v) const {
    uint64_t bits = formats::encode(v, d);
    std::memcpy(reinterpret_cast<void*>(addr), &bits, elemBytes(d));
  }
  void writeI(uint64_t addr, DType d, int64_t v) const {
    switch (d) {
      case DType::I1: *reinterpret_cast<uint8_t*>(addr) = v != 0; break;
      case DType::I8:
      case DType::U8: *reinterpret_cast<uint8_t*>(addr) = static_cast<uint8_t>(v); break;
      case DType::I16:
      case DType::U16: *reinterpret_cast<uint16_t*>(addr) = static_cast<uint16_t>(v); break;
      case DType::I32:
      case DType::U32: *reinterpret_cast<uint32_t*>(addr) = static_cast<uint32_t>(v); break;
      default: *reinterpret_cast<int64_t*>(addr) = v;
    }
  }

  const Module& module_;
  std::array<int64_t, 3> grid_;
  const std::vector<Buffer>& buffers_;
  std::array<int64_t, 3> pid_{};
  std::unordered_map<const Value*, TV> env_;
};

void Machine::execArith(const Op& op) {
  const Type& t = op.result()->type();
  TV r = makeLike(t);
  const TV& a = get(op.operand(0));
  if (op.numOperands() == 1) {
    if (r.isF()) {
      const ArrF& x = a.f;
      switch (op.kind()) {
        case OpKind::Neg: r.f = -x; break;
        case OpKind::Abs: r.f = x.abs(); break;
        case OpKind::Sqrt: r.f = x.sqrt(); break;
        case OpKind::Rsqrt: r.f = x.rsqrt(); break;
        case OpKind::Floor: r.f = x.floor(); break;
        case OpKind::Ceil: r.f = x.ceil(); break;
        default: r.f = x.unaryExpr(mathFn(op)); break;
      }
      roundInPlace(r);
    } else {
      bool keep = op.kind() == OpKind::Abs && isUnsigned(t.elem);
      // In uint64: -INT64_MIN wraps to itself instead of overflowing.
      auto neg = [](int64_t v) { return static_cast<int64_t>(0 - static_cast<uint64_t>(v)); };
      auto abs = [&](int64_t v) { return v < 0 ? neg(v) : v; };
      r.i = op.kind() == OpKind::Neg ? ArrI(a.i.unaryExpr(neg)) : keep ? a.i : ArrI(a.i.unaryExpr(abs));
      wrapInPlace(r);
    }
    set(op.result(), std::move(r));
    return;
  }
  const TV& b = get(op.operand(1));
  if (r.isF()) {
    const ArrF &x = a.f, &y = b.f;
    switch (op.kind()) {
      case OpKind::Add: r.f = x + y; break;
      case OpKind::Sub: r.f = x - y; break;
      case OpKind::Mul: r.f = x * y; break;
      case OpKind::Div: r.f = x / y; break;
      case OpKind::Rem: r.f = x.binaryExpr(y, [](double p, double q) { return std::fmod(p, q); }); break;
      case OpKind::Atan2: r.f = x.binaryExpr(y, [](double p, double q) { return std::atan2(p, q); }); break;
      case OpKind::Pow: r.f = x.binaryExpr(y, [](double p, double q) { return std::pow(p, q); }); break;
      case OpKind::Hypot: r.f = x.binaryExpr(y, [](double p, double q) { return std::hypot(p, q); }); break;
      case OpKind::Copysign: r.f = x.binaryExpr(y, [](double p, double q) { return std::copysign(p, q); }); break;
      case OpKind::Min: r.f = x.binaryExpr(y, [](double p, double q) { return std::fmin(p, q); }); break;
      case OpKind::Max: r.f = x.binaryExpr(y, [](double p, double q) { return std::fmax(p, q); }); break;
      case OpKind::Fma: {
        const ArrF& z = get(op.operand(2)).f;
        bool f64 = t.elem == DType::F64;
        for (Eigen::Index k = 0; k < x.size(); ++k)
          r.f[k] = f64 ? std::fma(x[k], y[k], z[k]) : fmaRoundToOdd(x[k], y[k], z[k]);
        break;
      }
      default: throw InternalError("interpreter: float " + std::string(op.mnemonic()));
    }
    roundInPlace(r);
  } else {
    const ArrI &x = a.i, &y = b.i;
    int width = bitWidth(t.elem);
    bool u = isUnsigned(t.elem);
    switch (op.kind()) {
      // In uint64: wrapping (then to the element's width) without signed overflow.
      case OpKind::Add: r.i = (x.cast<uint64_t>() + y.cast<uint64_t>()).cast<int64_t>(); break;
      case OpKind::Sub: r.i = (x.cast<uint64_t>() - y.cast<uint64_t>()).cast<int64_t>(); break;
      case OpKind::Mul:
        for (Eigen::Index k = 0; k < x.size(); ++k)
          r.i[k] = static_cast<int64_t>(static_cast<uint64_t>(x[k]) * static_cast<uint64_t>(y[k]));
        break;
      case OpKind::Div:
      case OpKind::Rem:
        for (Eigen::Index k = 0; k < x.size(); ++k) {
          if (y[k] == 0) fail(op, "integer division by zero at element " + idxStr(t.shape, k));
          if (u) {
            uint64_t p = static_cast<uint64_t>(x[k]), q = static_cast<uint64_t>(y[k]);
            r.i[k] = static_cast<int64_t>(op.kind() == OpKind::Div ? p / q : p % q);
            continue;
          }
          bool overflow = y[k] == -1 && x[k] == std::numeric_limits<int64_t>::min();
          r.i[k] = op.kind() == OpKind::Div ? (overflow ? x[k] : x[k] / y[k]) : (overflow ? 0 : x[k] % y[k]);
        }
        break;
      case OpKind::And: r.i = x.binaryExpr(y, [](int64_t p, int64_t q) { return p & q; }); break;
      case OpKind::Or: r.i = x.binaryExpr(y, [](int64_t p, int64_t q) { return p | q; }); break;
      case OpKind::Xor: r.i = x.binaryExpr(y, [](int64_t p, int64_t q) { return p ^ q; }); break;
      case OpKind::Shl:
        r.i = x.binaryExpr(y, [width](int64_t p, int64_t q) {
          return q < 0 || q >= width ? int64_t{0} : static_cast<int64_t>(static_cast<uint64_t>(p) << q);
        });
        break;
      case OpKind::Shr:
        // Logical for unsigned types: their bits shift in zeros.
        r.i = x.binaryExpr(y, [width, u](int64_t p, int64_t q) {
          if (u) return q < 0 || q >= width ? int64_t{0} : static_cast<int64_t>(static_cast<uint64_t>(p) >> q);
          return q < 0 || q >= width ? (p < 0 ? -1 : 0) : p >> q;
        });
        break;
      case OpKind::Min: r.i = x.binaryExpr(y, [u](int64_t p, int64_t q) { return lessInt(q, p, u) ? q : p; }); break;
      case OpKind::Max: r.i = x.binaryExpr(y, [u](int64_t p, int64_t q) { return lessInt(p, q, u) ? q : p; }); break;
      case OpKind::Umulhi: r.i = x.binaryExpr(y, [width](int64_t p, int64_t q) { return umulhi(p, q, width); }); break;
      default: throw InternalError("interpreter: int " + std::string(op.mnemonic()));
    }
    wrapInPlace(r);
  }
  set(op.result(), std::move(r));
}

void Machine::execCmp(const Op& op) {
  const TV& a = get(op.operand(0));
  const TV& b = get(op.operand(1));
  const std::string& p = op.strAttr("predicate");
  TV r = makeLike(op.result()->type());
  auto cmp = [&](auto x, auto y) -> int64_t {
    if (p == "eq") return x == y;
    if (p == "ne") return x != y;
    if (p == "lt") return x < y;
    if (p == "le") return x <= y;
    if (p == "gt") return x > y;
    return x >= y;
  };
  if (a.isF()) {
    for (Eigen::Index k = 0; k < r.i.size(); ++k) r.i[k] = cmp(a.f[k], b.f[k]);
  } else if (p[0] == 'u') {
    int w = bitWidth(a.type.elem);
    uint64_t mask = w == 64 ? ~0ull : (1ull << w) - 1;
    std::string q = p.substr(1);
    for (Eigen::Index k = 0; k < r.i.size(); ++k) {
      uint64_t x = static_cast<uint64_t>(a.i[k]) & mask, y = static_cast<uint64_t>(b.i[k]) & mask;
      r.i[k] = q == "lt" ? x < y : q == "le" ? x <= y : q == "gt" ? x > y : x >= y;
    }
  } else {
    for (Eigen::Index k = 0; k < r.i.size(); ++k) r.i[k] = cmp(a.i[k], b.i[k]);
  }
  set(op.result(), std::move(r));
}

void Machine::execCast(const Op& op) {
  const TV& a = get(op.operand(0));
  const Type& to = op.result()->type();
  TV r = makeLike(to);
  int64_t n = a.size();
  if (op.kind() == OpKind::Bitcast) {
    if (to.isPtr()) {
      r.i = a.i;
    } else {
      for (int64_t k = 0; k < n; ++k) {
        uint64_t bits = a.isF() ? formats::encode(a.f[k], a.type.elem) : static_cast<uint64_t>(a.i[k]);
        if (to.elem == DType::F4E2M1) bits &= 0xF;
        if (r.isF())
          r.f[k] = formats::decode(bits, to.elem);
        else
          r.i[k] = formats::wrapInt(static_cast<int64_t>(bits), to.elem);
      }
    }
    set(op.result(), std::move(r));
    return;
  }
  Rounding mode = formats::roundingFromName(op.strAttr("rounding"));
  const TV* rbits = op.numOperands() == 2 ? &get(op.operand(1)) : nullptr;
  for (int64_t k = 0; k < n; ++k) {
    if (r.isF()) {
      double x = a.isF() ? a.f[k] : intToDouble(a.i[k], a.type.elem, to.elem, mode);
      uint32_t rb = rbits ? static_cast<uint32_t>(rbits->i[k]) : 0;
      r.f[k] = formats::roundToFloat(x, to.elem, mode, rb);
    } else if (to.elem == DType::I1) {
      r.i[k] = a.isF() ? a.f[k] != 0 : a.i[k] != 0;
    } else {
      r.i[k] = a.isF() ? formats::floatToInt(a.f[k], to.elem) : formats::wrapInt(a.i[k], to.elem);
    }
  }
  set(op.result(), std::move(r));
}

// Copies element `src` of `a` into element `dst` of `r` (same storage kind).
inline void copyElem(TV& r, int64_t dst, const TV& a, int64_t src) {
  if (a.isF())
    r.f[dst] = a.f[src];
  else
    r.i[dst] = a.i[src];
}

void Machine::execShape(const Op& op) {
  const Type& t = op.result()->type();
  switch (op.kind()) {
    case OpKind::Constant: {
      TV r = makeLike(t);
      const Attr& v = *op.attr("value");
      if (r.isF())
        r.f.setConstant(formats::roundToFloat(std::get<double>(v), t.elem));
      else
        r.i.setConstant(formats::wrapInt(std::get<int64_t>(v), t.elem));
      set(op.result(), std::move(r));
      return;
    }
    case OpKind::Arange: {
      TV r = makeLike(t);
      r.i = ArrI::LinSpaced(t.shape[0], op.intAttr("start"), op.intAttr("end") - 1);
      set(op.result(), std::move(r));
      return;
    }
    case OpKind::ProgramId:
    case OpKind::NumPrograms: {
      TV r = makeLike(t);
      int64_t ax = op.intAttr("axis");
      r.i[0] = op.kind() == OpKind::ProgramId ? pid_[ax] : grid_[ax];
      set(op.result(), std::move(r));
      return;
    }
    case OpKind::Hint:
    case OpKind::ExpandDims:
    case OpKind::Reshape: {
      TV r = get(op.operand(0));
      r.type = t;
      set(op.result(), std::move(r));
      return;
    }
    default: break;
  }
  const TV& a = get(op.operand(0));
  TV r = makeLike(t);
  int64_t n = t.numel();
  switch (op.kind()) {
    case OpKind::Splat:
      for (int64_t k = 0; k < n; ++k) copyElem(r, k, a, 0);
      break;
    case OpKind::Broadcast:
    case OpKind::Trans: {
      // Source strides in output dimension order; broadcast dims get stride 0.
      const auto& in = a.type.shape;
      int rank = static_cast<int>(in.size());
      std::vector<int64_t> inStride(rank, 1);
      for (int d = rank - 2; d >= 0; --d) inStride[d] = inStride[d + 1] * in[d + 1];
      std::vector<int64_t> stride(rank);
      for (int d = 0; d < rank; ++d) {
        if (op.kind() == OpKind::Trans)
          stride[d] = inStride[op.intsAttr("perm")[d]];
        else
          stride[d] = in[d] == 1 ? 0 : inStride[d];
      }
      std::vector<int64_t> idx(rank, 0);
      int64_t src = 0;
      for (int64_t k = 0; k < n; ++k) {
        copyElem(r, k, a, src);
        for (int d = rank - 1; d >= 0; --d) {
          src += stride[d];
          if (++idx[d] < t.shape[d]) break;
          src -= stride[d] * idx[d];
          idx[d] = 0;
        }
      }
      break;
    }
    case OpKind::Join: {
      const TV& b = get(op.operand(1));
      for (int64_t k = 0; k < n / 2; ++k) {
        copyElem(r, 2 * k, a, k);
        copyElem(r, 2 * k + 1, b, k);
      }
      break;
    }
    case OpKind::Split: {
      TV r1 = makeLike(t);
      for (int64_t k = 0; k < n; ++k) {
        copyElem(r, k, a, 2 * k);
        copyElem(r1, k, a, 2 * k + 1);
      }
      set(op.result(1), std::move(r1));
      break;
    }
    case OpKind::Select: {
      const TV& x = get(op.operand(1));
      const TV& y = get(op.operand(2));
      for (int64_t k = 0; k < n; ++k) copyElem(r, k, a.i[k] ? x : y, k);
      break;
    }
    case OpKind::PtrAdd: {
      const TV& off = get(op.operand(1));
      int64_t eb = elemBytes(t.elem);
      if (t.elem == DType::F4E2M1) fail(op, "pointer arithmetic on f4e2m1 pointers is not supported; use packed i8 data");
      r.i = a.i + off.i * eb;
      break;
    }
    default: throw InternalError("interpreter: shape op " + std::string(op.mnemonic()));
  }
  set(op.result(), std::move(r));
}

// The values atomics leave in memory (integers before wrapping to the element type).
int64_t atomicInt(const Op& op, int64_t old, int64_t v, int64_t cmp, bool u) {
  switch (op.kind()) {
    case OpKind::AtomicAdd:  // wrapping, without signed overflow
      return static_cast<int64_t>(static_cast<uint64_t>(old) + static_cast<uint64_t>(v));
    case OpKind::AtomicMax: return lessInt(old, v, u) ? v : old;
    case OpKind::AtomicMin: return lessInt(v, old, u) ? v : old;
    case OpKind::AtomicXchg: return v;
    case OpKind::AtomicAnd: return old & v;
    case OpKind::AtomicOr: return old | v;
    case OpKind::AtomicXor: return old ^ v;
    case OpKind::AtomicCas: return old == cmp ? v : old;
    default: throw InternalError("interpreter: integer atomic " + std::string(op.mnemonic()));
  }
}

double atomicFloat(const Op& op, double old, double v, DType d) {
  switch (op.kind()) {
    case OpKind::AtomicAdd: return formats::roundToFloat(old + v, d);
    case OpKind::AtomicMax: return std::fmax(old, v);
    case OpKind::AtomicMin: return std::fmin(old, v);
    case OpKind::AtomicXchg: return v;
    default: throw InternalError("interpreter: float atomic " + std::string(op.mnemonic()));
  }
}

void Machine::execMemory(const Op& op) {
  const TV& p = get(op.operand(0));
  DType d = p.type.elem;
  int eb = elemBytes(d);
  if (d == DType::F4E2M1) fail(op, "memory access through f4e2m1 pointers is not supported; use packed i8 data");
  const Type& shape = p.type;
  int64_t n = p.i.size();
  bool isLoad = op.kind() == OpKind::Load;
  bool cas = op.kind() == OpKind::AtomicCas;
  unsigned maskIdx = isLoad ? 1 : cas ? 3 : 2;
  const TV* mask = op.numOperands() > maskIdx ? &get(op.operand(maskIdx)) : nullptr;
  Type vt = Type::tile(d, shape.shape);
  TV r = makeLike(vt);
  if (isLoad) {
    const TV* other = op.numOperands() > 2 ? &get(op.operand(2)) : nullptr;
    for (int64_t k = 0; k < n; ++k) {
      if (mask && !mask->i[k]) {
        if (r.isF())
          r.f[k] = other ? other->f[k] : 0.0;
        else
          r.i[k] = other ? other->i[k] : 0;
        continue;
      }
      uint64_t addr = static_cast<uint64_t>(p.i[k]);
      checkAccess(op, addr, eb, "load", shape.shape, k);
      if (r.isF())
        r.f[k] = readF(addr, d);
      else
        r.i[k] = readI(addr, d);
    }
    set(op.result(), std::move(r));
    return;
  }
  const TV& v = get(op.operand(cas ? 2 : 1));
  const TV* cmp = cas ? &get(op.operand(1)) : nullptr;
  std::string what(op.mnemonic());
  for (int64_t k = 0; k < n; ++k) {
    if (mask && !mask->i[k]) {
      if (op.numResults()) copyElem(r, k, v, k);
      continue;
    }
    uint64_t addr = static_cast<uint64_t>(p.i[k]);
    checkAccess(op, addr, eb, what.c_str(), shape.shape, k, true);
    if (op.kind() == OpKind::Store) {
      if (v.isF())
        writeF(addr, d, v.f[k]);
      else
        writeI(addr, d, v.i[k]);
      continue;
    }
    if (r.isF() && cas) {  // compares the stored bits (-0.0 is not 0.0, a NaN may equal itself)
      double old = readF(addr, d);
      r.f[k] = old;
      if (formats::encode(old, d) == formats::encode(cmp->f[k], d)) writeF(addr, d, v.f[k]);
    } else if (r.isF()) {
      double old = readF(addr, d);
      r.f[k] = old;
      writeF(addr, d, atomicFloat(op, old, v.f[k], d));
    } else {
      int64_t old = readI(addr, d);
      r.i[k] = old;
      writeI(addr, d, formats::wrapInt(atomicInt(op, old, v.i[k], cmp ? cmp->i[k] : 0, isUnsigned(d)), d));
    }
  }
  if (op.numResults()) set(op.result(), std::move(r));
}

void Machine::execDesc(const Op& op) {
  if (op.kind() == OpKind::MakeDesc) {
    const auto& block = op.intsAttr("block_shape");
    size_t rank = block.size();
    auto dd = std::make_shared<DescData>();
    dd->base = static_cast<uint64_t>(get(op.operand(0)).i[0]);
    for (size_t k = 0; k < rank; ++k) {
      dd->sizes.push_back(get(op.operand(1 + k)).i[0]);
      dd->strides.push_back(get(op.operand(1 + rank + k)).i[0]);
    }
    TV r;
    r.type = op.result()->type();
    r.desc = dd;
    set(op.result(), std::move(r));
    return;
  }
  const TV& dv = get(op.operand(0));
  const DescData& dd = *dv.desc;
  const auto& block = dv.type.shape;
  DType d = dv.type.elem;
  int eb = elemBytes(d);
  bool isLoad = op.kind() == OpKind::DescLoad;
  unsigned first = isLoad ? 1 : 2;
  std::vector<int64_t> off;
  for (unsigned k = first; k < op.numOperands(); ++k) off.push_back(get(op.operand(k)).i[0]);
  Type tt = Type::tile(d, block);
  TV r = makeLike(tt);
  const TV* v = isLoad ? nullptr : &get(op.operand(1));
  int64_t n = tt.numel();
  std::vector<int64_t> idx(block.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    // Elements outside the tensor read as zero and are not written (TMA semantics).
    bool inside = true;
    int64_t elem = 0;
    for (size_t a = 0; a < block.size(); ++a) {
      int64_t c = off[a] + idx[a];
      inside &= c >= 0 && c < dd.sizes[a];
      elem += c * dd.strides[a];
    }
    uint64_t addr = dd.base + static_cast<uint64_t>(elem * eb);
    if (inside) checkAccess(op, addr, eb, isLoad ? "descriptor load" : "descriptor store", block, k, !isLoad);
    if (isLoad) {
      if (r.isF())
        r.f[k] = inside ? readF(addr, d) : 0.0;
      else
        r.i[k] = inside ? readI(addr, d) : 0;
    } else if (inside) {
      if (v->isF())
        writeF(addr, d, v->f[k]);
      else
        writeI(addr, d, v->i[k]);
    }
    for (size_t a = block.size(); a-- > 0;) {
      if (++idx[a] < block[a]) break;
      idx[a] = 0;
    }
  }
  if (isLoad) set(op.result(), std::move(r));
}

void Machine::execReduce(const Op& op) {
  const TV& a = get(op.operand(0));
  const auto& s = a.type.shape;
  int axis = static_cast<int>(op.intAttr("axis"));
  int64_t outer = 1, inner = 1, len = s[axis];
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  TV r = makeLike(op.result()->type());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      int64_t base = o * len * inner + in, out = o * inner + in;
      bool u = isUnsigned(a.type.elem);
      if (op.kind() == OpKind::Argmax) {
        int64_t best = 0;
        for (int64_t k = 1; k < len; ++k) {
          bool better = a.isF() ? a.f[base + k * inner] > a.f[base + best * inner]
                                : lessInt(a.i[base + best * inner], a.i[base + k * inner], u);
          if (better) best = k;
        }
        r.i[out] = best;
        continue;
      }
      if (a.isF()) {
        double acc = a.f[base];
        for (int64_t k = 1; k < len; ++k) {
          double x = a.f[base + k * inner];
          acc = op.kind() == OpKind::ReduceSum ? acc + x : op.kind() == OpKind::ReduceMax ? std::fmax(acc, x) : std::fmin(acc, x);
        }
        r.f[out] = acc;
      } else {
        int64_t acc = a.i[base];
        for (int64_t k = 1; k < len; ++k) {
          int64_t x = a.i[base + k * inner];
          bool take = op.kind() == OpKind::ReduceMax ? lessInt(acc, x, u) : lessInt(x, acc, u);
          acc = op.kind() == OpKind::ReduceSum ? static_cast<int64_t>(static_cast<uint64_t>(acc) + x) : take ? x : acc;
        }
        r.i[out] = acc;
      }
    }
  }
  roundInPlace(r);
  wrapInPlace(r);
  set(op.result(), std::move(r));
}

// reduce / scan with a combine region, one element at a time in the order Ops.def
// states: a left fold, and a sequential inclusive scan (from the end with reverse).
void Machine::execCombine(const Op& op) {
  unsigned n = op.numOperands();
  std::vector<const TV*> in;
  for (Value* v : op.operands()) in.push_back(&get(v));
  const auto& s = in[0]->type.shape;
  int axis = static_cast<int>(op.intAttr("axis"));
  bool scan = op.kind() == OpKind::Scan, reverse = scan && op.boolAttr("reverse");
  int64_t outer = 1, inner = 1, len = s[axis];
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<TV> out;
  for (unsigned i = 0; i < n; ++i) out.push_back(makeLike(op.result(i)->type()));
  const Block& body = op.region(0);
  auto scalar = [&](unsigned i, int64_t at) {
    TV v = makeLike(Type::scalar(in[i]->type.elem));
    copyElem(v, 0, *in[i], at);
    return v;
  };
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t e = 0; e < inner; ++e) {
      int64_t base = o * len * inner + e;
      auto at = [&](int64_t k) { return base + (reverse ? len - 1 - k : k) * inner; };
      std::vector<TV> acc;
      for (unsigned i = 0; i < n; ++i) acc.push_back(scalar(i, at(0)));
      auto emit = [&](int64_t k) {
        if (!scan) return;
        for (unsigned i = 0; i < n; ++i) copyElem(out[i], at(k), acc[i], 0);
      };
      emit(0);
      for (int64_t k = 1; k < len; ++k) {
        for (unsigned i = 0; i < n; ++i) {
          env_[body.arg(i)] = std::move(acc[i]);
          env_[body.arg(n + i)] = scalar(i, at(k));
        }
        acc = runBlock(body);
        emit(k);
      }
      if (!scan)
        for (unsigned i = 0; i < n; ++i) copyElem(out[i], o * inner + e, acc[i], 0);
    }
  }
  for (unsigned i = 0; i < n; ++i) set(op.result(i), std::move(out[i]));
}

void Machine::execGather(const Op& op) {
  const TV& src = get(op.operand(0));
  const TV& index = get(op.operand(1));
  const auto& s = src.type.shape;
  const auto& is = index.type.shape;
  int axis = static_cast<int>(op.intAttr("axis"));
  int64_t inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  TV r = makeLike(op.result()->type());
  for (int64_t k = 0; k < r.size(); ++k) {
    // Outer and inner coordinates are shared with the source; only the axis changes.
    int64_t j = index.i[k], outer = k / (inner * is[axis]), in = k % inner;
    if (j < 0 || j >= s[axis])
      fail(op, "gather index " + std::to_string(j) + " at element " + idxStr(is, k) + " is out of range [0, " +
                   std::to_string(s[axis]) + ") along axis " + std::to_string(axis));
    copyElem(r, k, src, (outer * s[axis] + j) * inner + in);
  }
  set(op.result(), std::move(r));
}

void Machine::execHistogram(const Op& op) {
  const TV& x = get(op.operand(0));
  const TV* mask = op.numOperands() == 2 ? &get(op.operand(1)) : nullptr;
  TV r = makeLike(op.result()->type());
  r.i.setZero();
  int64_t bins = r.size();
  for (int64_t k = 0; k < x.size(); ++k)
    if ((!mask || mask->i[k]) && x.i[k] >= 0 && x.i[k] < bins) ++r.i[x.i[k]];
  set(op.result(), std::move(r));
}

namespace {

// An f16 accumulator (out_dtype=float16) as the GPU's FMA path computes it: each
// element sums its exact f16 or fp8 products in f32, in K order, from the accumulator,
// and is rounded to f16 after every `step` K elements (the K of one mma instruction).
template <class Mat>
void dotF16Acc(const Mat& A, const Mat& B, Mat& C, int64_t step) {
  int64_t k = A.cols();
  for (int64_t i = 0; i < C.rows(); ++i)
    for (int64_t j = 0; j < C.cols(); ++j) {
      float s = C(i, j);
      for (int64_t k0 = 0; k0 < k; k0 += step) {
        for (int64_t kk = k0; kk < std::min(k, k0 + step); ++kk) s = std::fma(A(i, kk), B(kk, j), s);
        s = static_cast<float>(formats::roundToFloat(s, DType::F16));
      }
      C(i, j) = s;
    }
}

}  // namespace

void Machine::execDot(const Op& op) {
  using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MatI = Eigen::Matrix<int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  bool scaled = op.kind() == OpKind::DotScaled;
  const TV& a = get(op.operand(0));
  const TV& b = get(op.operand(scaled ? 2 : 1));
  const TV& acc = get(op.operand(scaled ? 4 : 2));
  int64_t m = a.type.shape[0], k = a.type.shape[1], n = b.type.shape[1];
  TV r = makeLike(op.result()->type());
  if (!a.isF()) {
    MatI A = Eigen::Map<const MatI>(a.i.data(), m, k), B = Eigen::Map<const MatI>(b.i.data(), k, n);
    MatI C = Eigen::Map<const MatI>(acc.i.data(), m, n) + A * B;
    r.i = Eigen::Map<ArrI>(C.data(), m * n);
    wrapInPlace(r);
  } else {
    MatF A = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(a.f.data(), m, k).cast<float>();
    MatF B = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(b.f.data(), k, n).cast<float>();
    if (scaled) {
      const TV& as = get(op.operand(1));
      const TV& bs = get(op.operand(3));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j) A(i, j) *= static_cast<float>(as.f[i * (k / 32) + j / 32]);
      for (int64_t j = 0; j < k; ++j)
        for (int64_t c = 0; c < n; ++c) B(j, c) *= static_cast<float>(bs.f[c * (k / 32) + j / 32]);
    }
    MatF C = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(acc.f.data(), m, n).cast<float>();
    if (acc.type.elem == DType::F16)
      dotF16Acc(A, B, C, 256 / bitWidth(a.type.elem));  // 32 bytes of K
    else
      C.noalias() += A * B;
    r.f = Eigen::Map<Eigen::ArrayXf>(C.data(), m * n).cast<double>();
  }
  set(op.result(), std::move(r));
}

void Machine::execControl(const Op& op) {
  switch (op.kind()) {
    case OpKind::For: {
      int64_t lb = get(op.operand(0)).i[0], ub = get(op.operand(1)).i[0], step = get(op.operand(2)).i[0];
      if (step == 0) fail(op, "for loop with step 0");
      std::vector<TV> carried;
      for (unsigned k = 3; k < op.numOperands(); ++k) carried.push_back(get(op.operand(k)));
      const Block& body = op.region(0);
      DType ivT = op.operand(0)->type().elem;
      for (int64_t iv = lb; step > 0 ? iv < ub : iv > ub; iv += step) {
        TV ivv = makeLike(Type::scalar(ivT));
        ivv.i[0] = iv;
        env_[body.arg(0)] = std::move(ivv);
        for (unsigned a = 1; a < body.numArgs(); ++a) env_[body.arg(a)] = std::move(carried[a - 1]);
        carried = runBlock(body);
      }
      for (unsigned k = 0; k < op.numResults(); ++k) set(op.result(k), std::move(carried[k]));
      return;
    }
    case OpKind::If: {
      bool c = get(op.operand(0)).i[0] != 0;
      auto out = runBlock(op.region(c ? 0 : 1));
      for (unsigned k = 0; k < op.numResults(); ++k) set(op.result(k), std::move(out[k]));
      return;
    }
    case OpKind::While: {
      std::vector<TV> vals;
      for (Value* v : op.operands()) vals.push_back(get(v));
      while (true) {
        bindArgs(op.region(0), std::move(vals));
        auto cond = runBlock(op.region(0));
        std::vector<TV> fwd(std::make_move_iterator(cond.begin() + 1), std::make_move_iterator(cond.end()));
        if (!cond[0].i[0]) {
          for (unsigned k = 0; k < op.numResults(); ++k) set(op.result(k), std::move(fwd[k]));
          return;
        }
        bindArgs(op.region(1), std::move(fwd));
        vals = runBlock(op.region(1));
      }
    }
    case OpKind::Call: {
      Op* callee = module_.lookupFunc(op.strAttr("callee"));
      std::vector<TV> args;
      for (Value* v : op.operands()) args.push_back(get(v));
      auto saved = std::move(env_);
      env_.clear();
      bindArgs(callee->region(0), std::move(args));
      auto out = runBlock(callee->region(0));
      env_ = std::move(saved);
      for (unsigned k = 0; k < op.numResults(); ++k) set(op.result(k), std::move(out[k]));
      return;
    }
    default: throw InternalError("interpreter: control op " + std::string(op.mnemonic()));
  }
}

void Machine::execDebug(const Op& op) {
  if (op.kind() == OpKind::Assert) {
    const TV& c = get(op.operand(0));
    for (Eigen::Index k = 0; k < c.i.size(); ++k)
      if (!c.i[k])
        fail(op, "device_assert failed: " + op.strAttr("message") +
                     (c.type.isTile() ? " at element " + idxStr(c.type.shape, k) : std::string()));
    return;
  }
  const std::string& prefix = op.strAttr("prefix");
  for (Value* v : op.operands()) {
    const TV& t = get(v);
    for (int64_t k = 0; k < t.size(); ++k) {
      std::string val = t.isF() ? [&] {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g", t.f[k]);
        return std::string(buf);
      }()
                    : t.type.isNumeric() && isUnsigned(t.type.elem) ? std::to_string(static_cast<uint64_t>(t.i[k]))
                                                                     : std::to_string(t.i[k]);
      std::printf("pid (%lld, %lld, %lld) idx %s %s%s\n", static_cast<long long>(pid_[0]), static_cast<long long>(pid_[1]),
                  static_cast<long long>(pid_[2]), t.type.isTile() ? idxStr(t.type.shape, k).c_str() : "()",
                  prefix.c_str(), val.c_str());
    }
  }
  std::fflush(stdout);
}

void Machine::exec(const Op& op) {
  switch (accessKind(op)) {
    case OpKind::Cmp: return execCmp(op);
    case OpKind::Cast:
    case OpKind::Bitcast: return execCast(op);
    case OpKind::Constant:
    case OpKind::Arange:
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
    case OpKind::Hint:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::Trans:
    case OpKind::Join:
    case OpKind::Split:
    case OpKind::Select:
    case OpKind::PtrAdd: return execShape(op);
    case OpKind::Load:
    case OpKind::Store: return execMemory(op);
    case OpKind::MakeDesc:
    case OpKind::DescLoad:
    case OpKind::DescStore: return execDesc(op);
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMin:
    case OpKind::Argmax: return execReduce(op);
    case OpKind::Reduce:
    case OpKind::Scan: return execCombine(op);
    case OpKind::Gather: return execGather(op);
    case OpKind::Histogram: return execHistogram(op);
    case OpKind::Dot:
    case OpKind::DotScaled: return execDot(op);
    case OpKind::For:
    case OpKind::If:
    case OpKind::While:
    case OpKind::Call: return execControl(op);
    case OpKind::Print:
    case OpKind::Assert: return execDebug(op);
    case OpKind::DebugBarrier: return;  // programs run one at a time, each as one thread
    default:
      if (op.has(Elementwise)) return execArith(op);
      throw InternalError("interpreter cannot execute '" + std::string(op.mnemonic()) + "'");
  }
}

}  // namespace

void launch(const Module& m, const std::string& kernel, std::array<int64_t, 3> grid, const std::vector<Arg>& args,
            const std::vector<Buffer>& buffers, const std::function<bool()>& interrupted) {
  Op* k = m.lookupFunc(kernel);
  if (!k) throw InternalError("interpreter: no kernel '" + kernel + "'");
  if (isGpuStage(*k))
    throw UserError(k->loc(), "the interpreter runs tile-level IR; kernel '@" + kernel +
                                  "' is in the GPU stage (plan-layouts ran on it)");
  if (args.size() != k->region(0).numArgs())
    throw InternalError("interpreter: kernel '" + kernel + "' takes " + std::to_string(k->region(0).numArgs()) +
                        " arguments, got " + std::to_string(args.size()));
  Machine machine(m, grid, buffers);
  for (int64_t z = 0; z < grid[2]; ++z)
    for (int64_t y = 0; y < grid[1]; ++y)
      for (int64_t x = 0; x < grid[0]; ++x) {
        if (interrupted && interrupted()) throw Interrupted{};
        machine.runProgram(*k, args, {x, y, z});
      }
}

}  // namespace tilefuse::interp
