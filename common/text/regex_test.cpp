#include "common/text/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/text/unicode.h"

namespace tandem::text {
namespace {

using namespace std::literals;

// The tokenizer.json Split patterns of Qwen2/Qwen3, Llama 3, GPT-2 and the
// three of DeepSeek-V3 (applied in sequence by the tokenizer; here each on
// the whole text).
const std::string_view kPatterns[] = {
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re",
    R"re(\p{N}{1,3})re",
    R"re([一-龥぀-ゟ゠-ヿ]+)re",
    // DeepSeek's tokenizer.json holds raw CR and LF inside its classes.
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
};
constexpr size_t kPatternCount = std::size(kPatterns);

std::vector<std::string> matched_pieces(const Regex& re, std::string_view text) {
  const std::u32string cps = decode_utf8(text);
  std::vector<Regex::Match> matches;
  re.find_all(cps, matches);
  std::vector<std::string> out;
  for (const Regex::Match& m : matches) {
    out.push_back(encode_utf8(std::u32string_view(cps).substr(m.begin, m.end - m.begin)));
  }
  return out;
}

std::vector<std::string> strings(const std::vector<std::string_view>& v) {
  return {v.begin(), v.end()};
}

struct SplitCase {
  std::string_view text;
  std::vector<std::string_view> expected[kPatternCount];
};

// Expected matches from node: Hugging Face's SplitPreTokenizer(pattern).pattern
// run with String.prototype.matchAll.
const SplitCase kSplitCases[] = {
    {"Hello world! How are you?"sv, {
     /*kQwen*/ {"Hello"sv, " world"sv, "!"sv, " How"sv, " are"sv, " you"sv, "?"sv},
     /*kLlama3*/ {"Hello"sv, " world"sv, "!"sv, " How"sv, " are"sv, " you"sv, "?"sv},
     /*kGpt2*/ {"Hello"sv, " world"sv, "!"sv, " How"sv, " are"sv, " you"sv, "?"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"Hello"sv, " world"sv, "!"sv, " How"sv, " are"sv, " you"sv, "?"sv},
    }},
    {"don't DON'T we'LL she'S I'm they'RE you've it'd"sv, {
     /*kQwen*/ {"don"sv, "'t"sv, " DON"sv, "'T"sv, " we"sv, "'LL"sv, " she"sv, "'S"sv, " I"sv, "'m"sv, " they"sv, "'RE"sv, " you"sv, "'ve"sv, " it"sv, "'d"sv},
     /*kLlama3*/ {"don"sv, "'t"sv, " DON"sv, "'T"sv, " we"sv, "'LL"sv, " she"sv, "'S"sv, " I"sv, "'m"sv, " they"sv, "'RE"sv, " you"sv, "'ve"sv, " it"sv, "'d"sv},
     /*kGpt2*/ {"don"sv, "'t"sv, " DON"sv, "'"sv, "T"sv, " we"sv, "'"sv, "LL"sv, " she"sv, "'"sv, "S"sv, " I"sv, "'m"sv, " they"sv, "'"sv, "RE"sv, " you"sv, "'ve"sv, " it"sv, "'d"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"don"sv, "'t"sv, " DON"sv, "'T"sv, " we"sv, "'LL"sv, " she"sv, "'S"sv, " I"sv, "'m"sv, " they"sv, "'RE"sv, " you"sv, "'ve"sv, " it"sv, "'d"sv},
    }},
    {"  leading and trailing  "sv, {
     /*kQwen*/ {" "sv, " leading"sv, " and"sv, " trailing"sv, "  "sv},
     /*kLlama3*/ {" "sv, " leading"sv, " and"sv, " trailing"sv, "  "sv},
     /*kGpt2*/ {" "sv, " leading"sv, " and"sv, " trailing"sv, "  "sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {" "sv, " leading"sv, " and"sv, " trailing"sv, "  "sv},
    }},
    {"line one\nline two\r\nline three\n\n\nend"sv, {
     /*kQwen*/ {"line"sv, " one"sv, "\n"sv, "line"sv, " two"sv, "\r\n"sv, "line"sv, " three"sv, "\n\n\n"sv, "end"sv},
     /*kLlama3*/ {"line"sv, " one"sv, "\n"sv, "line"sv, " two"sv, "\r\n"sv, "line"sv, " three"sv, "\n\n\n"sv, "end"sv},
     /*kGpt2*/ {"line"sv, " one"sv, "\n"sv, "line"sv, " two"sv, "\r"sv, "\n"sv, "line"sv, " three"sv, "\n\n"sv, "\n"sv, "end"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"line"sv, " one"sv, "\n"sv, "line"sv, " two"sv, "\r\n"sv, "line"sv, " three"sv, "\n\n\n"sv, "end"sv},
    }},
    {"tabs\tand\u00A0nbsp\u3000ideographic\u2003em space"sv, {
     /*kQwen*/ {"tabs"sv, "\tand"sv, "\u00A0nbsp"sv, "\u3000ideographic"sv, "\u2003em"sv, " space"sv},
     /*kLlama3*/ {"tabs"sv, "\tand"sv, "\u00A0nbsp"sv, "\u3000ideographic"sv, "\u2003em"sv, " space"sv},
     /*kGpt2*/ {"tabs"sv, "\t"sv, "and"sv, "\u00A0"sv, "nbsp"sv, "\u3000"sv, "ideographic"sv, "\u2003"sv, "em"sv, " space"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"tabs"sv, "\tand"sv, "\u00A0nbsp"sv, "\u3000ideographic"sv, "\u2003em"sv, " space"sv},
    }},
    {"   \n  \t x"sv, {
     /*kQwen*/ {"   \n"sv, "  \t"sv, " x"sv},
     /*kLlama3*/ {"   \n"sv, "  \t"sv, " x"sv},
     /*kGpt2*/ {"   \n  \t"sv, " x"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"   \n"sv, "  \t"sv, " x"sv},
    }},
    {"12345 1234567890 3.14159 -42 1,000,000"sv, {
     /*kQwen*/ {"1"sv, "2"sv, "3"sv, "4"sv, "5"sv, " "sv, "1"sv, "2"sv, "3"sv, "4"sv, "5"sv, "6"sv, "7"sv, "8"sv, "9"sv, "0"sv, " "sv, "3"sv, "."sv, "1"sv, "4"sv, "1"sv, "5"sv, "9"sv, " -"sv, "4"sv, "2"sv, " "sv, "1"sv, ","sv, "0"sv, "0"sv, "0"sv, ","sv, "0"sv, "0"sv, "0"sv},
     /*kLlama3*/ {"123"sv, "45"sv, " "sv, "123"sv, "456"sv, "789"sv, "0"sv, " "sv, "3"sv, "."sv, "141"sv, "59"sv, " -"sv, "42"sv, " "sv, "1"sv, ","sv, "000"sv, ","sv, "000"sv},
     /*kGpt2*/ {"12345"sv, " 1234567890"sv, " 3"sv, "."sv, "14159"sv, " -"sv, "42"sv, " 1"sv, ","sv, "000"sv, ","sv, "000"sv},
     /*kDeepSeekDigits*/ {"123"sv, "45"sv, "123"sv, "456"sv, "789"sv, "0"sv, "3"sv, "141"sv, "59"sv, "42"sv, "1"sv, "000"sv, "000"sv},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {" "sv, " "sv, "."sv, " -"sv, " "sv, ","sv, ","sv},
    }},
    {"\u0661\u0662\u0663\u0664 \u0967\u0968\u0969\u096A\u096B \u0E51\u0E52 \uFF11\uFF12\uFF13\uFF14 \u2460\u00BD"sv, {
     /*kQwen*/ {"\u0661"sv, "\u0662"sv, "\u0663"sv, "\u0664"sv, " "sv, "\u0967"sv, "\u0968"sv, "\u0969"sv, "\u096A"sv, "\u096B"sv, " "sv, "\u0E51"sv, "\u0E52"sv, " "sv, "\uFF11"sv, "\uFF12"sv, "\uFF13"sv, "\uFF14"sv, " "sv, "\u2460"sv, "\u00BD"sv},
     /*kLlama3*/ {"\u0661\u0662\u0663"sv, "\u0664"sv, " "sv, "\u0967\u0968\u0969"sv, "\u096A\u096B"sv, " "sv, "\u0E51\u0E52"sv, " "sv, "\uFF11\uFF12\uFF13"sv, "\uFF14"sv, " "sv, "\u2460\u00BD"sv},
     /*kGpt2*/ {"\u0661\u0662\u0663\u0664"sv, " \u0967\u0968\u0969\u096A\u096B"sv, " \u0E51\u0E52"sv, " \uFF11\uFF12\uFF13\uFF14"sv, " \u2460\u00BD"sv},
     /*kDeepSeekDigits*/ {"\u0661\u0662\u0663"sv, "\u0664"sv, "\u0967\u0968\u0969"sv, "\u096A\u096B"sv, "\u0E51\u0E52"sv, "\uFF11\uFF12\uFF13"sv, "\uFF14"sv, "\u2460\u00BD"sv},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {" "sv, " "sv, " "sv, " "sv},
    }},
    {"中文分词测试\uFF0C你好世界\uFF01"sv, {
     /*kQwen*/ {"中文分词测试"sv, "\uFF0C你好世界"sv, "\uFF01"sv},
     /*kLlama3*/ {"中文分词测试"sv, "\uFF0C你好世界"sv, "\uFF01"sv},
     /*kGpt2*/ {"中文分词测试"sv, "\uFF0C"sv, "你好世界"sv, "\uFF01"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {"中文分词测试"sv, "你好世界"sv},
     /*kDeepSeekMain*/ {"中文分词测试"sv, "\uFF0C"sv, "你好世界"sv, "\uFF01"sv},
    }},
    {"日本語のテキストです\u3002カタカナとひらがな"sv, {
     /*kQwen*/ {"日本語のテキストです"sv, "\u3002カタカナとひらがな"sv},
     /*kLlama3*/ {"日本語のテキストです"sv, "\u3002カタカナとひらがな"sv},
     /*kGpt2*/ {"日本語のテキストです"sv, "\u3002"sv, "カタカナとひらがな"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {"日本語のテキストです"sv, "カタカナとひらがな"sv},
     /*kDeepSeekMain*/ {"日本語のテキストです"sv, "\u3002"sv, "カタカナとひらがな"sv},
    }},
    {"한국어 텍스트입니다"sv, {
     /*kQwen*/ {"한국어"sv, " 텍스트입니다"sv},
     /*kLlama3*/ {"한국어"sv, " 텍스트입니다"sv},
     /*kGpt2*/ {"한국어"sv, " 텍스트입니다"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"한국어"sv, " 텍스트입니다"sv},
    }},
    {"Emoji: 😀👍\U0001F3FD 👨\u200D👩\u200D👧\u200D👦 ❤\uFE0F \U0001F1FA\U0001F1F8!"sv, {
     /*kQwen*/ {"Emoji"sv, ":"sv, " 😀👍\U0001F3FD"sv, " 👨\u200D👩\u200D👧\u200D👦"sv, " ❤\uFE0F"sv, " \U0001F1FA\U0001F1F8!"sv},
     /*kLlama3*/ {"Emoji"sv, ":"sv, " 😀👍\U0001F3FD"sv, " 👨\u200D👩\u200D👧\u200D👦"sv, " ❤\uFE0F"sv, " \U0001F1FA\U0001F1F8!"sv},
     /*kGpt2*/ {"Emoji"sv, ":"sv, " 😀👍\U0001F3FD"sv, " 👨\u200D👩\u200D👧\u200D👦"sv, " ❤\uFE0F"sv, " \U0001F1FA\U0001F1F8!"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"Emoji"sv, ":"sv, " 😀👍\U0001F3FD"sv, " 👨"sv, "👩"sv, "👧"sv, "👦"sv, " ❤"sv, "\uFE0F"sv, " \U0001F1FA\U0001F1F8!"sv},
    }},
    {"e\u0301cole cafe\u0301 n\u0303 Z\u0351\u0352a\u0300\u0301\u0302"sv, {
     /*kQwen*/ {"e"sv, "\u0301cole"sv, " cafe"sv, "\u0301"sv, " n"sv, "\u0303"sv, " Z"sv, "\u0351\u0352"sv, "a"sv, "\u0300\u0301\u0302"sv},
     /*kLlama3*/ {"e"sv, "\u0301cole"sv, " cafe"sv, "\u0301"sv, " n"sv, "\u0303"sv, " Z"sv, "\u0351\u0352"sv, "a"sv, "\u0300\u0301\u0302"sv},
     /*kGpt2*/ {"e"sv, "\u0301"sv, "cole"sv, " cafe"sv, "\u0301"sv, " n"sv, "\u0303"sv, " Z"sv, "\u0351\u0352"sv, "a"sv, "\u0300\u0301\u0302"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"e\u0301cole"sv, " cafe\u0301"sv, " n\u0303"sv, " Z\u0351\u0352a\u0300\u0301\u0302"sv},
    }},
    {"\u0627\u0644\u0639\u0631\u0628\u064A\u0629 \u0645\u0631\u062D\u0628\u0627\u064B \u0661\u0662"sv, {
     /*kQwen*/ {"\u0627\u0644\u0639\u0631\u0628\u064A\u0629"sv, " \u0645\u0631\u062D\u0628\u0627"sv, "\u064B"sv, " "sv, "\u0661"sv, "\u0662"sv},
     /*kLlama3*/ {"\u0627\u0644\u0639\u0631\u0628\u064A\u0629"sv, " \u0645\u0631\u062D\u0628\u0627"sv, "\u064B"sv, " "sv, "\u0661\u0662"sv},
     /*kGpt2*/ {"\u0627\u0644\u0639\u0631\u0628\u064A\u0629"sv, " \u0645\u0631\u062D\u0628\u0627"sv, "\u064B"sv, " \u0661\u0662"sv},
     /*kDeepSeekDigits*/ {"\u0661\u0662"sv},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"\u0627\u0644\u0639\u0631\u0628\u064A\u0629"sv, " \u0645\u0631\u062D\u0628\u0627\u064B"sv, " "sv},
    }},
    {"\u0939\u093F\u0928\u094D\u0926\u0940 \u0915\u094D\u0937\u0924\u094D\u0930\u093F\u092F"sv, {
     /*kQwen*/ {"\u0939"sv, "\u093F\u0928"sv, "\u094D\u0926"sv, "\u0940"sv, " \u0915"sv, "\u094D\u0937\u0924"sv, "\u094D\u0930"sv, "\u093F\u092F"sv},
     /*kLlama3*/ {"\u0939"sv, "\u093F\u0928"sv, "\u094D\u0926"sv, "\u0940"sv, " \u0915"sv, "\u094D\u0937\u0924"sv, "\u094D\u0930"sv, "\u093F\u092F"sv},
     /*kGpt2*/ {"\u0939"sv, "\u093F"sv, "\u0928"sv, "\u094D"sv, "\u0926"sv, "\u0940"sv, " \u0915"sv, "\u094D"sv, "\u0937\u0924"sv, "\u094D"sv, "\u0930"sv, "\u093F"sv, "\u092F"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"\u0939\u093F\u0928\u094D\u0926\u0940"sv, " \u0915\u094D\u0937\u0924\u094D\u0930\u093F\u092F"sv},
    }},
    {"def foo(x):\n    return x**2  # comment\n"sv, {
     /*kQwen*/ {"def"sv, " foo"sv, "(x"sv, "):\n"sv, "   "sv, " return"sv, " x"sv, "**"sv, "2"sv, " "sv, " #"sv, " comment"sv, "\n"sv},
     /*kLlama3*/ {"def"sv, " foo"sv, "(x"sv, "):\n"sv, "   "sv, " return"sv, " x"sv, "**"sv, "2"sv, " "sv, " #"sv, " comment"sv, "\n"sv},
     /*kGpt2*/ {"def"sv, " foo"sv, "("sv, "x"sv, "):"sv, "\n   "sv, " return"sv, " x"sv, "**"sv, "2"sv, " "sv, " #"sv, " comment"sv, "\n"sv},
     /*kDeepSeekDigits*/ {"2"sv},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"def"sv, " foo"sv, "(x"sv, "):\n"sv, "   "sv, " return"sv, " x"sv, "**"sv, " "sv, " #"sv, " comment"sv, "\n"sv},
    }},
    {"$100 + 50% = #hash @user <tag/> [a] {b}"sv, {
     /*kQwen*/ {"$"sv, "1"sv, "0"sv, "0"sv, " +"sv, " "sv, "5"sv, "0"sv, "%"sv, " ="sv, " #"sv, "hash"sv, " @"sv, "user"sv, " <"sv, "tag"sv, "/>"sv, " ["sv, "a"sv, "]"sv, " {"sv, "b"sv, "}"sv},
     /*kLlama3*/ {"$"sv, "100"sv, " +"sv, " "sv, "50"sv, "%"sv, " ="sv, " #"sv, "hash"sv, " @"sv, "user"sv, " <"sv, "tag"sv, "/>"sv, " ["sv, "a"sv, "]"sv, " {"sv, "b"sv, "}"sv},
     /*kGpt2*/ {"$"sv, "100"sv, " +"sv, " 50"sv, "%"sv, " ="sv, " #"sv, "hash"sv, " @"sv, "user"sv, " <"sv, "tag"sv, "/>"sv, " ["sv, "a"sv, "]"sv, " {"sv, "b"sv, "}"sv},
     /*kDeepSeekDigits*/ {"100"sv, "50"sv},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"$"sv, " +"sv, " "sv, "%"sv, " ="sv, " #"sv, "hash"sv, " @"sv, "user"sv, " <"sv, "tag"sv, "/>"sv, " ["sv, "a"sv, "]"sv, " {"sv, "b"sv, "}"sv},
    }},
    {"mixed中English文字123数字"sv, {
     /*kQwen*/ {"mixed中English文字"sv, "1"sv, "2"sv, "3"sv, "数字"sv},
     /*kLlama3*/ {"mixed中English文字"sv, "123"sv, "数字"sv},
     /*kGpt2*/ {"mixed中English文字"sv, "123"sv, "数字"sv},
     /*kDeepSeekDigits*/ {"123"sv},
     /*kDeepSeekCjk*/ {"中"sv, "文字"sv, "数字"sv},
     /*kDeepSeekMain*/ {"mixed中English文字"sv, "3数字"sv},
    }},
    {"Привет, мир! Γειά"sv, {
     /*kQwen*/ {"Привет"sv, ","sv, " мир"sv, "!"sv, " Γειά"sv},
     /*kLlama3*/ {"Привет"sv, ","sv, " мир"sv, "!"sv, " Γειά"sv},
     /*kGpt2*/ {"Привет"sv, ","sv, " мир"sv, "!"sv, " Γειά"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"Привет"sv, ","sv, " мир"sv, "!"sv, " Γειά"sv},
    }},
    {"  \n\n  \r\n  "sv, {
     /*kQwen*/ {"  \n\n  \r\n"sv, "  "sv},
     /*kLlama3*/ {"  \n\n  \r\n"sv, "  "sv},
     /*kGpt2*/ {"  \n\n  \r\n  "sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"  \n\n  \r\n"sv, "  "sv},
    }},
    {"a\u200Bb\uFEFFc\302\205d"sv, {
     /*kQwen*/ {"a"sv, "\u200Bb"sv, "\uFEFFc"sv, "\302\205d"sv},
     /*kLlama3*/ {"a"sv, "\u200Bb"sv, "\uFEFFc"sv, "\302\205d"sv},
     /*kGpt2*/ {"a"sv, "\u200B"sv, "b"sv, "\uFEFF"sv, "c"sv, "\302\205"sv, "d"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"a"sv, "\u200Bb"sv, "\uFEFFc"sv, "\302\205d"sv},
    }},
    {"'s 'S 'x ''ll"sv, {
     /*kQwen*/ {"'s"sv, " '"sv, "S"sv, " '"sv, "x"sv, " ''"sv, "ll"sv},
     /*kLlama3*/ {"'s"sv, " '"sv, "S"sv, " '"sv, "x"sv, " ''"sv, "ll"sv},
     /*kGpt2*/ {"'s"sv, " '"sv, "S"sv, " '"sv, "x"sv, " ''"sv, "ll"sv},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {"'s"sv, " '"sv, "S"sv, " '"sv, "x"sv, " ''"sv, "ll"sv},
    }},
    {""sv, {
     /*kQwen*/ {},
     /*kLlama3*/ {},
     /*kGpt2*/ {},
     /*kDeepSeekDigits*/ {},
     /*kDeepSeekCjk*/ {},
     /*kDeepSeekMain*/ {},
    }},

};

TEST(Regex, TokenizerPatternsSplitAsNode) {
  for (size_t p = 0; p < kPatternCount; ++p) {
    const Regex re = Regex::compile(kPatterns[p]);
    for (const SplitCase& c : kSplitCases) {
      EXPECT_EQ(matched_pieces(re, c.text), strings(c.expected[p]))
          << "pattern " << kPatterns[p] << "\ntext " << testing::PrintToString(std::string(c.text));
    }
  }
}

TEST(Regex, FullCoverPatternsReassembleTheText) {
  // Qwen, Llama 3 and GPT-2 match every code point (DeepSeek's main pattern
  // leaves digits, matched by the split before it, and some format characters).
  for (size_t p : {0, 1, 2}) {
    const Regex re = Regex::compile(kPatterns[p]);
    for (const SplitCase& c : kSplitCases) {
      std::string joined;
      for (const std::string& s : matched_pieces(re, c.text)) joined += s;
      EXPECT_EQ(joined, c.text) << kPatterns[p];
    }
  }
}

struct ConstructCase {
  std::string_view pattern;
  std::string_view text;
  std::vector<std::string_view> expected;
};

// One line per construct; expected matches from node as above.
const ConstructCase kConstructCases[] = {
    {"a\\.b\\-c\\\\d"sv, "a.b-c\\d a.b-c"sv, {"a.b-c\\d"sv}},
    {"\\x41\\x{42}\\u0043\\u{1F600}"sv, "xABC😀ABC"sv, {"ABC😀"sv}},
    {"\\t\\n\\r\\f\\v"sv, "a\t\n\r\014\013b"sv, {"\t\n\r\014\013"sv}},
    {"\\uD83D\\uDE00+"sv, "😀😀x😀"sv, {"😀😀"sv, "😀"sv}},
    {"\\cA\\a\\e\\0"sv, "\001\007\033\000"sv, {"\001\007\033\000"sv}},
    {"."sv, "a\nb😀"sv, {"a"sv, "b"sv, "😀"sv}},
    {"[^\\r\\n\\p{L}\\p{N}]+"sv, "ab, cd!\n12 ?"sv, {", "sv, "!"sv, " ?"sv}},
    {"[一-龥\u3040-ゟ\u30A0-ヿ]+"sv, "漢字かなカナ한글abc"sv, {"漢字かなカナ"sv}},
    {"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]+"sv, "a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~b"sv, {"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"sv}},
    {"\\p{L}+"sv, "abc ÄÖ 中文 123"sv, {"abc"sv, "ÄÖ"sv, "中文"sv}},
    {"\\p{N}+"sv, "12 \u0661\u0662 ⅫⅡ \u00BD x"sv, {"12"sv, "\u0661\u0662"sv, "ⅫⅡ"sv, "\u00BD"sv}},
    {"\\p{P}+"sv, "a,.!?\u00AB\u00BB\u2014b"sv, {",.!?\u00AB\u00BB\u2014"sv}},
    {"\\p{S}+"sv, "a+$^©😀b"sv, {"+$^©😀"sv}},
    {"\\p{M}+"sv, "e\u0301\u0302 \u0903"sv, {"\u0301\u0302"sv, "\u0903"sv}},
    {"\\p{Z}+"sv, "a \u00A0\u2028b"sv, {" \u00A0\u2028"sv}},
    {"\\p{C}+"sv, "a\000\u200B\uE000b"sv, {"\000\u200B\uE000"sv}},
    {"\\p{Lu}+"sv, "aBCdE"sv, {"BC"sv, "E"sv}},
    {"\\p{Ll}"sv, "aBc"sv, {"a"sv, "c"sv}},
    {"\\p{Nd}+"sv, "1\u2460\u0663"sv, {"1"sv, "\u0663"sv}},
    {"\\p{Letter}+"sv, "ab1c"sv, {"ab"sv, "c"sv}},
    {"\\p{Uppercase_Letter}"sv, "aBc"sv, {"B"sv}},
    {"\\P{L}+"sv, "ab12 cd"sv, {"12 "sv}},
    {"\\P{Nd}"sv, "1a2"sv, {"a"sv}},
    {"\\p{gc=Pd}"sv, "a-b\u2013c"sv, {"-"sv, "\u2013"sv}},
    {"\\p{General_Category=Sc}"sv, "$\u20ACx"sv, {"$"sv, "\u20AC"sv}},
    {"\\p{Alphabetic}+"sv, "aⅫ\u0345b1"sv, {"aⅫ\u0345b"sv}},
    {"\\p{White_Space}+"sv, "a \302\205\u00A0b"sv, {" \302\205\u00A0"sv}},
    {"\\p{Any}"sv, "a😀"sv, {"a"sv, "😀"sv}},
    {"\\p{ASCII}+"sv, "abc中d"sv, {"abc"sv, "d"sv}},
    {"\\s+"sv, "a \t\u00A0\u3000\302\205\uFEFFb"sv, {" \t\u00A0\u3000\302\205"sv}},
    {"\\S+"sv, "a b\uFEFFc"sv, {"a"sv, "b\uFEFFc"sv}},
    {"\\d+"sv, "12\u0663\u096A \u2460"sv, {"12\u0663\u096A"sv}},
    {"\\D+"sv, "ab12cd"sv, {"ab"sv, "cd"sv}},
    {"\\w+"sv, "a_b1 é\u00B2 \u00BD 中"sv, {"a_b1"sv, "é\u00B2"sv, "\u00BD"sv, "中"sv}},
    {"[\\w]+"sv, "a_b1 é\u00B2 \u00BD"sv, {"a_b1"sv, "é"sv}},
    {"\\W+"sv, "a, b!"sv, {", "sv, "!"sv}},
    {"\\h+"sv, "0x1fG"sv, {"0"sv, "1f"sv}},
    {"a|ab|abc"sv, "abc ab a"sv, {"a"sv, "a"sv, "a"sv}},
    {"(?:ab|cd)+"sv, "abcdab cd"sv, {"abcdab"sv, "cd"sv}},
    {"(a)(b)?"sv, "ab a"sv, {"ab"sv, "a"sv}},
    {"(?i:'s|'t|'re)"sv, "'S 'T 're 'RE 'Re"sv, {"'S"sv, "'T"sv, "'re"sv, "'RE"sv, "'Re"sv}},
    {"(?i:abc)"sv, "ABC abc AbC"sv, {"ABC"sv, "abc"sv, "AbC"sv}},
    {"(?i:[a-c]+)"sv, "ABCabcD"sv, {"ABCabc"sv}},
    {"(?i:[^a])"sv, "aAb"sv, {"b"sv}},
    {"a?"sv, "aab"sv, {"a"sv, "a"sv, ""sv, ""sv}},
    {"a*"sv, "baaa"sv, {""sv, "aaa"sv, ""sv}},
    {"a+"sv, "baaa"sv, {"aaa"sv}},
    {"a{2}"sv, "aaaaa"sv, {"aa"sv, "aa"sv}},
    {"a{2,}"sv, "aaaaa a"sv, {"aaaaa"sv}},
    {"a{1,2}"sv, "aaaaa"sv, {"aa"sv, "aa"sv, "a"sv}},
    {"a{,2}"sv, "aaab"sv, {"aa"sv, "a"sv, ""sv, ""sv}},
    {"a??b"sv, "ab b"sv, {"ab"sv, "b"sv}},
    {"a*?b"sv, "aaab"sv, {"aaab"sv}},
    {"a+?"sv, "aaa"sv, {"a"sv, "a"sv, "a"sv}},
    {"a{2,3}?"sv, "aaaaa"sv, {"aa"sv, "aa"sv}},
    {"(?:a|b)*?c"sv, "ababc"sv, {"ababc"sv}},
    {"a++b"sv, "aab"sv, {"aab"sv}},
    {"\\p{N}{1,3}"sv, "1234567"sv, {"123"sv, "456"sv, "7"sv}},
    {"x{"sv, "x{"sv, {"x{"sv}},
    {"{2}"sv, "{2}"sv, {"{2}"sv}},
    {"a(?=b)"sv, "ab ac"sv, {"a"sv}},
    {"a(?!b)"sv, "ab ac"sv, {"a"sv}},
    {"(?<=a)b"sv, "ab cb"sv, {"b"sv}},
    {"(?<!a)b"sv, "ab cb"sv, {"b"sv}},
    {"(?<=\\p{L}{2})\\d"sv, "ab1 a2"sv, {"1"sv}},
    {"(?<=a|bc)d"sv, "ad bcd cd"sv, {"d"sv, "d"sv}},
    {"\\s+(?!\\S)"sv, "a   b   "sv, {"  "sv, "   "sv}},
    {"^\\w+"sv, "ab cd\nef"sv, {"ab"sv, "ef"sv}},
    {"\\w+$"sv, "ab cd\nef"sv, {"cd"sv, "ef"sv}},
    {"\\A\\w"sv, "ab\ncd"sv, {"a"sv}},
    {"\\w\\z"sv, "ab\ncd"sv, {"d"sv}},
    {"\\w\\Z"sv, "ab\ncd\n"sv, {"d"sv}},
    {"\\b\\w"sv, "ab cd"sv, {"a"sv, "c"sv}},
    {"\\B\\w"sv, "ab cd"sv, {"b"sv, "d"sv}},
    {"(?>a+)b"sv, "aab"sv, {"aab"sv}},
    {"(?<word>a)b"sv, "ab"sv, {"ab"sv}},
    {"a\\Gb"sv, "ab"sv, {"ab"sv}},
    {"[a-c-e]"sv, "a-d-e"sv, {"a"sv, "-"sv, "-"sv, "e"sv}},
    {"[a-z&&[^aeiou]]+"sv, "hello world"sv, {"h"sv, "ll"sv, "w"sv, "rld"sv}},
    {"[[:alpha:]]+"sv, "ab1c"sv, {"ab"sv, "c"sv}},
    {"[[:^digit:]]+"sv, "ab1c"sv, {"ab"sv, "c"sv}},
    {"[[:punct:]]+"sv, "a,+b"sv, {",+"sv}},
    {"[\\d-]+"sv, "1-2 a"sv, {"1-2"sv}},
    {"[]a]+"sv, "a]b"sv, {"a]"sv}},
    {"[\\b]"sv, "a\010b"sv, {"\010"sv}},
    {"[^(\\s|[.,!?])]+"sv, "hi there, you!"sv, {"hi"sv, "there"sv, "you"sv}},
    {""sv, "ab"sv, {""sv, ""sv, ""sv}},
    {"(?:)"sv, "😀a"sv, {""sv, ""sv, ""sv}},
    {"x*"sv, "axx"sv, {""sv, "xx"sv, ""sv}},

};

TEST(Regex, ConstructsMatchAsNode) {
  for (const ConstructCase& c : kConstructCases) {
    const Regex re = Regex::compile(c.pattern);
    EXPECT_EQ(matched_pieces(re, c.text), strings(c.expected))
        << "pattern " << c.pattern << "\ntext " << testing::PrintToString(std::string(c.text));
  }
}

TEST(Regex, MatchBoundariesAndEmptyMatches) {
  std::vector<Regex::Match> m;
  // An empty match moves the next search on by one code point, not one byte.
  Regex::compile("x*").find_all(U"a\U0001F600xx", m);
  EXPECT_EQ(m, (std::vector<Regex::Match>{{0, 0}, {1, 1}, {2, 4}, {4, 4}}));
  Regex::compile("a|").find_all(U"aa", m);
  EXPECT_EQ(m, (std::vector<Regex::Match>{{0, 1}, {1, 2}, {2, 2}}));
  // find_all replaces what `out` held.
  Regex::compile("b").find_all(U"abcb", m);
  EXPECT_EQ(m, (std::vector<Regex::Match>{{1, 2}, {3, 4}}));
  Regex::compile("b").find_all(U"", m);
  EXPECT_TRUE(m.empty());

  const Regex re = Regex::compile(R"(\p{L}+)");
  EXPECT_EQ(re.find(U"12 ab cd", 0), (Regex::Match{3, 5}));
  EXPECT_EQ(re.find(U"12 ab cd", 4), (Regex::Match{4, 5}));
  EXPECT_EQ(re.find(U"12 ab cd", 8), std::nullopt);
  EXPECT_EQ(re.find(U"12 ab cd", 9), std::nullopt);
  // A lookbehind sees text before the search start.
  EXPECT_EQ(Regex::compile("(?<=a)b").find(U"ab", 1), (Regex::Match{1, 2}));
  EXPECT_EQ(re.pattern(), R"(\p{L}+)");
}

TEST(Regex, LongWhitespaceRunsNeedNoDeepStack) {
  // One counted repetition instruction backs off a single position: a
  // recursive or per-iteration backtracker would overflow or go quadratic.
  std::u32string text(200000, U' ');
  text += U"x";
  text += std::u32string(200000, U'\n');
  std::vector<Regex::Match> m;
  Regex::compile(std::string(kPatterns[0])).find_all(text, m);
  EXPECT_EQ(m, (std::vector<Regex::Match>{{0, 199999}, {199999, 200001}, {200001, 400001}}));
  Regex::compile(R"((?:\s)+(?!\S))").find_all(std::u32string(100000, U'\t'), m);
  EXPECT_EQ(m, (std::vector<Regex::Match>{{0, 100000}}));
  // A group body: one backtrack entry per iteration, on the heap.
  Regex::compile(R"((?:\s\s|x)+(?!\S))").find_all(std::u32string(100001, U'\t'), m);
  EXPECT_EQ(m, (std::vector<Regex::Match>{{0, 100000}}));
}

TEST(Regex, CatastrophicBacktrackingIsAnErrorNotAHang) {
  // (a+)+b on a run of a's without b takes 2^n steps in a plain backtracker.
  const Regex re = Regex::compile("(a+)+b");
  const std::u32string text(40, U'a');
  std::vector<Regex::Match> out;
  try {
    re.find_all(text, out);
    FAIL() << "expected the step budget to stop the search";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backtracks without bound"), std::string::npos) << e.what();
  }
  // The same pattern on a short text still answers.
  re.find_all(U"aaab", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].end, 4u);
}

TEST(Regex, CopiesShareTheProgram) {
  const Regex a = Regex::compile("a+");
  Regex b = a;
  Regex c = std::move(b);
  std::vector<Regex::Match> m;
  c.find_all(U"baa", m);
  EXPECT_EQ(m, (std::vector<Regex::Match>{{1, 3}}));
}

ErrorKind compile_error(std::string_view pattern) {
  try {
    Regex::compile(pattern);
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "compiled: " << pattern;
  return ErrorKind::kInternal;
}

TEST(Regex, RejectsWhatNodeRejects) {
  for (std::string_view p : {"(", ")", "a)", "(?", "(?<", "[", "[]", "[z-a]", "[a-\\w]", "[\\w-z]",
                             "a**", "a+?+?", "*a", "|+", "(?=a)*", "\\A*", "a{2,1}", "\\", "\\q",
                             "\\00", "[\\00]", "\\x", "\\u12", "\\x{110000}", "\\p{gc=Foo}",
                             "(?<n>a)(?<n>b)", "[&&a]", "[a&&]", "[[:^:]]", "a{2}*?*", "\\p{L}{3}{2}"}) {
    EXPECT_EQ(compile_error(p), ErrorKind::kInvalidInput) << p;
  }
}

TEST(Regex, RejectsWhatItDoesNotImplement) {
  for (std::string_view p : {"(a)\\1", "\\k<n>(?<n>a)", "\\p{Han}", "\\p{sc=Latin}", "\\p{Emoji}",
                             "(?i)abc", "(?m:a)", "(?x)a", "(?#c)", "\\p{l}", "[[:foo:]]", "[[.a.]]", "(?<é>a)",
                             "(?:(?:ab){1000}){1000}", "a{100001}"}) {
    EXPECT_EQ(compile_error(p), ErrorKind::kUnsupported) << p;
  }
  try {
    Regex::compile("ab(c\\1");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("back reference at code point 4 of pattern \"ab(c\\1\""),
              std::string::npos) << e.what();
  }
  try {
    Regex::compile("ab[z-a]");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("range out of order in character class at code point 5"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(compile_error("\xFF"), ErrorKind::kInvalidInput);
}

}  // namespace
}  // namespace tandem::text
