// vec_ops.h: every level's SwiGLU within a few ulp of the generic (libm)
// one, its bf16 conversion bit-identical to f32_to_bf16 and its weighted
// sum to the generic one, on ragged lengths and special values.
#include "kernels/cpu/vec_ops.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quantize.h"

namespace tandem::kernels {
namespace {

void for_each_supported_level(void (*check)(CpuIsa, VecOps)) {
  const CpuFeatures f = detect_cpu_features();
  for (int level = 1; level < kCpuIsaCount; ++level) {
    if (!supports(f, CpuIsa(level))) {
      std::printf("  %s: skipped, this cpu cannot run it\n", std::string(isa_name(CpuIsa(level))).c_str());
      continue;
    }
    SCOPED_TRACE(std::string(isa_name(CpuIsa(level))));
    check(CpuIsa(level), vec_ops_for(CpuIsa(level)));
  }
}

TEST(VecOps, SwigluMatchesLibm) {
  for_each_supported_level([](CpuIsa, VecOps ops) {
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> gd(-30.0f, 30.0f), ud(-4.0f, 4.0f);
    for (int64_t n : {1, 7, 16, 33, 1000}) {
      std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
      for (auto& v : g) v = gd(rng);
      for (auto& v : u) v = ud(rng);
      const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 80.0f, -80.0f, 100.0f, -100.0f, 88.0f, -88.0f};
      for (size_t i = 0; i < std::size(special) && i < g.size(); ++i) g[i] = special[i];
      std::vector<float> want = g, got = g;
      generic::vec_ops().swiglu(want.data(), u.data(), n);
      ops.swiglu(got.data(), u.data(), n);
      for (size_t i = 0; i < g.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 5e-7f * std::fabs(want[i]) + 1e-30f)  // silu(-100) ~ -4e-42
            << "g = " << g[i] << ", u = " << u[i] << ", n = " << n;
    }
  });
}

// y + a·x + b·x with every product and sum rounded on its own.
__attribute__((optimize("fp-contract=off"))) float two_unfused_steps(float y, float x, float a, float b) {
  const float s = y + a * x;
  return s + b * x;
}

TEST(VecOps, AddScaledIsBitIdentical) {
  for_each_supported_level([](CpuIsa, VecOps ops) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (int64_t n : {1, 7, 16, 33, 1000}) {
      std::vector<float> x(static_cast<size_t>(n)), y(x.size());
      for (auto& v : x) v = nd(rng);
      for (auto& v : y) v = nd(rng);
      std::vector<float> want = y, got = y;
      for (const float a : {0.3f, -1.7e-3f}) {
        generic::vec_ops().add_scaled(want.data(), x.data(), a, n);
        ops.add_scaled(got.data(), x.data(), a, n);
      }
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "i = " << i << ", n = " << n;
        // rounded product, then rounded sum: one fma would round once
        ASSERT_EQ(std::bit_cast<uint32_t>(want[i]),
                  std::bit_cast<uint32_t>(two_unfused_steps(y[i], x[i], 0.3f, -1.7e-3f)))
            << "i = " << i;
      }
    }
  });
}

TEST(VecOps, Bf16ConversionIsBitIdentical) {
  for_each_supported_level([](CpuIsa, VecOps ops) {
    std::mt19937 rng(10);
    std::vector<float> x(4099);
    for (auto& v : x) v = std::bit_cast<float>(uint32_t(rng()));  // every class: NaN, inf, subnormal
    const float special[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                             std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0xFF810000u),
                             std::numeric_limits<float>::denorm_min(), 3.3895314e38f, 1.0f + 1.0f / 256};
    for (size_t i = 0; i < std::size(special); ++i) x[i] = special[i];
    std::vector<uint16_t> got(x.size());
    ops.to_bf16(x.data(), got.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(got[i], f32_to_bf16(x[i])) << "bits " << std::hex << std::bit_cast<uint32_t>(x[i]);
  });
}

TEST(VecOps, ActivationQuantisersAreByteIdentical) {
  for_each_supported_level([](CpuIsa, VecOps ops) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(256 * 12);
    for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::pow(10.0f, float(int(i / 256) - 6));
    for (int i = 256; i < 512; ++i) x[size_t(i)] = 0.0f;  // an all-zero block
    x[600] = -7.5f, x[700] = 7.5f;                        // a tie of the largest magnitudes
    x[1000] = 1e-30f;
    for (int i = 0; i < 32; ++i) x[size_t(1024 + i)] = float(i - 16) * 0.5f;  // exact halves after scaling
    for (DType t : {DType::kQ8_0, DType::kQ8_K}) {
      SCOPED_TRACE(std::string(name(t)));
      std::vector<uint8_t> want(*bytes_for(t, x.size())), got(want.size(), 0xEE);
      quantize_activations(t, x.data(), want.data(), x.size());
      (t == DType::kQ8_0 ? ops.quantize_q8_0 : ops.quantize_q8_k)(x.data(), got.data(), int64_t(x.size()));
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "byte " << i;
    }
  });
}

}  // namespace
}  // namespace tandem::kernels
