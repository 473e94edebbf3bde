// The fused MoE layer (moe.h):
//  - with the generic kernels it equals a plain sequential statement of the
//    layer (token by token, expert by expert, the same conversions and
//    kernels), bit for bit, whatever the thread count;
//  - every vector level agrees with a double-precision reference on the
//    dequantised weights within the activation-rounding error of its type;
//  - two workers' slices of F add up to the whole layer;
//  - bad routing is refused before any work.
#include "kernels/cpu/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/quantize.h"

namespace tandem::kernels {
namespace {

struct Layer {
  MoeShape shape;
  std::vector<std::vector<uint8_t>> gate, up, down;
  std::vector<std::vector<float>> gate_s, up_s, down_s;  // FP8 scales
  std::vector<std::vector<float>> gate_d, up_d, down_d;  // dequantised (scales applied)
  std::vector<MoeExpert> experts;
};

// A random matrix of `rows` x `cols` in type t; deq gets its values.
void make_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng, std::vector<uint8_t>& out,
                 std::vector<float>& scales, std::vector<float>& deq) {
  const size_t row_bytes = size_t(*bytes_for(t, uint64_t(cols)));
  out.assign(row_bytes * size_t(rows), 0);
  deq.resize(size_t(rows * cols));
  std::normal_distribution<float> nd(0.0f, t == DType::kF8E4M3 ? 40.0f : 0.08f);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t sblocks = size_t((cols + 127) / 128);
  if (t == DType::kF8E4M3) {
    scales.resize(sblocks * size_t((rows + 127) / 128));
    std::uniform_real_distribution<float> sd(1e-3f, 3e-3f);
    for (auto& s : scales) s = sd(rng);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng);
    quantize_generic(t, row.data(), out.data() + size_t(r) * row_bytes, row.size());
    dequantize_generic(t, out.data() + size_t(r) * row_bytes, deq.data() + r * cols, row.size());
    if (t == DType::kF8E4M3)
      for (int64_t c = 0; c < cols; ++c)
        deq[size_t(r * cols + c)] *= scales[size_t(r / 128) * sblocks + size_t(c / 128)];
  }
}

Layer make_layer(DType gu, DType dn, int64_t H, int64_t F, int64_t E, uint32_t seed) {
  std::mt19937 rng(seed);
  Layer L;
  L.shape = {gu, dn, H, F, E, size_t(*bytes_for(gu, uint64_t(H))), size_t(*bytes_for(dn, uint64_t(F))),
             size_t((H + 127) / 128), size_t((F + 127) / 128)};
  L.gate.resize(size_t(E)), L.up.resize(size_t(E)), L.down.resize(size_t(E));
  L.gate_s.resize(size_t(E)), L.up_s.resize(size_t(E)), L.down_s.resize(size_t(E));
  L.gate_d.resize(size_t(E)), L.up_d.resize(size_t(E)), L.down_d.resize(size_t(E));
  for (size_t e = 0; e < size_t(E); ++e) {
    make_matrix(gu, F, H, rng, L.gate[e], L.gate_s[e], L.gate_d[e]);
    make_matrix(gu, F, H, rng, L.up[e], L.up_s[e], L.up_d[e]);
    make_matrix(dn, H, F, rng, L.down[e], L.down_s[e], L.down_d[e]);
  }
  for (size_t e = 0; e < size_t(E); ++e)
    L.experts.push_back({L.gate[e].data(), L.up[e].data(), L.down[e].data(), L.gate_s[e].data(),
                         L.up_s[e].data(), L.down_s[e].data()});
  return L;
}

// Repacks the layer's experts in place to the gate/up layout gl and the down
// layout dl, as the arena stores them, and points the experts at this
// layer's own matrices (so a copy of a layer can be repacked).
void repack_experts(Layer& L, WeightLayout gl, WeightLayout dl) {
  const int64_t H = L.shape.hidden, F = L.shape.ffn;
  for (size_t e = 0; e < L.gate.size(); ++e) {
    repack_rows(gl, L.shape.gate_up_type, L.gate[e].data(), F, H);
    repack_rows(gl, L.shape.gate_up_type, L.up[e].data(), F, H);
    repack_rows(dl, L.shape.down_type, L.down[e].data(), H, F);
    L.experts[e] = {L.gate[e].data(), L.up[e].data(), L.down[e].data(), nullptr, nullptr, nullptr};
  }
  L.shape.gate_up_layout = gl;
  L.shape.down_layout = dl;
}

