// The specialization rules of kernel arguments, written once. The full launch path
// (jit._specialize, through tilefuse._C.specialize) compiles one kernel per
// specialization and the launch fast path (launcher.cpp) keys repeated launches by it,
// so the two cannot disagree on which launches share a compiled kernel.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

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

// The dtype of a numpy scalar (np.int32(3), np.float64(0.5), ...), by its type's name;
// nullopt for other objects and numpy scalars without a kernel type (np.float16, complex).
inline std::optional<DType> numpyScalarType(PyObject* v) {
  std::string_view name = Py_TYPE(v)->tp_name;
  if (!name.starts_with("numpy.")) return std::nullopt;
  name.remove_prefix(6);
  static constexpr std::pair<std::string_view, DType> kTypes[] = {
      {"bool", DType::I1},     {"bool_", DType::I1},    {"int8", DType::I8},      {"int16", DType::I16},
      {"int32", DType::I32},   {"int64", DType::I64},   {"longlong", DType::I64}, {"uint8", DType::U8},
      {"uint16", DType::U16},  {"uint32", DType::U32},  {"uint64", DType::U64},   {"ulonglong", DType::U64},
      {"float32", DType::F32}, {"float64", DType::F64},
  };
  for (const auto& [n, d] : kTypes)
    if (n == name) return d;
  return std::nullopt;
}

// A numpy scalar argument keeps its dtype (no specialization of 1; the %16 hint for ints).
inline Scalar numpyScalarSpec(PyObject* v, DType d, bool specialize, ArgSpec& spec, int64_t& i, double& f) {
  spec = {ArgSpec::Kind::Scalar, d};
  if (isFloat(d)) {
    f = PyFloat_AsDouble(v);
    return PyErr_Occurred() ? (PyErr_Clear(), Scalar::NotScalar) : Scalar::Ok;
  }
  if (d == DType::I1) {  // numpy bools have no __index__
    int t = PyObject_IsTrue(v);
    i = t > 0;
    return t < 0 ? (PyErr_Clear(), Scalar::NotScalar) : Scalar::Ok;
  }
  PyObject* n = PyNumber_Index(v);
  if (!n) {
    PyErr_Clear();
    return Scalar::NotScalar;
  }
  i = d == DType::U64 ? static_cast<int64_t>(PyLong_AsUnsignedLongLong(n)) : PyLong_AsLongLong(n);
  Py_DECREF(n);
  spec.divisible = specialize && d != DType::I1 && i % 16 == 0;
  return Scalar::Ok;
}

// A bool (i1), int (i32, i64, or u64 from 2^63 on, as Triton) or float (f32) argument,
// or a numpy scalar (its own dtype): its spec, and its value in `i` (ints and bools; a
// u64 as its bits) or `f` (floats). TooWide: an int beyond 64 bits.
inline Scalar scalarSpec(PyObject* v, bool specialize, ArgSpec& spec, int64_t& i, double& f) {
  if (auto d = numpyScalarType(v)) return numpyScalarSpec(v, *d, specialize, spec, i, f);
  if (PyBool_Check(v)) {  // before ints: bool is an int subclass
    spec = {ArgSpec::Kind::Scalar, DType::I1};
    i = v == Py_True;
    return Scalar::Ok;
  }
  if (PyLong_Check(v)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow > 0) {
      unsigned long long u = PyLong_AsUnsignedLongLong(v);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return Scalar::TooWide;
      }
      spec = {ArgSpec::Kind::Scalar, DType::U64, specialize && u % 16 == 0};
      i = static_cast<int64_t>(u);
      return Scalar::Ok;
    }
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
