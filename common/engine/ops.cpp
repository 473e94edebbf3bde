#include "common/engine/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/f32_dot.h"

namespace tandem::engine {

void rms_norm(const float* x, std::span<const float> w, float* y, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float mean = float(sum / double(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * (w.empty() ? 1.0f : w[i]);
}

float ggml_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;  // round(x / ln 2)
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  return std::ldexp(j, static_cast<int>(n));  // _mm512_scalef_ps
}

void swiglu(float* g, const float* u, int64_t n) {
  const int64_t whole = n & ~int64_t{15};
  for (int64_t i = 0; i < whole; ++i) g[i] = g[i] / (1.0f + ggml_expf(0.0f - g[i])) * u[i];
  for (int64_t i = whole; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  int64_t i = 0;
  for (; i + 15 < n; i += 16) {
    for (int64_t l = 0; l < 16; ++l) x[i + l] = ggml_expf(x[i + l] - mx);
    sum += static_cast<double>(kernels::reduce16(x + i));
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

float yarn_mscale(float factor, float mscale) {
  return factor <= 1.0f ? 1.0f : 0.1f * mscale * std::log(factor) + 1.0f;
}

namespace {

// ggml_rope_yarn_corr_dim: the dimension whose wavelength spans n_rot turns
// over the original context.
float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return float(n_dims) * std::log(float(n_ctx_orig) / (n_rot * 2.0f * float(M_PI))) /
         (2.0f * std::log(base));
}

}  // namespace

Rope::Rope(const RopeConfig& c, RopeStyle style, float attn_factor)
    : c_(c), style_(style), attn_factor_(attn_factor) {
  yarn_ = c.scaling == RopeScaling::kYarn && c.factor > 1.0f;
  if (yarn_) {
    const int n = int(c.dims);
    corr_lo_ = std::max(0.0f, std::floor(corr_dim(n, int(c.original_max_positions), c.beta_fast, c.theta)));
    corr_hi_ = std::min(float(n - 1), std::ceil(corr_dim(n, int(c.original_max_positions), c.beta_slow, c.theta)));
  }
}

void Rope::fill(int64_t pos, float* cos, float* sin) const {
  const int64_t n = c_.dims;
  const float freq_scale = c_.scaling == RopeScaling::kNone ? 1.0f : 1.0f / c_.factor;
  const float theta_scale = std::pow(c_.theta, -2.0f / float(n));
  float theta_extrap = float(pos);
  for (int64_t i0 = 0; i0 < n; i0 += 2) {
    float theta = freq_scale * theta_extrap;
    float mscale = attn_factor_;
    if (yarn_) {
      const float y = (float(i0 / 2) - corr_lo_) / std::max(0.001f, corr_hi_ - corr_lo_);
      const float ramp = 1.0f - std::min(1.0f, std::max(0.0f, y));  // ext_factor = 1
      theta = std::fma(theta, 1.0f - ramp, theta_extrap * ramp);  // contracted, as in ggml
      mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
    }
    cos[i0 / 2] = std::cos(theta) * mscale;
    sin[i0 / 2] = std::sin(theta) * mscale;
    theta_extrap *= theta_scale;
  }
}

void Rope::apply(float* x, int64_t n_heads, int64_t stride, int64_t pos) const {
  const int64_t n = c_.dims, half = n / 2;
  std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
  fill(pos, cos.data(), sin.data());
  std::vector<float> head(style_ == RopeStyle::kLlamaGguf ? static_cast<size_t>(n) : 0);
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * stride;
    if (style_ == RopeStyle::kLlamaGguf) {
      std::copy(v, v + n, head.begin());
      for (int64_t i = 0; i < half; ++i) {
        v[2 * i] = head[size_t(i)];
        v[2 * i + 1] = head[size_t(i + half)];
      }
    }
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = style_ == RopeStyle::kNeox ? i : 2 * i;
      const int64_t b = style_ == RopeStyle::kNeox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      // ggml's x0*cos - x1*sin, as GCC contracts it on FMA machines: the
      // first product is fused, the second rounded.
      v[a] = std::fma(x0, cos[i], -(x1 * sin[i]));
      v[b] = std::fma(x0, sin[i], x1 * cos[i]);
    }
  }
}

}  // namespace tandem::engine
