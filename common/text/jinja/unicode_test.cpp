// JavaScript string and number semantics (expected values checked with node).
#include "common/text/jinja/unicode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tandem::text::jinja {
namespace {

TEST(JsNumber, PrintsLikeJavaScript) {
  EXPECT_EQ(js_number_to_string(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(js_number_to_string(1.0), "1");
  EXPECT_EQ(js_number_to_string(-1.5), "-1.5");
  EXPECT_EQ(js_number_to_string(1e21), "1e+21");
  EXPECT_EQ(js_number_to_string(1e20), "100000000000000000000");
  EXPECT_EQ(js_number_to_string(123456789012345680000.0), "123456789012345680000");
  EXPECT_EQ(js_number_to_string(0.000001), "0.000001");
  EXPECT_EQ(js_number_to_string(1e-7), "1e-7");
  EXPECT_EQ(js_number_to_string(1.5e-7), "1.5e-7");
  EXPECT_EQ(js_number_to_string(2.5e300), "2.5e+300");
  EXPECT_EQ(js_number_to_string(5e-324), "5e-324");
  EXPECT_EQ(js_number_to_string(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
  EXPECT_EQ(js_number_to_string(-0.0), "0");
  EXPECT_EQ(js_number_to_string(std::nan("")), "NaN");
  EXPECT_EQ(js_number_to_string(HUGE_VAL), "Infinity");
  EXPECT_EQ(js_number_to_string(-HUGE_VAL), "-Infinity");
}

TEST(JsString, LengthAndIndexAreUtf16) {
  EXPECT_EQ(js_length("héllo"), 5);
  EXPECT_EQ(js_length("😀"), 2);
  EXPECT_EQ(js_char_at("héllo", 1), "é");
  EXPECT_EQ(js_char_at("abc", -1), "c");
  EXPECT_EQ(js_char_at("abc", 3), std::nullopt);
  // Half of a surrogate pair stays representable and round-trips.
  const auto high = js_char_at("😀", 0);
  ASSERT_TRUE(high.has_value());
  EXPECT_EQ(*high, "\xED\xA0\xBD");
  EXPECT_EQ(to_utf16(*high), std::u16string(1, u'\xD83D'));
  EXPECT_EQ(js_char_at("a😀b", 2), "\xED\xB8\x80");  // the low half
  EXPECT_EQ(js_char_at("a😀b", 3), "b");
  EXPECT_EQ(js_char_at("a😀b", -1), "b");
  EXPECT_EQ(js_char_at("a😀b", -4), "a");
  EXPECT_EQ(js_char_at("a😀b", -5), std::nullopt);
  EXPECT_EQ(js_json_quote(*high, false), "\"\\ud83d\"");
  EXPECT_EQ(js_code_points("a😀é"), (std::vector<std::string>{"a", "😀", "é"}));
}

TEST(JsString, TrimUsesJavaScriptWhitespace) {
  EXPECT_EQ(js_trim(" \t\n\u00a0\u3000x y\u2028\ufeff ", true, true), "x y");
  EXPECT_EQ(js_trim("  x  ", true, false), "x  ");
  EXPECT_EQ(js_trim("  x  ", false, true), "  x");
  EXPECT_EQ(js_trim("\u0085x", true, true), "\u0085x");  // NEL is not JS whitespace
  EXPECT_EQ(js_trim("", true, true), "");
  EXPECT_EQ(js_trim(" \n ", true, true), "");
}

TEST(JsString, CaseMappingIncludesSpecialCases) {
  EXPECT_EQ(js_to_upper("straße"), "STRASSE");
  EXPECT_EQ(js_to_upper("ǆ ﬁ ŉ"), "Ǆ FI ʼN");
  EXPECT_EQ(js_to_lower("İ"), "i\u0307");
  EXPECT_EQ(js_to_lower("ΟΔΥΣΣΕΥΣ ΣΑ Σ"), "οδυσσευς σα σ");
  EXPECT_EQ(js_to_upper("привет 𐐨"), "ПРИВЕТ 𐐀");
  EXPECT_EQ(js_to_lower("ÀÉÎ ABC"), "àéî abc");
  EXPECT_EQ(js_capitalize("élan vital"), "Élan vital");
  EXPECT_EQ(js_capitalize("hELLO"), "HELLO");
  EXPECT_EQ(js_title("hello wORLD élan x_y 3d"), "Hello WORLD éLan X_y 3d");
}

TEST(JsString, JsonQuoting) {
  EXPECT_EQ(js_json_quote("a\"b\\c\n\t\x01/<>", false), "\"a\\\"b\\\\c\\n\\t\\u0001/<>\"");
  EXPECT_EQ(js_json_quote("é😀\x7f", false), "\"é😀\x7f\"");
  EXPECT_EQ(js_json_quote("é😀\x7f", true), "\"\\u00e9\\ud83d\\ude00\\u007f\"");
}

TEST(JsNumberParsing, ParseIntParseFloatAndToNumber) {
  EXPECT_EQ(js_parse_int("  -12.5abc"), -12);
  EXPECT_EQ(js_parse_int("+7"), 7);
  EXPECT_EQ(js_parse_int("abc"), std::nullopt);
  EXPECT_EQ(js_parse_int(""), std::nullopt);
  EXPECT_EQ(js_parse_float("  -12.5abc"), -12.5);
  EXPECT_EQ(js_parse_float(".5"), 0.5);
  EXPECT_EQ(js_parse_float("1e3x"), 1000);
  EXPECT_EQ(js_parse_float("1e"), 1);
  EXPECT_EQ(js_parse_float("-Infinity"), -HUGE_VAL);
  EXPECT_EQ(js_parse_float("."), std::nullopt);
  EXPECT_EQ(js_string_to_number(" 12 "), 12);
  EXPECT_EQ(js_string_to_number(""), 0);
  EXPECT_EQ(js_string_to_number("0x10"), 16);
  EXPECT_EQ(js_string_to_number("1e3"), 1000);
  EXPECT_TRUE(std::isnan(js_string_to_number("12px")));
  EXPECT_TRUE(std::isnan(js_string_to_number("0x")));
}

}  // namespace
}  // namespace tandem::text::jinja
