// Each fixture folder's GGUF files and its hf/ directory describe the same
// model: after the tensor map, their canonical F32 weights are identical
// (f32/bf16 GGUF), within quantisation error (q8_0, q4_k_m), and the FP8
// checkpoint equals its BF16 source sibling within e4m3 rounding.
#include <cmath>

#include <gtest/gtest.h>

#include "common/formats/gguf.h"
#include "common/model/model_source.h"
#include "kernels/cpu/dequant.h"
#include "tests/expect_config.h"
#include "tests/fixture_support.h"

namespace tandem {
namespace {


// Relative RMS error bounds of llama.cpp's quantisations of these weights
// (measured by tools/fixture_checksums.py --check: q8_0 0.0055, q6_k 0.018,
// q5_k 0.036, q5_0 0.043, q4_k 0.072), with margin.
double rms_bound(DType t) {
  switch (t) {
    case DType::kQ8_0: return 0.008;
    case DType::kQ6_K: return 0.025;
    case DType::kQ5_K: return 0.045;
    case DType::kQ5_0: return 0.055;
    case DType::kQ4_K: return 0.09;
    default: return 0.0;  // plain types must match exactly
  }
}

void compare_twins(const ModelSource& hf, const ModelSource& gguf) {
  testing::expect_same_config(hf.config(), gguf.config());
  ASSERT_EQ(hf.tensors().tensors().size(), gguf.tensors().tensors().size());
  EXPECT_TRUE(hf.tensors().unused().empty());
  EXPECT_TRUE(gguf.tensors().unused().empty());
  for (const MappedTensor& h : hf.tensors().tensors()) {
    SCOPED_TRACE(gguf.path() + ": " + h.name);
    const MappedTensor* g = gguf.tensors().find(h.name);
    ASSERT_NE(g, nullptr);
    ASSERT_EQ(g->shape, h.shape);
    std::vector<float> a = read_f32(h), b = read_f32(*g);
    double bound = rms_bound(g->dtype);
    if (bound == 0.0) {
      size_t mismatches = 0;
      for (size_t i = 0; i < a.size(); ++i) mismatches += a[i] != b[i];
      EXPECT_EQ(mismatches, 0u) << name(g->dtype) << " should hold exactly the bf16 weights";
    } else {
      double err = 0, ref = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        err += (a[i] - b[i]) * double(a[i] - b[i]);
        ref += double(a[i]) * a[i];
      }
      EXPECT_LT(std::sqrt(err / ref), bound) << name(g->dtype);
    }
  }
}

class FixtureTwins : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTwins, GgufAndHfGiveTheSameCanonicalWeights) {
  TANDEM_REQUIRE_FIXTURES();
  auto dir = testing::fixtures_dir() / GetParam();
  auto hf = ModelSource::open((dir / "hf").string());
  int variants = 0;
  for (auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    auto gguf = ModelSource::open(entry.path().string());
    compare_twins(*hf, *gguf);
    ++variants;
  }
  EXPECT_GT(variants, 0);
}

INSTANTIATE_TEST_SUITE_P(AllFolders, FixtureTwins,
                         ::testing::Values("qwen3moe", "qwen2moe", "mixtral", "deepseek3"));

TEST(FixtureTwins, Fp8CheckpointMatchesItsBf16SourceWithinE4m3Rounding) {
  TANDEM_REQUIRE_FIXTURES();
  auto fp8 = ModelSource::open((testing::fixtures_dir() / "deepseek3-fp8" / "hf").string());
  auto bf16 = ModelSource::open((testing::fixtures_dir() / "deepseek3" / "hf").string());
  ASSERT_TRUE(fp8->config().fp8_block.has_value());
  EXPECT_EQ(fp8->config().fp8_block->first, 128u);
  testing::expect_same_config(fp8->config(), bf16->config());
  EXPECT_TRUE(fp8->tensors().unused().empty());  // every weight_scale_inv was used
  int fp8_tensors = 0;
  for (const MappedTensor& f : fp8->tensors().tensors()) {
    SCOPED_TRACE(f.name);
    const MappedTensor& b = bf16->tensors().at(f.name);
    std::vector<float> x = read_f32(f), ref = read_f32(b);
    ASSERT_EQ(x.size(), ref.size());
    if (f.dtype != DType::kF8E4M3) {
      EXPECT_EQ(x, ref);
      continue;
    }
    ++fp8_tensors;
    // e4m3 keeps 3 mantissa bits: round-to-nearest is within 2^-4 relative for
    // normal values; below 2^-6 (times the block scale) the step is 2^-9.
    float max_scale = 0;
    for (auto& p : f.pieces) {
      const SourceMatrix& s = *p.src;
      ASSERT_FALSE(s.scale.empty());
      size_t n = s.scale.size() / info(s.scale_dtype).block_bytes;
      std::vector<float> sc(n);
      kernels::dequantize_generic(s.scale_dtype, s.scale.data(), sc.data(), n);
      for (float v : sc) max_scale = std::max(max_scale, v);
    }
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i)
      bad += std::fabs(x[i] - ref[i]) > std::ldexp(std::fabs(ref[i]), -4) + std::ldexp(max_scale, -10);
    EXPECT_EQ(bad, 0u);
  }
  EXPECT_GT(fp8_tensors, 20);
}

}  // namespace
}  // namespace tandem