// Gives every FP8 expert matrix of L its marks (fp8_marks.h), kept in `marks`.
void mark_experts(Layer& L, std::vector<std::vector<uint8_t>>& marks) {
  const int64_t H = L.shape.hidden, F = L.shape.ffn;
  auto mark = [&](const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
    marks.emplace_back(fp8_marks_row_bytes(cols) * size_t(rows));
    fp8_mark_blocks(w.data(), size_t(cols), rows, cols, marks.back().data());
    return marks.back().data();
  };
  for (size_t e = 0; e < L.gate.size(); ++e) {
    L.experts[e].gate_marks = mark(L.gate[e], F, H);
    L.experts[e].up_marks = mark(L.up[e], F, H);
    L.experts[e].down_marks = mark(L.down[e], H, F);
  }
}

struct Routing {
  int64_t n_tokens;
  int top_k;
  std::vector<float> x;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routing make_routing(int64_t n_tokens, int top_k, int64_t H, int64_t E, uint32_t seed) {
  std::mt19937 rng(seed);
  Routing r{n_tokens, top_k, std::vector<float>(size_t(n_tokens * H)), {}, {}};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : r.x) v = nd(rng);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(E - 1));
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int k = 0; k < top_k; ++k) {
      int32_t e;
      bool again;
      do {  // distinct experts per token, as routers choose
        e = pick(rng);
        again = false;
        for (int j = 0; j < k; ++j) again |= r.ids[size_t(t * top_k + j)] == e;
      } while (again);
      r.ids.push_back((t + k) % 7 == 3 ? -1 : e);  // some slots empty (another worker's)
      r.weights.push_back(wd(rng));
    }
  return r;
}

std::vector<float> run_layer_on(ThreadPool& pool, const Layer& L, const Routing& r, CpuIsa isa) {
  const MoeKernels k = moe_kernels(isa, L.shape);
  std::vector<uint8_t> ws(moe_workspace_bytes(L.shape, r.n_tokens, r.top_k));
  std::vector<float> y(size_t(r.n_tokens * L.shape.hidden), NAN);
  MoeBatch b{r.n_tokens, r.top_k, r.x.data(), size_t(L.shape.hidden), r.ids.data(), r.weights.data(),
             y.data(), size_t(L.shape.hidden)};
  moe_forward(k, pool, L.shape, L.experts.data(), b, ws.data(), ws.size());
  return y;
}

std::vector<float> run_layer(const Layer& L, const Routing& r, CpuIsa isa, int threads) {
  ThreadPool pool = ThreadPool::create({threads, {}, false, 50});
  return run_layer_on(pool, L, r, isa);
}

// The layer as a plain loop over tokens and experts with the generic kernels.
std::vector<float> sequential_generic(const Layer& L, const Routing& r) {
  const MoeShape& s = L.shape;
  const int64_t H = s.hidden, F = s.ffn;
  std::vector<float> y(size_t(r.n_tokens * H), 0.0f), g(static_cast<size_t>(F)), u(static_cast<size_t>(F)), yd(static_cast<size_t>(H));
  std::vector<uint8_t> xa(row_dot_activation_bytes(s.gate_up_type, H)),
      ha(row_dot_activation_bytes(s.down_type, F));
  auto dot = [](DType t, const uint8_t* w, size_t stride, int64_t rows, int64_t cols, const float* sc,
                size_t ss, const uint8_t* a, float* out) {
    RowDotParams p;
    p.wtype = t, p.w = w, p.w_row_stride = stride, p.rows = rows, p.cols = cols, p.scales = sc;
    p.scale_row_stride = ss, p.a = a, p.n_tokens = 1, p.y = out, p.row_end = rows;
    generic::find(t)(p);
  };
  for (int64_t t = 0; t < r.n_tokens; ++t) {
    convert_row_dot_activations(s.gate_up_type, r.x.data() + t * H, 0, 1, H, xa.data(), xa.size());
    for (int k = 0; k < r.top_k; ++k) {
      const int32_t e = r.ids[size_t(t * r.top_k + k)];
      if (e < 0) continue;
      const MoeExpert& x = L.experts[size_t(e)];
      dot(s.gate_up_type, x.gate, s.gate_up_row_stride, F, H, x.gate_scales, s.gate_up_scale_stride, xa.data(), g.data());
      dot(s.gate_up_type, x.up, s.gate_up_row_stride, F, H, x.up_scales, s.gate_up_scale_stride, xa.data(), u.data());
      for (int64_t f = 0; f < F; ++f) g[size_t(f)] = g[size_t(f)] / (1.0f + std::exp(-g[size_t(f)])) * u[size_t(f)];
      convert_row_dot_activations(s.down_type, g.data(), 0, 1, F, ha.data(), ha.size());
      dot(s.down_type, x.down, s.down_row_stride, H, F, x.down_scales, s.down_scale_stride, ha.data(), yd.data());
      const float w = r.weights[size_t(t * r.top_k + k)];
      for (int64_t i = 0; i < H; ++i) y[size_t(t * H + i)] += w * yd[size_t(i)];
    }
  }
  return y;
}

