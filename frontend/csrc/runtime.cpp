// tilefuse._C.runtime: driver presence and device queries (no LLVM here).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tilefuse/runtime/Driver.h"

namespace py = pybind11;
using namespace tilefuse::runtime;

void init_runtime(py::module_& m) {
  auto r = m.def_submodule("runtime", "CUDA Driver API runtime");
  static py::exception<DriverError> driverError(r, "DriverError");
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
}
