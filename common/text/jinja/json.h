// Values to and from JSON, as @huggingface/jinja does it: inputs are taken
// the way JavaScript's JSON.parse and Object.entries() see them (integral
// numbers become integers, integer-like keys come first in ascending order),
// and tojson writes what its toJSON() writes (", " and ": " separators by
// default, non-ASCII kept unless ensure_ascii).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/text/jinja/value.h"

namespace tandem::text::jinja {

struct JsonOptions {
  int64_t indent = 0;  // 0: on one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
  size_t max_bytes = kDefaultMaxBytes;  // longer output fails
};

// Nesting deeper than this is rejected (inputs) or fails (tojson).
inline constexpr int kMaxJsonDepth = 256;

// Throws tandem::Error (kInvalidInput) naming `what` when nesting is too deep.
Value from_json(const nlohmann::ordered_json& j, std::string_view what);

// undefined_as_null: how undefined inside containers is written ("null" for
// tojson, "undefined" when a container is printed).
std::string to_json(const Value& v, const JsonOptions& options, bool undefined_as_null);

}  // namespace tandem::text::jinja