// Double precision on the dequantised weights and unrounded activations;
// `scale` gets, per output, sum over experts of w*sum|down*h| (the size the
// rounding errors are relative to).
std::vector<double> exact(const Layer& L, const Routing& r, std::vector<double>& scale) {
  const int64_t H = L.shape.hidden, F = L.shape.ffn;
  std::vector<double> y(size_t(r.n_tokens * H), 0.0), h(static_cast<size_t>(F));
  scale.assign(y.size(), 0.0);
  for (int64_t t = 0; t < r.n_tokens; ++t)
    for (int k = 0; k < r.top_k; ++k) {
      const int32_t e = r.ids[size_t(t * r.top_k + k)];
      if (e < 0) continue;
      const auto& gd = L.gate_d[size_t(e)];
      const auto& ud = L.up_d[size_t(e)];
      const auto& dd = L.down_d[size_t(e)];
      for (int64_t f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < H; ++i) {
          g += double(gd[size_t(f * H + i)]) * r.x[size_t(t * H + i)];
          u += double(ud[size_t(f * H + i)]) * r.x[size_t(t * H + i)];
        }
        h[size_t(f)] = g / (1.0 + std::exp(-g)) * u;
      }
      const double w = r.weights[size_t(t * r.top_k + k)];
      for (int64_t i = 0; i < H; ++i) {
        double acc = 0, mag = 0;
        for (int64_t f = 0; f < F; ++f) {
          acc += double(dd[size_t(i * F + f)]) * h[size_t(f)];
          mag += std::fabs(double(dd[size_t(i * F + f)]) * h[size_t(f)]);
        }
        y[size_t(t * H + i)] += w * acc;
        scale[size_t(t * H + i)] += w * mag;
      }
    }
  return y;
}

struct TypePair {
  DType gate_up, down;
  double rel;  // bound on |y - exact| / scale: the activation rounding of the type
};

const TypePair kPairs[] = {
    // bf16 activations round at 2^-9, Q8 ones at 1/254 of a block's max
    {DType::kF32, DType::kF32, 1e-6},      {DType::kBF16, DType::kBF16, 4e-3},
    {DType::kF8E4M3, DType::kF8E4M3, 4e-3}, {DType::kQ8_0, DType::kQ8_0, 1.5e-2},
    {DType::kQ4_K, DType::kQ6_K, 2.5e-2},  {DType::kQ5_K, DType::kQ4_K, 2.5e-2},
};

TEST(MoeLayer, GenericEqualsTheSequentialLayerForAnyThreadCount) {
  for (const TypePair& tp : kPairs) {
    SCOPED_TRACE(std::string(name(tp.gate_up)) + "/" + std::string(name(tp.down)));
    const Layer L = make_layer(tp.gate_up, tp.down, 256, 512, 6, 11);
    const Routing r = make_routing(5, 3, 256, 6, 12);
    const std::vector<float> want = sequential_generic(L, r);
    for (int threads : {1, 3}) EXPECT_EQ(run_layer(L, r, CpuIsa::kGeneric, threads), want) << threads;
  }
}

