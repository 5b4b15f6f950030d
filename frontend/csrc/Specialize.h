// The specialization rules of kernel arguments, written once. The full launch path
// (jit._specialize, through tilefuse._C.specialize) compiles one kernel per
// specialization and the launch fast path (launcher.cpp) keys repeated launches by it,
// so the two cannot disagree on which launches share a compiled kernel.
#pragma once

#include <Python.h>

#include <cstdint>

#include "tilefuse/ir/Types.h"

namespace tilefuse::specialize {

// What the compiled code of a kernel may assume about one runtime argument.
struct ArgSpec {
  enum class Kind : uint8_t { Ptr, Scalar, One };  // One: the int 1, compiled as a constant
  Kind kind = Kind::Scalar;
  DType dtype = DType::I32;  // a pointer's element type, else the scalar's
  // A multiple of 16: a pointer's address (16-byte aligned), an int's value. The compiler
  // takes it as a hint: 16-byte vector accesses, TMA bases and row strides.
  bool divisible = false;
  // Equal codes are equal specializations: launch keys hold codes.
  int64_t code() const { return int64_t(kind) << 16 | int64_t(dtype) << 1 | int64_t(divisible); }
};

constexpr uint64_t kAlignment = 16;
inline bool aligned16(uint64_t address) { return address % kAlignment == 0; }

inline ArgSpec pointerSpec(DType elem, uint64_t address) { return {ArgSpec::Kind::Ptr, elem, aligned16(address)}; }

// 1 is compiled as a constant; other ints are i32 when they fit, else i64. `specialize`
// false (do_not_specialize) keeps 1 an argument and drops the hint.
inline ArgSpec intSpec(int64_t v, bool specialize) {
  if (v == 1 && specialize) return {ArgSpec::Kind::One, DType::I32};
  DType d = v >= INT32_MIN && v <= INT32_MAX ? DType::I32 : DType::I64;
  return {ArgSpec::Kind::Scalar, d, specialize && v % 16 == 0};
}

enum class Scalar : uint8_t { Ok, NotScalar, TooWide };

// A bool (i1), int or float (f32) argument: its spec, and its value in `i` (ints and
// bools) or `f` (floats). TooWide: an int beyond 64 bits.
inline Scalar scalarSpec(PyObject* v, bool specialize, ArgSpec& spec, int64_t& i, double& f) {
  if (PyBool_Check(v)) {  // before ints: bool is an int subclass
    spec = {ArgSpec::Kind::Scalar, DType::I1};
    i = v == Py_True;
    return Scalar::Ok;
  }
  if (PyLong_Check(v)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) return Scalar::TooWide;
    spec = intSpec(x, specialize);
    i = x;
    return Scalar::Ok;
  }
  if (PyFloat_Check(v)) {
    spec = {ArgSpec::Kind::Scalar, DType::F32};
    f = PyFloat_AS_DOUBLE(v);
    return Scalar::Ok;
  }
  return Scalar::NotScalar;
}

}  // namespace tilefuse::specialize
