// Shared machinery of TensorMap::from_gguf and TensorMap::from_hf: owns the
// source views, checks every canonical tensor against its spec and records
// which source tensors were used. Internal to common/model.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/model/tensor_map.h"

namespace tandem {

class TensorMapBuilder {
 public:
  TensorMapBuilder(const ModelConfig& c, std::string source) : c_(c), source_(std::move(source)) {}

  // A view of one source tensor as [rows, cols] with cols = its last dimension.
  SourceMatrix* matrix(const std::string& file, const std::string& tensor, DType dtype,
                       const std::vector<uint64_t>& shape, std::span<const std::byte> data);

  // Records a source tensor consumed without a view of its own (FP8 scales).
  void mark_used(const std::string& tensor) { used_.insert(tensor); }

  // Adds a canonical tensor made of pieces, checking sizes and types.
  void add(const TensorSpec& spec, std::vector<TensorPiece> pieces);
  void add_whole(const TensorSpec& spec, SourceMatrix* m, const std::vector<uint64_t>& src_shape);

  // MLA: k_b/v_b from a fused kv_b [heads * (nope + v), kv_lora] matrix.
  std::vector<TensorPiece> split_kv_b(SourceMatrix* kv_b, bool want_k) const;
  // llama-arch GGUF: rows that undo convert_hf_to_gguf's q/k permutation.
  static std::vector<uint32_t> unpermute_rows(uint64_t rows, uint32_t n_heads);

  TensorMap finish(const std::vector<std::string>& all_source_tensors);

  const ModelConfig& config() const { return c_; }
  const std::string& source() const { return source_; }

 private:
  const ModelConfig& c_;
  std::string source_;
  TensorMap map_;
  std::set<std::string> used_;
};

// The layer-local part of a canonical name: "blk.3.attn_q.weight" -> "attn_q.weight".
std::string layer_suffix(const TensorSpec& spec);

}  // namespace tandem
