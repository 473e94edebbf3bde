// Reference attention, from the HF modeling code:
//   GQA (Qwen2MoeAttention, Qwen3MoeAttention, MixtralAttention): q/k/v
//     projections (+ biases for qwen2), per-head q/k RMSNorm (qwen3) before
//     rope, rotate_half rope on HF-order rows, causal softmax(q.k * d^-1/2).
//   MLA (DeepseekV2Attention / DeepseekV3Attention), not absorbed: the
//     compressed latent is decompressed into per-head keys and values.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"
#include "tests/reference_forward.h"

namespace tandem::reference {
namespace {

// HF's rotate_half form: with emb = cat(freqs, freqs),
//   x * cos(emb) + cat(-x2, x1) * sin(emb)
// on the first 2 * inv_freq.size() values of x; cos/sin scaled by mscale.
void rotate_half(double* x, int64_t pos, const Vec& inv_freq, double mscale) {
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const double a = double(pos) * inv_freq[i];
    const double c = std::cos(a) * mscale, s = std::sin(a) * mscale;
    const double x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c - x2 * s;
    x[i + half] = x2 * c + x1 * s;
  }
}

// base^(-2i/dim) for i < dim/2: the default rope frequencies.
Vec default_inv_freq(double base, uint32_t dim) {
  Vec f(dim / 2);
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::pow(base, -2.0 * double(i) / double(dim));
  return f;
}

// DeepSeek's yarn_get_mscale: YaRN's attention temperature.
double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// DeepSeek's yarn_find_correction_dim: the rotary dimension index whose
// wavelength completes `rotations` turns over the original context.
double yarn_correction_dim(double rotations, uint32_t dim, double base, double orig_ctx) {
  return double(dim) * std::log(orig_ctx / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

// DeepseekV3YarnRotaryEmbedding's inv_freq: the interpolated frequencies
// (divided by factor) for low-frequency dims, the original ones for
// high-frequency dims, blended by a linear ramp between the correction dims.
Vec yarn_inv_freq(const RopeConfig& r) {
  const uint32_t dim = r.dims;
  const double orig = r.original_max_positions;
  double low = std::max(0.0, std::floor(yarn_correction_dim(r.beta_fast, dim, r.theta, orig)));
  double high = std::min(double(dim - 1), std::ceil(yarn_correction_dim(r.beta_slow, dim, r.theta, orig)));
  if (low == high) high += 0.001;  // as HF: avoid a zero-width ramp
  Vec extra = default_inv_freq(r.theta, dim), f(dim / 2);
  for (size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double inter = extra[i] / r.factor;
    f[i] = inter * ramp + extra[i] * (1.0 - ramp);  // HF: inv_freq_mask = 1 - ramp
  }
  return f;
}

// Causal attention of one query over positions 0..count-1 of keys/values,
// plain softmax in double.
Vec attend(std::span<const double> q, const std::vector<Vec>& keys, const std::vector<Vec>& vals,
           size_t count, double scale) {
  Vec s(count);
  double mx = -INFINITY;
  for (size_t j = 0; j < count; ++j) {
    double d = 0;
    for (size_t i = 0; i < q.size(); ++i) d += q[i] * keys[j][i];
    s[j] = d * scale;
    mx = std::max(mx, s[j]);
  }
  double z = 0;
  for (double& v : s) z += (v = std::exp(v - mx));
  Vec out(vals[0].size(), 0.0);
  for (size_t j = 0; j < count; ++j)
    for (size_t i = 0; i < out.size(); ++i) out[i] += s[j] / z * vals[j][i];
  return out;
}

std::span<const double> slice(const Vec& v, size_t first, size_t n) { return {v.data() + first, n}; }

}  // namespace

std::vector<Vec> ReferenceModel::attention_gqa(uint32_t l, const std::vector<Vec>& xn) const {
  const size_t n = xn.size(), nh = c_.n_heads, nkv = c_.n_kv_heads, hd = c_.head_dim, vd = c_.v_head_dim;
  Vec inv_freq = default_inv_freq(c_.rope.theta, c_.rope.dims);
  if (c_.rope.scaling == RopeScaling::kLinear)
    for (double& f : inv_freq) f /= c_.rope.factor;
  else if (c_.rope.scaling == RopeScaling::kYarn)
    fail(ErrorKind::kUnsupported, "reference: YaRN rope is implemented for MLA models only");
  const double scale = 1.0 / std::sqrt(double(hd));
  // keys[g][t], vals[g][t]: kv head g at position t.
  std::vector<std::vector<Vec>> keys(nkv, std::vector<Vec>(n)), vals(nkv, std::vector<Vec>(n));
  std::vector<Vec> q(n);
  auto add_bias = [&](Vec& y, const char* name) {
    if (!has(blk(l, name))) return;
    std::span<const float> b = values(blk(l, name));
    for (size_t i = 0; i < y.size(); ++i) y[i] += b[i];
  };
  // Per-head RMSNorm (qwen3), then rope, of `heads` vectors of hd in y.
  auto norm_rope = [&](Vec& y, size_t heads, const char* norm, int64_t pos) {
    for (size_t h = 0; h < heads; ++h) {
      if (has(blk(l, norm))) {
        Vec normed = rms_norm(slice(y, h * hd, hd), values(blk(l, norm)), c_.rms_eps);
        std::copy(normed.begin(), normed.end(), y.begin() + ptrdiff_t(h * hd));
      }
      rotate_half(y.data() + h * hd, pos, inv_freq, 1.0);
    }
  };
  for (size_t t = 0; t < n; ++t) {
    q[t] = mat(blk(l, "attn_q.weight")) * xn[t];
    Vec k = mat(blk(l, "attn_k.weight")) * xn[t], v = mat(blk(l, "attn_v.weight")) * xn[t];
    add_bias(q[t], "attn_q.bias");
    add_bias(k, "attn_k.bias");
    add_bias(v, "attn_v.bias");
    norm_rope(q[t], nh, "attn_q_norm.weight", int64_t(t));
    norm_rope(k, nkv, "attn_k_norm.weight", int64_t(t));
    for (size_t g = 0; g < nkv; ++g) {
      keys[g][t].assign(k.begin() + ptrdiff_t(g * hd), k.begin() + ptrdiff_t((g + 1) * hd));
      vals[g][t].assign(v.begin() + ptrdiff_t(g * vd), v.begin() + ptrdiff_t((g + 1) * vd));
    }
  }
  std::vector<Vec> out(n);
  for (size_t t = 0; t < n; ++t) {
    Vec heads(nh * vd);
    for (size_t h = 0; h < nh; ++h) {
      const size_t g = h / (nh / nkv);  // HF repeat_kv: consecutive q heads share a kv head
      Vec o = attend(slice(q[t], h * hd, hd), keys[g], vals[g], t + 1, scale);
      std::copy(o.begin(), o.end(), heads.begin() + ptrdiff_t(h * vd));
    }
    out[t] = mat(blk(l, "attn_output.weight")) * heads;
  }
  return out;
}

std::vector<Vec> ReferenceModel::attention_mla(uint32_t l, const std::vector<Vec>& xn) const {
  const MlaConfig& m = *c_.mla;
  const size_t n = xn.size(), nh = c_.n_heads, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim;
  const size_t lora = m.kv_lora_rank, vd = m.v_head_dim, qd = nope + rope;
  const RopeConfig& r = c_.rope;
  const bool yarn = r.scaling == RopeScaling::kYarn;
  if (r.scaling == RopeScaling::kLinear)
    fail(ErrorKind::kUnsupported, "reference: linear rope scaling is not implemented for MLA");
  const Vec inv_freq = yarn ? yarn_inv_freq(r) : default_inv_freq(r.theta, rope);
  // DeepseekV3YarnRotaryEmbedding scales cos/sin by this ratio, and the
  // attention multiplies its softmax scale by mscale(mscale_all_dim)^2.
  const double rope_mscale =
      yarn ? yarn_get_mscale(r.factor, r.mscale) / yarn_get_mscale(r.factor, r.mscale_all_dim) : 1.0;
  double scale = 1.0 / std::sqrt(double(qd));
  if (yarn && r.mscale_all_dim != 0.0f) {
    const double ms = yarn_get_mscale(r.factor, r.mscale_all_dim);
    scale *= ms * ms;
  }
  // DeepSeek's apply_rotary_pos_emb first de-interleaves the rope dims
  // (view(d/2, 2).transpose), then applies rotate_half. Both q and k get the
  // same permutation, so their dot product is that of the stored order.
  auto rope_deinterleaved = [&](double* x, int64_t pos) {
    Vec d(rope);
    for (size_t i = 0; i < rope / 2; ++i) d[i] = x[2 * i], d[i + rope / 2] = x[2 * i + 1];
    rotate_half(d.data(), pos, inv_freq, rope_mscale);
    std::copy(d.begin(), d.end(), x);
  };
  // keys[h][t] = [k_nope (nope), k_pe (rope)], vals[h][t] (vd).
  std::vector<std::vector<Vec>> keys(nh, std::vector<Vec>(n)), vals(nh, std::vector<Vec>(n));
  std::vector<Vec> q(n);
  for (size_t t = 0; t < n; ++t) {
    if (has(blk(l, "attn_q_a.weight"))) {
      Vec a = mat(blk(l, "attn_q_a.weight")) * xn[t];
      q[t] = mat(blk(l, "attn_q_b.weight")) * rms_norm(a, values(blk(l, "attn_q_a_norm.weight")), c_.rms_eps);
    } else {
      q[t] = mat(blk(l, "attn_q.weight")) * xn[t];
    }
    for (size_t h = 0; h < nh; ++h) rope_deinterleaved(q[t].data() + h * qd + nope, int64_t(t));
    Vec kv = mat(blk(l, "attn_kv_a_mqa.weight")) * xn[t];
    Vec latent = rms_norm(slice(kv, 0, lora), values(blk(l, "attn_kv_a_norm.weight")), c_.rms_eps);
    rope_deinterleaved(kv.data() + lora, int64_t(t));  // k_pe: one rope key shared by all heads
    for (size_t h = 0; h < nh; ++h) {
      // kv_b_proj decompression. k_b[h] is [kv_lora, nope] (kv_b's k rows
      // transposed), so k_nope[j] = sum_i k_b[h][i][j] latent[i]; v_b[h] is
      // [v_dim, kv_lora], so v = v_b[h] latent.
      Mat kb = mat(blk(l, "attn_k_b.weight"), h);
      Vec k(qd, 0.0);
      for (size_t i = 0; i < lora; ++i)
        for (size_t j = 0; j < nope; ++j) k[j] += double(kb.w[i * nope + j]) * latent[i];
      std::copy(kv.begin() + ptrdiff_t(lora), kv.end(), k.begin() + ptrdiff_t(nope));
      keys[h][t] = std::move(k);
      vals[h][t] = mat(blk(l, "attn_v_b.weight"), h) * latent;
    }
  }
  std::vector<Vec> out(n);
  for (size_t t = 0; t < n; ++t) {
    Vec heads(nh * vd);
    for (size_t h = 0; h < nh; ++h) {
      Vec o = attend(slice(q[t], h * qd, qd), keys[h], vals[h], t + 1, scale);
      std::copy(o.begin(), o.end(), heads.begin() + ptrdiff_t(h * vd));
    }
    out[t] = mat(blk(l, "attn_output.weight")) * heads;
  }
  return out;
}

}  // namespace tandem::reference
