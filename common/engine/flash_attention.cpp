#include "common/engine/flash_attention.h"

#include <cmath>
#include <vector>

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
    double dot = 0;
    for (int64_t i = 0; i < a.dk; ++i) dot += double(a.q[i]) * k[i];
    const float s = float(dot) * a.scale;
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
    for (int64_t i = 0; i < a.dv; ++i) acc[size_t(i)] = h(acc[size_t(i)] + v[i] * vs);
    S = S * ms + vs;
  }
  const float inv = 1.0f / S;
  for (int64_t i = 0; i < a.dv; ++i) a.out[i] = acc[size_t(i)] * inv;
}

}  // namespace tandem::engine
