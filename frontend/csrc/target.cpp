// tilefuse._C.target: LLVM IR -> PTX through the in-process NVPTX backend.
#include <pybind11/pybind11.h>

#include "tilefuse/target/NVPTX.h"

namespace py = pybind11;
using namespace tilefuse;

void init_target(py::module_& m) {
  auto t = m.def_submodule("target", "NVPTX code generation");
  t.def(
      "llvm_ir_to_ptx",
      [](const std::string& ir, const std::string& arch, int opt) {
        py::gil_scoped_release release;
        return target::compileLLVMIRToPTX(ir, {arch, opt});
      },
      py::arg("llvm_ir"), py::arg("arch") = "sm_90a", py::arg("opt_level") = 3);
  t.def("ptx_feature_for", &target::ptxFeatureFor);
  t.def("llvm_version", &target::llvmVersion);
}
