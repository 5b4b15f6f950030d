// The launch fast path's keying and launch of one call (FastPath.h).
#include "FastPath.h"

#include <algorithm>

#include "Specialize.h"
#include "TorchReads.h"

namespace tilefuse::launcher {

namespace specialize = tilefuse::specialize;
using runtime::LoadedKernel;

// The key of one call and the parameters' values. On the stack and not initialized: a
// launch must not pay for clearing kMaxArgs slots.
struct Bound {
  int n;  // key items: the grid's, then one per parameter
  Item key[kMaxArgs + 1];
  int64_t values[kMaxArgs];  // by parameter: a data pointer, an int, or a float's bits (f32Arg, f64Arg)
  std::array<uint32_t, 3> grid;
  size_t hash;
  // The dtypes read from tensors, held until the key is matched or remembered (a getter
  // may return a fresh object).
  int nheld = 0;
  PyObject* held[kMaxArgs];
  Bound() = default;
  Bound(const Bound&) = delete;
  ~Bound() {
    for (int i = 0; i < nheld; ++i) Py_DECREF(held[i]);
  }
};

namespace {

constexpr int kWarps = -1, kStages = -2, kMaxnreg = -3, kUnknown = -4;

void mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

bool sameItem(const Item& x, const Item& y) {
  if (x.kind != y.kind || x.a != y.a || x.b != y.b) return false;
  if (x.kind == Kind::Tensor) return x.obj == y.obj;
  if (x.kind != Kind::Const) return true;
  if (x.obj == y.obj) return true;
  if (Py_TYPE(x.obj) != Py_TYPE(y.obj)) return false;
  int r = PyObject_RichCompareBool(x.obj, y.obj, Py_EQ);
  if (r < 0) PyErr_Clear();
  return r == 1;
}

// An int result of calling `method` (a type's method) on `obj`. Through the digit loop
// of PyLong_AsLongLongAndOverflow: PyLong_AsLongLong converts a 64-bit address through
// a byte array, several times slower.
bool callInt(PyObject* method, PyObject* obj, int64_t& out) {
  PyObject* r = PyObject_Vectorcall(method, &obj, 1, nullptr);
  if (!r) {
    PyErr_Clear();
    return false;
  }
  int overflow = 0;
  out = PyLong_Check(r) ? PyLong_AsLongLongAndOverflow(r, &overflow) : -1;
  bool ok = PyLong_Check(r) && !overflow;
  Py_DECREF(r);
  return ok;
}

}  // namespace

bool parseGrid(PyObject* g, std::array<uint32_t, 3>& dims) {
  dims = {1, 1, 1};
  auto one = [](PyObject* x, uint32_t& out) {
    if (!PyLong_CheckExact(x)) return false;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow || v < 0 || v > UINT32_MAX) return false;
    out = static_cast<uint32_t>(v);
    return true;
  };
  if (PyLong_CheckExact(g)) return one(g, dims[0]);
  if (!PyTuple_CheckExact(g) || PyTuple_GET_SIZE(g) < 1 || PyTuple_GET_SIZE(g) > 3) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g); ++i)
    if (!one(PyTuple_GET_ITEM(g, i), dims[i])) return false;
  return true;
}

FastPath::FastPath(std::vector<std::string> names, std::vector<bool> isConst, std::vector<bool> specialize,
                   std::vector<py::object> defaults, py::object stream, std::string name, py::object launchError,
                   int numWarps, int numStages)
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

