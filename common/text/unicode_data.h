// Internal: the tables generated into unicode_data.cpp by
// tools/gen_unicode_tables.mjs. Only unicode.cpp reads them; everything else
// goes through common/text/unicode.h.
#pragma once

#include <cstdint>
#include <span>

namespace tandem::text::detail {

// Full decomposition of `cp`: pool[offset, offset + length).
struct Decomposition {
  char32_t cp;
  uint16_t offset;
  uint8_t length;
};

// Canonical composition first + second -> composite.
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

struct UnicodeTables {
  // (first << 8) | GeneralCategory index, one entry per run, by first.
  std::span<const uint32_t> category_runs;
  // Inclusive [first, last] pairs, flattened, sorted, disjoint.
  std::span<const uint32_t> white_space;
  std::span<const uint32_t> alphabetic;
  std::span<const uint32_t> lowercase;
  std::span<const uint32_t> uppercase;
  // [code point, simple case folding] pairs, flattened, by code point; only
  // code points that fold to another one.
  std::span<const uint32_t> simple_case_folding;
  // (first << 8) | canonical combining class, one entry per run, by first.
  std::span<const uint32_t> combining_class_runs;
  std::span<const char32_t> decomposition_pool;
  // Code points whose NFD differs from themselves (Hangul syllables excluded).
  std::span<const Decomposition> canonical;
  // Code points whose NFKD differs from their NFD.
  std::span<const Decomposition> compatibility;
  // By (first, second).
  std::span<const Composition> compositions;
};

extern const char kUnicodeVersion[];
extern const UnicodeTables kTables;

}  // namespace tandem::text::detail
