// Loading compiled kernels (PTX or cubin) into the device's primary context and
// launching them on a stream.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tilefuse/runtime/Driver.h"

namespace tilefuse::runtime {

// One launch argument as the kernel's parameter list declares it.
struct KernelArg {
  enum class Kind : uint8_t { Ptr, I1, I32, I64, F32 } kind;
  uint64_t bits;  // the value (pointer, integer, or the float's bits)
};

class LoadedKernel {
 public:
  // `image` is PTX text (JIT-compiled by the driver) or a cubin.
  LoadedKernel(int device, const std::string& image, const std::string& name, int numThreads, int sharedBytes);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  // `maps`: the kernel's tensor maps, passed after `args`.
  void launch(std::array<uint32_t, 3> grid, uint64_t stream, const std::vector<KernelArg>& args,
              const std::vector<CUtensorMap>& maps = {}) const;
  // `params` holds every argument laid out as the kernel's parameter list (natural
  // alignment, as a C struct): one copy instead of one object per argument. Makes the
  // kernel's context current first when another one is.
  void launchPacked(std::array<uint32_t, 3> grid, uint64_t stream, std::string_view params) const;
  // `params[i]` points at the value of the kernel's parameter i.
  void launchParams(std::array<uint32_t, 3> grid, uint64_t stream, void** params) const;
  int device() const { return device_; }
  int numThreads() const { return threads_; }
  int sharedBytes() const { return shared_; }

 private:
  // Makes the kernel's context current when another one is, then launches with
  // cuLaunchKernel's `kernelParams` or `extra`.
  void launchWith(std::array<uint32_t, 3> grid, uint64_t stream, void** params, void** extra) const;
  int device_;
  CUcontext ctx_ = nullptr;  // the device's primary context
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  int threads_;
  int shared_;
};

// Makes the device's primary context current on this thread (as torch does).
void useDevice(int device);
// The device that owns a device pointer; -1 when it is not device memory.
int pointerDevice(uint64_t ptr);
void synchronize();

}  // namespace tilefuse::runtime
