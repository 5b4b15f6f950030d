// tilefuse._C.launcher: the launch fast path. Unlike the other bindings this one
// works on Python objects itself: a repeated launch of a seen specialization must
// not run Python code. `kernel[grid]` returns a BoundLaunch, a callable for one grid
// that CPython calls directly (vectorcall). A FastPath belongs to one @jit function. It
// binds the call's arguments to the parameters, keys them (constexpr values; dtype,
// alignment and device of tensors; the specialization of scalars by the rules of
// Specialize.h; grid, num_warps, num_stages), and launches the kernel remembered under
// that key through the runtime, which packs the arguments and encodes the tensor maps
// as the kernel's LaunchSpec says. Anything it does not know returns None and the
// caller takes the full path (jit.run), which checks, compiles and remembers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "Specialize.h"
#include "tilefuse/runtime/Launch.h"
#include "tilefuse/runtime/TensorMap.h"

namespace py = pybind11;
using tilefuse::runtime::LoadedKernel;
namespace specialize = tilefuse::specialize;

namespace {

enum class Kind : uint8_t { Const, Tensor, Scalar, Grid };

// One parameter's part of a key. Tensor: a = the address modulo 16, b = the device;
// Scalar: a = its ArgSpec code; Grid: the grid, num_warps and num_stages in a and b.
struct Item {
  Kind kind;
  int64_t a = 0, b = 0;
  py::object obj;  // the constexpr value, or the tensor's dtype
  bool operator==(const Item& o) const {
    if (kind != o.kind || a != o.a || b != o.b) return false;
    if (kind == Kind::Tensor) return obj.ptr() == o.obj.ptr();  // torch dtypes are singletons
    if (kind == Kind::Const) return Py_TYPE(obj.ptr()) == Py_TYPE(o.obj.ptr()) && obj.equal(o.obj);
    return true;
  }
};

// The key of one call and what packing needs: per parameter its raw value.
struct Bound {
  std::vector<Item> key;
  std::vector<int64_t> ints;   // data pointers and int values, by parameter
  std::vector<double> floats;  // float values, by parameter
  std::array<uint32_t, 3> grid = {1, 1, 1};
  size_t hash = 0;
};

// Where a kernel parameter's value comes from: the call's parameter `param`, read as
// a float (f32 or f64, by kind) or an int.
struct Source {
  int param;
  tilefuse::runtime::ParamKind kind;
  bool isFloat() const {
    return kind == tilefuse::runtime::ParamKind::F32 || kind == tilefuse::runtime::ParamKind::F64;
  }
};

struct Entry {
  Bound key;
  std::shared_ptr<LoadedKernel> kernel;
  std::vector<Source> sources;  // by kernel parameter
  py::object device;            // the kernel's device, as a Python int for the stream query
  py::object result;
};

constexpr int kMaxArgs = 256;

// The keyword arguments of a call (names and values, borrowed).
struct Keywords {
  PyObject* names[kMaxArgs];
  PyObject* values[kMaxArgs];
  int n = 0;
  bool add(PyObject* name, PyObject* value) {
    if (n == kMaxArgs) return false;
    names[n] = name;
    values[n++] = value;
    return true;
  }
};

// A grid of 1 to 3 non-negative ints (anything else takes the full path).
bool parseGrid(PyObject* g, std::array<uint32_t, 3>& dims) {
  dims = {1, 1, 1};
  auto one = [](PyObject* x, uint32_t& out) {
    if (!PyLong_CheckExact(x)) return false;
    long long v = PyLong_AsLongLong(x);
    if (v < 0 || v > UINT32_MAX) {
      PyErr_Clear();
      return false;
    }
    out = static_cast<uint32_t>(v);
    return true;
  };
  if (PyLong_CheckExact(g)) return one(g, dims[0]);
  if (!PyTuple_CheckExact(g) || PyTuple_GET_SIZE(g) < 1 || PyTuple_GET_SIZE(g) > 3) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g); ++i)
    if (!one(PyTuple_GET_ITEM(g, i), dims[i])) return false;
  return true;
}

