// tilefuse._C.interp: run a kernel on the CPU interpreter.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tilefuse/interp/Formats.h"
#include "tilefuse/interp/Interpreter.h"

namespace py = pybind11;
using namespace tilefuse;

void init_interp(py::module_& m) {
  auto i = m.def_submodule("interp", "CPU interpreter of the tile IR");
  py::class_<interp::Arg>(i, "Arg")
      .def_static("ptr",
                  [](uint64_t p) {
                    return interp::Arg{interp::Arg::Kind::Ptr, p, 0, 0};
                  })
      .def_static("int",
                  [](int64_t v) {
                    return interp::Arg{interp::Arg::Kind::Int, 0, v, 0};
                  })
      .def_static("float", [](double v) {
        return interp::Arg{interp::Arg::Kind::Float, 0, 0, v};
      });
  py::class_<interp::Buffer>(i, "Buffer")
      .def(py::init([](uint64_t base, uint64_t size, std::string name, bool readOnly) {
             return interp::Buffer{base, size, std::move(name), readOnly};
           }),
           py::arg("base"), py::arg("size"), py::arg("name"), py::arg("read_only") = false);
  i.def(
      "launch",
      [](const Module& m, const std::string& kernel, std::array<int64_t, 3> grid, const std::vector<interp::Arg>& args,
         const std::vector<interp::Buffer>& buffers) {
        // Ctrl-C between programs: the signal handler runs only when the GIL is taken.
        auto interrupted = [] {
          py::gil_scoped_acquire gil;
          return PyErr_CheckSignals() != 0;
        };
        try {
          py::gil_scoped_release release;
          interp::launch(m, kernel, grid, args, buffers, interrupted);
        } catch (const interp::Interrupted&) {
          throw py::error_already_set();  // the handler's exception, e.g. KeyboardInterrupt
        }
      },
      py::arg("module"), py::arg("kernel"), py::arg("grid"), py::arg("args"), py::arg("buffers"));
  i.def(
      "round_to",
      [](double x, DType d, const std::string& rounding, uint32_t rbits) {
        return formats::roundToFloat(x, d, formats::roundingFromName(rounding), rbits);
      },
      py::arg("x"), py::arg("dtype"), py::arg("rounding") = "rne", py::arg("rbits") = 0);
  i.def("encode", &formats::encode);
  i.def("decode", &formats::decode);
}
