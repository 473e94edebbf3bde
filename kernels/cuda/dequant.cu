#include "kernels/cuda/dequant.cuh"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <cuda_fp16.h>

#include "kernels/cpu/quant_blocks.h"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover any amount of work; this just bounds launch size.
constexpr int64_t kMaxGridBlocks = int64_t{1} << 16;
constexpr int kWarp = 32;
static_assert(kQK8_0 == kWarp, "the Q8_0 kernel maps one block to one warp");

// One warp per Q8_0 block: lane l decodes value l, so a warp reads one
// 34-byte block and writes one contiguous 128-byte run of floats. Bytes are
// read one at a time, so src needs no alignment.
__global__ void dequant_q8_0_kernel(const uint8_t* src, float* dst, int64_t rows,
                                    int64_t blocks_per_row, int64_t src_stride,
                                    int64_t dst_stride) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  const int64_t total = rows * blocks_per_row;
  for (int64_t g = first; g < total; g += n_warps) {
    const int64_t row = g / blocks_per_row, b = g % blocks_per_row;
    const uint8_t* blk = src + row * src_stride + b * static_cast<int64_t>(sizeof(BlockQ8_0));
    const uint16_t d_bits = static_cast<uint16_t>(blk[0] | (blk[1] << 8));  // fp16, little-endian
    const float d = __half2float(__ushort_as_half(d_bits));
    const float q = static_cast<float>(static_cast<int8_t>(blk[offsetof(BlockQ8_0, qs) + lane]));
    dst[row * dst_stride + b * kQK8_0 + lane] = q * d;  // same single rounding as the CPU
  }
}

// One thread per value: bf16 is the top half of an f32.
__global__ void dequant_bf16_kernel(const uint8_t* src, float* dst, int64_t rows, int64_t cols,
                                    int64_t src_stride, int64_t dst_stride) {
  const int64_t total = rows * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t row = i / cols, c = i % cols;
    const uint16_t bits = *reinterpret_cast<const uint16_t*>(src + row * src_stride + 2 * c);
    dst[row * dst_stride + c] = __uint_as_float(static_cast<uint32_t>(bits) << 16);
  }
}

unsigned grid_for(int64_t threads) {
  return static_cast<unsigned>(std::min((threads + kThreads - 1) / kThreads, kMaxGridBlocks));
}

}  // namespace

cudaError_t dequantize_cuda(const DequantParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0) return cudaErrorInvalidValue;
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  if (p.src == nullptr || p.dst == nullptr) return cudaErrorInvalidValue;
  int64_t block_elems, block_bytes;
  switch (p.type) {
    case DType::kQ8_0:
      block_elems = kQK8_0;
      block_bytes = sizeof(BlockQ8_0);
      break;
    case DType::kBF16:
      block_elems = 1;
      block_bytes = 2;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  if (p.cols % block_elems != 0) return cudaErrorInvalidValue;
  const int64_t row_bytes = p.cols / block_elems * block_bytes;
  const int64_t src_stride = p.src_row_stride != 0 ? p.src_row_stride : row_bytes;
  const int64_t dst_stride = p.dst_row_stride != 0 ? p.dst_row_stride : p.cols;
  if (src_stride < row_bytes || dst_stride < p.cols) return cudaErrorInvalidValue;
  // Keep every byte offset the kernels compute inside int64.
  if (dst_stride > INT64_MAX / 4 ||
      p.rows > INT64_MAX / std::max(src_stride, dst_stride * 4))
    return cudaErrorInvalidValue;
  const auto* src = static_cast<const uint8_t*>(p.src);
  if (p.type == DType::kBF16) {
    // The BF16 kernel loads uint16s; misaligned loads fault on the GPU.
    if (((reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(src_stride)) & 1) != 0)
      return cudaErrorInvalidValue;
    dequant_bf16_kernel<<<grid_for(p.rows * p.cols), kThreads, 0, stream>>>(
        src, p.dst, p.rows, p.cols, src_stride, dst_stride);
  } else {
    const int64_t blocks_per_row = p.cols / block_elems;
    dequant_q8_0_kernel<<<grid_for(p.rows * blocks_per_row * kWarp), kThreads, 0, stream>>>(
        src, p.dst, p.rows, blocks_per_row, src_stride, dst_stride);
  }
  return cudaGetLastError();
}

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    return 0;
  }
  return n;
}

}  // namespace tandem::kernels
