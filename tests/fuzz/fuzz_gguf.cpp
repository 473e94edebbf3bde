// libFuzzer target: GgufFile::parse on the input; on success the model
// mapping too (config_from_gguf, TensorMap::from_gguf, read_f32 of small
// tensors). Only tandem::Error may escape the readers; anything else (another
// exception, a crash, a sanitizer report, a hang, an allocation past the
// limit) is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/error.h"
#include "common/formats/gguf.h"
#include "common/model/config.h"
#include "common/model/tensor_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    GgufFile f = GgufFile::parse(bytes, "fuzz.gguf");
    // Touch every tensor's first and last byte: the views must lie inside the input.
    volatile std::byte sink{};
    for (const auto& t : f.tensors())
      if (!t.data.empty()) sink = t.data.front() ^ t.data.back();
    (void)sink;
    for (const auto& [key, value] : f.metadata()) (void)format_value(value);
    try {
      ModelConfig c = config_from_gguf(f);
      (void)describe(c);
      TensorMap m = TensorMap::from_gguf(c, f);
      for (const auto& t : m.tensors())
        if (t.n_elems() <= (1u << 16)) (void)read_f32(t);
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
  return 0;
}
