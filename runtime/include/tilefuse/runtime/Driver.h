// The CUDA Driver API, loaded on first use with dlopen so that importing
// tilefuse never needs a GPU or libcuda. Every call goes through TF_CU_CHECK,
// which throws DriverError with cuGetErrorString's text.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace tilefuse::runtime {

class DriverError : public std::runtime_error {
 public:
  explicit DriverError(const std::string& what, CUresult code = CUDA_ERROR_UNKNOWN)
      : std::runtime_error(what), code_(code) {}
  // The failed call's result (AOT launch functions return it); CUDA_ERROR_UNKNOWN where no
  // call failed (libcuda.so.1 missing).
  CUresult code() const { return code_; }

 private:
  CUresult code_;
};

struct DriverApi {
#define CU_FN(name, symbol) decltype(&::name) name = nullptr;
#include "tilefuse/runtime/cuda_functions.def"
};

// The loaded API; throws DriverError naming the reason when libcuda.so.1 is
// missing, lacks a symbol, or cuInit fails.
const DriverApi& driver();
// False (never throws) when no driver or no device is present.
bool driverAvailable();
std::string driverUnavailableReason();

void check(CUresult r, const char* call, const char* file, int line);
#define TF_CU_CHECK(call) ::tilefuse::runtime::check((call), #call, __FILE__, __LINE__)

struct DeviceInfo {
  int ordinal;
  std::string name;
  int major, minor;
  int multiprocessors;
  int maxSharedPerBlockOptin;
  int maxRegistersPerBlock;
  int l2CacheBytes;
};
int driverVersion();  // e.g. 13000 for CUDA 13.0
int deviceCount();    // 0 when no driver is present
DeviceInfo deviceInfo(int ordinal);
// The driver's handle of device `ordinal`; DriverError naming it when it does not exist.
CUdevice deviceHandle(int ordinal);

}  // namespace tilefuse::runtime