class FastPath {
 public:
  // `specialize[i]`: false for do_not_specialize parameters; `numWarps`, `numStages`:
  // the launch defaults (tilefuse.defaults).
  FastPath(std::vector<std::string> names, std::vector<bool> isConst, std::vector<bool> specialize,
           std::vector<py::object> defaults, py::object stream, std::string name, py::object launchError, int numWarps,
           int numStages)
      : names_(std::move(names)),
        isConst_(std::move(isConst)),
        specialize_(std::move(specialize)),
        defaults_(std::move(defaults)),
        stream_(std::move(stream)),
        name_(std::move(name)),
        launchError_(std::move(launchError)),
        numWarps_(numWarps),
        numStages_(numStages) {
    for (const std::string& n : names_)
      nameObjs_.push_back(py::reinterpret_steal<py::object>(PyUnicode_InternFromString(n.c_str())));
  }

  // The launch of a call given the vectorcall way (positional values, then the values
  // of `kwnames`, which may name num_warps and num_stages) on grid `dims`: the
  // remembered result (a new reference), or null without an error set when this call
  // is not known. Throws TensorMapError for arguments a tensor map cannot take.
  PyObject* call(const std::array<uint32_t, 3>& dims, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    Bound b;
    if (!bindVector(dims, args, nargs, kwnames, b)) return nullptr;
    for (const Entry& e : entries_) {
      if (e.key.hash != b.hash || !(e.key.key == b.key)) continue;
      int64_t args[kMaxArgs];  // a kernel has at most the call's parameters
      for (size_t i = 0; i < e.sources.size(); ++i) {
        const Source& src = e.sources[i];
        args[i] = src.isFloat() ? tilefuse::runtime::floatArg(src.kind, b.floats[src.param]) : b.ints[src.param];
      }
      uint64_t stream = 0;
      if (!stream_.is_none()) {
        PyObject* dev = e.device.ptr();
        PyObject* r = PyObject_Vectorcall(stream_.ptr(), &dev, 1, nullptr);
        if (!r) throw py::error_already_set();
        stream = PyLong_AsUnsignedLongLong(r);
        Py_DECREF(r);
      }
      e.kernel->launch(b.grid, stream, args);
      return py::object(e.result).release().ptr();
    }
    return nullptr;
  }

  const std::string& name() const { return name_; }
  PyObject* launchError() const { return launchError_.ptr(); }

  // The types of torch tensors, which the fast path reads (data_ptr, get_device, dtype).
  void addTensorTypes(const std::vector<py::type>& types) {
    for (const py::type& t : types) tensorTypes_.insert(reinterpret_cast<PyTypeObject*>(t.ptr()));
  }

  // After the full path launched kernel[grid](*args, **kwargs) (kwargs naming num_warps
  // and num_stages): launches with the same key go straight to `kernel`.
  bool remember(py::handle grid, py::tuple args, py::dict kwargs, std::shared_ptr<LoadedKernel> kernel,
                py::object result) {
    Entry e;
    if (!bindCall(grid, args, kwargs, e.key)) return false;
    for (const auto& p : kernel->spec().params) {
      auto it = std::find(names_.begin(), names_.end(), p.name);
      if (it == names_.end()) return false;
      e.sources.push_back({static_cast<int>(it - names_.begin()), p.kind});
    }
    e.kernel = std::move(kernel);
    e.device = py::int_(e.kernel->device());
    e.result = std::move(result);
    entries_.push_back(std::move(e));
    return true;
  }

  // The key of kernel[grid](*args, **kwargs), one (kind, a, b, object) per item (the grid
  // and options first); None when the fast path would not take the call. For tests.
  py::object key(py::handle grid, py::tuple args, py::dict kwargs) {
    Bound b;
    if (!bindCall(grid, args, kwargs, b)) return py::none();
    py::list out;
    for (const Item& it : b.key)
      out.append(py::make_tuple(static_cast<int>(it.kind), it.a, it.b, it.obj ? it.obj : py::none()));
    return out;
  }

  size_t size() const { return entries_.size(); }

 private:
  static void mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

