#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"

namespace tandem::kernels {
namespace {

// A group whose largest magnitude is below this is stored as all zeros
// (ggml's GROUP_MAX_EPS), rather than dividing by a vanishing scale.
constexpr float kGroupMaxEps = 1e-15f;

// Round half to even, like ggml's nearest_int (a magic-constant trick that
// relies on the default rounding mode, which lrint uses too).
int nearest_int(float f) {
  return static_cast<int>(std::clamp<long>(std::lrint(f), INT_MIN, INT_MAX));
}

// The value with the largest magnitude, sign kept; the first one on ties.
// ggml maps this value to the most negative quant, using the full range.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// ---- 32-element blocks: one scale from the absolute maximum --------------

BlockQ8_0 quant_q8_0(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0 b{};
  b.d = f32_to_fp16(d);
  for (int j = 0; j < kQK8_0; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  return b;
}

// ggml-cpu's quantize_row_q8_0 on x86 (what llama.cpp applies to the
// activations of a Q8_0/Q4_0/Q5_0 matmul): the same scale as the reference,
// but the inverse is 127/amax rather than 1/d, and _mm256_round_ps rounds
// half to even. Both change an occasional quant by one unit, and one unit in
// an activation moves a router logit by ~1e-3, enough to flip a near-tie.
BlockQ8_0 quant_q8_0_activation(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  BlockQ8_0 b{};
  b.d = f32_to_fp16(amax / 127.0f);
  for (int j = 0; j < kQK8_0; ++j) b.qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  return b;
}

BlockQ4_0 quant_q4_0(const float* x) {
  const float d = signed_absmax(x, kQK4_0) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_0 b{};
  b.d = f32_to_fp16(d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    // x*id is in [-8, 8]; +8.5 and truncation rounds to 0..16, capped at 15.
    const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int q1 = std::min(15, static_cast<int>(x[j + kQK4_0 / 2] * id + 8.5f));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  return b;
}

BlockQ5_0 quant_q5_0(const float* x) {
  const float d = signed_absmax(x, kQK5_0) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ5_0 b{};
  b.d = f32_to_fp16(d);
  uint32_t qh = 0;
  for (int j = 0; j < kQK5_0 / 2; ++j) {
    const int q0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    const int q1 = std::min(31, static_cast<int>(x[j + kQK5_0 / 2] * id + 16.5f));
    b.qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
    qh |= static_cast<uint32_t>(q0 >> 4) << j;
    qh |= static_cast<uint32_t>(q1 >> 4) << (j + kQK5_0 / 2);
  }
  std::memcpy(b.qh, &qh, sizeof(qh));
  return b;
}

// ---- k-quant helpers ------------------------------------------------------

// Fits x ~ scale * L + min, L in [0, nmax], min <= 0, minimising the
// w-weighted squared error (ggml's make_qkx2_quants). Starts from the plain
// min/max grid, then tries nstep+1 slightly stretched grids, solving the
// 2x2 least-squares problem for (scale, min) on each. Writes the best L and
// -min (>= 0) and returns scale.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                    float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;  // the stored min is subtracted, so it must be <= 0
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += w[i] * diff * diff;
  }
  uint8_t aux[kQK_K];  // n <= 256
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;  // all values on one grid point: no unique fit
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // refit with min pinned at 0
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * aux[i] + this_min - x[i];
      err += w[i] * diff * diff;
    }
    if (err < best_error) {
      std::copy(aux, aux + n, L);
      best_error = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// Fits x ~ scale * l, l in [-nmax, nmax-1], weighted by x^2 (ggml's
// make_qx_quants, rmse_type 1): the largest-magnitude value maps to -nmax,
// then 18 nearby grids are tried. Writes L = l + nmax and returns scale.
float fit_scale_sym(int n, int nmax, const float* x, uint8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t{0});
    return 0.0f;
  }
  // Sums sum(w*x*l) and sum(w*l^2) for the grid iscale, optionally storing L.
  auto fit = [&](float iscale, float* sumlx, float* suml2, bool store) {
    *sumlx = *suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = static_cast<uint8_t>(l + nmax);
      const float w = x[i] * x[i], fl = static_cast<float>(l);
      *sumlx += w * x[i] * fl;
      *suml2 += w * fl * fl;
    }
  };
  float sumlx, suml2;
  fit(-static_cast<float>(nmax) / max, &sumlx, &suml2, true);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;  // the error reduction this scale achieves
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    fit(iscale, &sumlx, &suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      fit(iscale, &sumlx, &suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Inverse of k4_scale_min (quant_blocks.h) for sub-block j; sub-blocks must
// be packed in order 0..7 into zeroed bytes.
void k4_pack_scale_min(int j, int sc, int m, uint8_t* scales) {
  if (j < 4) {
    scales[j] = static_cast<uint8_t>(sc);
    scales[j + 4] = static_cast<uint8_t>(m);
  } else {
    scales[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
    scales[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
    scales[j] |= static_cast<uint8_t>((m >> 4) << 6);
  }
}

// The common part of Q4_K and Q5_K: fits each 32-value sub-block, stores the
// eight scales and mins as 6-bit multiples of d = max_scale/63 and
// dmin = max_min/63, then requantises the values against the scales as
// stored (after both roundings), writing L in [0, nmax].
void quant_k4_scales(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out,
                     uint16_t* dmin_out, uint8_t* packed, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    // Weight large values more, but never ignore small ones.
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(packed, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    const int ls = std::clamp(nearest_int(inv_scale * scales[j]), 0, 63);
    const int lm = std::clamp(nearest_int(inv_min * mins[j]), 0, 63);
    k4_pack_scale_min(j, ls, lm, packed);
  }
  *d_out = f32_to_fp16(max_scale / 63.0f);
  *dmin_out = f32_to_fp16(max_min / 63.0f);
  const float d = fp16_to_f32(*d_out), dmin = fp16_to_f32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, packed, &sc, &m);
    const float ds = d * sc;
    if (ds == 0.0f) continue;  // the sub-block decodes to -dm whatever L is
    const float dm = dmin * m;
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dm) / ds), 0, nmax));
  }
}

