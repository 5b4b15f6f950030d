// A torch tensor's address, device and dtype read without calling into Python: three
// method calls per tensor (data_ptr, get_device, dtype) are most of what a launch from
// Python costs above the driver's own call.
//
// A torch.Tensor object is a THPVariable: PyObject_HEAD, then its at::Tensor (a TensorImpl
// pointer), held directly (newer torch) or in a c10::MaybeOwned (a bool, then a union
// whose either member is an at::Tensor). That at::Tensor is what libtorch's stable C shim (AOTInductor's
// aoti_torch_get_data_ptr, _device_index, _device_type, _dtype) takes as its handle. The
// layout is not public API, so it is checked once on probe tensors against what the Python
// methods say (`_cdata` is the TensorImpl pointer); where anything is missing or disagrees,
// the fast path keeps calling the methods.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tilefuse::launcher {

struct TorchTensor {
  int64_t ptr;
  int32_t deviceType, deviceIndex, dtype;
};

class TorchReads {
 public:
  // The reads from the already loaded libtorch at `library`, for objects of exactly
  // `types`, if `probes` (torch tensors, with their `_cdata`) read the same as through
  // Python; null otherwise, and `why` says what failed.
  static const TorchReads* enable(const std::string& library, const std::vector<PyObject*>& types,
                                  const std::vector<PyObject*>& probes, std::string& why);
  // The one enabled in this process, or null.
  static const TorchReads* get();

  bool covers(PyTypeObject* t) const;
  // False where the shim reports an error (e.g. a tensor without storage).
  bool read(PyObject* tensor, TorchTensor& out) const;

 private:
  using PtrFn = int32_t (*)(void*, void**);
  using IntFn = int32_t (*)(void*, int32_t*);
  PtrFn dataPtr_ = nullptr;
  IntFn deviceType_ = nullptr, deviceIndex_ = nullptr, dtype_ = nullptr;
  std::vector<PyTypeObject*> types_;
  size_t offset_ = 0;  // of the at::Tensor in the object
};

}  // namespace tilefuse::launcher
