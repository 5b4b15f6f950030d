// tilefuse._C.launcher: the launch fast path (FastPath.h). Unlike the other bindings this
// one works on Python objects itself: a repeated launch of a seen specialization must
// not run Python code. `Launcher`, the base class of jit.JITFunction, implements
// `kernel[grid]` in C: it returns the grid's BoundLaunch, a callable that CPython calls
// directly (vectorcall, no argument tuple or dict), made once per grid. A BoundLaunch
// launches through its FastPath, or calls the full path for a call it does not know.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "FastPath.h"
#include "TorchReads.h"
#include "tilefuse/runtime/TensorMap.h"

namespace py = pybind11;
using tilefuse::launcher::FastPath;
using tilefuse::launcher::parseGrid;

namespace {

// kernel[grid] for one grid: fast->call, else fallback(grid, *args, **kwargs).
struct BoundLaunch {
  PyObject ob_base;  // PyObject_HEAD
  vectorcallfunc vectorcall;
  FastPath* fast;
  PyObject* owner;  // the FastPath's Python object, which keeps `fast` alive
  PyObject* grid;   // as given, for the fallback
  PyObject* fallback;
  std::array<uint32_t, 3> dims;
};

PyObject* boundCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* b = reinterpret_cast<BoundLaunch*>(self);
  if (!b->fast) {  // cleared by the garbage collector
    PyErr_SetString(PyExc_RuntimeError, "kernel[grid]: this launcher was cleared");
    return nullptr;
  }
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  try {
    if (PyObject* r = b->fast->call(b->dims, args, nargs, kwnames)) return r;
    if (PyErr_Occurred()) return nullptr;
  } catch (const tilefuse::runtime::TensorMapError& e) {
    PyErr_SetString(b->fast->launchError(), (b->fast->name() + ": " + e.what()).c_str());
    return nullptr;
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (...) {
    py::detail::try_translate_exceptions();  // the registered translations (DriverError, ...)
    return nullptr;
  }
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  std::vector<PyObject*> all(static_cast<size_t>(1 + nargs + nkw));
  all[0] = b->grid;
  std::copy(args, args + nargs + nkw, all.begin() + 1);
  return PyObject_Vectorcall(b->fallback, all.data(), static_cast<size_t>(nargs + 1), kwnames);
}

int boundTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* b = reinterpret_cast<BoundLaunch*>(self);
  Py_VISIT(b->owner);
  Py_VISIT(b->grid);
  Py_VISIT(b->fallback);
  return 0;
}

int boundClear(PyObject* self) {
  auto* b = reinterpret_cast<BoundLaunch*>(self);
  b->fast = nullptr;
  Py_CLEAR(b->owner);
  Py_CLEAR(b->grid);
  Py_CLEAR(b->fallback);
  return 0;
}

void boundDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  boundClear(self);
  PyObject_GC_Del(self);
}

// A type object to fill in: all slots null (written out, the initializer would leave
// every slot unnamed).
PyTypeObject emptyType() {
  PyTypeObject t{};
  PyVarObject head = {PyObject_HEAD_INIT(nullptr) 0};
  t.ob_base = head;
  return t;
}

PyTypeObject* readyType(PyTypeObject& t) {
  if (PyType_Ready(&t) != 0) throw py::error_already_set();
  return &t;
}

PyTypeObject* boundType() {
  static PyTypeObject t = [] {
    PyTypeObject ty = emptyType();
    ty.tp_name = "tilefuse._C.launcher.BoundLaunch";
    ty.tp_basicsize = sizeof(BoundLaunch);
    ty.tp_dealloc = boundDealloc;
    ty.tp_vectorcall_offset = offsetof(BoundLaunch, vectorcall);
    ty.tp_call = PyVectorcall_Call;
    ty.tp_traverse = boundTraverse;
    ty.tp_clear = boundClear;
    ty.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
    ty.tp_doc = "kernel[grid]: launches through the C++ fast path, else the full path";
    return ty;
  }();
  static PyTypeObject* ready = readyType(t);
  return ready;
}

// A new BoundLaunch of `fast` (owned by `owner`) for `grid`, parsed as `dims`.
PyObject* makeBound(FastPath* fast, PyObject* owner, PyObject* grid, const std::array<uint32_t, 3>& dims,
                    PyObject* fallback) {
  auto* b = PyObject_GC_New(BoundLaunch, boundType());
  if (!b) return nullptr;
  b->vectorcall = boundCall;
  b->fast = fast;
  b->dims = dims;
  Py_INCREF(owner);
  b->owner = owner;
  Py_INCREF(grid);
  b->grid = grid;
  Py_INCREF(fallback);
  b->fallback = fallback;
  PyObject_GC_Track(b);
  return reinterpret_cast<PyObject*>(b);
}

// The base class of jit.JITFunction: kernel[grid] in C. Once the function's fast path
// exists (`_cfast`), a grid of 1 to 3 ints gets its BoundLaunch, made at the first
// subscript of that grid and kept (up to kBounds grids, then made anew); anything else
// goes to the Python method `_subscript(grid)`.
constexpr int kBounds = 64;

struct Launcher {
  PyObject ob_base;  // PyObject_HEAD
  PyObject* fastObj;
  FastPath* fast;
  int nbounds;
  PyObject* bounds[kBounds];  // BoundLaunch objects, the newest last
};

void clearBounds(Launcher* l) {
  for (int i = 0; i < l->nbounds; ++i) Py_CLEAR(l->bounds[i]);
  l->nbounds = 0;
}

int launcherTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* l = reinterpret_cast<Launcher*>(self);
  Py_VISIT(l->fastObj);
  for (int i = 0; i < l->nbounds; ++i) Py_VISIT(l->bounds[i]);
  return 0;
}

