// The MoE layer tests' shared pieces (moe_test.cpp, moe_layout_test.cpp):
// random layers in any weight type with their dequantised values, routings,
// the layer run on a thread pool, and two references to compare it with: a
// plain sequential statement of the layer with the generic kernels, and
// double precision on the dequantised weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/quantize.h"

namespace tandem::kernels::testing {

struct Layer {
  MoeShape shape;
  std::vector<std::vector<uint8_t>> gate, up, down;
  std::vector<std::vector<float>> gate_s, up_s, down_s;  // FP8 scales
  std::vector<std::vector<float>> gate_d, up_d, down_d;  // dequantised (scales applied)
  std::vector<MoeExpert> experts;
};

// A random matrix of `rows` x `cols` in type t; deq gets its values.
inline void make_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng, std::vector<uint8_t>& out,
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

inline Layer make_layer(DType gu, DType dn, int64_t H, int64_t F, int64_t E, uint32_t seed) {
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
inline void repack_experts(Layer& L, WeightLayout gl, WeightLayout dl) {
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
inline void mark_experts(Layer& L, std::vector<std::vector<uint8_t>>& marks) {
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

inline Routing make_routing(int64_t n_tokens, int top_k, int64_t H, int64_t E, uint32_t seed) {
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

inline std::vector<float> run_layer_on(ThreadPool& pool, const Layer& L, const Routing& r, CpuIsa isa) {
  const MoeKernels k = moe_kernels(isa, L.shape);
  std::vector<uint8_t> ws(moe_workspace_bytes(L.shape, r.n_tokens, r.top_k));
  std::vector<float> y(size_t(r.n_tokens * L.shape.hidden), NAN);
  MoeBatch b{r.n_tokens, r.top_k, r.x.data(), size_t(L.shape.hidden), r.ids.data(), r.weights.data(),
             y.data(), size_t(L.shape.hidden)};
  moe_forward(k, pool, L.shape, L.experts.data(), b, ws.data(), ws.size());
  return y;
}

inline std::vector<float> run_layer(const Layer& L, const Routing& r, CpuIsa isa, int threads) {
  ThreadPool pool = ThreadPool::create({threads, {}, false, 50});
  return run_layer_on(pool, L, r, isa);
}

// The layer as a plain loop over tokens and experts with the generic kernels.
inline std::vector<float> sequential_generic(const Layer& L, const Routing& r) {
  const MoeShape& s = L.shape;
  const int64_t H = s.hidden, F = s.ffn;
  std::vector<float> y(size_t(r.n_tokens * H), 0.0f), g(static_cast<size_t>(F)), u(static_cast<size_t>(F)),
      yd(static_cast<size_t>(H));
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
      dot(s.gate_up_type, x.gate, s.gate_up_row_stride, F, H, x.gate_scales, s.gate_up_scale_stride, xa.data(),
          g.data());
      dot(s.gate_up_type, x.up, s.gate_up_row_stride, F, H, x.up_scales, s.gate_up_scale_stride, xa.data(),
          u.data());
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
inline std::vector<double> exact(const Layer& L, const Routing& r, std::vector<double>& scale) {
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

}  // namespace tandem::kernels::testing
