// tilefuse._C.launcher: the launch fast path. Unlike the other bindings this one
// works on Python objects itself: a repeated launch of a seen specialization must
// not run Python code. A FastPath belongs to one @jit function. It binds the call's
// arguments to the parameters, keys them (constexpr values; dtype, 16-byte
// alignment and device of tensors; the specialization class of ints; float, bool;
// grid, num_warps, num_stages), and launches the specialization remembered under
// that key with the arguments laid out in one buffer and passed by pointer (and the
// kernel's tensor maps encoded from them). Anything it does not know returns None and
// the caller takes the full path (jit.run), which checks, compiles and remembers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tilefuse/runtime/Launch.h"
#include "tilefuse/runtime/TensorMap.h"

namespace py = pybind11;
using tilefuse::runtime::LoadedKernel;
using tilefuse::runtime::TensorMapDesc;

namespace {

enum class Kind : uint8_t { Const, Tensor, Int, Float, Bool, Grid };

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

// One parameter in the packed buffer: the call's parameter `param` as struct code
// `code` ('Q' pointer or int64, 'q' int64, 'i' int32, 'f' float) at byte `offset`.
struct Slot {
  int param;
  char code;
  size_t offset;
};

// A tensor map encoded at each launch: `desc` with the sizes and strides that come
// from parameters filled in (params: the call's parameter, or -1 for a constant).
struct MapSlot {
  TensorMapDesc desc;
  std::string where;
  int base;
  std::array<int, 5> sizeParam, strideParam;
  size_t offset;
};

constexpr size_t kMaxParams = 4096;  // bytes of a kernel's parameter space
constexpr size_t kMaxSlots = kMaxParams / 4;

struct Entry {
  Bound key;
  std::shared_ptr<LoadedKernel> kernel;
  std::vector<Slot> slots;
  std::vector<MapSlot> maps;
  std::vector<size_t> offsets;  // of every parameter in the buffer, in order
  py::object device;  // the kernel's device, as a Python int for the stream query
  py::object result;
};

class FastPath {
 public:
  FastPath(std::vector<std::string> names, std::vector<bool> isConst, std::vector<py::object> defaults,
           py::object stream)
      : names_(std::move(names)),
        isConst_(std::move(isConst)),
        defaults_(std::move(defaults)),
        stream_(std::move(stream)) {}

  py::object launch(py::handle grid, int numWarps, int numStages, py::args args, py::kwargs kwargs) {
    Bound b;
    if (!bind(grid, numWarps, numStages, args, kwargs, b)) return py::none();
    for (const Entry& e : entries_) {
      if (e.key.hash != b.hash || !(e.key.key == b.key)) continue;
      alignas(64) char buf[kMaxParams];
      for (const Slot& sl : e.slots) {
        if (sl.code == 'f') {
          float f = static_cast<float>(b.floats[sl.param]);
          std::memcpy(buf + sl.offset, &f, 4);
        } else if (sl.code == 'i') {
          int32_t v = static_cast<int32_t>(b.ints[sl.param]);
          std::memcpy(buf + sl.offset, &v, 4);
        } else {
          std::memcpy(buf + sl.offset, &b.ints[sl.param], 8);
        }
      }
      for (const MapSlot& m : e.maps) {
        TensorMapDesc d = m.desc;
        for (int a = 0; a < d.rank; ++a) {
          if (m.sizeParam[a] >= 0) d.sizes[a] = b.ints[m.sizeParam[a]];
          if (m.strideParam[a] >= 0) d.strides[a] = b.ints[m.strideParam[a]];
        }
        d.where = &m.where;
        CUtensorMap map = tilefuse::runtime::encodeTensorMap(d, static_cast<uint64_t>(b.ints[m.base]));
        std::memcpy(buf + m.offset, &map, sizeof map);
      }
      uint64_t stream = 0;
      if (!stream_.is_none()) {
        PyObject* dev = e.device.ptr();
        PyObject* r = PyObject_Vectorcall(stream_.ptr(), &dev, 1, nullptr);
        if (!r) throw py::error_already_set();
        stream = PyLong_AsUnsignedLongLong(r);
        Py_DECREF(r);
      }
      // Parameters by pointer: the driver takes tensor maps (__grid_constant__) this way.
      void* params[kMaxSlots];
      for (size_t i = 0; i < e.offsets.size(); ++i) params[i] = buf + e.offsets[i];
      e.kernel->launchParams(b.grid, stream, params);
      return e.result;
    }
    return py::none();
  }

