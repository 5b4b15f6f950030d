// tilefuse._C.specialize: the specialization rules (Specialize.h) for jit._specialize.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>

#include "Specialize.h"

namespace py = pybind11;
using namespace tilefuse;
using specialize::ArgSpec;

namespace {

Type argType(const ArgSpec& a) { return a.kind == ArgSpec::Kind::Ptr ? Type::ptr(a.dtype) : Type::scalar(a.dtype); }

}  // namespace

void init_specialize(py::module_& m) {
  auto s = m.def_submodule("specialize", "the specialization rules of kernel arguments");
  py::class_<ArgSpec> spec(s, "ArgSpec");
  py::enum_<ArgSpec::Kind>(spec, "Kind")
      .value("ptr", ArgSpec::Kind::Ptr)
      .value("scalar", ArgSpec::Kind::Scalar)
      .value("one", ArgSpec::Kind::One);
  spec.def_readonly("kind", &ArgSpec::kind)
      .def_readonly("dtype", &ArgSpec::dtype)
      .def_readonly("divisible", &ArgSpec::divisible)
      .def_property_readonly("code", &ArgSpec::code)
      .def_property_readonly("type", &argType)
      .def("__repr__", [](const ArgSpec& a) {
        std::string what = a.kind == ArgSpec::Kind::One ? "1" : argType(a).str() + (a.divisible ? " %16" : "");
        return "<ArgSpec " + what + ">";
      });
  s.def("pointer", &specialize::pointerSpec, py::arg("dtype"), py::arg("address"),
        "the spec of a pointer to `dtype` elements at `address`");
  s.def(
      "scalar",
      [](py::handle v, bool specialize) -> std::optional<ArgSpec> {
        ArgSpec a;
        int64_t i;
        double f;
        switch (specialize::scalarSpec(v.ptr(), specialize, a, i, f)) {
          case specialize::Scalar::Ok:
            return a;
          case specialize::Scalar::TooWide:
            throw std::overflow_error("an integer beyond 64 bits");
          default:
            return std::nullopt;
        }
      },
      py::arg("value"), py::arg("specialize"),
      "the spec of a bool, int or float; None for other values, OverflowError for ints beyond 64 bits");
}
