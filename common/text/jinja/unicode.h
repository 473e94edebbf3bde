// String helpers that follow JavaScript's string semantics, since the
// reference implementation of chat templates (@huggingface/jinja) runs on
// JavaScript strings: UTF-16 lengths and indices, JS whitespace for trim(),
// toUpperCase()/toLowerCase(), and Number -> string conversion.
//
// Strings are held as UTF-8. A lone UTF-16 surrogate (which JavaScript can
// produce by indexing into a surrogate pair) is kept as its 3-byte generalised
// UTF-8 form ("WTF-8") so that nothing is lost.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::text::jinja {

// Appends the (WTF-)8 encoding of a code point (surrogates allowed).
void append_utf8(std::string& out, char32_t cp);

// Decodes (WTF-)8 into code points; an invalid byte decodes as U+FFFD.
std::u32string decode_utf8(std::string_view s);

// UTF-16 code units of s, and back (lone surrogates kept).
std::u16string to_utf16(std::string_view s);
std::string from_utf16(std::u16string_view s);

// JavaScript's String.prototype.length: UTF-16 code units.
int64_t js_length(std::string_view s);

// JavaScript's string.at(i): the UTF-16 code unit at i (negative from the end).
std::optional<std::string> js_char_at(std::string_view s, int64_t index);

// Array.from(string): one string per code point.
std::vector<std::string> js_code_points(std::string_view s);

// JavaScript's WhiteSpace and LineTerminator set (what trim() and \s match).
bool is_js_space(char32_t cp);

// trim() / trimStart() / trimEnd().
std::string js_trim(std::string_view s, bool start, bool end);

// toUpperCase() / toLowerCase(). Covers Latin (with the Latin-1, Extended-A
// and Extended Additional blocks), Greek (with final sigma), Cyrillic,
// Armenian and fullwidth Latin, including the one-to-many mappings of those
// blocks (ß -> SS); other scripts pass through unchanged.
std::string js_to_upper(std::string_view s);
std::string js_to_lower(std::string_view s);

// Jinja's capitalize as @huggingface/jinja does it: the first code unit upper-
// cased, the rest unchanged.
std::string js_capitalize(std::string_view s);

// /\b\w/g -> upper case: ASCII word starts upper-cased, nothing lowered.
std::string js_title(std::string_view s);

// JavaScript's String(number) for a finite or non-finite double.
std::string js_number_to_string(double v);

// JSON.stringify(string): quotes, escapes ", \ and control characters, lone
// surrogates as \uXXXX; with ascii_only, every code unit from U+007F up too.
std::string js_json_quote(std::string_view s, bool ascii_only);

// parseInt(s, 10) and parseFloat(s); nullopt where JavaScript gives NaN.
std::optional<double> js_parse_int(std::string_view s);
std::optional<double> js_parse_float(std::string_view s);

// JavaScript's ToNumber(string) (used by loose equality); NaN where invalid.
double js_string_to_number(std::string_view s);

}  // namespace tandem::text::jinja
