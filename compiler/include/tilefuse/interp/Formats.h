// Number formats of the tile IR: rounding of real values into each dtype and
// their bit encodings. Shared by the interpreter and constant folding; the GPU
// lowering must produce the same bits.
#pragma once

#include <cstdint>
#include <string_view>

#include "tilefuse/ir/Types.h"

namespace tilefuse::formats {

enum class Rounding { NearestEven, TowardZero, Up, Stochastic };
Rounding roundingFromName(std::string_view name);  // "rne" "rtz" "ru" "rs"

// Rounds x to the nearest value of float dtype `d` under `mode`. `rbits` (32
// random bits) is used by Stochastic: the result rounds away from zero with
// probability equal to the discarded fraction (|x|/ulp - floor(|x|/ulp) > rbits/2^32).
// f16, bf16, f32: IEEE (overflow to inf under rne, ru and rs). f8e4m3, f8e5m2,
// f4e2m1: saturating to the largest finite value; f8e4m3 and f8e5m2 keep NaN,
// f4e2m1 (no NaN) maps NaN to 0. e8m0 holds powers of two 2^-127 .. 2^127 and NaN
// and rounds |x|: rne to the nearest power of two by value, a tie (1.5 * 2^k) going
// up (the implicit significand bit is odd), rtz down, ru up, rs as above with
// ulp = 2^floor(log2 |x|); zero and tiny values give 2^-127 and huge ones 2^127
// (saturating). f8e4b15 (Triton's; no inf or NaN, largest 1.875) takes x rounded to
// f16 under `mode`, clamped to 1.75 and rounded half away from zero, as Triton does.
double roundToFloat(double x, DType d, Rounding mode = Rounding::NearestEven, uint32_t rbits = 0);

// Float -> integer conversion: truncation toward zero, saturating at the
// dtype's range, NaN -> 0 (what cvt.rzi.sat does on the GPU).
int64_t floatToInt(double x, DType d);
// Wraps an integer to dtype d's width (two's complement; i1 keeps the low bit).
int64_t wrapInt(int64_t v, DType d);

// Bit encodings (the low bitWidth(d) bits are significant). encode expects a
// value already representable in d.
uint64_t encode(double x, DType d);
double decode(uint64_t bits, DType d);

}  // namespace tilefuse::formats
