// Writes the fuzz seed corpus: small valid GGUF and safetensors files made
// with the writers, small tokenizer.json files, and (when the fixtures are
// present) the fixture tokenizer.json and the fixtures' headers cut short.
//
//   fuzz_make_seeds OUT_DIR [FIXTURES_DIR]
//
// creates OUT_DIR/fuzz_gguf, OUT_DIR/fuzz_safetensors_header and
// OUT_DIR/fuzz_tokenizer_json. tests/fuzz/corpus holds its output.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/formats/gguf.h"
#include "common/formats/safetensors.h"
#include "common/formats/writers.h"
#include "tests/tiny_models.h"

namespace fs = std::filesystem;
using namespace tandem;
using namespace tandem::testing;

namespace {

void write(const fs::path& p, std::span<const std::byte> b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
  std::cout << p.string() << " (" << b.size() << " bytes)\n";
}

void write_text(const fs::path& p, std::string_view s) {
  write(p, std::as_bytes(std::span(s.data(), s.size())));
}

std::vector<std::byte> read_prefix(const fs::path& p, size_t n) {
  std::ifstream in(p, std::ios::binary);
  std::vector<std::byte> b(n);
  in.read(reinterpret_cast<char*>(b.data()), std::streamsize(n));
  b.resize(size_t(in.gcount()));
  return b;
}

// The fixture GGUF's bytes up to the data section plus a little data.
std::vector<std::byte> gguf_header(const fs::path& p) {
  GgufFile f = GgufFile::open(p.string());
  return read_prefix(p, f.data_offset() + 256);
}

// The fixture safetensors' length prefix and JSON header (no data).
std::vector<std::byte> safetensors_header(const fs::path& p) {
  auto len = read_prefix(p, 8);
  uint64_t n = 0;
  std::memcpy(&n, len.data(), 8);
  return read_prefix(p, 8 + n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fuzz_make_seeds OUT_DIR [FIXTURES_DIR]\n";
    return 2;
  }
  try {
    const fs::path out = argv[1];
    const fs::path gguf = out / "fuzz_gguf", st = out / "fuzz_safetensors_header",
                   tok = out / "fuzz_tokenizer_json";
    for (const auto& d : {gguf, st, tok}) fs::create_directories(d);

    write(gguf / "small_all_types.gguf", small_gguf());
    write(gguf / "tiny_qwen3moe.gguf", tiny_qwen3moe_gguf());
    TinyModel llama;
    llama.arch = "llama";
    write(gguf / "tiny_mixtral.gguf", tiny_moe_gguf(llama));
    write(gguf / "tiny_deepseek2.gguf", tiny_deepseek2_gguf());
    GgufWriter empty;
    write(gguf / "empty.gguf", empty.to_bytes());

    write(st / "small.safetensors", small_safetensors());
    SafetensorsWriter one;
    one.add_tensor("w", DType::kF32, {2}, std::vector<std::byte>(8));
    write(st / "one.safetensors", one.to_bytes());

    write_text(tok / "small_bpe.json", R"({"version": "1.0",
 "added_tokens": [{"id": 7, "content": "<|end|>", "single_word": false, "lstrip": false,
   "rstrip": false, "normalized": false, "special": true}],
 "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
 "post_processor": null, "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "dropout": null, "unk_token": "a", "byte_fallback": false,
   "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false,
   "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3, "abc": 4, "\u0120": 5, "\u0120c": 6},
   "merges": ["a b", "ab c", "\u0120 c"]}})");
    write_text(tok / "pairs_bpe.json", R"({"model": {"type": "BPE",
   "vocab": {"a": 0, "b": 1, "ab": 2, "a b": 3, "a ba b": 4},
   "merges": [["a", "b"], ["a b", "a b"]]},
 "added_tokens": [{"id": 9, "content": "<s>", "special": true}]})");
    write_text(tok / "unigram.json", R"({"model": {"type": "Unigram", "unk_id": 1,
   "vocab": [["<s>", 0.0], ["<unk>", 0.0], ["\u2581a", -1.5]], "byte_fallback": true}})");
    write_text(tok / "wordpiece.json", R"({"model": {"type": "WordPiece", "unk_token": "[UNK]",
   "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
   "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}})");

    if (argc > 2 && fs::is_directory(argv[2])) {
      const fs::path fx = argv[2];
      fs::copy_file(fx / "qwen3moe/hf/tokenizer.json", tok / "fixture_tokenizer.json",
                    fs::copy_options::overwrite_existing);
      fs::permissions(tok / "fixture_tokenizer.json", fs::perms::owner_write,
                      fs::perm_options::add);
      write(gguf / "fixture_qwen3moe_header.gguf", gguf_header(fx / "qwen3moe/model-q4_k_m.gguf"));
      write(gguf / "fixture_deepseek3_header.gguf",
            gguf_header(fx / "deepseek3/model-q4_k_m.gguf"));
      write(st / "fixture_deepseek3_fp8_header.safetensors",
            safetensors_header(fx / "deepseek3-fp8/hf/model.safetensors"));
      write(st / "fixture_qwen2moe_header.safetensors",
            safetensors_header(fx / "qwen2moe/hf/model.safetensors"));
    }
  } catch (const std::exception& e) {
    std::cerr << "fuzz_make_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