  // out = obj.name() for a method returning an int.
  static bool callInt(PyObject* obj, PyObject* name, int64_t& out) {
    PyObject* r = PyObject_VectorcallMethod(name, &obj, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (!r) {
      PyErr_Clear();
      return false;
    }
    out = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return true;
  }

  static bool sameName(PyObject* a, PyObject* b) { return a == b || PyUnicode_Compare(a, b) == 0; }

  // bind() for a call given the vectorcall way (as call() takes it).
  bool bindVector(const std::array<uint32_t, 3>& dims, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                  Bound& b) {
    static PyObject* warpsName = PyUnicode_InternFromString("num_warps");
    static PyObject* stagesName = PyUnicode_InternFromString("num_stages");
    int warps = numWarps_, stages = numStages_;
    Keywords kw;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; ++i) {
      PyObject* name = PyTuple_GET_ITEM(kwnames, i);
      PyObject* v = args[nargs + i];
      bool isWarps = sameName(name, warpsName), isStages = !isWarps && sameName(name, stagesName);
      if (isWarps || isStages) {
        if (!PyLong_CheckExact(v)) return false;
        (isWarps ? warps : stages) = static_cast<int>(PyLong_AsLong(v));
      } else if (!kw.add(name, v)) {
        return false;
      }
    }
    return bind(dims, warps, stages, args, nargs, kw, b);
  }

  // bind() for a call given as a grid, a tuple and a dict.
  bool bindCall(py::handle grid, const py::tuple& args, const py::dict& kwargs, Bound& b) {
    std::array<uint32_t, 3> dims;
    if (!parseGrid(grid.ptr(), dims)) return false;
    std::vector<PyObject*> all;
    for (py::handle a : args) all.push_back(a.ptr());
    py::list names;
    for (auto item : kwargs) {
      names.append(item.first);
      all.push_back(item.second.ptr());
    }
    py::tuple kwnames(names);
    return bindVector(dims, all.data(), static_cast<Py_ssize_t>(args.size()), kwargs.empty() ? nullptr : kwnames.ptr(),
                      b);
  }

  bool bind(const std::array<uint32_t, 3>& dims, int numWarps, int numStages, PyObject* const* args, Py_ssize_t nargs,
            const Keywords& kw, Bound& b) {
    b.grid = dims;
    b.key.push_back(
        {Kind::Grid, (int64_t(b.grid[0]) << 32) | b.grid[1], (int64_t(b.grid[2]) << 32) | (numWarps << 8) | numStages});
    // Arguments to parameters.
    size_t n = names_.size();
    if (static_cast<size_t>(nargs) > n || n > kMaxArgs) return false;
    PyObject* vals[kMaxArgs];
    std::fill_n(vals, n, nullptr);
    for (Py_ssize_t i = 0; i < nargs; ++i) vals[i] = args[i];
    for (int j = 0; j < kw.n; ++j) {
      size_t i = 0;
      while (i < n && !sameName(kw.names[j], nameObjs_[i].ptr())) ++i;
      if (i == n || vals[i]) return false;  // an unknown name, or given twice
      vals[i] = kw.values[j];
    }
    b.ints.assign(n, 0);
    b.floats.assign(n, 0.0);
    size_t h = 0;
    mix(h, b.key[0].a);
    mix(h, b.key[0].b);
    for (size_t i = 0; i < n; ++i) {
      PyObject* v = vals[i] ? vals[i] : defaults_[i].ptr();  // a null object: no default
      if (!v) return false;                                  // missing
      Item it{Kind::Const};
      if (isConst_[i]) {
        it.obj = py::reinterpret_borrow<py::object>(v);
        Py_hash_t hv = PyObject_Hash(v);
        if (hv == -1) {
          PyErr_Clear();
          return false;
        }
        mix(h, static_cast<size_t>(hv));
      } else if (tensorTypes_.count(Py_TYPE(v))) {
        // Method calls without bound-method objects, names interned once.
        static PyObject* dataPtr = PyUnicode_InternFromString("data_ptr");
        static PyObject* getDevice = PyUnicode_InternFromString("get_device");
        static PyObject* dtype = PyUnicode_InternFromString("dtype");
        int64_t ptr = 0, dev = 0;
        if (!callInt(v, dataPtr, ptr) || !callInt(v, getDevice, dev)) return false;
        PyObject* dt = PyObject_GetAttr(v, dtype);
        if (!dt) {
          PyErr_Clear();
          return false;
        }
        // The address modulo the alignment decides the specialization (aligned16) and the
        // full path's check of element alignment.
        it = {Kind::Tensor, static_cast<int64_t>(static_cast<uint64_t>(ptr) % specialize::kAlignment), dev,
              py::reinterpret_steal<py::object>(dt)};
        b.ints[i] = ptr;
        mix(h, reinterpret_cast<size_t>(dt));
      } else {
        specialize::ArgSpec spec;
        if (specialize::scalarSpec(v, specialize_[i], spec, b.ints[i], b.floats[i]) != specialize::Scalar::Ok)
          return false;
        it = {Kind::Scalar, spec.code()};
      }
      mix(h, static_cast<size_t>(it.kind) * 31 + it.a * 7 + it.b);
      b.key.push_back(std::move(it));
    }
    b.hash = h;
    return true;
  }

