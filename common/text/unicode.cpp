#include "common/text/unicode.h"

#include <algorithm>
#include <span>

#include "common/text/unicode_data.h"

namespace tandem::text {
namespace {

using detail::kTables;

constexpr char32_t kMaxCodePoint = 0x10FFFF;

// The value of the run containing cp in a (first << 8) | value run table.
uint8_t run_value(std::span<const uint32_t> runs, char32_t cp) {
  const uint32_t key = (static_cast<uint32_t>(cp) << 8) | 0xFFu;
  auto it = std::upper_bound(runs.begin(), runs.end(), key);
  return static_cast<uint8_t>(*(it - 1) & 0xFFu);  // runs[0] starts at 0
}

bool in_ranges(std::span<const uint32_t> pairs, char32_t cp) {
  // pairs = first0, last0, first1, last1...: find the first `last` >= cp.
  size_t lo = 0, hi = pairs.size() / 2;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (pairs[2 * mid + 1] < cp) lo = mid + 1; else hi = mid;
  }
  return lo < pairs.size() / 2 && pairs[2 * lo] <= cp;
}

std::vector<CodePointRange> ranges_of(std::span<const uint32_t> pairs) {
  std::vector<CodePointRange> out;
  out.reserve(pairs.size() / 2);
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) out.push_back({pairs[i], pairs[i + 1]});
  return out;
}

// ---- normalisation ------------------------------------------------------------
// Hangul syllables decompose and compose arithmetically (Unicode ch. 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const detail::Decomposition* find_decomposition(std::span<const detail::Decomposition> table,
                                                char32_t cp) {
  auto it = std::lower_bound(table.begin(), table.end(), cp,
                             [](const detail::Decomposition& d, char32_t c) { return d.cp < c; });
  return it != table.end() && it->cp == cp ? &*it : nullptr;
}

void append_decomposition(std::u32string& out, char32_t cp, bool compatibility) {
  if (cp < 0xA0) {  // nothing below U+00A0 decomposes, canonically or not
    out.push_back(cp);
    return;
  }
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const detail::Decomposition* d = nullptr;
  if (compatibility) d = find_decomposition(kTables.compatibility, cp);
  if (d == nullptr) d = find_decomposition(kTables.canonical, cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  auto pool = kTables.decomposition_pool.subspan(d->offset, d->length);
  out.append(pool.begin(), pool.end());
}

// Canonical ordering: every run of non-starters sorted stably by class.
// Runs are almost always one or two marks long; a stable sort keeps long
// runs (thousands of stacked marks) from going quadratic.
void reorder(std::u32string& s) {
  const size_t n = s.size();
  size_t i = 0;
  std::vector<std::pair<uint8_t, char32_t>> run;
  while (i < n) {
    if (s[i] < 0x300 || canonical_combining_class(s[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && s[j] >= 0x300 && canonical_combining_class(s[j]) != 0) ++j;
    if (j - i > 1) {
      run.clear();
      for (size_t k = i; k < j; ++k) run.emplace_back(canonical_combining_class(s[k]), s[k]);
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < j; ++k) s[k] = run[k - i].second;
    }
    i = j;
  }
}

// The primary composite of first + second, or 0.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  // Every second character of a canonical pair is U+0300 or above: Latin
  // text never reaches the table.
  if (second < 0x300) return 0;
  auto table = kTables.compositions;
  auto it = std::lower_bound(table.begin(), table.end(), std::pair{first, second},
                             [](const detail::Composition& c, std::pair<char32_t, char32_t> k) {
                               return c.first < k.first ||
                                      (c.first == k.first && c.second < k.second);
                             });
  return it != table.end() && it->first == first && it->second == second ? it->composite : 0;
}

// Canonical composition (UAX #15): each character composes with the last
// starter unless a character between them is a starter or has a class >= its
// own. The input is canonically ordered, so the last one in between decides.
void compose(std::u32string& s) {
  size_t starter = std::u32string::npos;
  uint8_t last_class = 0;
  bool any_between = false;
  size_t out = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    const uint8_t cc = c < 0x300 ? 0 : canonical_combining_class(c);
    if (starter != std::u32string::npos && (!any_between || (last_class != 0 && last_class < cc))) {
      if (char32_t composite = compose_pair(s[starter], c); composite != 0) {
        s[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = out;
      any_between = false;
    } else {
      any_between = true;
    }
    last_class = cc;
    s[out++] = c;
  }
  s.resize(out);
}

}  // namespace

const char* to_string(GeneralCategory gc) {
  static constexpr const char* kNames[kGeneralCategoryCount] = {
      "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
      "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  return kNames[static_cast<unsigned>(gc)];
}

GeneralCategory general_category(char32_t cp) {
  if (cp > kMaxCodePoint) return GeneralCategory::kCn;
  return static_cast<GeneralCategory>(run_value(kTables.category_runs, cp));
}

bool is_white_space(char32_t cp) { return in_ranges(kTables.white_space, cp); }
bool is_alphabetic(char32_t cp) { return in_ranges(kTables.alphabetic, cp); }
bool is_lowercase(char32_t cp) { return in_ranges(kTables.lowercase, cp); }
bool is_uppercase(char32_t cp) { return in_ranges(kTables.uppercase, cp); }

char32_t simple_case_fold(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  auto pairs = kTables.simple_case_folding;
  size_t lo = 0, hi = pairs.size() / 2;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (pairs[2 * mid] < cp) lo = mid + 1; else hi = mid;
  }
  return lo < pairs.size() / 2 && pairs[2 * lo] == cp ? pairs[2 * lo + 1] : cp;
}

uint8_t canonical_combining_class(char32_t cp) {
  if (cp < 0x300 || cp > kMaxCodePoint) return 0;
  return run_value(kTables.combining_class_runs, cp);
}

const char* unicode_version() { return detail::kUnicodeVersion; }

std::vector<CodePointRange> category_ranges(uint32_t category_mask) {
  std::vector<CodePointRange> out;
  auto runs = kTables.category_runs;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (((category_mask >> (runs[i] & 0xFFu)) & 1u) == 0) continue;
    const char32_t first = runs[i] >> 8;
    const char32_t last = i + 1 < runs.size() ? (runs[i + 1] >> 8) - 1 : kMaxCodePoint;
    if (!out.empty() && out.back().last + 1 == first) {
      out.back().last = last;
    } else {
      out.push_back({first, last});
    }
  }
  return out;
}