// ---- 256-element super-blocks --------------------------------------------

BlockQ4_K quant_q4_k(const float* x) {
  BlockQ4_K b{};
  uint8_t L[kQK_K];
  quant_k4_scales(x, 15, -1.0f, 20, &b.d, &b.dmin, b.scales, L);
  // Chunk c of 64 values: sub-block 2c in low nibbles, 2c+1 in high nibbles.
  for (int c = 0; c < kQK_K / 64; ++c)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  return b;
}

BlockQ5_K quant_q5_k(const float* x) {
  BlockQ5_K b{};
  uint8_t L[kQK_K];
  quant_k4_scales(x, 31, -0.5f, 15, &b.d, &b.dmin, b.scales, L);
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      b.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      // 5th bits: bit 2c for the low-nibble half, 2c+1 for the high one.
      b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
  return b;
}

BlockQ6_K quant_q6_k(const float* x) {
  BlockQ6_K b{};
  uint8_t L[kQK_K];
  float scales[kQK_K / 16];
  float max_scale = 0.0f, max_abs_scale = 0.0f;
  for (int s = 0; s < kQK_K / 16; ++s) {
    scales[s] = fit_scale_sym(16, 32, x + 16 * s, L + 16 * s);
    if (std::fabs(scales[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  if (max_abs_scale < kGroupMaxEps) return b;  // all zero
  // Sub-block scales become int8 multiples of d; the largest maps to -128.
  const float iscale = -128.0f / max_scale;
  b.d = f32_to_fp16(1.0f / iscale);
  for (int s = 0; s < kQK_K / 16; ++s)
    b.scales[s] = static_cast<int8_t>(std::clamp(nearest_int(iscale * scales[s]), -128, 127));
  const float d = fp16_to_f32(b.d);
  for (int s = 0; s < kQK_K / 16; ++s) {
    const float ds = d * b.scales[s];
    if (ds == 0.0f) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * s + i] = static_cast<uint8_t>(std::clamp(nearest_int(x[16 * s + i] / ds), -32, 31) + 32);
  }
  // Half h (128 values): values l, l+32, l+64, l+96 share qh[32h + l] (2
  // bits each, in that order); low nibbles go to ql[64h + l] (l, l+64) and
  // ql[64h + 32 + l] (l+32, l+96).
  for (int h = 0; h < 2; ++h) {
    const uint8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      b.ql[64 * h + l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
      b.ql[64 * h + 32 + l] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
      b.qh[32 * h + l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                              ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
    }
  }
  return b;
}

BlockQ8_K quant_q8_k(const float* x) {
  BlockQ8_K b{};  // all-zero input leaves d, qs and bsums zero
  const float max = signed_absmax(x, kQK_K);
  if (max == 0.0f) return b;
  const float iscale = -127.0f / max;
  for (int j = 0; j < kQK_K; ++j) b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
  for (int g = 0; g < kQK_K / 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
    b.bsums[g] = static_cast<int16_t>(sum);
  }
  b.d = 1.0f / iscale;
  return b;
}

// ---- plain types ------------------------------------------------------------

// Round to nearest even and saturate; NaN becomes 0.
template <typename I>
I to_int_saturating(float f) {
  if (std::isnan(f)) return 0;
  const float r = std::nearbyint(f);
  // Both limits convert to float exactly or (INT32_MAX) round up to 2^31,
  // so any r strictly inside them converts to I without overflow.
  if (r <= static_cast<float>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (r >= static_cast<float>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(r);
}

template <typename Block, int kElems, typename Fn>
void each_block(const float* src, uint8_t* dst, size_t n_blocks, Fn fn) {
  for (size_t i = 0; i < n_blocks; ++i) {
    const Block b = fn(src + i * kElems);
    std::memcpy(dst + i * sizeof(Block), &b, sizeof(Block));
  }
}

template <typename S, typename Conv>
void each_value(const float* src, uint8_t* dst, size_t n, Conv conv) {
  for (size_t i = 0; i < n; ++i) {
    const S v = conv(src[i]);
    std::memcpy(dst + i * sizeof(S), &v, sizeof(S));
  }
}

}  // namespace

void quantize_generic(DType t, const float* src, void* dst_v, size_t n) {
  if (static_cast<int>(t) >= kDTypeCount)  // info() would index out of bounds
    fail_invalid("quantize: unknown dtype {}", static_cast<int>(t));
  const DTypeInfo& ti = info(t);
  if (n % ti.block_elems != 0)
    fail_invalid("quantize {}: {} elements is not a whole number of {}-element blocks", ti.name,
                 n, ti.block_elems);
  auto* dst = static_cast<uint8_t*>(dst_v);
  const size_t nb = n / ti.block_elems;
  switch (t) {
    case DType::kF32:
      if (n != 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      return each_value<uint16_t>(src, dst, n, f32_to_fp16);
    case DType::kBF16:
      return each_value<uint16_t>(src, dst, n, f32_to_bf16);
    case DType::kF8E4M3:
      return each_value<uint8_t>(src, dst, n, f32_to_fp8_e4m3);
    case DType::kI8:
      return each_value<int8_t>(src, dst, n, to_int_saturating<int8_t>);
    case DType::kU8:
      return each_value<uint8_t>(src, dst, n, to_int_saturating<uint8_t>);
    case DType::kI32:
      return each_value<int32_t>(src, dst, n, to_int_saturating<int32_t>);
    case DType::kQ4_0:
      return each_block<BlockQ4_0, kQK4_0>(src, dst, nb, quant_q4_0);
    case DType::kQ8_0:
      return each_block<BlockQ8_0, kQK8_0>(src, dst, nb, quant_q8_0);
    case DType::kQ5_0:
      return each_block<BlockQ5_0, kQK5_0>(src, dst, nb, quant_q5_0);
    case DType::kQ4_K:
      return each_block<BlockQ4_K, kQK_K>(src, dst, nb, quant_q4_k);
    case DType::kQ5_K:
      return each_block<BlockQ5_K, kQK_K>(src, dst, nb, quant_q5_k);
    case DType::kQ6_K:
      return each_block<BlockQ6_K, kQK_K>(src, dst, nb, quant_q6_k);
    case DType::kQ8_K:
      return each_block<BlockQ8_K, kQK_K>(src, dst, nb, quant_q8_k);
  }
  fail(ErrorKind::kInternal, "quantize: dtype {} not handled", ti.name);
}

void quantize_activations(DType t, const float* src, void* dst, size_t n_elems) {
  if (t != DType::kQ8_0) return quantize_generic(t, src, dst, n_elems);
  if (n_elems % kQK8_0 != 0)
    fail_invalid("quantize q8_0 activations: {} elements is not a whole number of {}-element blocks",
                 n_elems, kQK8_0);
  each_block<BlockQ8_0, kQK8_0>(src, static_cast<uint8_t*>(dst), n_elems / kQK8_0,
                                quant_q8_0_activation);
}

}  // namespace tandem::kernels
