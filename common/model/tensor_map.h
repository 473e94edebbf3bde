// The tensor map: every weight of a model under one canonical name and shape,
// whichever format it came from. Canonical names follow GGUF's (`blk.N.attn_q.weight`)
// with row-major shapes ([out, in] for matrices; routed experts stacked as
// [n_experts, out, in]; MLA's k_b as [heads, kv_lora, nope] and v_b as
// [heads, v_dim, kv_lora], the orientation the absorbed attention multiplies by).
// q/k rows are in Hugging Face order (NEOX-style rotary halves) for every
// architecture: llama-arch GGUF's permuted rows are gathered back.
//
// A canonical tensor is a stack of pieces; a piece selects rows of one source
// matrix (optionally transposed). Where the map is the identity the tensor is
// zero-copy; read_f32() materialises any tensor as canonical F32.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/model/config.h"

namespace tandem {

class GgufFile;
class SafetensorsModel;

// A 2-D row-major view of one source tensor's bytes.
struct SourceMatrix {
  std::string file;
  std::string tensor;
  DType dtype;
  uint64_t rows = 0, cols = 0;
  std::span<const std::byte> data;
  // FP8 checkpoints: one scale per block of block_rows x block_cols, multiplied in.
  std::span<const std::byte> scale;
  DType scale_dtype = DType::kF32;
  uint32_t block_rows = 0, block_cols = 0;

  size_t row_bytes() const;
  std::span<const std::byte> row(uint64_t r) const;
};

struct TensorPiece {
  const SourceMatrix* src = nullptr;
  uint64_t first_row = 0, n_rows = 0;  // a contiguous row range ...
  std::vector<uint32_t> gather;        // ... or, if non-empty, these rows in this order
  bool transpose = false;              // emit the selection's transpose

  uint64_t out_rows() const;           // rows this piece contributes
  uint64_t out_cols() const;
};

struct MappedTensor {
  std::string name;
  std::vector<uint64_t> shape;  // canonical row-major
  DType dtype;                  // source storage type
  std::vector<TensorPiece> pieces;
  uint64_t n_elems() const;
  // True when the canonical tensor is exactly the bytes of one source tensor.
  bool zero_copy() const;
  // Where it comes from, for inspect: "file:tensor[rows...]" per piece.
  std::string origin() const;
};

// Canonical name and shape of every tensor the config implies.
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  int layer = -1;  // -1 for global tensors
};
std::vector<TensorSpec> expected_tensors(const ModelConfig& c);

class TensorMap {
 public:
  const std::vector<MappedTensor>& tensors() const { return tensors_; }
  const MappedTensor* find(const std::string& name) const;
  const MappedTensor& at(const std::string& name) const;  // throws kNotFound
  // Source tensors no canonical tensor uses (e.g. DeepSeek's MTP layer).
  const std::vector<std::string>& unused() const { return unused_; }

  // Builders. Throw Error naming the file and tensor when a required tensor is
  // missing, has the wrong shape or type, or a scale does not fit its weight.
  static TensorMap from_gguf(const ModelConfig& c, const GgufFile& f);
  static TensorMap from_hf(const ModelConfig& c, const SafetensorsModel& m);

 private:
  void add(MappedTensor t);
  std::vector<std::unique_ptr<SourceMatrix>> sources_;
  std::vector<MappedTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<std::string> unused_;
  friend class TensorMapBuilder;
};

// Dequantises (and applies FP8 block scales, row gathers and transposes) into
// out, which must hold n_elems() floats.
void read_f32(const MappedTensor& t, std::span<float> out);
std::vector<float> read_f32(const MappedTensor& t);

}  // namespace tandem
