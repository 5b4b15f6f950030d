// The AOT example: a C++ program that launches the axpy kernel that `python -m tilefuse.aot`
// compiled (see README.md) with only the runtime library, and checks it against a float64
// reference on fresh random inputs. Usage: axpy_example [n] (default 1000003).
#include <cuda.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "axpy.h"

#define CHECK(call)                                                              \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                    \
      const char* s_ = nullptr;                                                  \
      cuGetErrorString(r_, &s_);                                                 \
      std::fprintf(stderr, "%s failed: %s\n", #call, s_ ? s_ : "unknown error"); \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

int main(int argc, char** argv) {
  const int32_t n = argc > 1 ? std::atoi(argv[1]) : 1000003;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<float> x(n), y(n), out(n);
  for (int32_t i = 0; i < n; ++i) x[i] = normal(rng), y[i] = normal(rng);
  const float a = normal(rng);

  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  size_t bytes = sizeof(float) * (n > 0 ? n : 1);
  CUdeviceptr dx, dy, dout;
  CHECK(cuMemAlloc(&dx, bytes));  // cuMemAlloc's memory is 256-byte aligned, as *fp32:16 needs
  CHECK(cuMemAlloc(&dy, bytes));
  CHECK(cuMemAlloc(&dout, bytes));
  CHECK(cuMemcpyHtoD(dx, x.data(), sizeof(float) * n));
  CHECK(cuMemcpyHtoD(dy, y.data(), sizeof(float) * n));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  CUresult r = axpy(stream, dx, dy, dout, a, n);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "axpy failed (%d): %s\n", int(r), axpy_error());
    return 1;
  }
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuMemcpyDtoH(out.data(), dout, sizeof(float) * n));

  // a * x + y in fp32 is one fma or a product and a sum: within two roundings of the exact
  // value, 2^-23 relative to |a x| + |y|.
  double worst = 0;
  for (int32_t i = 0; i < n; ++i) {
    double ref = double(a) * x[i] + y[i];
    double bound = std::ldexp(std::fabs(double(a) * x[i]) + std::fabs(y[i]), -23);
    double err = std::fabs(out[i] - ref);
    if (!(err <= bound)) {
      std::fprintf(stderr, "axpy: out[%d] = %.9g, expected %.9g (bound %.3g)\n", i, out[i], ref, bound);
      return 1;
    }
    if (bound > 0 && err / bound > worst) worst = err / bound;
  }
  std::printf("axpy n=%d ok: worst error %.3f of the two-rounding bound\n", n, worst);
  cuMemFree(dx), cuMemFree(dy), cuMemFree(dout);
  cuStreamDestroy(stream);
  return 0;
}
