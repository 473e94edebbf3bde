// Compares the GPU decode with dequantize_generic, bit for bit. Needs a CUDA
// device; on machines without one the device tests skip and only the
// parameter checks (which never reach the device) run.
#include "kernels/cuda/dequant.cuh"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/quantize.h"

namespace tandem::kernels {
namespace {

// A device allocation freed on scope exit (tests only; kernels never allocate).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

class CudaDequant : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// Runs dequantize_cuda on rows x cols values of t (strides in bytes / floats;
// 0 = packed) and checks every value against the CPU reference.
void check_against_cpu(DType t, int64_t rows, int64_t cols, int64_t src_stride,
                       int64_t dst_stride) {
  const size_t row_bytes = *bytes_for(t, static_cast<uint64_t>(cols));
  const size_t sstride = src_stride ? static_cast<size_t>(src_stride) : row_bytes;
  const size_t dstride = dst_stride ? static_cast<size_t>(dst_stride) : static_cast<size_t>(cols);
  std::vector<uint8_t> host_src(sstride * rows, 0xEE);
  const auto x = random_values(static_cast<size_t>(rows * cols), 1);
  for (int64_t r = 0; r < rows; ++r)
    quantize_generic(t, x.data() + r * cols, host_src.data() + r * sstride,
                     static_cast<size_t>(cols));
  DeviceBuffer src(host_src.size()), dst(dstride * rows * sizeof(float));
  ASSERT_EQ(cudaMemcpy(src.as<void>(), host_src.data(), host_src.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(dst.as<void>(), 0xFF, dstride * rows * sizeof(float)), cudaSuccess);
  DequantParams p;
  p.type = t;
  p.src = src.as<void>();
  p.dst = dst.as<float>();
  p.rows = rows;
  p.cols = cols;
  p.src_row_stride = src_stride;
  p.dst_row_stride = dst_stride;
  ASSERT_EQ(dequantize_cuda(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(dstride * rows);
  ASSERT_EQ(cudaMemcpy(got.data(), dst.as<void>(), got.size() * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<float> want(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_generic(t, host_src.data() + r * sstride, want.data(), want.size());
    ASSERT_EQ(std::memcmp(got.data() + r * dstride, want.data(), want.size() * sizeof(float)), 0)
        << name(t) << " row " << r;
    // Padding between dst rows is left alone.
    for (size_t c = static_cast<size_t>(cols); c < dstride; ++c) {
      uint32_t bits;
      std::memcpy(&bits, &got[r * dstride + c], 4);
      ASSERT_EQ(bits, 0xFFFFFFFFu) << "row " << r << " padding " << c;
    }
  }
}

TEST_F(CudaDequant, Q8_0MatchesCpu) { check_against_cpu(DType::kQ8_0, 37, 4096, 0, 0); }
TEST_F(CudaDequant, BF16MatchesCpu) { check_against_cpu(DType::kBF16, 37, 4099, 0, 0); }
TEST_F(CudaDequant, StridedRows) {
  check_against_cpu(DType::kQ8_0, 5, 96, 3 * 34 + 7, 100);  // odd src stride is fine for Q8_0
  check_against_cpu(DType::kBF16, 5, 33, 70, 40);
}
TEST_F(CudaDequant, MoreWorkThanOneGridCovers) {
  // The grid is capped at 65536 x 256 threads (16.8M); go past it.
  check_against_cpu(DType::kQ8_0, 540000, 32, 0, 0);
  check_against_cpu(DType::kBF16, 1, 17000000, 0, 0);
}

// These are rejected before any CUDA call, so they run on any machine.
TEST(CudaDequantParams, RejectsBadShapes) {
  alignas(4) static uint8_t src[1024];
  static float dst[1024];
  DequantParams p;
  p.src = src;
  p.dst = dst;
  p.rows = 1;
  p.cols = 33;  // not whole Q8_0 blocks
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaErrorInvalidValue);
  p.cols = 32;
  p.src_row_stride = 33;  // shorter than a 34-byte row
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaErrorInvalidValue);
  p.src_row_stride = 0;
  p.dst_row_stride = 31;
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaErrorInvalidValue);
  p.dst_row_stride = 0;
  p.type = DType::kQ4_K;  // not supported on the GPU
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaErrorInvalidValue);
  p.type = DType::kBF16;
  p.src = src + 1;  // misaligned
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaErrorInvalidValue);
  p.src = nullptr;
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaErrorInvalidValue);
  p.rows = -1;
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaErrorInvalidValue);
  p.rows = 0;  // nothing to do: success without a device
  EXPECT_EQ(dequantize_cuda(p, nullptr), cudaSuccess);
}

TEST(CudaDeviceCount, NeverFails) { EXPECT_GE(cuda_device_count(), 0); }

}  // namespace
}  // namespace tandem::kernels
