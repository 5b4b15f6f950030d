#include "tilefuse/interp/Formats.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "tilefuse/Error.h"

namespace tilefuse::formats {
namespace {

struct Format {
  int mant;        // stored mantissa bits
  int bias;        // exponent bias
  int emin;        // exponent of the smallest normal
  double maxFinite;
  bool ieee;       // has inf, all-ones exponent reserved (f16, bf16, f32, f64, e5m2)
  bool saturate;   // casts clamp to +-maxFinite instead of overflowing
};

Format formatOf(DType d) {
  switch (d) {
    case DType::F16: return {10, 15, -14, 65504.0, true, false};
    case DType::BF16: return {7, 127, -126, 0x1.fep127, true, false};
    case DType::F32: return {23, 127, -126, 0x1.fffffep127, true, false};
    case DType::F64: return {52, 1023, -1022, std::numeric_limits<double>::max(), true, false};
    case DType::F8E4M3: return {3, 7, -6, 448.0, false, true};
    case DType::F8E5M2: return {2, 15, -14, 57344.0, true, true};
    case DType::F4E2M1: return {1, 1, 0, 6.0, false, true};
    case DType::F8E4B15: return {3, 15, -14, 1.875, false, true};
    default: throw InternalError("no float format for " + std::string(dtypeName(d)));
  }
}

double roundE8M0(double x, Rounding mode, uint32_t rbits) {
  if (std::isnan(x)) return x;
  double a = std::fabs(x);
  if (a == 0 || a < 0x1p-127) return 0x1p-127;
  if (std::isinf(a) || a >= 0x1p127) return 0x1p127;
  int e;
  double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int lo = e - 1;                // 2^lo <= a < 2^(lo+1)
  int k = lo;
  if (f != 0.5) {
    double frac = 2 * f - 1;  // the discarded fraction of a / ulp, ulp = 2^lo (exact)
    switch (mode) {
      case Rounding::Up: k = lo + 1; break;
      // The significand is the implicit 1 alone, which is odd: ties round up (as torch,
      // ml_dtypes and LLVM's APFloat do).
      case Rounding::NearestEven: k = frac >= 0.5 ? lo + 1 : lo; break;
      case Rounding::Stochastic: k = frac * 0x1p32 > static_cast<double>(rbits) ? lo + 1 : lo; break;
      case Rounding::TowardZero: break;
    }
  }
  if (k > 127) k = 127;
  if (k < -127) k = -127;
  return std::ldexp(1.0, k);
}

// Triton's f16 -> float8e4b15 (its PTX on NVIDIA GPUs): the magnitude clamped to 1.75
// (NaN and inf too), then the f16 bits shifted right by 7 rounding half away from zero.
// Sources wider than f16 are first rounded to f16 in the cast's mode, as Triton does.
double roundE4B15(double h) {
  uint64_t bits = encode(h, DType::F16);
  uint64_t mag = std::min<uint64_t>(bits & 0x7FFF, 0x3F00);
  return decode(((bits >> 8) & 0x80) | ((mag + 0x40) >> 7), DType::F8E4B15);
}

}  // namespace

Rounding roundingFromName(std::string_view name) {
  if (name == "rne") return Rounding::NearestEven;
  if (name == "rtz") return Rounding::TowardZero;
  if (name == "ru") return Rounding::Up;
  if (name == "rs") return Rounding::Stochastic;
  throw InternalError("unknown rounding '" + std::string(name) + "'");
}

double roundToFloat(double x, DType d, Rounding mode, uint32_t rbits) {
  if (d == DType::E8M0) return roundE8M0(x, mode, rbits);
  if (d == DType::F8E4B15) return roundE4B15(roundToFloat(x, DType::F16, mode, rbits));
  if (d == DType::F64) return x;
  if (d == DType::F32 && mode == Rounding::NearestEven) return static_cast<double>(static_cast<float>(x));
  Format f = formatOf(d);
  if (std::isnan(x)) return d == DType::F4E2M1 ? 0.0 : x;
  bool neg = std::signbit(x);
  double a = std::fabs(x);
  if (std::isinf(a)) return f.ieee && !f.saturate ? x : (neg ? -f.maxFinite : f.maxFinite);
  if (a == 0) return x;
  int e;
  std::frexp(a, &e);
  int exp = std::max(e - 1, f.emin);
  double quantum = std::ldexp(1.0, exp - f.mant);
  double n = a / quantum;  // exact: division by a power of two
  double fl = std::floor(n);
  double r = fl;  // each mode below sets it (the initializer quiets -Wmaybe-uninitialized)
  switch (mode) {
    case Rounding::NearestEven: r = std::nearbyint(n); break;
    case Rounding::TowardZero: r = fl; break;
    case Rounding::Up: r = neg ? fl : std::ceil(n); break;
    case Rounding::Stochastic: r = (n - fl) * 0x1p32 > static_cast<double>(rbits) ? fl + 1 : fl; break;
  }
  double v = r * quantum;
  if (v > f.maxFinite) {
    bool toInf = f.ieee && !f.saturate && mode != Rounding::TowardZero && !(mode == Rounding::Up && neg);
    v = toInf ? std::numeric_limits<double>::infinity() : f.maxFinite;
  }
  return neg ? -v : v;
}

int64_t floatToInt(double x, DType d) {
  if (std::isnan(x)) return 0;
  double t = std::trunc(x);
  if (d == DType::I1) return t != 0;
  int bits = bitWidth(d);
  if (isUnsigned(d)) {  // saturating to [0, 2^bits - 1], as cvt.rzi.u*.f* does
    if (t <= 0) return 0;
    if (t >= std::ldexp(1.0, bits)) return bits == 64 ? -1 : static_cast<int64_t>((uint64_t{1} << bits) - 1);
    return static_cast<int64_t>(static_cast<uint64_t>(t));
  }
  double lo = -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, bits - 1);
  if (t <= lo) return bits == 64 ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(lo);
  if (t >= hi) return bits == 64 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(hi) - 1;
  return static_cast<int64_t>(t);
}

