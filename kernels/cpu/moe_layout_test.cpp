// The fused MoE layer with its experts in the arena's repacked layouts
// (weight_layout.h) and FP8 marks: the same floats as the rowmajor layer, or
// within the exact layer's bound where the kernels sum in another order; the
// amx level's whole-matrix tasks; layouts a type cannot take are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/moe_test_layer.h"

namespace tandem::kernels {
namespace {

using testing::exact;
using testing::Layer;
using testing::make_layer;
using testing::make_routing;
using testing::mark_experts;
using testing::repack_experts;
using testing::Routing;
using testing::run_layer;

// Q4_K and Q8_0 experts stored repacked (q4_k_x4, q8_0_x4: the arena's
// layouts for them from avx2 and avx512 up) give the rowmajor layer bit
// for bit, at every level and thread count; Q4_K with down in Q4_K too or
// in Q6_K rows as Q4_K_M files keep it. Q8_0 at the amx level: within the exact
// layer's bound (one fma per block, where ggml adds 8 lanes').
TEST(MoeLayer, X4LayoutsGiveTheRowmajorLayerBitForBit) {
  const std::pair<DType, DType> types[] = {
      {DType::kQ4_K, DType::kQ4_K}, {DType::kQ4_K, DType::kQ6_K}, {DType::kQ8_0, DType::kQ8_0}};
  for (const auto& [gu, down] : types) {
    SCOPED_TRACE(std::string(name(gu)) + ", down " + std::string(name(down)));
    const Layer L = make_layer(gu, down, 512, 768, 6, 31);
    Layer X = L;
    // Q6_K's down as its rows (q6_k_x4 sums otherwise: the test below)
    repack_experts(X, repacked_layout(gu), down == DType::kQ6_K ? WeightLayout::kRowMajor : repacked_layout(down));
    for (int64_t tokens : {1, 3, 9, 24}) {  // 24: 12 tokens an expert, the amx tiles
      const Routing r = make_routing(tokens, 3, 512, 6, uint32_t(40 + tokens));
      const std::vector<float> want = run_layer(L, r, CpuIsa::kGeneric, 1);
      for (int level = 0; level < kCpuIsaCount; ++level) {
        const CpuIsa isa = CpuIsa(level);
        if (!supports(detect_cpu_features(), isa)) continue;
        SCOPED_TRACE(std::string(isa_name(isa)) + ", " + std::to_string(tokens) + " tokens");
        EXPECT_EQ(run_layer(L, r, isa, 2), want);
        if (gu == DType::kQ8_0 && isa == CpuIsa::kAmx) {
          // its tiles and x4 kernel round otherwise (row_dot_amx_q8.cpp):
          // the exact layer's bound, as every level's
          std::vector<double> scale;
          const std::vector<double> ex = exact(L, r, scale);
          const std::vector<float> y = run_layer(X, r, isa, 2);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_LE(std::fabs(y[i] - ex[i]), 1.5e-2 * scale[i] + 1e-7) << "output " << i;
          continue;
        }
        EXPECT_EQ(run_layer(X, r, isa, 2), want);
      }
    }
  }
}

// A BF16 layer (seed `seed`; routings seed `routing` + tokens) with its
// experts stored as `l` agrees with the exact layer at every level within
// 4e-3 of each output's scale, at 1, 6 and 45 tokens.
void expect_bf16_layer_agrees(WeightLayout l, uint32_t seed, uint32_t routing) {
  const Layer L = make_layer(DType::kBF16, DType::kBF16, 512, 768, 5, seed);
  Layer X = L;
  repack_experts(X, l, l);
  for (int64_t tokens : {1, 6, 45}) {
    const Routing r = make_routing(tokens, 3, 512, 5, uint32_t(routing + tokens));
    std::vector<double> scale;
    const std::vector<double> want = exact(L, r, scale);
    for (int level = 0; level < kCpuIsaCount; ++level) {
      if (!supports(detect_cpu_features(), CpuIsa(level))) continue;
      SCOPED_TRACE(std::string(isa_name(CpuIsa(level))) + ", " + std::to_string(tokens) + " tokens");
      const std::vector<float> y = run_layer(X, r, CpuIsa(level), 2);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(y[i] - want[i]), 4e-3 * scale[i] + 1e-7) << "output " << i;
    }
  }
}

// BF16 experts stored as bf16_x16 (the arena's layout for them at amx, and
// from avx512bf16 up before layout version 9), with enough tokens per expert
// for the prefill tiles (amx: chunks of 16 tokens, and gathered gate/up
// activations staged in steps of fewer columns).
TEST(MoeLayer, Bf16X16LayerAgreesWithTheExactLayerAtEveryLevel) {
  expect_bf16_layer_agrees(WeightLayout::kBf16X16, 61, 60);
}

// BF16 experts stored as bf16_x16z (the arena's layout for them at
// avx512bf16 since layout version 9), from one token (ggml's order) to
// passes of several tokens in steps.
TEST(MoeLayer, Bf16X16ZLayerAgreesWithTheExactLayerAtEveryLevel) {
  expect_bf16_layer_agrees(WeightLayout::kBf16X16Z, 67, 70);
}

// The layer as one call per expert matrix, over all its rows and every
// token routed to it, with `isa`'s kernels and vector ops (the layer's
// conversions and weighted-sum order).
std::vector<float> whole_matrix_calls(const Layer& L, const Routing& r, CpuIsa isa) {
  const MoeShape& s = L.shape;
  const int64_t H = s.hidden, F = s.ffn;
  const MoeKernels k = moe_kernels(isa, s);
  const size_t xa_row = row_dot_activation_bytes(s.gate_up_type, H), ha_row = row_dot_activation_bytes(s.down_type, F);
  std::vector<uint8_t> xa(xa_row * size_t(r.n_tokens));
  convert_row_dot_activations(s.gate_up_type, r.x.data(), size_t(H), r.n_tokens, H, xa.data(), xa_row, isa,
                              s.gate_up_layout);
  std::vector<float> yd(r.ids.size() * size_t(H));  // per slot t * top_k + k
  for (int32_t e = 0; e < int32_t(s.n_experts); ++e) {
    std::vector<size_t> slots;
    std::vector<const uint8_t*> a_rows;
    for (size_t i = 0; i < r.ids.size(); ++i)
      if (r.ids[i] == e) slots.push_back(i), a_rows.push_back(xa.data() + i / size_t(r.top_k) * xa_row);
    const int64_t m = int64_t(slots.size());
    if (m == 0) continue;
    std::vector<float> g(size_t(m * F)), u(g.size()), d(size_t(m * H));
    std::vector<uint8_t> ha(ha_row * size_t(m));
    auto call = [&](bool gate_up, const uint8_t* w, const float* sc, float* y) {
      const int64_t rows = gate_up ? F : H;
      RowDotParams p;
      p.wtype = gate_up ? s.gate_up_type : s.down_type;
      p.w = w, p.w_row_stride = gate_up ? s.gate_up_row_stride : s.down_row_stride, p.rows = rows;
      p.cols = gate_up ? H : F, p.scales = sc;
      p.scale_row_stride = gate_up ? s.gate_up_scale_stride : s.down_scale_stride;
      if (gate_up)
        p.a_rows = a_rows.data();
      else
        p.a = ha.data(), p.a_row_bytes = ha_row;
      p.n_tokens = m, p.y = y, p.y_row_stride = size_t(rows), p.row_end = rows;
      p.layout = gate_up ? s.gate_up_layout : s.down_layout;
      (gate_up ? k.gate_up : k.down)(p);
    };
    const MoeExpert& x = L.experts[size_t(e)];
    call(true, x.gate, x.gate_scales, g.data());
    call(true, x.up, x.up_scales, u.data());
    for (int64_t t = 0; t < m; ++t) k.ops.swiglu(g.data() + t * F, u.data() + t * F, F);
    convert_row_dot_activations(s.down_type, g.data(), size_t(F), m, F, ha.data(), ha_row, isa, s.down_layout);
    call(false, x.down, x.down_scales, d.data());
    for (int64_t j = 0; j < m; ++j) std::copy_n(d.data() + j * H, H, yd.data() + slots[size_t(j)] * size_t(H));
  }
  std::vector<float> y(size_t(r.n_tokens * H), 0.0f);
  for (int64_t t = 0; t < r.n_tokens; ++t)
    for (int k2 = 0; k2 < r.top_k; ++k2) {
      const size_t i = size_t(t * r.top_k + k2);
      if (r.ids[i] >= 0) k.ops.add_scaled(y.data() + t * H, yd.data() + i * size_t(H), r.weights[i], H);
    }
  return y;
}

// FP8 prefill at the amx level: the layer's tasks start at multiples of the
// 16-row tiles (task_rows), so every row goes through the tiles as in one
// call over the whole matrix, and the floats are the same. A task starting
// elsewhere would send its rows to avx512bf16's kernel, which rounds
// otherwise. Shapes whose tasks (1-4 MiB) are no multiple of 16 rows.
TEST(MoeLayer, Fp8TasksTakeTheAmxTilesAsWholeMatrices) {
  if (!supports(detect_cpu_features(), CpuIsa::kAmx)) GTEST_SKIP() << "this cpu has no amx level";
  const Layer L = make_layer(DType::kF8E4M3, DType::kF8E4M3, 1536, 768, 4, 71);
  const Routing r = make_routing(12, 3, 1536, 4, 72);
  EXPECT_EQ(run_layer(L, r, CpuIsa::kAmx, 2), whole_matrix_calls(L, r, CpuIsa::kAmx));
  EXPECT_EQ(run_layer(L, r, CpuIsa::kAvx512Bf16, 2), whole_matrix_calls(L, r, CpuIsa::kAvx512Bf16));
}

// Q8_0 (q8_0_x4) prefill at the amx level: the layer's floats are those of
// one call per whole matrix, its tasks (about 1.3 MiB for 2080 x 768
// experts) cut in multiples of the 16-row tiles (task_rows). Rows a task
// left to the x4 kernel would sum the same (it adds whole blocks, as the
// tiles: WeightLayout.Q8_0X4TokensGetTheSameFloatsInAnyBatch); the cut
// keeps every row in the faster tiles.
TEST(MoeLayer, Q8_0TasksTakeTheAmxTilesAsWholeMatrices) {
  if (!supports(detect_cpu_features(), CpuIsa::kAmx)) GTEST_SKIP() << "this cpu has no amx level";
  const int64_t H = 2080, F = 768;
  Layer L = make_layer(DType::kQ8_0, DType::kQ8_0, H, F, 4, 81);
  repack_experts(L, WeightLayout::kQ8_0X4, WeightLayout::kQ8_0X4);
  const Routing r = make_routing(12, 3, H, 4, 82);
  EXPECT_EQ(run_layer(L, r, CpuIsa::kAmx, 2), whole_matrix_calls(L, r, CpuIsa::kAmx));
  EXPECT_EQ(run_layer(L, r, CpuIsa::kAvx512Bf16, 2), whole_matrix_calls(L, r, CpuIsa::kAvx512Bf16));
}

// FP8 experts with their marks (fp8_marks.h): the same floats as without,
// for one token (the loop the marks serve) and for a batch (which ignores
// them), at every level, with zeros, subnormals and NaN in some blocks.
TEST(MoeLayer, Fp8MarksGiveTheSameFloats) {
  const int64_t H = 1024, F = 384, E = 3;
  Layer L = make_layer(DType::kF8E4M3, DType::kF8E4M3, H, F, E, 91);
  std::mt19937 rng(92);
  const uint8_t special[] = {0x00, 0x80, 0x01, 0x86, 0x7F};
  std::vector<std::vector<uint8_t>> marks;
  for (size_t e = 0; e < size_t(E); ++e) {
    for (auto* m : {&L.gate[e], &L.up[e], &L.down[e]}) {
      for (int k = 0; k < 6; ++k) (*m)[rng() % m->size()] = special[k == 5 && e == 1 ? 4 : k % 4];
    }
  }
  mark_experts(L, marks);
  Layer plain = L;
  for (auto& x : plain.experts) x.gate_marks = x.up_marks = x.down_marks = nullptr;
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    for (int64_t tokens : {1, 5}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + ", " + std::to_string(tokens) + " tokens");
      const Routing r = make_routing(tokens, 2, H, E, 93);
      const std::vector<float> a = run_layer(L, r, isa, 2), b = run_layer(plain, r, isa, 2);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << i << ": " << a[i] << " " << b[i];
    }
  }
}

