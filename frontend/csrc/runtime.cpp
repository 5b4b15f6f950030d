// tilefuse._C.runtime: driver presence and device queries (no LLVM here).
#include <cstring>
#include <optional>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tilefuse/runtime/DiskCache.h"
#include "tilefuse/runtime/Driver.h"
#include "tilefuse/runtime/Launch.h"
#include "tilefuse/runtime/TensorMap.h"

namespace py = pybind11;
using namespace tilefuse::runtime;

void init_runtime(py::module_& m) {
  auto r = m.def_submodule("runtime", "CUDA Driver API runtime");
  py::register_exception<DriverError>(r, "DriverError");
  py::register_exception<TensorMapError>(r, "TensorMapError");
  r.def("driver_available", &driverAvailable);
  r.def("driver_unavailable_reason", &driverUnavailableReason);
  r.def("driver_version", &driverVersion);
  r.def("device_count", &deviceCount);
  py::class_<DeviceInfo>(r, "DeviceInfo")
      .def_readonly("ordinal", &DeviceInfo::ordinal)
      .def_readonly("name", &DeviceInfo::name)
      .def_readonly("major", &DeviceInfo::major)
      .def_readonly("minor", &DeviceInfo::minor)
      .def_readonly("multiprocessors", &DeviceInfo::multiprocessors)
      .def_readonly("max_shared_per_block_optin", &DeviceInfo::maxSharedPerBlockOptin)
      .def("__repr__", [](const DeviceInfo& d) {
        return "<DeviceInfo " + std::to_string(d.ordinal) + ": " + d.name + " sm_" + std::to_string(d.major) +
               std::to_string(d.minor) + ">";
      });
  r.def("device_info", &deviceInfo);
  r.def("use_device", &useDevice);
  r.def("pointer_device", &pointerDevice);
  r.def("synchronize", &synchronize);

  py::enum_<KernelArg::Kind>(r, "ArgKind")
      .value("ptr", KernelArg::Kind::Ptr)
      .value("i1", KernelArg::Kind::I1)
      .value("i32", KernelArg::Kind::I32)
      .value("i64", KernelArg::Kind::I64)
      .value("f32", KernelArg::Kind::F32);
  py::class_<KernelArg>(r, "KernelArg").def(py::init([](KernelArg::Kind k, uint64_t bits) {
    return KernelArg{k, bits};
  }));
  py::class_<LoadedKernel, std::shared_ptr<LoadedKernel>>(r, "LoadedKernel")
      .def(py::init([](int device, py::bytes image, const std::string& name, int threads, int shared) {
             return std::make_shared<LoadedKernel>(device, std::string(image), name, threads, shared);
           }),
           py::arg("device"), py::arg("image"), py::arg("name"), py::arg("num_threads"), py::arg("shared_bytes"))
      .def(
          "launch",
          [](const LoadedKernel& k, std::array<uint32_t, 3> grid, uint64_t stream, const std::vector<KernelArg>& args,
             const std::vector<py::bytes>& maps) {
            std::vector<CUtensorMap> m(maps.size());
            for (size_t i = 0; i < maps.size(); ++i) {
              std::string b = maps[i];
              if (b.size() != sizeof(CUtensorMap)) throw std::invalid_argument("a tensor map has 128 bytes");
              std::memcpy(&m[i], b.data(), sizeof(CUtensorMap));
            }
            k.launch(grid, stream, args, m);
          },
          py::arg("grid"), py::arg("stream"), py::arg("args"), py::arg("maps") = std::vector<py::bytes>{})
      .def_property_readonly("device", &LoadedKernel::device)
      .def_property_readonly("num_threads", &LoadedKernel::numThreads)
      .def_property_readonly("shared_bytes", &LoadedKernel::sharedBytes);

  // A tensor map from the values of a lower.TensorMapSpec: its 128 bytes (encode), or
  // only the checks (check, without a GPU). Raises TensorMapError naming the problem.
  auto desc = [](int elemBytes, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                 const std::vector<int64_t>& box, int swizzle, const std::string* where) {
    TensorMapDesc d;
    if (sizes.size() < 1 || sizes.size() > 5 || strides.size() != sizes.size() || box.size() != sizes.size())
      throw std::invalid_argument("a tensor map has 1 to 5 dims with one size, stride and box extent each");
    d.rank = static_cast<int>(sizes.size());
    d.elemBytes = elemBytes;
    for (int a = 0; a < d.rank; ++a) {
      d.sizes[a] = sizes[a];
      d.strides[a] = strides[a];
      d.box[a] = box[a];
    }
    d.swizzleBytes = swizzle;
    d.where = where;
    return d;
  };
  r.def(
      "encode_tensor_map",
      [desc](int elemBytes, uint64_t base, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
             const std::vector<int64_t>& box, int swizzle, const std::string& where) {
        CUtensorMap m = encodeTensorMap(desc(elemBytes, sizes, strides, box, swizzle, &where), base);
        return py::bytes(reinterpret_cast<const char*>(&m), sizeof m);
      },
      py::arg("elem_bytes"), py::arg("base"), py::arg("sizes"), py::arg("strides"), py::arg("box"), py::arg("swizzle"),
      py::arg("where"));
  r.def(
      "check_tensor_map",
      [desc](int elemBytes, uint64_t base, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
             const std::vector<int64_t>& box, int swizzle,
             const std::string& where) { checkTensorMap(desc(elemBytes, sizes, strides, box, swizzle, &where), base); },
      py::arg("elem_bytes"), py::arg("base"), py::arg("sizes"), py::arg("strides"), py::arg("box"), py::arg("swizzle"),
      py::arg("where"));

  py::class_<DiskCache>(r, "DiskCache")
      .def(py::init([](std::optional<std::string> d) { return DiskCache(d ? *d : defaultCacheDir()); }),
           py::arg("dir") = py::none())
      .def_property_readonly("dir", &DiskCache::dir)
      .def("get",
           [](const DiskCache& c, const std::string& k) -> py::object {
             auto v = c.get(k);
             return v ? py::object(py::bytes(*v)) : py::object(py::none());
           })
      .def("put", [](const DiskCache& c, const std::string& k, py::bytes data) { c.put(k, std::string(data)); });
}
