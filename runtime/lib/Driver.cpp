#include "tilefuse/runtime/Driver.h"

#include <dlfcn.h>

#include <mutex>

namespace tilefuse::runtime {
namespace {

struct Loaded {
  DriverApi api;
  std::string error;  // empty when loaded and initialized
};

Loaded load() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    l.error = std::string("cannot load libcuda.so.1 (no NVIDIA driver on this machine?): ") + dlerror();
    return l;
  }
#define CU_FN(name, symbol)                                                        \
  l.api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, symbol));              \
  if (!l.api.name) {                                                               \
    l.error = "libcuda.so.1 lacks " symbol " (driver too old for CUDA 12 calls?)"; \
    return l;                                                                      \
  }
#include "tilefuse/runtime/cuda_functions.def"
  CUresult r = l.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    l.api.cuGetErrorString(r, &s);
    l.error = std::string("cuInit failed: ") + (s ? s : "unknown error");
  }
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw DriverError(l.error);
  return l.api;
}

bool driverAvailable() { return loaded().error.empty(); }
std::string driverUnavailableReason() { return loaded().error; }

void check(CUresult r, const char* call, const char* file, int line) {
  if (r == CUDA_SUCCESS) return;
  const char* s = nullptr;
  if (driver().cuGetErrorString(r, &s) != CUDA_SUCCESS || !s) s = "unknown CUDA error";
  throw DriverError(std::string(call) + " failed: " + s + " (" + file + ":" + std::to_string(line) + ")", r);
}

int driverVersion() {
  int v = 0;
  TF_CU_CHECK(driver().cuDriverGetVersion(&v));
  return v;
}

int deviceCount() {
  if (!driverAvailable()) return 0;
  int n = 0;
  TF_CU_CHECK(driver().cuDeviceGetCount(&n));
  return n;
}

CUdevice deviceHandle(int ordinal) {
  int n = deviceCount();
  if (ordinal < 0 || ordinal >= n)
    throw DriverError("device " + std::to_string(ordinal) + " does not exist (" + std::to_string(n) + " visible)",
                      CUDA_ERROR_INVALID_DEVICE);
  CUdevice dev;
  TF_CU_CHECK(driver().cuDeviceGet(&dev, ordinal));
  return dev;
}

DeviceInfo deviceInfo(int ordinal) {
  const DriverApi& d = driver();
  CUdevice dev = deviceHandle(ordinal);
  DeviceInfo info{};
  info.ordinal = ordinal;
  char name[256] = {};
  TF_CU_CHECK(d.cuDeviceGetName(name, sizeof name, dev));
  info.name = name;
  TF_CU_CHECK(d.cuDeviceGetAttribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  TF_CU_CHECK(d.cuDeviceGetAttribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  TF_CU_CHECK(d.cuDeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  TF_CU_CHECK(
      d.cuDeviceGetAttribute(&info.maxSharedPerBlockOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  TF_CU_CHECK(d.cuDeviceGetAttribute(&info.maxRegistersPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, dev));
  TF_CU_CHECK(d.cuDeviceGetAttribute(&info.l2CacheBytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
  return info;
}

}  // namespace tilefuse::runtime
