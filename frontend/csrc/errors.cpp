// UserError -> tilefuse._C.UserError(message, file, line, col); InternalError -> InternalError.
#include <pybind11/pybind11.h>

#include "tilefuse/Error.h"

namespace py = pybind11;

namespace {
// Messages quote the user's text, which need not be valid UTF-8 (IR parsed from bytes).
py::str utf8(const std::string& s) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}
}  // namespace

void init_errors(py::module_& m) {
  static py::exception<tilefuse::UserError> userError(m, "UserError");
  static py::exception<tilefuse::InternalError> internalError(m, "InternalError");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tilefuse::UserError& e) {
      const auto& l = e.loc();
      py::object err = py::reinterpret_borrow<py::object>(userError)(utf8(e.what()));
      err.attr("message") = utf8(e.message());
      err.attr("file") = l.known() ? py::object(utf8(*l.file)) : py::none();
      err.attr("line") = l.line;
      err.attr("col") = l.col;
      PyErr_SetObject(userError.ptr(), err.ptr());
    } catch (const tilefuse::InternalError& e) {
      py::set_error(internalError, utf8(e.what()));
    }
  });
}
