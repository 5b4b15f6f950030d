// Reading torch tensors without Python calls (TorchReads.h).
#include "TorchReads.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>

namespace tilefuse::launcher {

namespace {

// The at::Tensor inside a THPVariable: after the object header and MaybeOwned's bool.
constexpr size_t kTensorOffset = sizeof(PyObject) + alignof(void*);
static_assert(kTensorOffset == 24, "THPVariable's at::Tensor follows a 16-byte header and an 8-aligned bool");

void* tensorAt(PyObject* obj) { return reinterpret_cast<char*>(obj) + kTensorOffset; }

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
  void* t = tensorAt(tensor);
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
    if (*static_cast<int64_t*>(tensorAt(probe)) != impl) {
      why = "this torch's THPVariable layout is not the one expected";
      return nullptr;
    }
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
