#include "common/engine/kv_cache.h"

#include "common/error.h"

namespace tandem::engine {

KvCache::KvCache(const ModelConfig& c, int64_t max_positions) : capacity_(max_positions) {
  if (c.mla) {
    k_width_ = int64_t(c.mla->kv_lora_rank) + c.mla->qk_rope_head_dim;
    v_width_ = 0;
  } else {
    k_width_ = int64_t(c.n_kv_heads) * c.head_dim;
    v_width_ = int64_t(c.n_kv_heads) * c.v_head_dim;
  }
  k_.resize(c.n_layers);
  v_.resize(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    k_[l].resize(size_t(k_width_ * capacity_));
    v_[l].resize(size_t(v_width_ * capacity_));
  }
}

void KvCache::truncate(int64_t pos) {
  if (pos < 0 || pos > size_)
    throw Error(ErrorKind::kInternal, fmt::format("truncate to {} of a cache of {}", pos, size_));
  size_ = pos;
}

}  // namespace tandem::engine
