#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/model/tensor_map_builder.h"

#include <numeric>

namespace tandem {

std::string layer_suffix(const TensorSpec& spec) {
  if (spec.layer < 0) return spec.name;
  return spec.name.substr(spec.name.find('.', 4) + 1);
}

SourceMatrix* TensorMapBuilder::matrix(const std::string& file, const std::string& tensor,
                                       DType dtype, const std::vector<uint64_t>& shape,
                                       std::span<const std::byte> data) {
  auto m = std::make_unique<SourceMatrix>();
  m->file = file;
  m->tensor = tensor;
  m->dtype = dtype;
  m->cols = shape.empty() ? 1 : shape.back();
  uint64_t n = std::accumulate(shape.begin(), shape.end(), uint64_t{1}, std::multiplies<>());
  m->rows = m->cols ? n / m->cols : 0;
  m->data = data;
  used_.insert(tensor);
  map_.sources_.push_back(std::move(m));
  return map_.sources_.back().get();
}

void TensorMapBuilder::add(const TensorSpec& spec, std::vector<TensorPiece> pieces) {
  uint64_t want = std::accumulate(spec.shape.begin(), spec.shape.end(), uint64_t{1},
                                  std::multiplies<>());
  uint64_t got = 0;
  for (auto& p : pieces) {
    got += p.out_rows() * p.out_cols();
    if (p.out_cols() != spec.shape.back())
      fail_invalid("{}: tensor '{}' (for {}) has rows of {} values, expected {} (shape [{}])",
                   source_, p.src->tensor, spec.name, p.out_cols(), spec.shape.back(),
                   fmt::join(spec.shape, ", "));
    if (p.src->dtype != pieces[0].src->dtype)
      fail_invalid("{}: pieces of '{}' mix types {} and {}", source_, spec.name,
                   name(pieces[0].src->dtype), name(p.src->dtype));
  }
  if (got != want)
    fail_invalid("{}: tensor '{}' from {} has {} values but the config implies shape [{}] ({} "
                 "values)",
                 source_, spec.name, pieces.empty() ? "?" : pieces[0].src->tensor, got,
                 fmt::join(spec.shape, ", "), want);
  MappedTensor t;
  t.name = spec.name;
  t.shape = spec.shape;
  t.dtype = pieces.at(0).src->dtype;
  t.pieces = std::move(pieces);
  map_.add(std::move(t));
}

void TensorMapBuilder::add_whole(const TensorSpec& spec, SourceMatrix* m,
                                 const std::vector<uint64_t>& src_shape) {
  // Same values, same order: the shapes may differ only by leading 1s
  // (GGUF stores qwen2's shared-expert gate as [H], HF as [1, H]).
  auto squeeze = [](std::vector<uint64_t> s) {
    while (s.size() > 1 && s.front() == 1) s.erase(s.begin());
    return s;
  };
  if (squeeze(src_shape) != squeeze(spec.shape))
    fail_invalid("{}: tensor '{}' has shape [{}] but the config implies [{}] for {}", source_,
                 m->tensor, fmt::join(src_shape, ", "), fmt::join(spec.shape, ", "), spec.name);
  add(spec, {TensorPiece{m, 0, m->rows, {}, false}});
}

std::vector<TensorPiece> TensorMapBuilder::split_kv_b(SourceMatrix* kv_b, bool want_k) const {
  const auto& mla = *c_.mla;
  const uint64_t per_head = uint64_t(mla.qk_nope_head_dim) + mla.v_head_dim;
  if (kv_b->rows != c_.n_heads * per_head || kv_b->cols != mla.kv_lora_rank)
    fail_invalid("{}: '{}' is [{}, {}], expected [{}, {}] (heads x (nope + v), kv_lora)", source_,
                 kv_b->tensor, kv_b->rows, kv_b->cols, c_.n_heads * per_head, mla.kv_lora_rank);
  std::vector<TensorPiece> pieces;
  for (uint64_t h = 0; h < c_.n_heads; ++h) {
    if (want_k)  // k part [nope, kv_lora] per head, transposed to [kv_lora, nope]
      pieces.push_back({kv_b, h * per_head, mla.qk_nope_head_dim, {}, true});
    else  // v part [v, kv_lora] per head
      pieces.push_back({kv_b, h * per_head + mla.qk_nope_head_dim, mla.v_head_dim, {}, false});
  }
  return pieces;
}

std::vector<uint32_t> TensorMapBuilder::unpermute_rows(uint64_t rows, uint32_t n_heads) {
  // convert_hf_to_gguf.py permute(): w.reshape(n_head, 2, hd/2, ...).swapaxes(1, 2),
  // so HF row h*hd + j*hd/2 + i is stored at GGUF row h*hd + 2*i + j.
  const uint64_t hd = rows / n_heads, half = hd / 2;
  std::vector<uint32_t> g(rows);
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t h = r / hd, within = r % hd, j = within / half, i = within % half;
    g[r] = uint32_t(h * hd + 2 * i + j);
  }
  return g;
}

TensorMap TensorMapBuilder::finish(const std::vector<std::string>& all) {
  for (auto& n : all)
    if (!used_.count(n)) map_.unused_.push_back(n);
  return std::move(map_);
}

}  // namespace tandem
