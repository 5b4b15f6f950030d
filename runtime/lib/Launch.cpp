#include "tilefuse/runtime/Launch.h"

#include <cstring>

namespace tilefuse::runtime {

void useDevice(int device) {
  const DriverApi& d = driver();
  CUdevice dev = deviceHandle(device);
  CUcontext cur = nullptr;
  TF_CU_CHECK(d.cuCtxGetCurrent(&cur));
  if (cur) {
    CUdevice curDev;
    TF_CU_CHECK(d.cuCtxGetDevice(&curDev));
    if (curDev == dev) return;
  }
  CUcontext ctx;
  TF_CU_CHECK(d.cuDevicePrimaryCtxRetain(&ctx, dev));
  TF_CU_CHECK(d.cuCtxSetCurrent(ctx));
}

int pointerDevice(uint64_t ptr) {
  int ordinal = -1;
  CUresult r =
      driver().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, static_cast<CUdeviceptr>(ptr));
  return r == CUDA_SUCCESS ? ordinal : -1;
}

void synchronize() { TF_CU_CHECK(driver().cuCtxSynchronize()); }

LoadedKernel::LoadedKernel(int device, const std::string& image, const std::string& name, int numThreads,
                           int sharedBytes)
    : device_(device), threads_(numThreads), shared_(sharedBytes) {
  useDevice(device);
  const DriverApi& d = driver();
  TF_CU_CHECK(d.cuCtxGetCurrent(&ctx_));
  char log[8192] = {};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {log, reinterpret_cast<void*>(sizeof log)};
  CUresult r = d.cuModuleLoadDataEx(&module_, image.c_str(), 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    d.cuGetErrorString(r, &s);
    throw DriverError(std::string("loading kernel '") + name + "' failed: " + (s ? s : "unknown error") + "\n" + log);
  }
  TF_CU_CHECK(d.cuModuleGetFunction(&fn_, module_, name.c_str()));
  if (sharedBytes > 48 * 1024)
    TF_CU_CHECK(d.cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sharedBytes));
}

LoadedKernel::~LoadedKernel() {
  if (module_ && driverAvailable()) driver().cuModuleUnload(module_);
}

void LoadedKernel::launch(std::array<uint32_t, 3> grid, uint64_t stream, const std::vector<KernelArg>& args,
                          const std::vector<CUtensorMap>& maps) const {
  // Parameter storage: each argument in its declared width.
  std::vector<uint64_t> storage(args.size());
  std::vector<void*> params(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    storage[i] = args[i].bits;
    params[i] = &storage[i];  // little endian: the low bytes hold narrower values
  }
  for (const CUtensorMap& m : maps) params.push_back(const_cast<CUtensorMap*>(&m));
  launchWith(grid, stream, params.data(), nullptr);
}

void LoadedKernel::launchPacked(std::array<uint32_t, 3> grid, uint64_t stream, std::string_view params) const {
  size_t size = params.size();
  void* config[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<char*>(params.data()), CU_LAUNCH_PARAM_BUFFER_SIZE,
                    &size, CU_LAUNCH_PARAM_END};
  launchWith(grid, stream, nullptr, config);
}

void LoadedKernel::launchParams(std::array<uint32_t, 3> grid, uint64_t stream, void** params) const {
  launchWith(grid, stream, params, nullptr);
}

void LoadedKernel::launchWith(std::array<uint32_t, 3> grid, uint64_t stream, void** params, void** extra) const {
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;  // an empty grid launches nothing
  const DriverApi& d = driver();
  CUcontext cur = nullptr;
  TF_CU_CHECK(d.cuCtxGetCurrent(&cur));
  if (cur != ctx_) TF_CU_CHECK(d.cuCtxSetCurrent(ctx_));
  TF_CU_CHECK(d.cuLaunchKernel(fn_, grid[0], grid[1], grid[2], static_cast<unsigned>(threads_), 1, 1,
                               static_cast<unsigned>(shared_), reinterpret_cast<CUstream>(stream), params, extra));
}

}  // namespace tilefuse::runtime
