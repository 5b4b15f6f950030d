// tilefuse._C.passes: one function per registry row (options as keyword arguments),
// the pipeline and the GPU stage.
#include <pybind11/pybind11.h>

#include "tilefuse/passes/Passes.h"

namespace py = pybind11;
using namespace tilefuse;

void init_passes(py::module_& m) {
  auto p = m.def_submodule("passes", "tile-IR passes (Passes.def)");
  for (const auto& info : passes::registry()) {
    const passes::PassInfo* pass = &info;
    p.def(
        std::string(info.name).c_str(),
        [pass](Module& mod, const py::kwargs& kw) {
          passes::PassOptions given;
          for (const auto& [k, v] : kw) given[py::str(k)] = py::str(v);
          pass->run(mod, passes::completeOptions(*pass, given));
        },
        std::string(info.description).c_str());
  }
  p.def("names", [] {
    py::list l;
    for (const auto& info : passes::registry()) l.append(std::string(info.name));
    return l;
  });
  p.def("run_pipeline", &passes::runPipeline, "the compiler pipeline");
  p.def("gpu_stage", &passes::runGpuStage, py::arg("module"), py::arg("arch"), py::arg("num_warps"),
        py::arg("num_stages") = 3, "the GPU stage of a copy of the optimized module");
}