  std::vector<std::string> names_;
  std::vector<py::object> nameObjs_;  // the same, interned
  std::vector<bool> isConst_;
  std::vector<bool> specialize_;
  std::vector<py::object> defaults_;
  py::object stream_;
  std::string name_;
  py::object launchError_;
  int numWarps_, numStages_;
  std::set<PyTypeObject*> tensorTypes_;
  std::vector<Entry> entries_;
};

// kernel[grid] once the FastPath exists: a callable for one grid that CPython calls
// directly (vectorcall, no argument tuple or dict). It launches through its FastPath,
// or calls fallback(grid, *args, **kwargs) (the full path) for a call it does not know.
struct BoundLaunch {
  PyObject ob_base;  // PyObject_HEAD
  vectorcallfunc vectorcall;
  FastPath* fast;
  PyObject* owner;  // the FastPath's Python object, which keeps `fast` alive
  PyObject* grid;   // as given, for the fallback
  PyObject* fallback;
  std::array<uint32_t, 3> dims;
  bool gridOk;
};

PyObject* boundCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* b = reinterpret_cast<BoundLaunch*>(self);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (b->gridOk) {
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
  }
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  std::vector<PyObject*> all(static_cast<size_t>(1 + nargs + nkw));
  all[0] = b->grid;
  std::copy(args, args + nargs + nkw, all.begin() + 1);
  return PyObject_Vectorcall(b->fallback, all.data(), static_cast<size_t>(nargs + 1), kwnames);
}

void boundDealloc(PyObject* self) {
  auto* b = reinterpret_cast<BoundLaunch*>(self);
  Py_XDECREF(b->owner);
  Py_XDECREF(b->grid);
  Py_XDECREF(b->fallback);
  PyObject_Free(self);
}

PyTypeObject* boundType() {
  static PyTypeObject t = [] {
    PyTypeObject ty{PyVarObject_HEAD_INIT(nullptr, 0)};
    ty.tp_name = "tilefuse._C.launcher.BoundLaunch";
    ty.tp_basicsize = sizeof(BoundLaunch);
    ty.tp_dealloc = boundDealloc;
    ty.tp_vectorcall_offset = offsetof(BoundLaunch, vectorcall);
    ty.tp_call = PyVectorcall_Call;
    ty.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    ty.tp_doc = "kernel[grid]: launches through the C++ fast path, else the full path";
    return ty;
  }();
  static bool ready = PyType_Ready(&t) == 0;
  if (!ready) throw py::error_already_set();
  return &t;
}

py::object makeBound(py::object owner, py::object grid, py::object fallback) {
  auto* b = PyObject_New(BoundLaunch, boundType());
  if (!b) throw py::error_already_set();
  b->vectorcall = boundCall;
  b->fast = owner.cast<FastPath*>();
  b->owner = owner.release().ptr();
  b->gridOk = parseGrid(grid.ptr(), b->dims);
  b->grid = grid.release().ptr();
  b->fallback = fallback.release().ptr();
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(b));
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
      .def("bound", &makeBound, py::arg("grid"), py::arg("fallback"),
           "kernel[grid]: a callable launching through this fast path, else fallback(grid, *args, **kwargs)")
      .def("add_tensor_types", &FastPath::addTensorTypes, py::arg("types"))
      .def("remember", &FastPath::remember, py::arg("grid"), py::arg("args"), py::arg("kwargs"), py::arg("kernel"),
           py::arg("result"))
      .def("key", &FastPath::key, py::arg("grid"), py::arg("args"), py::arg("kwargs"))
      .def("__len__", &FastPath::size);
}