int64_t wrapInt(int64_t v, DType d) {
  switch (d) {
    case DType::I1: return v & 1;
    case DType::I8: return static_cast<int8_t>(v);
    case DType::I16: return static_cast<int16_t>(v);
    case DType::I32: return static_cast<int32_t>(v);
    case DType::U8: return static_cast<uint8_t>(v);
    case DType::U16: return static_cast<uint16_t>(v);
    case DType::U32: return static_cast<uint32_t>(v);
    default: return v;
  }
}

uint64_t encode(double x, DType d) {
  switch (d) {
    case DType::F64: {
      uint64_t b;
      std::memcpy(&b, &x, 8);
      return b;
    }
    case DType::F32: {
      float f = static_cast<float>(x);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return b;
    }
    case DType::BF16: {
      float f = static_cast<float>(x);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      if (std::isnan(x)) return 0x7FC0 | ((b >> 16) & 0x8000);
      return b >> 16;
    }
    case DType::E8M0: {
      if (std::isnan(x)) return 0xFF;
      int e;
      std::frexp(x, &e);
      return static_cast<uint64_t>(e - 1 + 127);
    }
    default: break;
  }
  Format f = formatOf(d);
  int width = bitWidth(d);
  int ebits = width - 1 - f.mant;
  uint64_t sign = std::signbit(x) ? 1ull << (width - 1) : 0;
  uint64_t expAllOnes = (1ull << ebits) - 1;
  if (std::isnan(x)) {
    if (d == DType::F8E4M3) return sign | 0x7F;
    return sign | (expAllOnes << f.mant) | (1ull << (f.mant - 1));
  }
  double a = std::fabs(x);
  if (std::isinf(a)) return sign | (expAllOnes << f.mant);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  int exp = e - 1;
  if (exp < f.emin) return sign | static_cast<uint64_t>(a / std::ldexp(1.0, f.emin - f.mant));  // subnormal
  uint64_t mant = static_cast<uint64_t>((a / std::ldexp(1.0, exp) - 1.0) * std::ldexp(1.0, f.mant));
  return sign | (static_cast<uint64_t>(exp + f.bias) << f.mant) | mant;
}

double decode(uint64_t bits, DType d) {
  switch (d) {
    case DType::F64: {
      double x;
      std::memcpy(&x, &bits, 8);
      return x;
    }
    case DType::F32: {
      uint32_t b = static_cast<uint32_t>(bits);
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case DType::BF16: {
      uint32_t b = static_cast<uint32_t>(bits & 0xFFFF) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case DType::E8M0: {
      unsigned b = bits & 0xFF;
      return b == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, static_cast<int>(b) - 127);
    }
    default: break;
  }
  Format f = formatOf(d);
  int width = bitWidth(d);
  int ebits = width - 1 - f.mant;
  bits &= (1ull << width) - 1;
  bool neg = (bits >> (width - 1)) & 1;
  uint64_t exp = (bits >> f.mant) & ((1ull << ebits) - 1);
  uint64_t mant = bits & ((1ull << f.mant) - 1);
  double v;
  if (d == DType::F8E4M3 && exp == 0xF && mant == 0x7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (f.ieee && exp == (1ull << ebits) - 1) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), f.emin - f.mant);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mant), static_cast<int>(exp) - f.bias);
  }
  return neg ? -v : v;
}

}  // namespace tilefuse::formats
