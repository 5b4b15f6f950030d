// Host launch overhead from C++: tilefuse's runtime (LoadedKernel::launch)
// against a bare cuLaunchKernel on the same function, same arguments.
//   g++ -O2 -std=c++20 bench/launch_cpp.cpp runtime/lib/*.cpp -Iruntime/include \
//       -I/usr/local/cuda/include -ldl -o launch_cpp && ./launch_cpp vector_add.ptx add_kernel 128
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tilefuse/runtime/Launch.h"

using namespace tilefuse::runtime;

namespace {

// Median over batches of the mean host time per launch, in microseconds.
template <class F>
double perLaunchUs(F&& launch) {
  constexpr int kBatch = 500, kBatches = 40;
  std::vector<double> t;
  for (int b = 0; b < kBatches + 5; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) launch();
    auto t1 = std::chrono::steady_clock::now();
    synchronize();
    if (b >= 5) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s KERNEL.ptx NAME THREADS\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string ptx = ss.str();
  LaunchSpec spec;
  spec.kernel = argv[2];
  spec.numThreads = std::atoi(argv[3]);
  spec.params = {{"x", ParamKind::Ptr}, {"y", ParamKind::Ptr}, {"out", ParamKind::Ptr}, {"n", ParamKind::I32}};
  LoadedKernel k(0, ptx, spec);
  // vector add (x, y, out, n) with n = 0: every lane is masked off, so null pointers are never read.
  int64_t args[] = {0, 0, 0, 0};
  double ours = perLaunchUs([&] { k.launch({4, 1, 1}, 0, args); });

  // The bare call: the same function handle through the driver, parameters by pointer.
  CUmodule mod;
  CUfunction fn;
  TF_CU_CHECK(driver().cuModuleLoadDataEx(&mod, ptx.c_str(), 0, nullptr, nullptr));
  TF_CU_CHECK(driver().cuModuleGetFunction(&fn, mod, argv[2]));
  struct {
    uint64_t x, y, out;
    int32_t n;
  } packed{0, 0, 0, 0};
  void* params[] = {&packed.x, &packed.y, &packed.out, &packed.n};
  double bare = perLaunchUs([&] {
    TF_CU_CHECK(driver().cuLaunchKernel(fn, 4, 1, 1, std::atoi(argv[3]), 1, 1, 0, nullptr, params, nullptr));
  });
  std::printf("{\"tilefuse_cpp_us\": %.3f, \"bare_cuLaunchKernel_us\": %.3f, \"ratio\": %.3f}\n", ours, bare,
              ours / bare);
  return 0;
}
