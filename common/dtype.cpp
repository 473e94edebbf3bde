#include "common/dtype.h"

#include <array>
#include <string>

namespace tandem {
namespace {

// Indexed by DType. Block sizes follow ggml's definitions (QK_K = 256).
constexpr std::array<DTypeInfo, kDTypeCount> kInfo = {{
    {"f32", 1, 4, 0, "F32", true},
    {"f16", 1, 2, 1, "F16", true},
    {"bf16", 1, 2, 30, "BF16", true},
    {"f8_e4m3", 1, 1, -1, "F8_E4M3", true},
    {"i8", 1, 1, 24, "I8", false},
    {"u8", 1, 1, -1, "U8", false},
    {"i32", 1, 4, 26, "I32", false},
    {"q4_0", 32, 18, 2, "", false},
    {"q8_0", 32, 34, 8, "", false},
    {"q5_0", 32, 22, 6, "", false},
    {"q4_k", 256, 144, 12, "", false},
    {"q5_k", 256, 176, 13, "", false},
    {"q6_k", 256, 210, 14, "", false},
    {"q8_k", 256, 292, 15, "", false},
}};

}  // namespace

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

std::optional<uint64_t> bytes_for(DType t, uint64_t n) {
  const auto& i = info(t);
  if (n % i.block_elems != 0) return std::nullopt;
  uint64_t blocks = n / i.block_elems;
  if (blocks > UINT64_MAX / i.block_bytes) return std::nullopt;
  return blocks * i.block_bytes;
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  for (size_t k = 0; k < kInfo.size(); ++k)
    if (kInfo[k].ggml_type == static_cast<int>(ggml_type)) return static_cast<DType>(k);
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  if (name.empty()) return std::nullopt;
  for (size_t k = 0; k < kInfo.size(); ++k)
    if (kInfo[k].safetensors_name == name) return static_cast<DType>(k);
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t k = 0; k < kInfo.size(); ++k)
    if (kInfo[k].name == name) return static_cast<DType>(k);
  return std::nullopt;
}

std::string_view ggml_type_name(uint32_t t) {
  static constexpr std::string_view kNames[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", "Q4_2(removed)", "Q4_3(removed)", "Q5_0", "Q5_1",
      "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4(removed)",
      "Q4_0_4_8(removed)", "Q4_0_8_8(removed)", "TQ1_0", "TQ2_0", "IQ4_NL_4_4(removed)",
      "IQ4_NL_4_8(removed)", "IQ4_NL_8_8(removed)", "MXFP4"};
  if (t < std::size(kNames)) return kNames[t];
  return "unknown";
}

}  // namespace tandem
