// Internals shared by the generator's sources: weight rows, tensor producers
// (plain, quantised, FP8 with block scales), progress and the two writers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "common/formats/writers.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::genmodel {

// Fast generator of one canonical tensor's values.
class WeightGen {
 public:
  WeightGen(uint64_t seed, const TensorSpec& spec);
  float at(uint64_t index) const;
  // Canonical row r (cols() values).
  void row(uint64_t r, float* out) const;
  uint64_t cols() const { return cols_; }

 private:
  uint64_t key_;
  double mean_, std_;
  uint64_t cols_;
};

// Fills out (one row of a stored tensor, `cols` floats) for stored row `row`.
using RowFn = std::function<void(uint64_t row, float* out)>;

// Progress on stderr while writing: bytes produced, percentage and rate.
class Progress {
 public:
  Progress(uint64_t total_bytes, bool enabled);
  void add(uint64_t bytes);
  void finish();

 private:
  void print(bool final);
  uint64_t total_;
  bool enabled_;
  bool tty_;  // redraw one line; otherwise a line every few seconds
  std::atomic<uint64_t> done_{0};
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, last_;
};

// Shared state of one generate() call.
struct GenContext {
  const GenOptions& opt;
  unsigned threads;
  Progress* progress = nullptr;
};

// A tensor of `rows` x `cols` stored as dtype (any plain or block type).
TensorProducer row_producer(const GenContext& g, DType dtype, uint64_t rows, uint64_t cols,
                            RowFn fn);
// FP8 E4M3 weight and its F32 scale_inv [ceil(rows/b), ceil(cols/b)]:
// scale = block amax / 448, weight = round(w / scale). Either may run first.
struct Fp8Producers {
  TensorProducer weight, scale;
};
Fp8Producers fp8_producers(const GenContext& g, uint64_t rows, uint64_t cols, uint32_t block,
                           RowFn fn);

// Canonical tensors in llama.cpp's conversion order (per layer: attention,
// then FFN, exp_probs_b last).
std::vector<TensorSpec> ordered_specs(const ModelConfig& c);
// "blk.3.attn_q.weight" -> "attn_q.weight"
std::string suffix_of(const TensorSpec& spec);

// Producers read g.progress when they run, so the writers set it up once the
// total size is known.
std::vector<std::string> write_gguf(GenContext& g, const Tokenizer& tok, const std::string& path,
                                    uint64_t& tensor_bytes);
std::vector<std::string> write_hf(GenContext& g, const Tokenizer& tok, const std::string& dir,
                                  uint64_t& tensor_bytes);

// Tokenizer metadata as convert_hf_to_gguf.py writes it (tokens padded to
// vocab_size with [PAD<i>]).
void add_gguf_tokenizer(GgufWriter& w, const Tokenizer& tok, uint32_t vocab_size);
// tokenizer.json and tokenizer_config.json of an HF directory.
std::string hf_tokenizer_json(const Tokenizer& tok);
std::string hf_tokenizer_config_json(const Tokenizer& tok, uint32_t max_positions);

// config.json (the keys config_from_hf_json reads, per architecture, with a
// quantization_config for FP8) and generation_config.json.
std::string hf_config_json(const ModelConfig& c, DType dtype);
std::string hf_generation_config_json(const ModelConfig& c);

// Writes `data` to path via path.tmp + rename.
void write_text_file(const std::string& path, const std::string& data);

// A float as the shortest decimal that reads back as the same float, as a
// double (so JSON shows 1e-06, not 9.999999974752427e-07).
double nice(float f);

}  // namespace tandem::genmodel