std::vector<CodePointRange> property_ranges(BinaryProperty property) {
  switch (property) {
    case BinaryProperty::kWhiteSpace: return ranges_of(kTables.white_space);
    case BinaryProperty::kAlphabetic: return ranges_of(kTables.alphabetic);
    case BinaryProperty::kLowercase: return ranges_of(kTables.lowercase);
    case BinaryProperty::kUppercase: return ranges_of(kTables.uppercase);
  }
  return {};
}

// ---- UTF-8 ----------------------------------------------------------------------
namespace {

enum class Decoded { kOk, kInvalid, kTruncated };

// One step of the WHATWG UTF-8 decoder from s[i]: sets `cp` (U+FFFD unless
// kOk) and returns the index of the next byte to read. A byte that breaks a
// sequence is not consumed: it starts the next one. kTruncated: a so far
// valid sequence cut short by the end of `s`.
size_t decode_one(std::string_view s, size_t i, char32_t& cp, Decoded& status) {
  status = Decoded::kOk;
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    cp = b;
    return i + 1;
  }
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
    cp = b & 0x1Fu;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    cp = b & 0x0Fu;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    cp = b & 0x07u;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    status = Decoded::kInvalid;
    cp = kReplacementCharacter;
    return i + 1;
  }
  size_t j = i + 1;
  for (int k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) {
      status = Decoded::kTruncated;
      cp = kReplacementCharacter;
      return j;
    }
    const auto c = static_cast<unsigned char>(s[j]);
    if (c < lo || c > hi) {
      status = Decoded::kInvalid;
      cp = kReplacementCharacter;
      return j;
    }
    cp = (cp << 6) | (c & 0x3Fu);
    lo = 0x80;
    hi = 0xBF;
  }
  return j;
}

}  // namespace

void decode_utf8_append(std::string_view s, std::u32string& out) {
  out.reserve(out.size() + s.size());
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs dominate real text; skip the state machine for them.
    while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) out.push_back(s[i++]);
    if (i == s.size()) break;
    char32_t cp;
    Decoded status;
    i = decode_one(s, i, cp, status);
    out.push_back(cp);
  }
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  decode_utf8_append(s, out);
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementCharacter;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(out, cp);
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    Decoded status;
    i = decode_one(s, i, cp, status);
    if (status != Decoded::kOk) return false;
  }
  return true;
}

size_t utf8_complete_prefix(std::string_view s) {
  // A lead byte resets the decoder, so decoding from the last non-continuation
  // byte among the final four gives the same state as decoding everything.
  const size_t n = s.size();
  size_t start = n;
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    if ((static_cast<unsigned char>(s[n - back]) & 0xC0) != 0x80) {
      start = n - back;
      break;
    }
  }
  size_t i = start;
  while (i < n) {
    char32_t cp;
    Decoded status;
    const size_t next = decode_one(s, i, cp, status);
    if (status == Decoded::kTruncated) return i;
    i = next;
  }
  return n;
}

// ---- normalisation --------------------------------------------------------------
std::u32string normalize(std::u32string_view s, NormalizationForm form) {
  const bool compatibility =
      form == NormalizationForm::kNFKC || form == NormalizationForm::kNFKD;
  std::u32string out;
  out.reserve(s.size() + s.size() / 8);
  for (char32_t cp : s) append_decomposition(out, cp, compatibility);
  reorder(out);
  if (form == NormalizationForm::kNFC || form == NormalizationForm::kNFKC) compose(out);
  return out;
}

std::string normalize(std::string_view s, NormalizationForm form) {
  // Below U+00A0 nothing decomposes, and nothing composes with a following
  // ASCII character, so pure-ASCII text is its own normal form in all four.
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(s);
  }
  return encode_utf8(normalize(decode_utf8(s), form));
}

std::string nfc(std::string_view s) { return normalize(s, NormalizationForm::kNFC); }
std::string nfd(std::string_view s) { return normalize(s, NormalizationForm::kNFD); }
std::string nfkc(std::string_view s) { return normalize(s, NormalizationForm::kNFKC); }
std::string nfkd(std::string_view s) { return normalize(s, NormalizationForm::kNFKD); }

}  // namespace tandem::text