// FP8 experts stored as fp8_x16 (the arena's layout for FP8 at avx512bf16)
// agree with the exact layer at every level, for one and two tokens (the
// four-group tiles) and batches with passes of 9 tokens and more (zeros,
// subnormals and NaN: Fp8X16's row-dot tests).
TEST(MoeLayer, Fp8X16LayerAgreesWithTheExactLayerAtEveryLevel) {
  const int64_t H = 1280, F = 768, E = 3;  // gate and up: two steps of 1024 columns
  const Layer L = make_layer(DType::kF8E4M3, DType::kF8E4M3, H, F, E, 98);
  Layer X = L;
  for (size_t e = 0; e < size_t(E); ++e) {
    repack_rows(WeightLayout::kFp8X16, DType::kF8E4M3, X.gate[e].data(), F, H);
    repack_rows(WeightLayout::kFp8X16, DType::kF8E4M3, X.up[e].data(), F, H);
    repack_rows(WeightLayout::kFp8X16, DType::kF8E4M3, X.down[e].data(), H, F);
    X.experts[e].gate = X.gate[e].data();
    X.experts[e].up = X.up[e].data();
    X.experts[e].down = X.down[e].data();
  }
  X.shape.gate_up_layout = X.shape.down_layout = WeightLayout::kFp8X16;
  for (int64_t tokens : {1, 2, 30}) {
    const Routing r = make_routing(tokens, 2, H, E, uint32_t(100 + tokens));
    std::vector<double> scale;
    const std::vector<double> want = exact(L, r, scale);
    for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
      if (!supports(detect_cpu_features(), isa)) continue;
      SCOPED_TRACE(std::string(isa_name(isa)) + ", " + std::to_string(tokens) + " tokens");
      const std::vector<float> y = run_layer(X, r, isa, 2);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(y[i] - want[i]), 4e-3 * scale[i] + 1e-7) << "output " << i;
    }
  }
}

