// tilefuse._C.runtime: the driver, devices, launch specs, the disk cache and launches (no LLVM here).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

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
      .def_readonly("max_registers_per_block", &DeviceInfo::maxRegistersPerBlock)
      .def_readonly("l2_cache_bytes", &DeviceInfo::l2CacheBytes)
      .def("__repr__", [](const DeviceInfo& d) {
        return "<DeviceInfo " + std::to_string(d.ordinal) + ": " + d.name + " sm_" + std::to_string(d.major) +
               std::to_string(d.minor) + ">";
      });
  r.def("device_info", &deviceInfo);
  r.def("use_device", &useDevice);
  r.def("pointer_device", &pointerDevice);
  r.def("synchronize", &synchronize);
  r.def("allocation_end", &allocationEnd, py::arg("ptr"));
  py::class_<DeviceBuffer>(r, "DeviceBuffer")
      .def(py::init<size_t>(), py::arg("bytes"))
      .def_property_readonly("ptr", &DeviceBuffer::ptr)
      .def("zero", &DeviceBuffer::zero)
      .def("read", [](const DeviceBuffer& b) { return py::bytes(b.read()); });

  py::enum_<ParamKind>(r, "ParamKind")
      .value("ptr", ParamKind::Ptr)
      .value("i1", ParamKind::I1)
      .value("i32", ParamKind::I32)
      .value("i64", ParamKind::I64)
      .value("f32", ParamKind::F32)
      .value("i8", ParamKind::I8)
      .value("i16", ParamKind::I16)
      .value("u8", ParamKind::U8)
      .value("u16", ParamKind::U16)
      .value("u32", ParamKind::U32)
      .value("u64", ParamKind::U64)
      .value("f64", ParamKind::F64);
  using Map = LaunchSpec::TensorMap;
  py::class_<Map::Dim>(r, "TensorMapDim")
      .def_readonly("param", &Map::Dim::param)
      .def_readonly("value", &Map::Dim::value)
      .def_readonly("factor", &Map::Dim::factor)
      .def("__eq__", &Map::Dim::operator==);
  py::class_<Map>(r, "TensorMap")
      .def_readonly("base", &Map::base)
      .def_readonly("elem_bytes", &Map::elemBytes)
      .def_readonly("sizes", &Map::sizes)
      .def_readonly("strides", &Map::strides)
      .def_readonly("box", &Map::box)
      .def_readonly("swizzle_bytes", &Map::swizzleBytes)
      .def_readonly("where", &Map::where);
  py::class_<LaunchSpec::Param>(r, "Param")
      .def_readonly("name", &LaunchSpec::Param::name)
      .def_readonly("kind", &LaunchSpec::Param::kind);
  py::class_<LaunchSpec>(r, "LaunchSpec")
      .def_static("from_json", &launchSpecFromJson)
      .def("to_json", &toJson)
      .def_readonly("kernel", &LaunchSpec::kernel)
      .def_readonly("arch", &LaunchSpec::arch)
      .def_readonly("num_warps", &LaunchSpec::numWarps)
      .def_readonly("num_stages", &LaunchSpec::numStages)
      .def_readonly("num_threads", &LaunchSpec::numThreads)
      .def_readonly("shared_bytes", &LaunchSpec::sharedBytes)
      .def_readonly("params", &LaunchSpec::params)
      .def_readonly("tensor_maps", &LaunchSpec::tensorMaps)
      .def("__eq__", &LaunchSpec::operator==);
  py::class_<CachedKernel>(r, "CachedKernel")
      .def(py::init([](LaunchSpec spec, std::string ptx, py::bytes image) {
             return CachedKernel{std::move(spec), std::move(ptx), std::string(image)};
           }),
           py::arg("spec"), py::arg("ptx"), py::arg("image"))
      .def_readonly("spec", &CachedKernel::spec)
      .def_readonly("ptx", &CachedKernel::ptx)
      .def_property_readonly("image", [](const CachedKernel& k) { return py::bytes(k.image); });
  py::class_<FuncResources>(r, "FuncResources")
      .def_readonly("num_regs", &FuncResources::numRegs)
      .def_readonly("local_bytes", &FuncResources::localBytes)
      .def_readonly("max_threads_per_block", &FuncResources::maxThreadsPerBlock);
  py::class_<LoadedKernel, std::shared_ptr<LoadedKernel>>(r, "LoadedKernel")
      .def(py::init([](int device, py::bytes image, LaunchSpec spec) {
             return std::make_shared<LoadedKernel>(device, std::string(image), std::move(spec));
           }),
           py::arg("device"), py::arg("image"), py::arg("spec"))
      .def(
          "launch",
          [](const LoadedKernel& k, std::array<uint32_t, 3> grid, uint64_t stream, const py::list& values,
             bool cooperative) {
            // One value per parameter: a pointer's address, an int, a float or a bool.
            const auto& params = k.spec().params;
            if (values.size() != params.size())
              throw std::invalid_argument(k.spec().kernel + " takes " + std::to_string(params.size()) + " arguments");
            std::vector<int64_t> args;
            for (size_t i = 0; i < params.size(); ++i) {
              py::handle v = values[i];
              switch (params[i].kind) {
                case ParamKind::Ptr:
                  args.push_back(static_cast<int64_t>(v.cast<uint64_t>()));
                  break;
                case ParamKind::F32:
                case ParamKind::F64:
                  args.push_back(floatArg(params[i].kind, v.cast<double>()));
                  break;
                case ParamKind::U64:
                  args.push_back(static_cast<int64_t>(v.cast<uint64_t>()));
                  break;
                case ParamKind::I1:
                  args.push_back(v.cast<bool>());
                  break;
                default:
                  args.push_back(v.cast<int64_t>());
              }
            }
            k.launch(grid, stream, args.data(), cooperative);
          },
          py::arg("grid"), py::arg("stream"), py::arg("values"), py::arg("cooperative") = false)
      .def("max_resident", &LoadedKernel::maxResident)
      .def_property_readonly("spec", &LoadedKernel::spec)
      .def("resources", &LoadedKernel::resources)
      .def_property_readonly("device", &LoadedKernel::device);

  // The checks of a tensor map with these values (no GPU needed): raises TensorMapError
  // naming the problem.
  r.def(
      "check_tensor_map",
      [](int elemBytes, uint64_t base, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
         const std::vector<int64_t>& box, int swizzle, const std::string& where) {
        if (sizes.size() < 1 || sizes.size() > 5 || strides.size() != sizes.size() || box.size() != sizes.size())
          throw std::invalid_argument("a tensor map has 1 to 5 dims with one size, stride and box extent each");
        TensorMapDesc d;
        d.rank = static_cast<int>(sizes.size());
        d.elemBytes = elemBytes;
        for (int a = 0; a < d.rank; ++a) {
          d.sizes[a] = sizes[a];
          d.strides[a] = strides[a];
          d.box[a] = box[a];
        }
        d.swizzleBytes = swizzle;
        d.where = &where;
        checkTensorMap(d, base);
      },
      py::arg("elem_bytes"), py::arg("base"), py::arg("sizes"), py::arg("strides"), py::arg("box"), py::arg("swizzle"),
      py::arg("where"));

  py::class_<DiskCache>(r, "DiskCache")
      .def(py::init([](std::optional<std::string> d, std::optional<uint64_t> max) {
             return DiskCache(d ? *d : defaultCacheDir(), max ? *max : defaultCacheMaxBytes());
           }),
           py::arg("dir") = py::none(), py::arg("max_bytes") = py::none())
      .def_property_readonly("dir", &DiskCache::dir)
      .def_property_readonly("max_bytes", &DiskCache::maxBytes)
      .def("evict", &DiskCache::evict, py::arg("keep") = "")
      .def("get",
           [](const DiskCache& c, const std::string& k) -> py::object {
             auto v = c.get(k);
             return v ? py::object(py::bytes(*v)) : py::object(py::none());
           })
      .def("put", [](const DiskCache& c, const std::string& k, py::bytes data) { c.put(k, std::string(data)); })
      .def("get_kernel", &DiskCache::getKernel)
      .def("put_kernel", &DiskCache::putKernel);
}
