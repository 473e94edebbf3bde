// Unicode case mapping for the scripts chat content commonly uses, as
// JavaScript's toUpperCase()/toLowerCase() map them (full mappings, so one
// code point may become several). Code points outside the covered blocks
// (see unicode.h) map to themselves.
#pragma once

#include <string>

namespace tandem::text::jinja {

void append_upper(std::string& out, char32_t cp);
void append_lower(std::string& out, char32_t cp);  // capital sigma -> σ (no final-sigma rule)
// Whether cp is a letter that has a case in the covered blocks.
bool is_cased_letter(char32_t cp);

}  // namespace tandem::text::jinja
