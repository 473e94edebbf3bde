// The attention cache of one sequence: per layer, f32 rows per position.
// GQA layers keep K and V (n_kv_heads x head_dim each); MLA layers keep the
// compressed latent plus the rotated rope key (kv_lora + rope dims), which is
// both their key and (its first kv_lora values) their value.
#pragma once

#include <cstdint>
#include <vector>

#include "common/model/config.h"

namespace tandem::engine {

class KvCache {
 public:
  KvCache(const ModelConfig& c, int64_t max_positions);

  int64_t size() const { return size_; }          // positions filled
  int64_t capacity() const { return capacity_; }
  int64_t k_width() const { return k_width_; }    // floats per position, keys
  int64_t v_width() const { return v_width_; }    // floats per position, values (0 for MLA)

  float* k(int64_t layer, int64_t pos) { return k_[size_t(layer)].data() + pos * k_width_; }
  float* v(int64_t layer, int64_t pos) { return v_[size_t(layer)].data() + pos * v_width_; }
  const float* k(int64_t layer, int64_t pos) const { return k_[size_t(layer)].data() + pos * k_width_; }
  const float* v(int64_t layer, int64_t pos) const { return v_[size_t(layer)].data() + pos * v_width_; }

  // Called by the model after a batch wrote its rows.
  void advance(int64_t n) { size_ += n; }
  // Forget positions from `pos` on (e.g. to re-run a prompt suffix).
  void truncate(int64_t pos);

 private:
  int64_t size_ = 0, capacity_;
  int64_t k_width_, v_width_;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace tandem::engine
