// Attention: GQA over an f32 K/V cache, and DeepSeek MLA with absorbed
// k_b/v_b over the compressed-latent cache (as llama.cpp computes it).
#include <cmath>
#include <cstring>

#include "common/engine/flash_attention.h"
#include "common/engine/model_layer.h"

namespace tandem::engine {
namespace {

void add_bias(float* y, const Weight* b, int64_t n, int64_t width) {
  if (!b) return;
  auto v = b->values();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < width; ++i) y[t * width + i] += v[size_t(i)];
}

}  // namespace

void Model::attention_gqa(const Layer& L, int64_t layer, const float* xn, int64_t n, int64_t pos0,
                          KvCache& cache, float* out) {
  const ModelConfig& c = config_;
  const int64_t nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim, vd = c.v_head_dim;
  std::vector<float> q(size_t(n * nh * hd)), k(size_t(n * nkv * hd)), v(size_t(n * nkv * vd));
  linear_(L.wq->matrix(), xn, n, q.data());
  linear_(L.wk->matrix(), xn, n, k.data());
  linear_(L.wv->matrix(), xn, n, v.data());
  add_bias(q.data(), L.bq, n, nh * hd);
  add_bias(k.data(), L.bk, n, nkv * hd);
  add_bias(v.data(), L.bv, n, nkv * vd);
  for (int64_t t = 0; t < n; ++t) {
    float* qt = q.data() + t * nh * hd;
    float* kt = k.data() + t * nkv * hd;
    if (L.q_norm)
      for (int64_t h = 0; h < nh; ++h) rms_norm(qt + h * hd, L.q_norm->values(), qt + h * hd, hd, c.rms_eps);
    if (L.k_norm)
      for (int64_t h = 0; h < nkv; ++h) rms_norm(kt + h * hd, L.k_norm->values(), kt + h * hd, hd, c.rms_eps);
    rope_->apply(qt, nh, hd, pos0 + t);
    rope_->apply(kt, nkv, hd, pos0 + t);
    round_to_fp16(qt, nh * hd);
    float* kc = cache.k(layer, pos0 + t);
    float* vc = cache.v(layer, pos0 + t);
    std::memcpy(kc, kt, sizeof(float) * size_t(nkv * hd));
    std::memcpy(vc, v.data() + t * nkv * vd, sizeof(float) * size_t(nkv * vd));
    round_to_fp16(kc, nkv * hd);  // the cache holds fp16 values (llama.cpp's F16 cast)
    round_to_fp16(vc, nkv * vd);
  }
  std::vector<float> attn(size_t(n * nh * vd));
  const int64_t group = nh / nkv;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      attend({q.data() + (t * nh + h) * hd, cache.k(layer, 0) + g * hd, nkv * hd,
              cache.v(layer, 0) + g * vd, nkv * vd, hd, vd, pos0 + t + 1, kq_scale_,
              attn.data() + (t * nh + h) * vd});
    }
  linear_(L.wo->matrix(), attn.data(), n, out);
}

void Model::attention_mla(const Layer& L, int64_t layer, const float* xn, int64_t n, int64_t pos0,
                          KvCache& cache, float* out) {
  const ModelConfig& c = config_;
  const MlaConfig& m = *c.mla;
  const int64_t nh = c.n_heads, nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim;
  const int64_t lora = m.kv_lora_rank, vd = m.v_head_dim, qd = nope + rope, kw = lora + rope;
  std::vector<float> q(size_t(n * nh * qd));
  if (L.wq_a) {
    const MatrixView& qa = L.wq_a->matrix();
    std::vector<float> a(size_t(n * qa.rows));
    linear_(qa, xn, n, a.data());
    for (int64_t t = 0; t < n; ++t)
      rms_norm(a.data() + t * qa.rows, L.q_a_norm->values(), a.data() + t * qa.rows, qa.rows, c.rms_eps);
    linear_(L.wq_b->matrix(), a.data(), n, q.data());
  } else {
    linear_(L.wq->matrix(), xn, n, q.data());
  }
  std::vector<float> kv(size_t(n * kw));
  linear_(L.wkv_a->matrix(), xn, n, kv.data());
  for (int64_t t = 0; t < n; ++t) {
    float* kvt = kv.data() + t * kw;
    rms_norm(kvt, L.kv_a_norm->values(), kvt, lora, c.rms_eps);
    rope_->apply(kvt + lora, 1, rope, pos0 + t);
    rope_->apply(q.data() + t * nh * qd + nope, nh, qd, pos0 + t);
    std::memcpy(cache.k(layer, pos0 + t), kvt, sizeof(float) * size_t(kw));
    round_to_fp16(cache.k(layer, pos0 + t), kw);
  }
  // Absorb k_b into the query: per head, q_lat = k_b[h] (lora x nope) . q_nope.
  std::vector<float> qn(size_t(n * nope)), qlat(size_t(n * nh * kw)), tmp(size_t(n * lora));
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(qn.data() + t * nope, q.data() + (t * nh + h) * qd, sizeof(float) * size_t(nope));
    linear_(L.k_b->matrix(size_t(h)), qn.data(), n, tmp.data());
    for (int64_t t = 0; t < n; ++t) {
      float* dst = qlat.data() + (t * nh + h) * kw;
      std::memcpy(dst, tmp.data() + t * lora, sizeof(float) * size_t(lora));
      std::memcpy(dst + lora, q.data() + (t * nh + h) * qd + nope, sizeof(float) * size_t(rope));
    }
  }
  round_to_fp16(qlat.data(), n * nh * kw);
  std::vector<float> lat(size_t(n * nh * lora));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < nh; ++h)  // the latent is both key (with rope dims) and value
      attend({qlat.data() + (t * nh + h) * kw, cache.k(layer, 0), kw, cache.k(layer, 0), kw, kw,
              lora, pos0 + t + 1, kq_scale_, lat.data() + (t * nh + h) * lora});
  // Per head, out = v_b[h] (vd x lora) . latent.
  std::vector<float> heads(size_t(n * nh * vd)), lh(size_t(n * lora)), oh(size_t(n * vd));
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(lh.data() + t * lora, lat.data() + (t * nh + h) * lora, sizeof(float) * size_t(lora));
    linear_(L.v_b->matrix(size_t(h)), lh.data(), n, oh.data());
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(heads.data() + (t * nh + h) * vd, oh.data() + t * vd, sizeof(float) * size_t(vd));
  }
  linear_(L.wo->matrix(), heads.data(), n, out);
}

}  // namespace tandem::engine