PyObject* FastPath::call(const std::array<uint32_t, 3>& dims, PyObject* const* args, Py_ssize_t nargs,
                         PyObject* kwnames) {
  Bound b;
  if (!bindVector(dims, args, nargs, kwnames, b)) return nullptr;
  const Entry* e = find(b);
  if (!e) return nullptr;
  int64_t packed[kMaxArgs];  // a kernel has at most the call's parameters
  for (size_t i = 0; i < e->sources.size(); ++i) packed[i] = b.values[e->sources[i]];
  uint64_t stream = 0;
  if (!stream_.is_none()) {
    PyObject* dev = e->device.ptr();
    PyObject* r = PyObject_Vectorcall(stream_.ptr(), &dev, 1, nullptr);
    if (!r) throw py::error_already_set();
    // PyLong_AsVoidPtr: the digit loop, not the byte array of PyLong_AsUnsignedLongLong.
    stream = reinterpret_cast<uint64_t>(PyLong_AsVoidPtr(r));
    Py_DECREF(r);
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  e->kernel->launch(b.grid, stream, packed);
  PyObject* r = e->result.ptr();
  Py_INCREF(r);
  return r;
}

void FastPath::addTensorTypes(const std::vector<py::type>& types) {
  for (const py::type& t : types) {
    auto* type = reinterpret_cast<PyTypeObject*>(t.ptr());
    if (std::any_of(tensorTypes_.begin(), tensorTypes_.end(), [&](const TensorType& k) { return k.type == type; }))
      continue;
    if (!py::hasattr(t, "data_ptr") || !py::hasattr(t, "get_device")) continue;
    const TorchReads* reads = TorchReads::get();
    TensorType k{type, t.attr("data_ptr"), t.attr("get_device"), py::object(), reads && reads->covers(type)};
    if (py::hasattr(t, "dtype")) {
      py::object d = t.attr("dtype");
      if (Py_TYPE(d.ptr())->tp_descr_get && Py_TYPE(d.ptr())->tp_descr_set) k.dtype = d;  // wins over the instance
    }
    tensorTypes_.push_back(std::move(k));
  }
}

bool FastPath::remember(py::handle grid, py::tuple args, py::dict kwargs, std::shared_ptr<LoadedKernel> kernel,
                        py::object result) {
  Bound b;
  if (!bindCall(grid, args, kwargs, b)) return false;
  auto e = std::make_unique<Entry>();
  e->key.assign(b.key, b.key + b.n);
  e->hash = b.hash;
  for (const Item& it : e->key)
    if (it.obj) e->refs.push_back(py::reinterpret_borrow<py::object>(it.obj));
  for (const auto& p : kernel->spec().params) {
    auto it = std::find(names_.begin(), names_.end(), p.name);
    if (it == names_.end()) return false;
    e->sources.push_back(static_cast<int>(it - names_.begin()));
  }
  e->kernel = std::move(kernel);
  e->device = py::int_(e->kernel->device());
  e->result = std::move(result);
  entries_.push_back(std::move(e));
  return true;
}

py::object FastPath::key(py::handle grid, py::tuple args, py::dict kwargs) {
  Bound b;
  if (!bindCall(grid, args, kwargs, b)) return py::none();
  py::list out;
  for (int i = 0; i < b.n; ++i) {
    const Item& it = b.key[i];
    py::object obj = it.obj ? py::reinterpret_borrow<py::object>(it.obj) : py::none();
    out.append(py::make_tuple(static_cast<int>(it.kind), it.a, it.b, obj));
  }
  return out;
}

// The parameter a keyword names, or kWarps, kStages, kMaxnreg, kUnknown. By identity
// first: call sites pass interned names, as nameObjs_ are.
int FastPath::keyword(PyObject* name) const {
  static PyObject* warps = PyUnicode_InternFromString("num_warps");
  static PyObject* stages = PyUnicode_InternFromString("num_stages");
  static PyObject* maxnreg = PyUnicode_InternFromString("maxnreg");
  if (name == warps) return kWarps;
  if (name == stages) return kStages;
  if (name == maxnreg) return kMaxnreg;
  int n = static_cast<int>(nameObjs_.size());
  for (int i = 0; i < n; ++i)
    if (nameObjs_[i].ptr() == name) return i;
  if (PyUnicode_CHECK_INTERNED(name)) return kUnknown;  // interned strings are equal only if identical
  if (PyUnicode_Compare(name, warps) == 0) return kWarps;
  if (PyUnicode_Compare(name, stages) == 0) return kStages;
  if (PyUnicode_Compare(name, maxnreg) == 0) return kMaxnreg;
  for (int i = 0; i < n; ++i)
    if (PyUnicode_Compare(name, nameObjs_[i].ptr()) == 0) return i;
  return kUnknown;
}

bool FastPath::bindCall(py::handle grid, const py::tuple& args, const py::dict& kwargs, Bound& b) const {
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

bool FastPath::bindTensor(const TensorType& t, PyObject* v, Item& it, int64_t& ptr, Bound& b) const {
  static PyObject* dtypeName = PyUnicode_InternFromString("dtype");
  if (t.direct) {
    TorchTensor r;
    if (!TorchReads::get()->read(v, r)) return false;
    ptr = r.ptr;
    int64_t align = static_cast<int64_t>(static_cast<uint64_t>(ptr) % specialize::kAlignment);
    it = {Kind::Tensor, align | (int64_t(r.dtype) << 8), (int64_t(r.deviceType) << 32) | uint32_t(r.deviceIndex),
          nullptr};
    return true;
  }
  int64_t dev = 0;
  if (!callInt(t.dataPtr.ptr(), v, ptr) || !callInt(t.getDevice.ptr(), v, dev)) return false;
  PyObject* dt = t.dtype ? Py_TYPE(t.dtype.ptr())->tp_descr_get(t.dtype.ptr(), v, reinterpret_cast<PyObject*>(t.type))
                         : PyObject_GetAttr(v, dtypeName);
  if (!dt) {
    PyErr_Clear();
    return false;
  }
  b.held[b.nheld++] = dt;
  // The address modulo the alignment decides the specialization (aligned16) and the full
  // path's check of element alignment.
  it = {Kind::Tensor, static_cast<int64_t>(static_cast<uint64_t>(ptr) % specialize::kAlignment), dev, dt};
  return true;
}

bool FastPath::bindVector(const std::array<uint32_t, 3>& dims, PyObject* const* args, Py_ssize_t nargs,
                          PyObject* kwnames, Bound& b) const {
  int n = static_cast<int>(names_.size());
  if (nargs > n || n > kMaxArgs) return false;
  // Arguments to parameters.
  PyObject* vals[kMaxArgs];
  std::copy(args, args + nargs, vals);
  std::fill(vals + nargs, vals + n, nullptr);
  int64_t warps = numWarps_, stages = numStages_, maxnreg = 0;  // 0: no register cap
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t j = 0; j < nkw; ++j) {
    PyObject* v = args[nargs + j];
    int i = keyword(PyTuple_GET_ITEM(kwnames, j));
    if (i == kWarps || i == kStages || i == kMaxnreg) {
      if (i == kMaxnreg && v == Py_None) continue;
      // Each option takes 8 bits of the key; other values are the full path's to check.
      long o = PyLong_CheckExact(v) ? PyLong_AsLong(v) : -1;
      if (o < 0 || o > 255) {
        PyErr_Clear();
        return false;
      }
      (i == kWarps ? warps : i == kStages ? stages : maxnreg) = o;
    } else if (i == kUnknown || vals[i]) {
      return false;  // an unknown name, or given twice
    } else {
      vals[i] = v;
    }
  }
  b.grid = dims;
  b.key[0] = {Kind::Grid, (int64_t(dims[0]) << 32) | dims[1],
              (int64_t(dims[2]) << 32) | (maxnreg << 16) | (warps << 8) | stages, nullptr};
  size_t h = 0;
  mix(h, b.key[0].a);
  mix(h, b.key[0].b);
  for (int i = 0; i < n; ++i) {
    PyObject* v = vals[i] ? vals[i] : defaults_[i].ptr();  // a null object: no default
    if (!v) return false;                                  // missing
    Item& it = b.key[i + 1];
    b.values[i] = 0;
    if (isConst_[i]) {
      Py_hash_t hv = PyObject_Hash(v);
      if (hv == -1) {
        PyErr_Clear();
        return false;
      }
      it = {Kind::Const, 0, 0, v};
      mix(h, static_cast<size_t>(hv));
      continue;
    }
    auto t = std::find_if(tensorTypes_.begin(), tensorTypes_.end(),
                          [&](const TensorType& k) { return k.type == Py_TYPE(v); });
    if (t != tensorTypes_.end()) {
      if (!bindTensor(*t, v, it, b.values[i], b)) return false;
      mix(h, reinterpret_cast<size_t>(it.obj));  // null for direct reads, whose dtype is in `a`
    } else {
      specialize::ArgSpec spec;
      double f = 0;
      if (specialize::scalarSpec(v, specialize_[i], spec, b.values[i], f) != specialize::Scalar::Ok) return false;
      if (spec.dtype == DType::F32 || spec.dtype == DType::F64)
        b.values[i] = spec.dtype == DType::F64 ? runtime::f64Arg(f) : runtime::f32Arg(f);
      it = {Kind::Scalar, spec.code(), 0, nullptr};
    }
    mix(h, static_cast<size_t>(it.kind) * 31 + it.a * 7 + it.b);
  }
  b.n = n + 1;
  b.hash = h;
  return true;
}

const FastPath::Entry* FastPath::find(const Bound& b) const {
  for (const auto& e : entries_) {
    if (e->hash != b.hash || static_cast<int>(e->key.size()) != b.n) continue;
    if (std::equal(e->key.begin(), e->key.end(), b.key, sameItem)) return e.get();
  }
  return nullptr;
}

}  // namespace tilefuse::launcher
