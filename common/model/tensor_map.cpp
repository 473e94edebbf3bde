#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/model/tensor_map.h"

#include <numeric>
#include <set>

#include "common/error.h"
#include "common/formats/gguf.h"
#include "common/formats/safetensors.h"
#include "kernels/cpu/dequant.h"

namespace tandem {
namespace {

uint64_t numel(const std::vector<uint64_t>& s) {
  return std::accumulate(s.begin(), s.end(), uint64_t{1}, std::multiplies<>());
}

}  // namespace

size_t SourceMatrix::row_bytes() const { return *bytes_for(dtype, cols); }

std::span<const std::byte> SourceMatrix::row(uint64_t r) const {
  return data.subspan(r * row_bytes(), row_bytes());
}

uint64_t TensorPiece::out_rows() const {
  uint64_t sel = gather.empty() ? n_rows : gather.size();
  return transpose ? src->cols : sel;
}

uint64_t TensorPiece::out_cols() const {
  uint64_t sel = gather.empty() ? n_rows : gather.size();
  return transpose ? sel : src->cols;
}

uint64_t MappedTensor::n_elems() const { return numel(shape); }

bool MappedTensor::zero_copy() const {
  if (pieces.size() != 1) return false;
  const auto& p = pieces[0];
  return p.gather.empty() && !p.transpose && p.first_row == 0 && p.n_rows == p.src->rows &&
         p.src->scale.empty();
}

std::string MappedTensor::origin() const {
  std::string s;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& p = pieces[i];
    if (i == 3 && pieces.size() > 4) {
      s += fmt::format(" ... ({} pieces)", pieces.size());
      break;
    }
    if (i) s += " + ";
    s += p.src->tensor;
    if (!p.gather.empty()) s += "[permuted rows]";
    else if (p.n_rows != p.src->rows) s += fmt::format("[rows {}..{})", p.first_row, p.first_row + p.n_rows);
    if (p.transpose) s += "^T";
    if (!p.src->scale.empty()) s += "*scale";
  }
  return s;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  const uint64_t H = c.hidden, V = c.vocab_size;
  out.push_back({"token_embd.weight", {V, H}});
  out.push_back({"output_norm.weight", {H}});
  out.push_back({"output.weight", {V, H}});
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    int L = int(l);
    auto add = [&](const std::string& n, std::vector<uint64_t> s) {
      out.push_back({fmt::format("blk.{}.{}", l, n), std::move(s), L});
    };
    add("attn_norm.weight", {H});
    add("ffn_norm.weight", {H});
    const uint64_t nh = c.n_heads;
    if (c.mla) {
      const auto& m = *c.mla;
      uint64_t qdim = nh * (m.qk_nope_head_dim + m.qk_rope_head_dim);
      if (m.q_lora_rank) {
        add("attn_q_a.weight", {m.q_lora_rank, H});
        add("attn_q_a_norm.weight", {m.q_lora_rank});
        add("attn_q_b.weight", {qdim, m.q_lora_rank});
      } else {
        add("attn_q.weight", {qdim, H});
      }
      add("attn_kv_a_mqa.weight", {uint64_t(m.kv_lora_rank) + m.qk_rope_head_dim, H});
      add("attn_kv_a_norm.weight", {m.kv_lora_rank});
      add("attn_k_b.weight", {nh, m.kv_lora_rank, m.qk_nope_head_dim});
      add("attn_v_b.weight", {nh, m.v_head_dim, m.kv_lora_rank});
      add("attn_output.weight", {H, nh * m.v_head_dim});
    } else {
      const uint64_t nkv = c.n_kv_heads, hd = c.head_dim, vd = c.v_head_dim;
      add("attn_q.weight", {nh * hd, H});
      add("attn_k.weight", {nkv * hd, H});
      add("attn_v.weight", {nkv * vd, H});
      add("attn_output.weight", {H, nh * vd});
      if (c.qkv_bias) {
        add("attn_q.bias", {nh * hd});
        add("attn_k.bias", {nkv * hd});
        add("attn_v.bias", {nkv * vd});
      }
      if (c.qk_norm) {
        add("attn_q_norm.weight", {hd});
        add("attn_k_norm.weight", {hd});
      }
    }
    if (c.is_moe_layer(l)) {
      const uint64_t E = c.moe.n_experts, F = c.moe.expert_ffn;
      add("ffn_gate_inp.weight", {E, H});
      if (c.moe.score_correction_bias) add("exp_probs_b.bias", {E});
      add("ffn_gate_exps.weight", {E, F, H});
      add("ffn_up_exps.weight", {E, F, H});
      add("ffn_down_exps.weight", {E, H, F});
      if (c.moe.shared_ffn) {
        const uint64_t S = c.moe.shared_ffn;
        add("ffn_gate_shexp.weight", {S, H});
        add("ffn_up_shexp.weight", {S, H});
        add("ffn_down_shexp.weight", {H, S});
      }
      if (c.moe.shared_gate) add("ffn_gate_inp_shexp.weight", {1, H});
    } else {
      const uint64_t F = c.dense_ffn;
      add("ffn_gate.weight", {F, H});
      add("ffn_up.weight", {F, H});
      add("ffn_down.weight", {H, F});
    }
  }
  return out;
}

const MappedTensor* TensorMap::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const MappedTensor& TensorMap::at(const std::string& name) const {
  if (auto* t = find(name)) return *t;
  throw Error(ErrorKind::kNotFound, fmt::format("tensor '{}' is not in the model", name));
}

void TensorMap::add(MappedTensor t) {
  index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
}

void read_f32(const MappedTensor& t, std::span<float> out) {
  if (out.size() != t.n_elems())
    throw Error(ErrorKind::kInternal,
                fmt::format("read_f32({}): buffer holds {} floats, tensor has {}", t.name,
                            out.size(), t.n_elems()));
  float* dst = out.data();
  std::vector<float> tmp;
  for (const auto& p : t.pieces) {
    const SourceMatrix& s = *p.src;
    const uint64_t sel = p.gather.empty() ? p.n_rows : p.gather.size();
    // Rows land either directly in dst or, for a transpose, in tmp first.
    float* rows_out = dst;
    if (p.transpose) {
      tmp.resize(sel * s.cols);
      rows_out = tmp.data();
    }
    std::vector<float> scale_row;
    for (uint64_t i = 0; i < sel; ++i) {
      uint64_t r = p.gather.empty() ? p.first_row + i : p.gather[i];
      float* o = rows_out + i * s.cols;
      kernels::dequantize_generic(s.dtype, s.row(r).data(), o, s.cols);
      if (!s.scale.empty()) {
        uint64_t n_bc = (s.cols + s.block_cols - 1) / s.block_cols;
        scale_row.resize(n_bc);
        size_t esz = info(s.scale_dtype).block_bytes;
        kernels::dequantize_generic(s.scale_dtype, s.scale.data() + (r / s.block_rows) * n_bc * esz,
                                    scale_row.data(), n_bc);
        for (uint64_t c = 0; c < s.cols; ++c) o[c] *= scale_row[c / s.block_cols];
      }
    }
    if (p.transpose)
      for (uint64_t i = 0; i < sel; ++i)
        for (uint64_t c = 0; c < s.cols; ++c) dst[c * sel + i] = tmp[i * s.cols + c];
    dst += sel * s.cols;
  }
}

std::vector<float> read_f32(const MappedTensor& t) {
  std::vector<float> v(t.n_elems());
  read_f32(t, v);
  return v;
}

}  // namespace tandem
