// The launch fast path of one @jit function: it binds a call's arguments to the
// parameters, keys them (constexpr values; dtype, alignment and device of tensors; the
// specialization of scalars by the rules of Specialize.h; grid, num_warps, num_stages),
// and launches the kernel remembered under that key through the runtime, which packs
// the arguments and encodes the tensor maps as the kernel's LaunchSpec says. Anything it
// does not know is left to the full path (jit.run), which checks, compiles and remembers.
// A repeated launch runs no Python code of ours and allocates nothing.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilefuse/runtime/Launch.h"

namespace tilefuse::launcher {

namespace py = pybind11;

// A grid of 1 to 3 non-negative exact ints, as `dims` (anything else takes the full path).
bool parseGrid(PyObject* grid, std::array<uint32_t, 3>& dims);

enum class Kind : uint8_t { Const, Tensor, Scalar, Grid };

// One parameter's part of a key. Tensor: a = the address modulo 16, b = the device, obj =
// the dtype (by identity: torch dtypes are singletons), or, read through TorchReads, a =
// the address modulo 16 and the dtype's code, b = the device's type and index, obj = null; Scalar: a = its ArgSpec code; Const:
// obj = the value; Grid: the grid, num_warps and num_stages in a and b. Plain data: a key
// being matched borrows obj from the call, a remembered key owns it (Entry::refs).
struct Item {
  Kind kind;
  int64_t a, b;
  PyObject* obj;
};

constexpr int kMaxArgs = 256;
struct Bound;

class FastPath {
 public:
  // `specialize[i]`: false for do_not_specialize parameters; `defaults[i]`: null for none;
  // `numWarps`, `numStages`: the launch defaults (tilefuse.defaults).
  FastPath(std::vector<std::string> names, std::vector<bool> isConst, std::vector<bool> specialize,
           std::vector<py::object> defaults, py::object stream, std::string name, py::object launchError, int numWarps,
           int numStages);

  // The launch of a call given the vectorcall way (positional values, then the values of
  // `kwnames`, which may name num_warps and num_stages) on grid `dims`: the remembered
  // result (a new reference), or null without an error set when this call is not known.
  // Throws TensorMapError for arguments a tensor map cannot take.
  PyObject* call(const std::array<uint32_t, 3>& dims, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);

  // The types of torch tensors, whose data_ptr, get_device and dtype the fast path reads
  // (through TorchReads where enabled for the type, else the methods as the type defines them).
  void addTensorTypes(const std::vector<py::type>& types);

  // After the full path launched kernel[grid](*args, **kwargs) (kwargs naming num_warps and
  // num_stages): launches with the same key go straight to `kernel`.
  bool remember(py::handle grid, py::tuple args, py::dict kwargs, std::shared_ptr<runtime::LoadedKernel> kernel,
                py::object result);

  // The key of kernel[grid](*args, **kwargs), one (kind, a, b, object) per item (the grid
  // and options first); None when the fast path would not take the call. For tests.
  py::object key(py::handle grid, py::tuple args, py::dict kwargs);

  size_t size() const { return entries_.size(); }
  const std::string& name() const { return name_; }
  PyObject* launchError() const { return launchError_.ptr(); }

 private:
  struct TensorType {
    PyTypeObject* type;
    py::object dataPtr, getDevice;  // the type's methods
    py::object dtype;               // its data descriptor `dtype`, else null (read as an attribute)
    bool direct;                    // read through TorchReads, without the methods
  };
  struct Entry {
    std::vector<Item> key;
    size_t hash;
    std::vector<py::object> refs;  // what the key's items point to
    std::shared_ptr<runtime::LoadedKernel> kernel;
    std::vector<int> sources;  // by kernel parameter: the call's parameter that gives its value
    py::object device;         // the kernel's device, as a Python int for the stream query
    py::object result;
  };

  int keyword(PyObject* name) const;
  bool bindVector(const std::array<uint32_t, 3>& dims, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                  Bound& b) const;
  bool bindCall(py::handle grid, const py::tuple& args, const py::dict& kwargs, Bound& b) const;
  bool bindTensor(const TensorType& t, PyObject* v, Item& it, int64_t& ptr, Bound& b) const;
  const Entry* find(const Bound& b) const;

  std::vector<std::string> names_;
  std::vector<py::object> nameObjs_;  // the same, interned
  std::vector<bool> isConst_;
  std::vector<bool> specialize_;
  std::vector<py::object> defaults_;
  py::object stream_;
  std::string name_;
  py::object launchError_;
  int numWarps_, numStages_;
  std::vector<TensorType> tensorTypes_;
  // Never removed, and each where it was made: a call holds its entry while a Python
  // callback (the stream query) may let another thread remember a new one.
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace tilefuse::launcher