// Experts of 25 MB: the layer takes tasks of up to 4 MiB (moe.cpp), fewer
// and larger chunks than the small layers above, sized by the thread count,
// and the last two experts' down projections in 1 MiB pieces (the tail).
TEST(MoeLayer, LargeLayersInLargerTasksEqualTheSequentialLayer) {
  const Layer L = make_layer(DType::kF32, DType::kF32, 1024, 2048, 3, 31);
  const Routing r = make_routing(4, 2, 1024, 3, 32);
  const std::vector<float> want = sequential_generic(L, r);
  for (int threads : {1, 2, 3}) EXPECT_EQ(run_layer(L, r, CpuIsa::kGeneric, threads), want) << threads;
}

// The task list puts expert e's down tasks after expert e + 2's gate/up
// ones (kDownLag) and the last experts' downs at its end: one, two and three
// active experts, at every thread count, give the sequential layer.
TEST(MoeLayer, FewActiveExpertsEqualTheSequentialLayer) {
  const Layer L = make_layer(DType::kQ8_0, DType::kQ8_0, 256, 512, 6, 61);
  for (int active = 1; active <= 3; ++active) {
    const Routing r = make_routing(1, active, 256, 6, uint32_t(62 + active));
    const std::vector<float> want = sequential_generic(L, r);
    for (int threads : {1, 2, 3})
      EXPECT_EQ(run_layer(L, r, CpuIsa::kGeneric, threads), want) << active << " experts, " << threads << " threads";
  }
}

// The layer runs through ThreadPool::run_shared: with threads that go to
// sleep after every job (no spin), they join each layer late or not at all,
// and the floats stay those of the sequential layer.
TEST(MoeLayer, ThreadsJoiningLateOrNotAtAllGiveTheSameFloats) {
  const Layer L = make_layer(DType::kQ4_K, DType::kQ6_K, 256, 512, 6, 31);
  const Routing r = make_routing(5, 3, 256, 6, 32);
  const std::vector<float> want = sequential_generic(L, r);
  ThreadPool pool = ThreadPool::create({3, {}, false, 0});
  for (int rep = 0; rep < 12; ++rep) {
    if (rep % 4 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_EQ(run_layer_on(pool, L, r, CpuIsa::kGeneric), want) << "repetition " << rep;
  }
}

TEST(MoeLayer, EveryLevelMatchesTheExactLayer) {
  const CpuFeatures f = detect_cpu_features();
  for (const TypePair& tp : kPairs) {
    const Layer L = make_layer(tp.gate_up, tp.down, 512, 768, 8, 21);
    const Routing r = make_routing(9, 4, 512, 8, 22);
    std::vector<double> scale;
    const std::vector<double> want = exact(L, r, scale);
    for (int level = 0; level < kCpuIsaCount; ++level) {
      if (!supports(f, CpuIsa(level))) continue;
      SCOPED_TRACE(std::string(name(tp.gate_up)) + "/" + std::string(name(tp.down)) + " at " +
                   std::string(isa_name(CpuIsa(level))));
      const std::vector<float> y = run_layer(L, r, CpuIsa(level), 2);
      double worst = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << i;
        const double d = std::fabs(y[i] - want[i]);
        ASSERT_LE(d, tp.rel * scale[i] + 1e-7) << "output " << i << ": " << y[i] << " vs " << want[i];
        if (scale[i] > 0) worst = std::max(worst, d / scale[i]);
      }
      std::printf("  %s/%s at %s: worst |y - exact| / scale = %.2e\n", std::string(name(tp.gate_up)).c_str(),
                  std::string(name(tp.down)).c_str(), std::string(isa_name(CpuIsa(level))).c_str(), worst);
    }
  }
}

