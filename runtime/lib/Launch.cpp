#include "tilefuse/runtime/Launch.h"

#include <stdexcept>
#include <vector>

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

uint64_t allocationEnd(uint64_t ptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (driver().cuMemGetAddressRange(&base, &size, static_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) return 0;
  return static_cast<uint64_t>(base) + size;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  CUdeviceptr p = 0;
  TF_CU_CHECK(driver().cuMemAlloc(&p, bytes));
  ptr_ = static_cast<uint64_t>(p);
  zero();
}

DeviceBuffer::~DeviceBuffer() { driver().cuMemFree(static_cast<CUdeviceptr>(ptr_)); }

void DeviceBuffer::zero() const { TF_CU_CHECK(driver().cuMemsetD8(static_cast<CUdeviceptr>(ptr_), 0, bytes_)); }

std::string DeviceBuffer::read() const {
  synchronize();  // the launch may be on a non-blocking stream
  std::string out(bytes_, '\0');
  TF_CU_CHECK(driver().cuMemcpyDtoH(out.data(), static_cast<CUdeviceptr>(ptr_), bytes_));
  return out;
}

namespace {

// The spec's tensor maps refer to parameters it has, so that a launch can index without checks.
void checkSpec(const LaunchSpec& s) {
  auto param = [&](int p) { return p >= -1 && p < static_cast<int>(s.params.size()); };
  for (const LaunchSpec::TensorMap& m : s.tensorMaps) {
    size_t rank = m.sizes.size();
    bool ok =
        rank >= 1 && rank <= 5 && m.strides.size() == rank && m.box.size() == rank && m.base >= 0 && param(m.base);
    for (size_t a = 0; ok && a < rank; ++a)
      ok = param(m.sizes[a].param) && param(m.strides[a].param) && param(m.sizes[a].factor) &&
           param(m.strides[a].factor);
    if (!ok)
      throw std::invalid_argument("launch spec of '" + s.kernel +
                                  "': a tensor map has 1 to 5 dims and refers to parameters of the kernel");
  }
}

}  // namespace

LoadedKernel::LoadedKernel(int device, const std::string& image, LaunchSpec spec)
    : device_(device), spec_(std::move(spec)) {
  checkSpec(spec_);
  for (const LaunchSpec::TensorMap& m : spec_.tensorMaps) maps_.push_back(describeTensorMap(m));
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
    throw DriverError("loading kernel '" + spec_.kernel + "' failed: " + (s ? s : "unknown error") + "\n" + log, r);
  }
  TF_CU_CHECK(d.cuModuleGetFunction(&fn_, module_, spec_.kernel.c_str()));
  if (spec_.sharedBytes > 48 * 1024)
    TF_CU_CHECK(d.cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, spec_.sharedBytes));
}

LoadedKernel::~LoadedKernel() {
  if (module_ && driverAvailable()) driver().cuModuleUnload(module_);
}

FuncResources LoadedKernel::resources() const {
  const DriverApi& d = driver();
  FuncResources r{};
  TF_CU_CHECK(d.cuFuncGetAttribute(&r.numRegs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn_));
  TF_CU_CHECK(d.cuFuncGetAttribute(&r.localBytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn_));
  TF_CU_CHECK(d.cuFuncGetAttribute(&r.maxThreadsPerBlock, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn_));
  return r;
}

int64_t LoadedKernel::maxResident() const {
  const DriverApi& d = driver();
  int perSM = 0;
  TF_CU_CHECK(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, fn_, static_cast<int>(spec_.numThreads),
                                                            static_cast<size_t>(spec_.sharedBytes)));
  return static_cast<int64_t>(perSM) * deviceInfo(device_).multiprocessors;
}

void LoadedKernel::launch(std::array<uint32_t, 3> grid, uint64_t stream, const int64_t* args, bool cooperative) const {
  // Parameters by pointer, as the driver takes tensor maps (__grid_constant__); the
  // little-endian int64 slots hold narrower values in their low bytes. On the stack up
  // to a size that covers common kernels (a large frame slows every launch), else on the heap.
  constexpr size_t kStackParams = 64, kStackMaps = 4;
  size_t n = spec_.params.size(), nmaps = maps_.size();
  void* stackParams[kStackParams];
  CUtensorMap stackMaps[kStackMaps];
  std::vector<void*> heapParams;
  std::vector<CUtensorMap> heapMaps;
  void** params = stackParams;
  CUtensorMap* maps = stackMaps;
  if (n + nmaps > kStackParams) params = (heapParams.resize(n + nmaps), heapParams.data());
  if (nmaps > kStackMaps) maps = (heapMaps.resize(nmaps), heapMaps.data());
  for (size_t i = 0; i < n; ++i) params[i] = const_cast<int64_t*>(args + i);
  for (size_t j = 0; j < nmaps; ++j) {
    const LaunchSpec::TensorMap& m = spec_.tensorMaps[j];
    TensorMapDesc d = maps_[j];
    for (int a = 0; a < d.rank; ++a) {
      if (m.sizes[a].param >= 0) d.sizes[a] = m.sizes[a].of(args);
      if (m.strides[a].param >= 0) d.strides[a] = m.strides[a].of(args);
    }
    maps[j] = encodeTensorMap(d, static_cast<uint64_t>(args[m.base]));
    params[n + j] = &maps[j];
  }
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;  // an empty grid launches nothing (its maps are checked)
  const DriverApi& d = driver();
  CUcontext cur = nullptr;
  TF_CU_CHECK(d.cuCtxGetCurrent(&cur));
  if (cur != ctx_) TF_CU_CHECK(d.cuCtxSetCurrent(ctx_));
  auto threads = static_cast<unsigned>(spec_.numThreads), shared = static_cast<unsigned>(spec_.sharedBytes);
  auto* st = reinterpret_cast<CUstream>(stream);
  if (cooperative)
    TF_CU_CHECK(d.cuLaunchCooperativeKernel(fn_, grid[0], grid[1], grid[2], threads, 1, 1, shared, st, params));
  else
    TF_CU_CHECK(d.cuLaunchKernel(fn_, grid[0], grid[1], grid[2], threads, 1, 1, shared, st, params, nullptr));
}

}  // namespace tilefuse::runtime
