// tilefuse._C.passes: one function per registry row, plus the pipeline.
#include <pybind11/pybind11.h>

#include "tilefuse/passes/Passes.h"

namespace py = pybind11;
using namespace tilefuse;

void init_passes(py::module_& m) {
  auto p = m.def_submodule("passes", "tile-IR passes (Passes.def)");
  for (const auto& info : passes::registry()) {
    auto run = info.run;
    p.def(
        std::string(info.name).c_str(), [run](Module& mod) { run(mod); }, std::string(info.description).c_str());
  }
  p.def("names", [] {
    py::list l;
    for (const auto& info : passes::registry()) l.append(std::string(info.name));
    return l;
  });
  p.def("run_pipeline", &passes::runPipeline, "the compiler pipeline");
}
