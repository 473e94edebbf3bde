// Small model files built in memory with the writers, for the corruption
// suite and the fuzz seed corpus: a GGUF holding every kind of header field,
// tiny but complete MoE models (each maps through TensorMap without error)
// and a small safetensors file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::testing {

// A GGUF with every kind of header field: scalars, a string, a string array,
// an int array, a nested array, alignment 64, three tensors (f32, q8_0, q4_k).
std::vector<std::byte> small_gguf();

// A tiny MoE GGUF (f32 weights from a seed): vocab 16, hidden 8, 1 layer,
// 2 heads / 1 kv head of head_dim, 2 experts of 4.
struct TinyModel {
  std::string arch = "qwen3moe";  // or "llama" (Mixtral layout, no q/k norms)
  uint32_t head_dim = 4;
  std::optional<uint32_t> rope_dims;
  uint32_t alignment = 32;
};
std::vector<std::byte> tiny_moe_gguf(const TinyModel& m);
inline std::vector<std::byte> tiny_qwen3moe_gguf() {
  return tiny_moe_gguf({});
}

// A tiny DeepSeek-V3 layout (deepseek2 architecture): MLA without q LoRA, a
// leading dense layer, sigmoid routing with a correction bias, grouped top-k,
// a shared expert; layer 0 keeps the fused attn_kv_b, layer 1 the split k_b/v_b.
std::vector<std::byte> tiny_deepseek2_gguf();

// A small safetensors file: BF16, F32 and an FP8 weight with its block scale.
std::vector<std::byte> small_safetensors();

}  // namespace tandem::testing
