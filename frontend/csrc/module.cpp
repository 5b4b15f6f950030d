// tilefuse._C: the extension module; each area registers itself.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void init_errors(py::module_& m);
void init_ir(py::module_& m);
void init_passes(py::module_& m);
void init_target(py::module_& m);
void init_runtime(py::module_& m);
void init_interp(py::module_& m);
void init_lower(py::module_& m);
void init_dlpack(py::module_& m);
void init_specialize(py::module_& m);
void init_launcher(py::module_& m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "tilefuse compiler and runtime bindings";
  init_errors(m);
  init_ir(m);
  init_passes(m);
  init_target(m);
  init_runtime(m);
  init_interp(m);
  init_lower(m);
  init_dlpack(m);
  init_specialize(m);
  init_launcher(m);
}