// split_bf16_activations: BF16 and FP8 layers with activations of f32
// precision (hi + lo bf16 rows) at every level, 1 token (the one-token
// loops then see 2 rows) and 9 (tiles): within 1e-5 of the exact layer's
// scale (about 1e-6 measured), where bf16 activations alone are off by more
// than 2e-4 somewhere (about 6e-4). Also as the arena stores them for the
// expert workers: BF16 repacked to bf16_x16, FP8 with its marks.
TEST(MoeLayer, SplitBf16ActivationsReachF32Precision) {
  const CpuFeatures f = detect_cpu_features();
  std::vector<std::vector<uint8_t>> marks;
  for (const auto& [t, stored] : {std::pair{DType::kBF16, false}, {DType::kBF16, true},
                                  {DType::kF8E4M3, false}, {DType::kF8E4M3, true}}) {
    Layer L = make_layer(t, t, 512, 768, 8, 23);
    if (stored && t == DType::kBF16) repack_experts(L, repacked_layout(t), repacked_layout(t));
    if (stored && t == DType::kF8E4M3) mark_experts(L, marks);
    for (int64_t n : {1, 9}) {
      const Routing r = make_routing(n, 4, 512, 8, 24);
      std::vector<double> scale;
      const std::vector<double> want = exact(L, r, scale);
      for (int level = 0; level < kCpuIsaCount; ++level) {
        if (!supports(f, CpuIsa(level))) continue;
        SCOPED_TRACE(std::string(name(t)) + (stored ? " as stored" : "") + " at " +
                     std::string(isa_name(CpuIsa(level))) + ", " + std::to_string(n) + " tokens");
        auto worst = [&](bool split) {
          L.shape.split_bf16_activations = split;
          const std::vector<float> y = run_layer(L, r, CpuIsa(level), 2);
          double w = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            EXPECT_TRUE(std::isfinite(y[i])) << i;
            if (scale[i] > 0) w = std::max(w, std::fabs(y[i] - want[i]) / scale[i]);
          }
          return w;
        };
        const double split = worst(true), plain = worst(false);
        EXPECT_LE(split, 1e-5);
        EXPECT_GE(plain, 2e-4);
        std::printf("  %s%s at %s, %d tokens: worst |y - exact| / scale %.2e split, %.2e bf16\n",
                    std::string(name(t)).c_str(), stored ? " as stored" : "",
                    std::string(isa_name(CpuIsa(level))).c_str(), int(n), split, plain);
      }
    }
  }
}

TEST(MoeLayer, TwoWorkersSlicesAddUpToTheWholeLayer) {
  // F = 768 split 512 + 256 along whole Q8_K blocks: gate/up rows and down
  // columns of each expert. F32 so the only difference is summation order.
  const Layer L = make_layer(DType::kF32, DType::kF32, 128, 768, 4, 31);
  const Routing r = make_routing(6, 2, 128, 4, 32);
  const std::vector<float> whole = run_layer(L, r, best_isa(detect_cpu_features()), 2);
  std::vector<float> sum(whole.size(), 0.0f);
  for (auto [f0, f1] : {std::pair<int64_t, int64_t>{0, 512}, {512, 768}}) {
    Layer part = L;
    part.shape.ffn = f1 - f0;
    part.shape.down_row_stride = size_t(4 * (f1 - f0));
    for (size_t e = 0; e < 4; ++e) {
      part.gate[e].assign(L.gate[e].begin() + f0 * 128 * 4, L.gate[e].begin() + f1 * 128 * 4);
      part.up[e].assign(L.up[e].begin() + f0 * 128 * 4, L.up[e].begin() + f1 * 128 * 4);
      part.down[e].clear();
      for (int64_t i = 0; i < 128; ++i)
        part.down[e].insert(part.down[e].end(), L.down[e].begin() + (i * 768 + f0) * 4,
                            L.down[e].begin() + (i * 768 + f1) * 4);
      part.experts[e] = {part.gate[e].data(), part.up[e].data(), part.down[e].data(), nullptr, nullptr, nullptr};
    }
    const std::vector<float> y = run_layer(part, r, best_isa(detect_cpu_features()), 2);
    for (size_t i = 0; i < y.size(); ++i) sum[i] += y[i];
  }
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(sum[i], whole[i], 1e-4 * (1 + std::fabs(whole[i]))) << i;
}

TEST(MoeLayer, BadRoutingIsRefusedBeforeAnyWork) {
  const Layer L = make_layer(DType::kBF16, DType::kBF16, 64, 64, 3, 41);
  Routing r = make_routing(2, 2, 64, 3, 42);
  r.ids[1] = 3;  // out of range
  EXPECT_THROW(run_layer(L, r, CpuIsa::kGeneric, 1), Error);
  r.ids[1] = 0;
  r.ids[0] = 1;
  r.weights[2] = NAN;
  r.ids[2] = 2;
  EXPECT_THROW(run_layer(L, r, CpuIsa::kGeneric, 1), Error);
  MoeShape bad = L.shape;
  bad.ffn = 100;
  bad.down_type = DType::kQ4_K;
  EXPECT_THROW(moe_check_shape(bad), Error);
}

