// The test-model generator: writes a complete, plausible MoE checkpoint of any
// supported architecture and size as a GGUF file (laid out as llama.cpp's
// convert_hf_to_gguf.py writes it) or a Hugging Face directory (config.json,
// safetensors, optionally sharded or FP8 block-quantised, plus a tokenizer).
//
// Weights are a pure function of (seed, canonical tensor name, element index),
// rounded to bfloat16, so every format of the same seed holds the same numbers:
// after TensorMap mapping, a GGUF f32 file and an HF bf16 directory read back
// bit-identical canonical F32 tensors. Tensor data is produced while writing,
// one tensor at a time, so models larger than memory can be made.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/model/config.h"
#include "common/model/tensor_map.h"

namespace tandem::genmodel {

enum class OutFormat { kGguf, kHf };

struct GenOptions {
  ModelConfig config;  // what to generate; see make_config()
  OutFormat format = OutFormat::kGguf;
  // GGUF: f32 f16 bf16 q8_0 q4_0 q5_0 q4_k q5_k q6_k (applied to weight
  // matrices; norms, biases and routers stay F32 as llama.cpp keeps them).
  // HF: f32 bf16 f8_e4m3 (FP8 with 128x128 block scales).
  DType dtype = DType::kF32;
  uint64_t seed = 0;
  uint64_t shard_bytes = 0;  // HF only: 0 = one model.safetensors
  unsigned threads = 0;      // 0 = all hardware threads
  bool progress = true;      // progress on stderr for outputs over 64 MiB
};

struct GenResult {
  std::vector<std::string> files;  // every file written
  uint64_t bytes = 0;              // their total size
  uint64_t tensor_bytes = 0;       // tensor data alone
  double seconds = 0;
};

// Writes the model: a .gguf file at `out`, or an HF directory `out` (created
// if needed; stale model*.safetensors files in it are removed). Throws Error.
GenResult generate(const GenOptions& o, const std::string& out);

// ---- configs -------------------------------------------------------------

Arch arch_from_name(std::string_view name);  // "qwen3_moe", ... (throws)
std::vector<std::string> preset_names();
// A complete config of `arch` at the preset's sizes ("tiny", "small",
// "default", "<model>-shapes"). Throws on an unknown preset or one that fixes
// a different architecture.
ModelConfig preset_config(Arch arch, std::string_view preset);
// Recomputes what follows from the architecture and the primary sizes
// (MLA head dims, shared-expert sizes, router kind, vocab = tokenizer size
// when 0, ...), then validates. Call after changing sizes of a preset.
void finalize_config(ModelConfig& c);
// The default architecture of a preset, if it names one ("qwen3-30b-a3b-shapes").
std::optional<Arch> preset_arch(std::string_view preset);

// ---- dtypes ---------------------------------------------------------------

// The type a GGUF tensor of this canonical spec gets when `requested` is asked
// for: F32 for 1-D tensors and routers, a fallback for rows that are not whole
// blocks (K-quants: q5_0 or q8_0; 32-blocks: f32).
DType gguf_tensor_dtype(const TensorSpec& spec, DType requested);
// llama.cpp's general.file_type for a requested GGUF dtype.
uint32_t gguf_file_type(DType requested);

// ---- weights --------------------------------------------------------------

// The canonical value of element `index` (row-major, canonical shape) of a
// tensor, already rounded to bf16. Matrices ~ N(0, 1/fan_in), norm weights
// ~ 1 + N(0, 0.1^2), biases ~ N(0, 0.1^2).
float canonical_value(uint64_t seed, const TensorSpec& spec, uint64_t index);
// Elements [first, first + out.size()) of the canonical tensor.
void canonical_fill(uint64_t seed, const TensorSpec& spec, uint64_t first, std::span<float> out);

// ---- tokenizer --------------------------------------------------------------

// A small byte-level BPE vocabulary: the 256 byte symbols (id = byte), a few
// English merges, then <|endoftext|>, <|im_start|>, <|im_end|>.
struct Tokenizer {
  std::vector<std::string> tokens;    // real tokens (no padding)
  std::vector<std::string> merges;    // "left right"
  uint32_t n_special = 0;             // the last n_special tokens are special
  uint32_t eos_id = 0;                // <|im_end|>
  uint32_t pad_id = 0;                // <|endoftext|>
  std::string chat_template;
};
// The tokenizer for a vocabulary of vocab_size entries (0: its natural size):
// merges are dropped to fit a smaller vocabulary; a larger one is padded
// (GGUF: [PAD<i>] tokens; HF: the model's vocab_size only). Throws if
// vocab_size cannot hold the bytes and the special tokens.
Tokenizer make_tokenizer(uint32_t vocab_size);
uint32_t natural_vocab_size();

}  // namespace tandem::genmodel
