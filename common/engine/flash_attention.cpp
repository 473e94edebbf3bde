#include "common/engine/flash_attention.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/f32_dot.h"
#include "kernels/cpu/float_convert.h"

namespace tandem::engine {

namespace {
inline float h(float x) { return kernels::fp16_to_f32(kernels::f32_to_fp16(x)); }
}  // namespace

void round_to_fp16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = h(x[i]);
}

void attend(const AttentionRow& a) {
  thread_local std::vector<float> acc;  // holds fp16 values, as ggml's VKQ16
  acc.assign(size_t(a.dv), 0.0f);
  float S = 0.0f, M = -INFINITY;
  for (int64_t j = 0; j < a.n_positions; ++j) {
    const float* k = a.keys + j * a.key_stride;
    kernels::F32Dot dot(a.dk);  // ggml_vec_dot_f16
    for (int64_t i = 0; i < a.dk; ++i) dot.add(k[i], a.q[i]);
    const float s = dot.result() * a.scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > M) {
      const float old = M;
      M = s;
      ms = std::exp(old - M);
      for (auto& v : acc) v = h(v * ms);
    } else {
      vs = std::exp(s - M);
    }
    const float* v = a.values + j * a.value_stride;
    // ggml_vec_mad_f16: one fused multiply-add in f32, then stored as fp16.
    for (int64_t i = 0; i < a.dv; ++i) acc[size_t(i)] = h(std::fma(v[i], vs, acc[size_t(i)]));
    S = std::fma(S, ms, vs);  // ggml's S*ms + vs, contracted by GCC
  }
  const float inv = 1.0f / S;
  for (int64_t i = 0; i < a.dv; ++i) a.out[i] = acc[size_t(i)] * inv;
}

}  // namespace tandem::engine