TEST(MoeLayer, NoExpertOnThisWorkerGivesZeros) {
  const Layer L = make_layer(DType::kF32, DType::kF32, 32, 32, 2, 51);
  Routing r = make_routing(3, 2, 32, 2, 52);
  for (auto& id : r.ids) id = -1;
  for (float v : run_layer(L, r, CpuIsa::kGeneric, 2)) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace tandem::kernels

namespace tandem::kernels {
namespace {

// Q4_K and Q8_0 experts stored repacked (q4_k_x4, q8_0_x4: the arena's
// layouts for them where the CPU has AVX-512) give the rowmajor layer bit
// for bit, at every level and thread count; Q4_K with down in Q4_K too or
// in Q6_K as Q4_K_M files keep it. Q8_0 at the amx level: within the exact
// layer's bound (one fma per block, where ggml adds 8 lanes').
TEST(MoeLayer, X4LayoutsGiveTheRowmajorLayerBitForBit) {
  const std::pair<DType, DType> types[] = {
      {DType::kQ4_K, DType::kQ4_K}, {DType::kQ4_K, DType::kQ6_K}, {DType::kQ8_0, DType::kQ8_0}};
  for (const auto& [gu, down] : types) {
    SCOPED_TRACE(std::string(name(gu)) + ", down " + std::string(name(down)));
    const Layer L = make_layer(gu, down, 512, 768, 6, 31);
    Layer X = L;
    repack_experts(X, repacked_layout(gu), repacked_layout(down));
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

// BF16 experts stored as bf16_x16 (the arena's layout for them from
// avx512bf16 up) agree with the exact layer at every level, with enough
// tokens per expert for the prefill tiles (amx: chunks of 16 tokens, and
// gathered gate/up activations staged in steps of fewer columns).
TEST(MoeLayer, Bf16X16LayerAgreesWithTheExactLayerAtEveryLevel) {
  const Layer L = make_layer(DType::kBF16, DType::kBF16, 512, 768, 5, 61);
  Layer X = L;
  repack_experts(X, WeightLayout::kBf16X16, WeightLayout::kBf16X16);
  for (int64_t tokens : {1, 6, 45}) {
    const Routing r = make_routing(tokens, 3, 512, 5, uint32_t(60 + tokens));
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

// FP8 experts stored as fp8_s16 (the arena's layout for long FP8 rows at
// avx512bf16), marked from their rows: the rowmajor layer's floats at every
// level, for one and two tokens (the sliced loop) and for a batch.
TEST(MoeLayer, Fp8S16LayerGivesTheRowmajorFloats) {
  const int64_t H = 2048, F = 2048, E = 3;  // two slices a row: the repack moves bytes
  Layer L = make_layer(DType::kF8E4M3, DType::kF8E4M3, H, F, E, 95);
  std::mt19937 rng(96);
  for (size_t e = 0; e < size_t(E); ++e)
    for (auto* m : {&L.gate[e], &L.up[e], &L.down[e]})
      for (int k = 0; k < 4; ++k) (*m)[rng() % m->size()] = uint8_t(k);  // zero and subnormals
  std::vector<std::vector<uint8_t>> marks;
  mark_experts(L, marks);
  Layer X = L;
  for (size_t e = 0; e < size_t(E); ++e) {
    repack_rows(WeightLayout::kFp8S16, DType::kF8E4M3, X.gate[e].data(), F, H);
    repack_rows(WeightLayout::kFp8S16, DType::kF8E4M3, X.up[e].data(), F, H);
    repack_rows(WeightLayout::kFp8S16, DType::kF8E4M3, X.down[e].data(), H, F);
    X.experts[e].gate = X.gate[e].data();
    X.experts[e].up = X.up[e].data();
    X.experts[e].down = X.down[e].data();
  }
  X.shape.gate_up_layout = X.shape.down_layout = WeightLayout::kFp8S16;
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    for (int64_t tokens : {1, 2, 6}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + ", " + std::to_string(tokens) + " tokens");
      const Routing r = make_routing(tokens, 2, H, E, uint32_t(97 + tokens));
      EXPECT_EQ(run_layer(X, r, isa, 2), run_layer(L, r, isa, 2));
    }
  }
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