// Q8_0 experts stored as q8_0_x16 (the arena's layout for Q8_0 at
// avx512bf16) agree with the rowmajor layer at every level, for one and two
// tokens and batches with passes of 6 tokens and more. Only the blocks'
// scaling rounds otherwise (one fma per block), but the down projection's
// input is quantised again, where a value on a rounding edge may move a
// step: here one did, in one token at 30 tokens, and moved 1197 of its 1280
// outputs by up to 4.3e-4 of their sum |w * h| (the exact layer's); the
// others differ by under 1e-7 of it. Hence a bound of 1e-3.
TEST(MoeLayer, Q8_0X16LayerAgreesWithTheRowmajorLayerAtEveryLevel) {
  const int64_t H = 1280;  // gate and up: two steps of 1024 values
  const Layer L = make_layer(DType::kQ8_0, DType::kQ8_0, H, 768, 3, 102);
  Layer X = L;
  repack_experts(X, WeightLayout::kQ8_0X16, WeightLayout::kQ8_0X16);
  double worst = 0;
  for (int64_t tokens : {1, 2, 30}) {
    const Routing r = make_routing(tokens, 2, H, 3, uint32_t(103 + tokens));
    std::vector<double> scale;
    exact(L, r, scale);
    for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
      if (!supports(detect_cpu_features(), isa)) continue;
      SCOPED_TRACE(std::string(isa_name(isa)) + ", " + std::to_string(tokens) + " tokens");
      const std::vector<float> want = run_layer(L, r, isa, 2), y = run_layer(X, r, isa, 2);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_LE(std::fabs(y[i] - want[i]), 1e-3 * scale[i] + 1e-7) << "output " << i;
        worst = std::max(worst, std::fabs(y[i] - want[i]) / (scale[i] + 1e-30));
      }
    }
  }
  std::printf("  q8_0_x16 layer: worst |x16 - rowmajor| / sum|w*h| = %.2e\n", worst);
}

