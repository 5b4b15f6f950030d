#include "tilefuse/runtime/TensorMap.h"

#include "tilefuse/runtime/Driver.h"

namespace tilefuse::runtime {
namespace {

[[noreturn]] void reject(const TensorMapDesc& d, const std::string& what) {
  throw TensorMapError("tensor descriptor" + (d.where ? " at " + *d.where : std::string()) + ": " + what +
                       " (the TMA copy engine needs 16-byte aligned bases and strides and sizes of 1 to 2^32)");
}

CUtensorMapDataType dataType(int bytes) {
  switch (bytes) {
    case 1:
      return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case 2:
      return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case 4:
      return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    default:
      return CU_TENSOR_MAP_DATA_TYPE_UINT64;
  }
}

CUtensorMapSwizzle swizzle(int bytes) {
  switch (bytes) {
    case 32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

}  // namespace

void checkTensorMap(const TensorMapDesc& d, uint64_t base) {
  if (base % 16) reject(d, "base address " + std::to_string(base) + " is not a multiple of 16 bytes");
  for (int a = 0; a < d.rank; ++a) {
    int64_t size = d.sizes[a], stride = d.strides[a];
    std::string dim = " of dim " + std::to_string(a);
    if (size < 1 || size > (int64_t(1) << 32)) reject(d, "size " + std::to_string(size) + dim + " is out of range");
    if (a + 1 == d.rank) {
      if (stride != 1) reject(d, "stride " + std::to_string(stride) + " of the last dim is not 1");
    } else if (stride <= 0 || (stride * d.elemBytes) % 16 || stride * d.elemBytes >= (int64_t(1) << 40)) {
      reject(d, "stride " + std::to_string(stride) + dim + " (" + std::to_string(stride * d.elemBytes) +
                    " bytes) is not a positive multiple of 16 bytes below 2^40");
    }
  }
}

CUtensorMap encodeTensorMap(const TensorMapDesc& d, uint64_t base) {
  checkTensorMap(d, base);
  // The driver orders dims innermost first and takes the strides of dims 1.. in bytes.
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elemStrides[5];
  for (int a = 0; a < d.rank; ++a) {
    int r = d.rank - 1 - a;
    dims[r] = static_cast<cuuint64_t>(d.sizes[a]);
    box[r] = static_cast<cuuint32_t>(d.box[a]);
    elemStrides[r] = 1;
    if (r > 0) strides[r - 1] = static_cast<cuuint64_t>(d.strides[a] * d.elemBytes);
  }
  CUtensorMap map;
  CUresult res = driver().cuTensorMapEncodeTiled(&map, dataType(d.elemBytes), static_cast<cuuint32_t>(d.rank),
                                                 reinterpret_cast<void*>(base), dims, strides, box, elemStrides,
                                                 CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle(d.swizzleBytes),
                                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    const char* s = nullptr;
    driver().cuGetErrorString(res, &s);
    reject(d, std::string("cuTensorMapEncodeTiled failed: ") + (s ? s : "unknown error"));
  }
  return map;
}

TensorMapDesc describeTensorMap(const LaunchSpec::TensorMap& m) {
  TensorMapDesc d;
  d.rank = static_cast<int>(m.sizes.size());
  d.elemBytes = m.elemBytes;
  for (int a = 0; a < d.rank; ++a) {
    d.sizes[a] = m.sizes[a].value;
    d.strides[a] = m.strides[a].value;
    d.box[a] = m.box[a];
  }
  d.swizzleBytes = m.swizzleBytes;
  d.where = &m.where;
  return d;
}

}  // namespace tilefuse::runtime
