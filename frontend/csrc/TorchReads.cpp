// Reading torch tensors without Python calls (TorchReads.h).
#include "TorchReads.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>

namespace tilefuse::launcher {

namespace {

// Where a THPVariable's at::Tensor may be: right after the object header (newer torch:
// `at::Tensor cdata`), or after MaybeOwned's bool (older: `c10::MaybeOwned<at::Tensor>`).
constexpr size_t kOffsets[] = {sizeof(PyObject), sizeof(PyObject) + alignof(void*)};

std::unique_ptr<TorchReads>& slot() {
  static std::unique_ptr<TorchReads> reads;
  return reads;
}

// obj.name() as an int64, or false.
bool methodInt(PyObject* obj, const char* name, int64_t& out) {
  PyObject* r = PyObject_CallMethod(obj, name, nullptr);
  if (!r) {
    PyErr_Clear();
    return false;
  }
  out = PyLong_AsLongLong(r);
  Py_DECREF(r);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

bool attrInt(PyObject* obj, const char* name, int64_t& out) {
  PyObject* r = PyObject_GetAttrString(obj, name);
  if (!r) {
    PyErr_Clear();
    return false;
  }
  out = static_cast<int64_t>(reinterpret_cast<intptr_t>(PyLong_AsVoidPtr(r)));
  Py_DECREF(r);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

}  // namespace

const TorchReads* TorchReads::get() { return slot().get(); }

bool TorchReads::covers(PyTypeObject* t) const { return std::find(types_.begin(), types_.end(), t) != types_.end(); }

bool TorchReads::read(PyObject* tensor, TorchTensor& out) const {
  void* t = reinterpret_cast<char*>(tensor) + offset_;
  void* p = nullptr;
  if (dataPtr_(t, &p) || deviceType_(t, &out.deviceType) || deviceIndex_(t, &out.deviceIndex) || dtype_(t, &out.dtype))
    return false;
  out.ptr = static_cast<int64_t>(reinterpret_cast<intptr_t>(p));
  return true;
}

const TorchReads* TorchReads::enable(const std::string& library, const std::vector<PyObject*>& types,
                                     const std::vector<PyObject*>& probes, std::string& why) {
  if (slot()) return slot().get();
  // RTLD_NOLOAD: only the library torch has already loaded; never a second copy.
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) {
    why = "libtorch is not loaded from " + library;
    return nullptr;
  }
  auto reads = std::make_unique<TorchReads>();
  reads->dataPtr_ = reinterpret_cast<PtrFn>(dlsym(lib, "aoti_torch_get_data_ptr"));
  reads->deviceType_ = reinterpret_cast<IntFn>(dlsym(lib, "aoti_torch_get_device_type"));
  reads->deviceIndex_ = reinterpret_cast<IntFn>(dlsym(lib, "aoti_torch_get_device_index"));
  reads->dtype_ = reinterpret_cast<IntFn>(dlsym(lib, "aoti_torch_get_dtype"));
  if (!reads->dataPtr_ || !reads->deviceType_ || !reads->deviceIndex_ || !reads->dtype_) {
    why = "libtorch has no aoti_torch_get_* shim";
    return nullptr;
  }
  for (PyObject* t : types) reads->types_.push_back(reinterpret_cast<PyTypeObject*>(t));
  std::vector<std::pair<PyObject*, int32_t>> dtypes;  // each probe's dtype object and code
  for (PyObject* probe : probes) {
    // The layout first: only a confirmed at::Tensor may be handed to the shim.
    int64_t impl = 0, ptr = 0, device = 0;
    if (!reads->covers(Py_TYPE(probe)) || !attrInt(probe, "_cdata", impl) || !methodInt(probe, "data_ptr", ptr) ||
        !methodInt(probe, "get_device", device)) {
      why = "a probe is not a torch tensor of the given types";
      return nullptr;
    }
    size_t at = 0;
    for (size_t o : kOffsets)
      if (*reinterpret_cast<int64_t*>(reinterpret_cast<char*>(probe) + o) == impl) at = o;
    if (!at || (reads->offset_ && at != reads->offset_)) {
      why = "this torch's THPVariable layout is not one of those known";
      return nullptr;
    }
    reads->offset_ = at;
    TorchTensor r{};
    if (!reads->read(probe, r) || r.ptr != ptr || (device >= 0 ? r.deviceIndex != device : r.deviceType == 1)) {
      why = "the shim's reads disagree with the tensor's methods";
      return nullptr;
    }
    PyObject* dt = PyObject_GetAttrString(probe, "dtype");
    if (!dt) {
      PyErr_Clear();
      why = "a probe has no dtype";
      return nullptr;
    }
    Py_DECREF(dt);  // torch dtypes are singletons: the pointer stays valid
    for (const auto& [other, code] : dtypes)
      if ((other == dt) != (code == r.dtype)) {
        why = "the shim's dtype codes do not tell the probes' dtypes apart";
        return nullptr;
      }
    dtypes.emplace_back(dt, r.dtype);
  }
  slot() = std::move(reads);
  return slot().get();
}

}  // namespace tilefuse::launcher
