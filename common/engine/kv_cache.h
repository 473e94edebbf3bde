// The attention cache of one sequence: per layer, f32 rows per position.
// GQA layers keep K and V (n_kv_heads x head_dim each); MLA layers keep the
// compressed latent plus the rotated rope key (kv_lora + rope dims), which is
// both their key and (its first kv_lora values) their value.
//
// The rows live in one block: owned by the cache, or lent by the caller
// (a shared-memory file that outlives the process: a gpu worker's caches,
// services/gpu_worker/kv_file.h). Layer l's keys come first, then its values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/model/config.h"

namespace tandem::engine {

class KvCache {
 public:
  // Owns its rows (zeroed).
  KvCache(const ModelConfig& c, int64_t max_positions);
  // Over `storage` (floats_for(c, max_positions) floats, kept alive by the
  // caller), holding `size` positions already.
  KvCache(const ModelConfig& c, int64_t max_positions, std::span<float> storage, int64_t size = 0);
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  // Floats a cache of max_positions needs.
  static size_t floats_for(const ModelConfig& c, int64_t max_positions);

  int64_t size() const { return size_; }          // positions filled
  int64_t capacity() const { return capacity_; }
  int64_t k_width() const { return k_width_; }    // floats per position, keys
  int64_t v_width() const { return v_width_; }    // floats per position, values (0 for MLA)

  float* k(int64_t layer, int64_t pos) { return base_ + layer * layer_floats_ + pos * k_width_; }
  float* v(int64_t layer, int64_t pos) { return base_ + layer * layer_floats_ + capacity_ * k_width_ + pos * v_width_; }
  const float* k(int64_t layer, int64_t pos) const { return const_cast<KvCache*>(this)->k(layer, pos); }
  const float* v(int64_t layer, int64_t pos) const { return const_cast<KvCache*>(this)->v(layer, pos); }

  // Called by the model after a batch wrote its rows.
  void advance(int64_t n) { size_ += n; }
  // Forget positions from `pos` on (e.g. to re-run a prompt suffix).
  void truncate(int64_t pos);

 private:
  void set_widths(const ModelConfig& c);
  int64_t size_ = 0, capacity_;
  int64_t k_width_ = 0, v_width_ = 0, layer_floats_ = 0;
  std::vector<float> own_;
  float* base_ = nullptr;
};

}  // namespace tandem::engine
