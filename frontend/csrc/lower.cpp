// tilefuse._C.lower: tile IR -> LLVM IR -> PTX for one kernel.
#include <pybind11/pybind11.h>

#include "tilefuse/lower/LowerToLLVM.h"

namespace py = pybind11;
using namespace tilefuse;

void init_lower(py::module_& m) {
  auto l = m.def_submodule("lower", "GPU lowering");
  py::class_<lower::LoweredKernel>(l, "LoweredKernel")
      .def_readonly("name", &lower::LoweredKernel::name)
      .def_readonly("llir", &lower::LoweredKernel::llir)
      .def_readonly("ptx", &lower::LoweredKernel::ptx)
      .def_readonly("num_threads", &lower::LoweredKernel::numThreads)
      .def_readonly("shared_bytes", &lower::LoweredKernel::sharedBytes);
  l.def(
      "compile",
      [](const Module& m, const std::string& kernel, const std::string& arch, int numWarps, int numStages,
         bool keepIR, const std::string& libdevice) {
        py::gil_scoped_release release;
        return lower::compileKernel(m, kernel, {arch, numWarps, numStages, keepIR, libdevice});
      },
      py::arg("module"), py::arg("kernel"), py::arg("arch") = "sm_90a", py::arg("num_warps") = 4,
      py::arg("num_stages") = 3, py::arg("keep_ir") = true, py::arg("libdevice") = "");
}