// Q5_K and Q6_K experts stored as q5_k_x4 and q6_k_x4 (the arena's layouts
// for them from avx2 up): Q5_K with down in Q5_K or Q6_K (as Q5_K_M files
// keep some), Q4_K (q4_k_x4) with down in Q6_K (Q4_K_M's), and Q6_K: within
// 1e-5 of each output's sum |w * h| of the rowmajor layer at every level
// (their kernels add each super-block's exact sums, or each half's, with one
// fma where ggml adds 8 lanes'; the reference level reads them through
// rowmajor rows: the same floats), at 1, 3 (one pass of 3 tokens) and 30
// tokens; from avx2 up every level's x4 layer gives the same floats.
TEST(MoeLayer, Q5KAndQ6KX4LayersAgreeWithTheRowmajorLayerAtEveryLevel) {
  const std::pair<DType, DType> types[] = {
      {DType::kQ5_K, DType::kQ5_K}, {DType::kQ5_K, DType::kQ6_K}, {DType::kQ4_K, DType::kQ6_K}, {DType::kQ6_K, DType::kQ6_K}};
  double worst = 0;
  for (const auto& [gu, down] : types) {
    const Layer L = make_layer(gu, down, 512, 768, 4, 110);
    Layer X = L;
    repack_experts(X, repacked_layout(gu), repacked_layout(down));
    for (int64_t tokens : {1, 3, 30}) {
      const Routing r = make_routing(tokens, 2, 512, 4, uint32_t(111 + tokens));
      std::vector<double> scale;
      exact(L, r, scale);
      std::vector<float> x4_floats;  // the first x4 kernels' layer, from avx2 up
      for (int level = 0; level < kCpuIsaCount; ++level) {
        const CpuIsa isa = CpuIsa(level);
        if (!supports(detect_cpu_features(), isa)) continue;
        SCOPED_TRACE(std::string(name(gu)) + ", down " + std::string(name(down)) + ", " + std::string(isa_name(isa)) +
                     ", " + std::to_string(tokens) + " tokens");
        const std::vector<float> want = run_layer(L, r, isa, 2), y = run_layer(X, r, isa, 2);
        if (isa < CpuIsa::kAvx2) {
          EXPECT_EQ(y, want);
          continue;
        }
        EXPECT_NE(y, want);  // another order: some output's last bits differ
        if (x4_floats.empty())
          x4_floats = y;
        else
          EXPECT_EQ(y, x4_floats);  // the 256- and 512-bit tiles make the same sums
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_LE(std::fabs(y[i] - want[i]), 1e-5 * scale[i] + 1e-7) << "output " << i;
          worst = std::max(worst, std::fabs(y[i] - want[i]) / (scale[i] + 1e-30));
        }
      }
    }
  }
  std::printf("  q5_k_x4 and q6_k_x4 layers: worst |x4 - rowmajor| / sum|w*h| = %.2e\n", worst);
}

TEST(MoeLayer, LayoutsTheTypesCannotTakeAreRefused) {
  Layer L = make_layer(DType::kQ6_K, DType::kQ6_K, 256, 256, 2, 3);
  L.shape.gate_up_layout = WeightLayout::kQ4KX4;
  EXPECT_THROW(moe_check_shape(L.shape), Error);
  Layer M = make_layer(DType::kQ4_K, DType::kQ4_K, 256, 256, 2, 3);
  M.shape.down_layout = WeightLayout::kQ4KX4;
  M.shape.down_row_stride += 64;  // groups need contiguous rows
  EXPECT_THROW(moe_check_shape(M.shape), Error);
}

}  // namespace
}  // namespace tandem::kernels
