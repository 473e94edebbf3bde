#include "common/engine/model.h"

#include <cmath>
#include <cstring>

#include "common/engine/model_layer.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "kernels/cpu/dequant.h"

namespace tandem::engine {

Model::Model(const ModelSource& src, kernels::CpuIsa isa)
    : Model(src.config(), ModelWeights::prepare(src), isa) {}

Model::Model(const ModelConfig& config, ModelWeights weights, kernels::CpuIsa isa)
    : config_(config), weights_(std::move(weights)), linear_(isa) {
  init_layers();
}

void Model::init_layers() {
  const ModelConfig& c = config_;
  embed_ = &weights_.at("token_embd.weight");
  out_norm_ = &weights_.at("output_norm.weight");
  head_ = &weights_.at("output.weight");
  auto get = [&](uint32_t l, const char* n) { return weights_.find(fmt::format("blk.{}.{}", l, n)); };
  layers_.resize(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[l];
    L.attn_norm = get(l, "attn_norm.weight");
    L.ffn_norm = get(l, "ffn_norm.weight");
    L.wq = get(l, "attn_q.weight");
    L.wk = get(l, "attn_k.weight");
    L.wv = get(l, "attn_v.weight");
    L.wo = get(l, "attn_output.weight");
    L.bq = get(l, "attn_q.bias");
    L.bk = get(l, "attn_k.bias");
    L.bv = get(l, "attn_v.bias");
    L.q_norm = get(l, "attn_q_norm.weight");
    L.k_norm = get(l, "attn_k_norm.weight");
    L.wq_a = get(l, "attn_q_a.weight");
    L.q_a_norm = get(l, "attn_q_a_norm.weight");
    L.wq_b = get(l, "attn_q_b.weight");
    L.wkv_a = get(l, "attn_kv_a_mqa.weight");
    L.kv_a_norm = get(l, "attn_kv_a_norm.weight");
    L.k_b = get(l, "attn_k_b.weight");
    L.v_b = get(l, "attn_v_b.weight");
    L.moe = c.is_moe_layer(l);
    L.gate = get(l, "ffn_gate.weight");
    L.up = get(l, "ffn_up.weight");
    L.down = get(l, "ffn_down.weight");
    L.router = get(l, "ffn_gate_inp.weight");
    L.router_bias = get(l, "exp_probs_b.bias");
    L.gate_exps = get(l, "ffn_gate_exps.weight");
    L.up_exps = get(l, "ffn_up_exps.weight");
    L.down_exps = get(l, "ffn_down_exps.weight");
    L.gate_sh = get(l, "ffn_gate_shexp.weight");
    L.up_sh = get(l, "ffn_up_shexp.weight");
    L.down_sh = get(l, "ffn_down_shexp.weight");
    L.gate_inp_sh = get(l, "ffn_gate_inp_shexp.weight");
  }
  if (c.mla) {
    // DeepSeek moves YaRN's magnitude scaling out of the rotation and into the
    // softmax scale (mscale^2); the rotation keeps HF's mscale ratio only.
    const RopeConfig& r = c.rope;
    bool yarn = r.scaling == RopeScaling::kYarn && r.factor > 1.0f;
    float attn_factor = 1.0f, m = 1.0f;
    if (yarn) {
      m = yarn_mscale(r.factor, r.mscale_all_dim);
      attn_factor = yarn_mscale(r.factor, r.mscale) / m / (1.0f + 0.1f * std::log(r.factor));
    }
    rope_ = std::make_unique<Rope>(r, RopeStyle::kInterleaved, attn_factor);
    kq_scale_ = m * m / std::sqrt(float(c.mla->qk_nope_head_dim + c.mla->qk_rope_head_dim));
  } else {
    rope_ = std::make_unique<Rope>(c.rope, c.arch == Arch::kMixtral ? RopeStyle::kLlamaGguf : RopeStyle::kNeox);
    kq_scale_ = 1.0f / std::sqrt(float(c.head_dim));
  }
}

Model::~Model() = default;

std::vector<float> Model::forward(std::span<const uint32_t> tokens, KvCache& cache) {
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return {};
  const Sequence one{tokens, &cache};
  std::vector<float> x, xn;
  run_layers(std::span(&one, 1), x, xn);
  std::vector<float> logits(size_t(n) * config_.vocab_size);
  linear_(head_->matrix(), xn.data(), n, logits.data());
  return logits;
}

std::vector<float> Model::forward_last(std::span<const Sequence> batch) {
  const int64_t H = config_.hidden;
  std::vector<float> x, xn;
  run_layers(batch, x, xn);
  // The head only for each sequence's last row.
  std::vector<float> last(batch.size() * size_t(H));
  int64_t row = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    row += int64_t(batch[s].tokens.size());
    std::memcpy(last.data() + s * size_t(H), xn.data() + (row - 1) * H, sizeof(float) * size_t(H));
  }
  std::vector<float> logits(batch.size() * config_.vocab_size);
  linear_(head_->matrix(), last.data(), int64_t(batch.size()), logits.data());
  return logits;
}

