// Elementwise and row operations of the forward pass, in plain f32 code.
// They follow ggml's CPU definitions (the fixtures' reference is llama.cpp):
// sums of squares and softmax denominators accumulate in double.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/model/config.h"

namespace tandem::engine {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be empty: no weight)
void rms_norm(const float* x, std::span<const float> w, float* y, int64_t n, float eps);

// ggml_vec_soft_max_f32 on AVX-512: whole runs of 16 through ggml_expf, the
// rest through libm's expf; the denominator summed in double.
void softmax(float* x, int64_t n);
inline float sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

// ggml's vectorised exp (ggml_v_expf, AVX-512: a degree-5 polynomial after
// range reduction, within 1.5 ulp of exp). llama.cpp's softmax and SiLU use
// it, and their results feed roundings (Q8/bf16 activations, routing), so
// we compute the same bits rather than libm's.
float ggml_expf(float x);

// g[i] = silu(g[i]) * u[i] as ggml_vec_swiglu_f32: whole runs of 16 with
// ggml_expf, the rest with libm's expf.
void swiglu(float* g, const float* u, int64_t n);

enum class RopeStyle {
  kNeox,         // rotate pairs (i, i + n/2): Qwen
  kInterleaved,  // rotate pairs (2i, 2i + 1): DeepSeek's decoupled rope dims
  // Mixtral: NEOX's pairs, laid out as llama-arch GGUF rows are (its
  // converter permutes q/k rows): each head's halves are interleaved first,
  // x[i] to 2i and x[i + n/2] to 2i + 1, and the pairs (2i, 2i + 1) rotated,
  // so that the attention adds q.k in llama.cpp's element order.
  kLlamaGguf,
};

// Rotary embedding with optional YaRN, precomputed per position on demand.
// Mirrors ggml's rope_yarn(): theta = lerp(interp, extrap, ramp) and cos/sin
// scaled by mscale * (1 + 0.1 ln(factor)) when YaRN is on.
class Rope {
 public:
  // attn_factor scales cos/sin (DeepSeek passes 1 / (1 + 0.1 ln factor) to
  // cancel YaRN's own magnitude scaling and moves it into the softmax scale).
  Rope(const RopeConfig& c, RopeStyle style, float attn_factor = 1.0f);

  // Rotates the first `dims` values of each of n_heads vectors of `stride`
  // floats at x, for position pos.
  void apply(float* x, int64_t n_heads, int64_t stride, int64_t pos) const;
  RopeStyle style() const { return style_; }

 private:
  void fill(int64_t pos, float* cos, float* sin) const;
  RopeConfig c_;
  RopeStyle style_;
  float attn_factor_;
  float corr_lo_ = 0, corr_hi_ = 0;
  bool yarn_ = false;
};

// YaRN's attention temperature: 0.1 * mscale * ln(factor) + 1 (1 if factor <= 1).
float yarn_mscale(float factor, float mscale);

}  // namespace tandem::engine
