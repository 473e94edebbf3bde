#include "common/engine/kv_cache.h"

#include "common/error.h"

namespace tandem::engine {

void KvCache::set_widths(const ModelConfig& c) {
  if (c.mla) {
    k_width_ = int64_t(c.mla->kv_lora_rank) + c.mla->qk_rope_head_dim;
    v_width_ = 0;
  } else {
    k_width_ = int64_t(c.n_kv_heads) * c.head_dim;
    v_width_ = int64_t(c.n_kv_heads) * c.v_head_dim;
  }
  layer_floats_ = (k_width_ + v_width_) * capacity_;
}

size_t KvCache::floats_for(const ModelConfig& c, int64_t max_positions) {
  KvCache probe(c, 0);
  return size_t(probe.k_width_ + probe.v_width_) * size_t(max_positions) * c.n_layers;
}

KvCache::KvCache(const ModelConfig& c, int64_t max_positions) : capacity_(max_positions) {
  set_widths(c);
  own_.resize(size_t(layer_floats_) * c.n_layers);
  base_ = own_.data();
}

KvCache::KvCache(const ModelConfig& c, int64_t max_positions, std::span<float> storage, int64_t size)
    : size_(size), capacity_(max_positions) {
  set_widths(c);
  if (storage.size() < size_t(layer_floats_) * c.n_layers || size < 0 || size > max_positions)
    throw Error(ErrorKind::kInternal, fmt::format("a cache of {} positions over {} floats holding {}", max_positions,
                                                  storage.size(), size));
  base_ = storage.data();
}

void KvCache::truncate(int64_t pos) {
  if (pos < 0 || pos > size_)
    throw Error(ErrorKind::kInternal, fmt::format("truncate to {} of a cache of {}", pos, size_));
  size_ = pos;
}

}  // namespace tandem::engine
