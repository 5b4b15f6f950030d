// tilefuse._C.dlpack: reads (without consuming) the tensor a DLPack capsule describes.
#include <pybind11/pybind11.h>

#include <cstdint>

namespace py = pybind11;

namespace {

// The DLPack ABI (dlpack.h, stable since v0.2): only the fields read here.
struct DLDevice {
  int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means compact row-major
  uint64_t byte_offset;
};

}  // namespace

void init_dlpack(py::module_& m) {
  auto d = m.def_submodule("dlpack", "DLPack capsules");
  d.def(
      "describe",
      // py::tuple, not auto: pybind11 3 types each make_tuple by its arguments, and the two returns differ.
      [](py::capsule cap) -> py::tuple {
        if (std::string(cap.name() ? cap.name() : "") != "dltensor")
          throw py::value_error("expected an unconsumed DLPack capsule named 'dltensor'");
        // A DLManagedTensor begins with its DLTensor.
        const DLTensor* t = static_cast<const DLTensor*>(cap.get_pointer());
        uint64_t base = reinterpret_cast<uint64_t>(t->data) + t->byte_offset;
        int64_t elemBytes = (t->dtype.bits * t->dtype.lanes + 7) / 8;
        // The span of bytes the tensor can reach, from its shape and strides.
        int64_t lo = 0, hi = 0, stride = 1;
        for (int32_t i = t->ndim - 1; i >= 0; --i) {
          int64_t st = t->strides ? t->strides[i] : stride;
          int64_t n = t->shape[i];
          if (n == 0)
            return py::make_tuple(base, base, 0, t->device.device_type, t->device.device_id, t->dtype.code,
                                  t->dtype.bits, t->dtype.lanes);
          (st >= 0 ? hi : lo) += (n - 1) * st;
          stride *= n;
        }
        int64_t bytes = (hi - lo + 1) * elemBytes;
        return py::make_tuple(base, base + lo * elemBytes, bytes, t->device.device_type, t->device.device_id,
                              t->dtype.code, t->dtype.bits, t->dtype.lanes);
      },
      py::arg("capsule"),
      "(address of the first element, lowest address reached, bytes spanned, device type, device id, dtype code, "
      "bits, lanes)");
}
