// A stand-in libcuda.so.1 for test_launch_path.py: one sm_90 device, modules of PTX
// text, and launches that append their grid, block, shared memory and parameter values
// (sizes read from the PTX entry's .param list) and a stream other than the default to
// $FAKE_CUDA_LOG, one line each;
// without $FAKE_CUDA_LOG a launch does nothing, which times the host side alone.
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Each module's (and so its kernel's) parameter sizes: CUmodule and CUfunction point at one.
struct Params {
  int n, size[1024];
};
static int ctx;
static CUcontext current;

static CUresult ok(void) { return CUDA_SUCCESS; }

CUresult cuGetErrorString(CUresult e, const char** s) {
  *s = "fake driver error";
  return ok();
}
CUresult cuInit(unsigned flags) { return ok(); }
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return ok();
}
CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return ok();
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ok();
}
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR            ? 9
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR          ? 0
       : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ? 232448
       : a == CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK           ? 65536
       : a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE                     ? 52428800
                                                                    : 132;
  return ok();
}
CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  snprintf(name, len, "fake");
  return ok();
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  *c = (CUcontext)&ctx;
  return ok();
}
CUresult cuCtxSetCurrent(CUcontext c) {
  current = c;
  return ok();
}
CUresult cuCtxGetCurrent(CUcontext* c) {
  *c = current;
  return ok();
}
CUresult cuCtxGetDevice(CUdevice* d) {
  *d = 0;
  return ok();
}
CUresult cuCtxSynchronize(void) { return ok(); }

// Parameter sizes from ".param .u64 k_param_0," ... ".param .align 64 .b8 k_param_9[128]".
CUresult cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned n, CUjit_option* o, void** v) {
  struct Params* k = calloc(1, sizeof *k);
  const char* p = strstr((const char*)image, ".entry");
  const char* end = p ? strchr(p, '{') : NULL;
  for (; p && (p = strstr(p, ".param ")) && p < end; p = strchr(p, '\n')) {
    const char* bracket = memchr(p, '[', strchr(p, '\n') - p);
    k->size[k->n++] = bracket ? atoi(bracket + 1) : atoi(p + strlen(".param .u")) / 8;
  }
  *m = (CUmodule)k;
  return ok();
}
CUresult cuModuleUnload(CUmodule m) {
  free(m);
  return ok();
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  *f = (CUfunction)m;
  return ok();
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { return ok(); }
// 128 registers per thread, so that a block of more than $FAKE_CUDA_MAX_THREADS (default
// 512) threads exceeds the register file.
CUresult cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  const char* max = getenv("FAKE_CUDA_MAX_THREADS");
  *v = a == CU_FUNC_ATTRIBUTE_NUM_REGS                ? 128
       : a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? (max ? atoi(max) : 512)
                                                      : 0;
  return ok();
}

// Two programs per SM of the 132 cuDeviceGetAttribute reports: 264 resident at once.
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction f, int threads, size_t shared) {
  *n = 2;
  return ok();
}

// One launch of k's kernel, logged to $FAKE_CUDA_LOG as its grid, block, shared bytes and
// parameter values.
static CUresult launch(const struct Params* k, const char* kind, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned shared, CUstream s, void** params) {
  int nparams = k->n;
  const int* psize = k->size;
  static const char* path;
  static int looked;
  if (!looked) path = getenv("FAKE_CUDA_LOG"), looked = 1;
  if (!path) return ok();  // bench/launch_overhead.py: a launch that costs nothing
  FILE* log = fopen(path, "a");
  fprintf(log, "%sgrid=%u,%u,%u block=%u shared=%u", kind, gx, gy, gz, bx, shared);
  for (int i = 0; i < nparams; ++i) {
    int64_t v = 0;
    if (psize[i] == 128) {  // a tensor map, as cuTensorMapEncodeTiled below wrote it
      const int64_t* q = params[i];
      fprintf(log, " map(%lld,%lld,%lld,%lld,%lld)", (long long)q[0], (long long)q[1], (long long)q[2], (long long)q[3],
              (long long)q[4]);
      continue;
    }
    memcpy(&v, params[i], psize[i]);
    if (psize[i] == 4) v = (int32_t)v;
    fprintf(log, " %d:%lld", psize[i], (long long)v);
  }
  if (s) fprintf(log, " stream=%#llx", (unsigned long long)(uintptr_t)s);
  fprintf(log, "\n");
  fclose(log);
  // $FAKE_CUDA_VIOLATION (7 comma-separated words): what a TILEFUSE_DEBUG=1 kernel writes
  // into its error record, the last parameter, when an access is out of bounds.
  const char* words = getenv("FAKE_CUDA_VIOLATION");
  if (words && nparams > 0 && psize[nparams - 1] == 8) {
    int64_t* record = NULL;
    memcpy(&record, params[nparams - 1], 8);
    for (int i = 0; i < 7 && *words; ++i) {
      char* end;
      record[i] = strtoll(words, &end, 10);
      words = *end ? end + 1 : end;
    }
  }
  return ok();
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void** params, void** extra) {
  return launch((const struct Params*)f, "", gx, gy, gz, bx, shared, s, params);
}

// Logged as a launch with "coop " before it.
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, CUstream s, void** params) {
  return launch((const struct Params*)f, "coop ", gx, gy, gz, bx, shared, s, params);
}

// Records the base, the innermost size, the byte stride of dim 1 and the innermost box.
CUresult cuTensorMapEncodeTiled(CUtensorMap* m, CUtensorMapDataType t, cuuint32_t rank, void* base,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* elemStrides, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  int64_t* q = (int64_t*)m;
  memset(m, 0, sizeof *m);
  q[0] = (int64_t)(uintptr_t)base;
  q[1] = rank;
  q[2] = (int64_t)dims[0];
  q[3] = rank > 1 ? (int64_t)strides[0] : 0;
  q[4] = box[0];
  return ok();
}
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
  *(int*)data = 0;
  return ok();
}
CUresult cuEventCreate(CUevent* e, unsigned flags) { return ok(); }
CUresult cuEventRecord(CUevent e, CUstream s) { return ok(); }
CUresult cuEventSynchronize(CUevent e) { return ok(); }
CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  *ms = 0;
  return ok();
}
CUresult cuEventDestroy(CUevent e) { return ok(); }
// Device memory is host memory; every address lies in an allocation of 1 GiB from 0.
CUresult cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  *p = (CUdeviceptr)(uintptr_t)calloc(1, bytes);
  return *p ? ok() : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFree(CUdeviceptr p) {
  free((void*)(uintptr_t)p);
  return ok();
}
CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
  memset((void*)(uintptr_t)p, v, n);
  return ok();
}
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  memcpy(dst, (const void*)(uintptr_t)src, n);
  return ok();
}
CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  *base = 0;
  *size = (size_t)1 << 30;
  return ok();
}