int launcherClear(PyObject* self) {
  auto* l = reinterpret_cast<Launcher*>(self);
  clearBounds(l);
  l->fast = nullptr;
  Py_CLEAR(l->fastObj);
  return 0;
}

void launcherDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  launcherClear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* launcherSubscript(PyObject* self, PyObject* grid) {
  auto* l = reinterpret_cast<Launcher*>(self);
  std::array<uint32_t, 3> dims;
  if (l->fast && parseGrid(grid, dims)) {
    for (int i = l->nbounds - 1; i >= 0; --i) {
      if (reinterpret_cast<BoundLaunch*>(l->bounds[i])->dims == dims) {
        Py_INCREF(l->bounds[i]);
        return l->bounds[i];
      }
    }
    static PyObject* fullName = PyUnicode_InternFromString("_launch_full");
    PyObject* fallback = PyObject_GetAttr(self, fullName);
    if (!fallback) return nullptr;
    PyObject* b = makeBound(l->fast, l->fastObj, grid, dims, fallback);
    Py_DECREF(fallback);
    if (!b) return nullptr;
    if (l->nbounds == kBounds) clearBounds(l);
    Py_INCREF(b);
    l->bounds[l->nbounds++] = b;
    return b;
  }
  static PyObject* slowName = PyUnicode_InternFromString("_subscript");
  return PyObject_CallMethodOneArg(self, slowName, grid);
}

PyObject* getFast(PyObject* self, void*) {
  auto* l = reinterpret_cast<Launcher*>(self);
  PyObject* r = l->fastObj ? l->fastObj : Py_None;
  Py_INCREF(r);
  return r;
}

int setFast(PyObject* self, PyObject* value, void*) {
  auto* l = reinterpret_cast<Launcher*>(self);
  FastPath* fast = nullptr;
  if (value && value != Py_None) {
    try {
      fast = py::handle(value).cast<FastPath*>();
    } catch (const py::cast_error&) {
      PyErr_SetString(PyExc_TypeError, "_cfast must be a tilefuse._C.launcher.FastPath or None");
      return -1;
    }
    Py_INCREF(value);
  }
  clearBounds(l);  // they launch through the fast path they were made with
  Py_XDECREF(l->fastObj);
  l->fastObj = fast ? value : nullptr;
  l->fast = fast;
  return 0;
}

PyTypeObject* launcherType() {
  static PyMappingMethods mapping = {nullptr, launcherSubscript, nullptr};
  static PyGetSetDef getset[] = {
      {"_cfast", getFast, setFast, "the launch fast path (a FastPath), None before the first GPU launch", nullptr},
      {nullptr, nullptr, nullptr, nullptr, nullptr}};
  static PyTypeObject t = [] {
    PyTypeObject ty = emptyType();
    ty.tp_name = "tilefuse._C.launcher.Launcher";
    ty.tp_basicsize = sizeof(Launcher);
    ty.tp_dealloc = launcherDealloc;
    ty.tp_as_mapping = &mapping;
    ty.tp_getset = getset;
    ty.tp_traverse = launcherTraverse;
    ty.tp_clear = launcherClear;
    ty.tp_new = PyType_GenericNew;
    ty.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC;
    ty.tp_doc = "kernel[grid] in C: the base class of jit.JITFunction";
    return ty;
  }();
  static PyTypeObject* ready = readyType(t);
  return ready;
}

}  // namespace

void init_launcher(py::module_& m) {
  auto l = m.def_submodule("launcher", "the launch fast path");
  py::class_<FastPath>(l, "FastPath")
      .def(py::init([](std::vector<std::string> names, std::vector<bool> isConst, std::vector<bool> specialize,
                       py::dict defaults, py::object stream, std::string name, py::object launchError, int numWarps,
                       int numStages) {
             std::vector<py::object> d(names.size());  // null: no default
             for (size_t i = 0; i < names.size(); ++i)
               if (defaults.contains(names[i])) d[i] = defaults[py::str(names[i])];
             return std::make_unique<FastPath>(names, isConst, specialize, d, stream, name, launchError, numWarps,
                                               numStages);
           }),
           py::arg("names"), py::arg("is_const"), py::arg("specialize"), py::arg("defaults"), py::arg("stream"),
           py::arg("name"), py::arg("launch_error"), py::arg("num_warps"), py::arg("num_stages"))
      .def("add_tensor_types", &FastPath::addTensorTypes, py::arg("types"))
      .def("remember", &FastPath::remember, py::arg("grid"), py::arg("args"), py::arg("kwargs"), py::arg("kernel"),
           py::arg("result"))
      .def("key", &FastPath::key, py::arg("grid"), py::arg("args"), py::arg("kwargs"))
      .def("__len__", &FastPath::size);
  l.def(
      "enable_torch_reads",
      [](const std::string& library, std::vector<py::object> types, std::vector<py::object> probes) {
        std::vector<PyObject*> t, p;
        for (const auto& x : types) t.push_back(x.ptr());
        for (const auto& x : probes) p.push_back(x.ptr());
        std::string why;
        bool ok = tilefuse::launcher::TorchReads::enable(library, t, p, why) != nullptr;
        return py::make_tuple(ok, why);
      },
      py::arg("library"), py::arg("types"), py::arg("probes"),
      "Reads exactly these torch tensor types without Python calls, if the probes confirm the layout: "
      "(enabled, why not)");
  l.def("torch_reads_enabled", [] { return tilefuse::launcher::TorchReads::get() != nullptr; });
  PyTypeObject* launcher = launcherType();
  Py_INCREF(launcher);
  l.attr("Launcher") = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(launcher));
}