  // After the full path launched: launches with the same key go straight to `kernel`.
  // `plan`: (parameter, struct code) of the kernel's parameters in order; `maps`: its
  // tensor maps as (elem bytes, base parameter, sizes, strides, box, swizzle, where)
  // with each size and stride a (parameter or -1, value) pair; `tensorTypes`: the
  // types of the call's torch tensors.
  bool remember(py::handle grid, int numWarps, int numStages, py::tuple args, py::dict kwargs,
                std::shared_ptr<LoadedKernel> kernel, std::vector<std::pair<int, char>> plan, py::list maps,
                std::vector<py::type> tensorTypes, py::object result) {
    for (const py::type& t : tensorTypes) tensorTypes_.insert(reinterpret_cast<PyTypeObject*>(t.ptr()));
    Entry e;
    if (!bind(grid, numWarps, numStages, args, kwargs, e.key)) return false;
    size_t off = 0;
    for (auto [i, code] : plan) {
      size_t w = code == 'i' || code == 'f' ? 4 : 8;
      off = (off + w - 1) / w * w;
      e.slots.push_back({i, code, off});
      e.offsets.push_back(off);
      off += w;
    }
    for (py::handle h : maps) {
      auto t = h.cast<py::tuple>();
      MapSlot m;
      m.desc.elemBytes = t[0].cast<int>();
      m.base = t[1].cast<int>();
      auto sizes = t[2].cast<std::vector<std::pair<int, int64_t>>>();
      auto strides = t[3].cast<std::vector<std::pair<int, int64_t>>>();
      auto box = t[4].cast<std::vector<int64_t>>();
      m.desc.rank = static_cast<int>(sizes.size());
      if (m.desc.rank > 5) return false;
      for (int a = 0; a < m.desc.rank; ++a) {
        std::tie(m.sizeParam[a], m.desc.sizes[a]) = sizes[a];
        std::tie(m.strideParam[a], m.desc.strides[a]) = strides[a];
        m.desc.box[a] = box[a];
      }
      m.desc.swizzleBytes = t[5].cast<int>();
      m.where = t[6].cast<std::string>();
      off = (off + 63) / 64 * 64;
      m.offset = off;
      e.offsets.push_back(off);
      off += sizeof(CUtensorMap);
      e.maps.push_back(std::move(m));
    }
    if (off > kMaxParams) return false;
    e.kernel = std::move(kernel);
    e.device = py::int_(e.kernel->device());
    e.result = std::move(result);
    entries_.push_back(std::move(e));
    return true;
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

  bool bind(py::handle grid, int numWarps, int numStages, py::handle args, py::handle kwargs, Bound& b) {
    // The grid: 1 to 3 non-negative ints (a callable grid takes the full path).
    PyObject* g = grid.ptr();
    if (PyLong_CheckExact(g)) {
      b.grid[0] = static_cast<uint32_t>(PyLong_AsLongLong(g));
    } else if (PyTuple_CheckExact(g) && PyTuple_GET_SIZE(g) >= 1 && PyTuple_GET_SIZE(g) <= 3) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g); ++i) {
        PyObject* x = PyTuple_GET_ITEM(g, i);
        if (!PyLong_CheckExact(x)) return false;
        long long v = PyLong_AsLongLong(x);
        if (v < 0 || v > UINT32_MAX) return false;
        b.grid[i] = static_cast<uint32_t>(v);
      }
    } else {
      return false;
    }
    b.key.push_back(
        {Kind::Grid, (int64_t(b.grid[0]) << 32) | b.grid[1], (int64_t(b.grid[2]) << 32) | (numWarps << 8) | numStages});
    // Arguments to parameters.
    size_t n = names_.size();
    std::vector<PyObject*> vals(n, nullptr);
    PyObject* a = args.ptr();
    if (static_cast<size_t>(PyTuple_GET_SIZE(a)) > n) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); ++i) vals[i] = PyTuple_GET_ITEM(a, i);
    if (kwargs && PyDict_Size(kwargs.ptr()) > 0) {
      size_t matched = 0;
      for (size_t i = 0; i < n; ++i) {
        PyObject* x = PyDict_GetItemString(kwargs.ptr(), names_[i].c_str());
        if (!x) continue;
        if (vals[i]) return false;  // given twice
        vals[i] = x;
        ++matched;
      }
      if (matched != static_cast<size_t>(PyDict_Size(kwargs.ptr()))) return false;  // unknown names
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
        it = {Kind::Tensor, ptr & 15, dev, py::reinterpret_steal<py::object>(dt)};
        b.ints[i] = ptr;
        mix(h, reinterpret_cast<size_t>(dt));
      } else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) return false;
        it = {Kind::Int, x == 1 ? 2 : int64_t(x % 16 == 0), int64_t(x >= INT32_MIN && x <= INT32_MAX)};
        b.ints[i] = x;
      } else if (PyFloat_CheckExact(v)) {
        it = {Kind::Float};
        b.floats[i] = PyFloat_AS_DOUBLE(v);
      } else if (PyBool_Check(v)) {
        it = {Kind::Bool};
        b.ints[i] = v == Py_True;
      } else {
        return false;
      }
      mix(h, static_cast<size_t>(it.kind) * 31 + it.a * 7 + it.b);
      b.key.push_back(std::move(it));
    }
    b.hash = h;
    return true;
  }

  std::vector<std::string> names_;
  std::vector<bool> isConst_;
  std::vector<py::object> defaults_;
  py::object stream_;
  std::set<PyTypeObject*> tensorTypes_;
  std::vector<Entry> entries_;
};

}  // namespace

void init_launcher(py::module_& m) {
  auto l = m.def_submodule("launcher", "the launch fast path");
  py::class_<FastPath>(l, "FastPath")
      .def(
          py::init([](std::vector<std::string> names, std::vector<bool> isConst, py::dict defaults, py::object stream) {
            std::vector<py::object> d(names.size());  // null: no default
            for (size_t i = 0; i < names.size(); ++i)
              if (defaults.contains(names[i])) d[i] = defaults[py::str(names[i])];
            return std::make_unique<FastPath>(names, isConst, d, stream);
          }),
          py::arg("names"), py::arg("is_const"), py::arg("defaults"), py::arg("stream"))
      .def("launch", &FastPath::launch, py::arg("grid"), py::arg("num_warps"), py::arg("num_stages"))
      .def("remember", &FastPath::remember, py::arg("grid"), py::arg("num_warps"), py::arg("num_stages"),
           py::arg("args"), py::arg("kwargs"), py::arg("kernel"), py::arg("plan"), py::arg("maps"),
           py::arg("tensor_types"), py::arg("result"))
      .def("__len__", &FastPath::size);
}
