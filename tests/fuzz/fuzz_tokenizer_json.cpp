// libFuzzer target: parse_tokenizer_json on the input. Only tandem::Error may
// escape; anything else is a finding. On success the spec's invariants are
// checked (every vocab entry and added token is found by text and by id).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "common/text/tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  TokenizerLimits limits;
  limits.max_ids = 1u << 16;  // keeps single inputs fast; the checks are the same
  try {
    TokenizerSpec s = parse_tokenizer_json(text, "fuzz.tokenizer.json", limits);
    for (const auto& [tok, id] : s.vocab)
      if (id >= s.n_ids() || s.id_to_token[id] != tok) __builtin_trap();
    for (const auto& t : s.added_tokens)
      if (t.id >= s.n_ids() || s.id_to_token[t.id] != t.content || !s.find(t.content))
        __builtin_trap();
    for (const auto& [a, b] : s.merges)
      if (!s.vocab.count(a) || !s.vocab.count(b)) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