void Model::run_layers(std::span<const Sequence> batch, std::vector<float>& x, std::vector<float>& xn) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden;
  int64_t n = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const Sequence& q = batch[s];
    if (!q.cache) fail(ErrorKind::kInternal, "sequence {} of the batch has no cache", s);
    if (q.tokens.empty()) fail_invalid("sequence {} of the batch has no tokens", s);
    for (size_t r = 0; r < s; ++r)
      if (batch[r].cache == q.cache) fail(ErrorKind::kInternal, "sequences {} and {} share a cache", r, s);
    if (q.cache->size() + int64_t(q.tokens.size()) > q.cache->capacity())
      fail(ErrorKind::kInvalidInput, "context full: {} positions cached + {} new > capacity {}",
           q.cache->size(), q.tokens.size(), q.cache->capacity());
    for (uint32_t id : q.tokens)
      if (id >= c.vocab_size) fail_invalid("token id {} is outside the vocabulary (size {})", id, c.vocab_size);
    n += int64_t(q.tokens.size());
  }
  if (n == 0) fail_invalid("the batch is empty");
  x.assign(size_t(n * H), 0.0f);
  xn.assign(size_t(n * H), 0.0f);
  std::vector<float> tmp(size_t(n * H));
  route_margins_.assign(size_t(n), INFINITY);
  const MatrixView& emb = embed_->matrix();
  int64_t t = 0;
  for (const Sequence& q : batch)
    for (uint32_t id : q.tokens)
      kernels::dequantize_generic(emb.dtype, emb.data + id * emb.row_stride, x.data() + t++ * H, size_t(H));
  for (int64_t l = 0; l < int64_t(layers_.size()); ++l) {
    const Layer& L = layers_[size_t(l)];
    for (t = 0; t < n; ++t)
      rms_norm(x.data() + t * H, L.attn_norm->values(), xn.data() + t * H, H, c.rms_eps);
    int64_t row = 0;
    for (const Sequence& q : batch) {
      const int64_t m = int64_t(q.tokens.size()), pos0 = q.cache->size();
      const float* in = xn.data() + row * H;
      float* out = tmp.data() + row * H;
      if (c.mla) attention_mla(L, l, in, m, pos0, *q.cache, out);
      else attention_gqa(L, l, in, m, pos0, *q.cache, out);
      row += m;
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    for (t = 0; t < n; ++t)
      rms_norm(x.data() + t * H, L.ffn_norm->values(), xn.data() + t * H, H, c.rms_eps);
    if (L.moe) moe_ffn(L, l, xn.data(), n, tmp.data());
    else dense_ffn(L, xn.data(), n, tmp.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
  }
  for (const Sequence& q : batch) q.cache->advance(int64_t(q.tokens.size()));
  for (t = 0; t < n; ++t)
    rms_norm(x.data() + t * H, out_norm_->values(), xn.data() + t * H, H, c.rms_eps);
}

void Model::dense_ffn(const Layer& L, const float* xn, int64_t n, float* out) {
  const MatrixView &g = L.gate->matrix(), &u = L.up->matrix(), &d = L.down->matrix();
  std::vector<float> a(size_t(n * g.rows)), b(size_t(n * u.rows));
  linear_(g, xn, n, a.data());
  linear_(u, xn, n, b.data());
  for (int64_t t = 0; t < n; ++t) swiglu(a.data() + t * g.rows, b.data() + t * g.rows, g.rows);
  linear_(d, a.data(), n, out);
}

}  // namespace tandem::engine
