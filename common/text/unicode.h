// Unicode for the tokenizer: character properties, UTF-8 and normalisation,
// matching what Hugging Face's JavaScript tokenizer sees on node (RegExp
// \p{..}, String.prototype.normalize, TextDecoder).
//
// The tables (unicode_data.cpp) are generated from node itself by
// tools/gen_unicode_tables.mjs; unicode_version() says which Unicode version
// they describe. Lookups are binary searches over runs or ranges (a few
// thousand entries); the regex engine builds bitmaps from the ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::text {

enum class GeneralCategory : uint8_t {
  kLu, kLl, kLt, kLm, kLo, kMn, kMc, kMe, kNd, kNl, kNo, kPc, kPd, kPs, kPe, kPi, kPf,
  kPo, kSm, kSc, kSk, kSo, kZs, kZl, kZp, kCc, kCf, kCs, kCo, kCn
};
inline constexpr int kGeneralCategoryCount = 30;

// The two-letter alias ("Lu").
const char* to_string(GeneralCategory gc);

// Sets of categories as bit masks (bit i = GeneralCategory i), for the
// one-letter groups of \p{L} and friends.
constexpr uint32_t category_bit(GeneralCategory gc) { return 1u << static_cast<unsigned>(gc); }
inline constexpr uint32_t kLetterCategories = 0x1Fu;          // Lu Ll Lt Lm Lo
inline constexpr uint32_t kCasedLetterCategories = 0x07u;     // Lu Ll Lt
inline constexpr uint32_t kMarkCategories = 0xE0u;            // Mn Mc Me
inline constexpr uint32_t kNumberCategories = 0x700u;         // Nd Nl No
inline constexpr uint32_t kPunctuationCategories = 0x3F800u;  // Pc Pd Ps Pe Pi Pf Po
inline constexpr uint32_t kSymbolCategories = 0x3C0000u;      // Sm Sc Sk So
inline constexpr uint32_t kSeparatorCategories = 0x1C00000u;  // Zs Zl Zp
inline constexpr uint32_t kOtherCategories = 0x3E000000u;     // Cc Cf Cs Co Cn

GeneralCategory general_category(char32_t cp);
bool is_white_space(char32_t cp);  // White_Space property
bool is_alphabetic(char32_t cp);   // Alphabetic property
bool is_lowercase(char32_t cp);    // Lowercase property
bool is_uppercase(char32_t cp);    // Uppercase property

// Simple case folding (CaseFolding.txt status C and S): what JS /iu compares.
// a and b match each other case-insensitively iff their foldings are equal.
char32_t simple_case_fold(char32_t cp);

uint8_t canonical_combining_class(char32_t cp);

// "17.0": the Unicode version the tables were generated from.
const char* unicode_version();

// An inclusive range of code points.
struct CodePointRange {
  char32_t first;
  char32_t last;
  friend bool operator==(const CodePointRange&, const CodePointRange&) = default;
};

enum class BinaryProperty { kWhiteSpace, kAlphabetic, kLowercase, kUppercase };

// Sorted, disjoint and non-adjacent ranges covering exactly the code points
// whose category is in `category_mask` (a union of category_bit()), or that
// have the property. For building character classes.
std::vector<CodePointRange> category_ranges(uint32_t category_mask);
std::vector<CodePointRange> property_ranges(BinaryProperty property);

// ---- UTF-8 ------------------------------------------------------------------
inline constexpr char32_t kReplacementCharacter = 0xFFFD;

// Decodes as WHATWG TextDecoder('utf-8') does: each maximal subpart of an
// invalid sequence (and a truncated sequence at the end) becomes one U+FFFD.
std::u32string decode_utf8(std::string_view s);
// The same, appending to `out` (reuse its capacity across calls).
void decode_utf8_append(std::string_view s, std::u32string& out);

// Surrogates and values above U+10FFFF are written as U+FFFD (as TextEncoder
// writes lone surrogates).
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view s);

bool is_valid_utf8(std::string_view s);

// The length of the longest prefix of `s` that does not end inside an
// incomplete but so far valid UTF-8 sequence: bytes after it may still become
// a character when more bytes arrive. Invalid bytes are never held back.
size_t utf8_complete_prefix(std::string_view s);

// ---- Normalisation -----------------------------------------------------------
// Identical to JavaScript's String.prototype.normalize of the decoded string
// (invalid UTF-8 is decoded to U+FFFD first, as above).
enum class NormalizationForm { kNFC, kNFD, kNFKC, kNFKD };

std::u32string normalize(std::u32string_view s, NormalizationForm form);
std::string normalize(std::string_view s, NormalizationForm form);

std::string nfc(std::string_view s);
std::string nfd(std::string_view s);
std::string nfkc(std::string_view s);
std::string nfkd(std::string_view s);

}  // namespace tandem::text
