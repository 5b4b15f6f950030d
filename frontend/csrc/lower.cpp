// tilefuse._C.lower: tile IR -> LLVM IR -> PTX for one kernel.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

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
      .def_readonly("shared_bytes", &lower::LoweredKernel::sharedBytes)
      .def_property_readonly("tensor_maps",
                             [](const lower::LoweredKernel& k) {
                               // One dict per tensor map; a dim is (parameter index, -1 when constant; value).
                               py::list out;
                               auto dims = [](const std::vector<lower::TensorMapSpec::Dim>& ds) {
                                 py::list l;
                                 for (const auto& d : ds) l.append(py::make_tuple(d.param, d.value));
                                 return l;
                               };
                               for (const auto& m : k.tensorMaps) {
                                 py::dict d;
                                 d["base"] = m.base;
                                 d["elem_bytes"] = m.elemBytes;
                                 d["sizes"] = dims(m.sizes);
                                 d["strides"] = dims(m.strides);
                                 d["box"] = py::cast(m.box);
                                 d["swizzle"] = m.swizzleBytes;
                                 d["where"] = m.where;
                                 out.append(d);
                               }
                               return out;
                             })
      .def_property_readonly("hints", [](const lower::LoweredKernel& k) {
        // (file or None, line, col, message) per missed fast path.
        py::list out;
        for (const auto& h : k.hints) {
          py::object file = h.loc.known() ? py::cast(*h.loc.file) : py::none();
          out.append(py::make_tuple(file, h.loc.line, h.loc.col, h.message));
        }
        return out;
      });
  l.def(
      "compile",
      [](const Module& m, const std::string& kernel, const std::string& arch, int numWarps, int numStages, bool keepIR,
         const std::string& libdevice) {
        py::gil_scoped_release release;
        return lower::compileKernel(m, kernel, {arch, numWarps, numStages, keepIR, libdevice});
      },
      py::arg("module"), py::arg("kernel"), py::arg("arch"), py::arg("num_warps"), py::arg("num_stages"),
      py::arg("keep_ir") = true, py::arg("libdevice") = "");
}
