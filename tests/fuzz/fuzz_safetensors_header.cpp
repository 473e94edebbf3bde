// libFuzzer target: SafetensorsFile::parse on the input (length prefix, JSON
// header, data). Only tandem::Error may escape; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/error.h"
#include "common/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    SafetensorsFile f = SafetensorsFile::parse(bytes, "fuzz.safetensors");
    // The views must lie inside the input and be found by name.
    volatile std::byte sink{};
    for (const auto& t : f.tensors()) {
      if (!t.data.empty()) sink = t.data.front() ^ t.data.back();
      if (f.find(t.name) != &t) __builtin_trap();
    }
    (void)sink;
  } catch (const Error&) {
  }
  return 0;
}
