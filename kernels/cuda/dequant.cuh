// GPU dequantisation of weight rows to f32, for the types the GPU worker
// stages (Q8_0 experts, BF16 dense weights). Decodes exactly like
// dequantize_generic (kernels/cpu/dequant.h), bit for bit.
//
// This header is plain C++ (no CUDA syntax) so host-only code and tests can
// include it; kernels live in dequant.cu.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/dtype.h"

namespace tandem::kernels {

struct DequantParams {
  DType type = DType::kQ8_0;  // kQ8_0 or kBF16
  const void* src = nullptr;  // device memory: `rows` rows of `cols` values of `type`
  float* dst = nullptr;       // device memory: rows x cols floats; must not overlap src
  int64_t rows = 0;
  int64_t cols = 0;            // values per row; a multiple of the block size (32 for Q8_0)
  int64_t src_row_stride = 0;  // bytes from one src row to the next; 0 = packed
  int64_t dst_row_stride = 0;  // floats from one dst row to the next; 0 = packed (cols)
};

// Enqueues the decode on `stream` and returns without waiting; the caller
// keeps both buffers alive until the stream passes this point. Allocates
// nothing. Returns cudaErrorInvalidValue, without touching the device, for
// an unsupported type, a partial block, a stride shorter than a row, a null
// pointer with work to do, or BF16 data that is not 2-byte aligned;
// cudaSuccess at once for an empty shape; otherwise the launch status.
cudaError_t dequantize_cuda(const DequantParams& p, cudaStream_t stream);

// Number of usable CUDA devices; 0 when there is no device, no driver, or
// the runtime fails in any way. Never throws or aborts, so callers (and
// tests) can probe for a GPU on any machine.
int cuda_device_count() noexcept;

}  // namespace tandem::kernels
