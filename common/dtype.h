// Element types of model weights, in every format Tandem reads. A quantised
// type stores blocks of `block_elems` values in `block_bytes` bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP FP8 E4M3 (finite-only "fn" variant used by DeepSeek-V3)
  kI8,
  kU8,
  kI32,
  kQ4_0,
  kQ8_0,
  kQ5_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
};
inline constexpr int kDTypeCount = 14;

struct DTypeInfo {
  std::string_view name;  // Tandem's name, e.g. "q4_k", "bf16"
  uint32_t block_elems;   // values per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
  int ggml_type;          // GGUF tensor type id, -1 if GGUF has none
  std::string_view safetensors_name;  // "" if safetensors has none
  bool is_float;          // plain float type (no blocks)
};

const DTypeInfo& info(DType t);
inline std::string_view name(DType t) { return info(t).name; }

// Bytes needed for n elements; nullopt if n is not a whole number of blocks
// or the size overflows.
std::optional<uint64_t> bytes_for(DType t, uint64_t n_elems);

std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::optional<DType> dtype_from_name(std::string_view name);
// llama.cpp's name of a GGUF type id (for error messages), "type N" if unknown.
std::string_view ggml_type_name(uint32_t ggml_type);

}  // namespace tandem
