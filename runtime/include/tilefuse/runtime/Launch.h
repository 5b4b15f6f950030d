// Loading compiled kernels (PTX or cubin) into the device's primary context and
// launching them on a stream.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tilefuse/runtime/Driver.h"
#include "tilefuse/runtime/LaunchSpec.h"
#include "tilefuse/runtime/TensorMap.h"

namespace tilefuse::runtime {

// The launch argument of an f32 parameter: its bits in the low four bytes.
inline int64_t f32Arg(double v) {
  float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// What the loaded function uses of the device, as the driver reports it.
struct FuncResources {
  int numRegs;             // registers per thread
  int localBytes;          // local memory per thread (register spills, local arrays)
  int maxThreadsPerBlock;  // the most threads a launch may have with these registers
};

// The launch argument of an f64 parameter: its bits.
inline int64_t f64Arg(double v) {
  int64_t bits;
  std::memcpy(&bits, &v, 8);
  return bits;
}

// The launch argument of a float parameter of kind `k` (f32 or f64).
inline int64_t floatArg(ParamKind k, double v) { return k == ParamKind::F64 ? f64Arg(v) : f32Arg(v); }

class LoadedKernel {
 public:
  // `image` is PTX text (JIT-compiled by the driver) or a cubin holding `spec.kernel`.
  LoadedKernel(int device, const std::string& image, LaunchSpec spec);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  // `args[i]` is the value of spec().params[i]: pointers and integers as int64 (u64 as
  // its bits), f32 and f64 as floatArg, i1 as 0 or 1. Encodes the spec's tensor maps from them (TensorMapError for
  // values the copy engine cannot take) and makes the kernel's context current when
  // another one is. `cooperative`: a cooperative launch (every program resident at once,
  // as Triton's launch_cooperative_grid; the driver refuses grids beyond maxResident()).
  void launch(std::array<uint32_t, 3> grid, uint64_t stream, const int64_t* args, bool cooperative = false) const;
  // The most programs of this kernel resident on its device at once (per SM × SMs).
  int64_t maxResident() const;
  FuncResources resources() const;
  const LaunchSpec& spec() const { return spec_; }
  int device() const { return device_; }

 private:
  int device_;
  LaunchSpec spec_;
  std::vector<TensorMapDesc> maps_;  // of spec_.tensorMaps, made once
  CUcontext ctx_ = nullptr;          // the device's primary context
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
};

// A small device allocation that kernels write and the host reads after them (the error
// record of TILEFUSE_DEBUG=1 launches), in the current context.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint64_t ptr() const { return ptr_; }
  void zero() const;
  std::string read() const;  // after the device has finished all work
 private:
  uint64_t ptr_ = 0;
  size_t bytes_;
};

// The end of the device allocation that holds `ptr`; 0 when it is not device memory.
uint64_t allocationEnd(uint64_t ptr);

// Makes the device's primary context current on this thread (as torch does).
void useDevice(int device);
// The device that owns a device pointer; -1 when it is not device memory.
int pointerDevice(uint64_t ptr);
void synchronize();

}  // namespace tilefuse::runtime
