// UserError -> tilefuse._C.UserError(message, file, line, col); InternalError -> InternalError.
#include <pybind11/pybind11.h>

#include "tilefuse/Error.h"

namespace py = pybind11;

void init_errors(py::module_& m) {
  static py::exception<tilefuse::UserError> userError(m, "UserError");
  static py::exception<tilefuse::InternalError> internalError(m, "InternalError");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tilefuse::UserError& e) {
      const auto& l = e.loc();
      py::object err = py::reinterpret_borrow<py::object>(userError)(py::str(e.what()));
      err.attr("message") = e.message();
      err.attr("file") = l.known() ? py::cast(*l.file) : py::none();
      err.attr("line") = l.line;
      err.attr("col") = l.col;
      PyErr_SetObject(userError.ptr(), err.ptr());
    } catch (const tilefuse::InternalError& e) {
      py::set_error(internalError, e.what());
    }
  });
}
