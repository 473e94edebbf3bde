// Split throughput of the regex engine on 1 MB of English-like text (words,
// capitals, contractions, numbers, punctuation, line breaks, indentation),
// in MB/s of UTF-8 input, for the Qwen and DeepSeek-V3 pre-tokenizer
// patterns; also UTF-8 decoding and NFC on the same text.
// Run: build/bin/tandem-bench-regex
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "common/text/regex.h"
#include "common/text/unicode.h"

namespace {

using tandem::text::Regex;

const char* const kQwen =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kDeepSeek[] = {
    R"re(\p{N}{1,3})re",
    R"re([一-龥぀-ゟ゠-ヿ]+)re",
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
};

// Deterministic English-like text of about `bytes` bytes.
std::string english(size_t bytes) {
  static const char* const kWords[] = {
      "the", "of", "and", "to", "in", "is", "was", "that", "for", "it", "with", "as", "his", "on",
      "be", "at", "by", "I", "this", "had", "not", "are", "but", "from", "or", "have", "an", "they",
      "which", "one", "you", "were", "her", "all", "she", "there", "would", "their", "we", "him",
      "been", "has", "when", "who", "will", "more", "no", "if", "out", "so", "said", "what", "up",
      "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "could",
      "time", "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like",
      "our", "over", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before",
      "must", "through", "years", "where", "much", "your", "way", "well", "down", "should",
      "because", "each", "just", "those", "people", "Mr.", "how", "too", "little", "state", "good",
      "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here",
      "between", "both", "life", "being", "under", "never", "day", "same", "another", "know",
      "don't", "it's", "we'll", "I'm", "they're", "you've", "he'd", "government", "tokenizer",
      "configuration", "throughput", "Hugging", "Face", "JavaScript", "DeepSeek", "Qwen"};
  static const char* const kPunct[] = {",", ".", ";", ":", "!", "?", " -", " (see", ")", "\""};
  std::mt19937 rng(42);
  std::string out;
  bool sentence_start = true;
  while (out.size() < bytes) {
    std::string w = kWords[rng() % std::size(kWords)];
    if (sentence_start && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 32);
    if (rng() % 40 == 0) w = std::to_string(rng() % 100000);
    out += w;
    sentence_start = false;
    const unsigned r = rng() % 100;
    if (r < 12) {
      out += kPunct[rng() % std::size(kPunct)];
      sentence_start = out.back() == '.' || out.back() == '!' || out.back() == '?';
    }
    if (r == 99) {
      out += "\n\n";
      sentence_start = true;
    } else if (r == 98) {
      out += "\n    ";
    } else {
      out += ' ';
    }
  }
  out.resize(bytes);
  return out;
}

const std::string& text() {
  static const std::string t = english(1 << 20);
  return t;
}

void BM_SplitQwen(benchmark::State& state) {
  const Regex re = Regex::compile(kQwen);
  const std::u32string cps = tandem::text::decode_utf8(text());
  std::vector<Regex::Match> matches;
  for (auto _ : state) {
    re.find_all(cps, matches);
    benchmark::DoNotOptimize(matches.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text().size()));
  state.counters["matches"] = double(matches.size());
}

// DeepSeek-V3's three Split patterns in sequence: each later pattern runs on
// the pieces the earlier ones left between their matches and on the matches.
void BM_SplitDeepSeek(benchmark::State& state) {
  std::vector<Regex> res;
  for (const char* p : kDeepSeek) res.push_back(Regex::compile(p));
  const std::u32string cps = tandem::text::decode_utf8(text());
  std::vector<std::u32string_view> pieces, next;
  std::vector<Regex::Match> matches;
  for (auto _ : state) {
    pieces.assign(1, cps);
    for (const Regex& re : res) {
      next.clear();
      for (std::u32string_view piece : pieces) {
        re.find_all(piece, matches);
        size_t at = 0;
        for (const Regex::Match& m : matches) {
          if (m.begin > at) next.push_back(piece.substr(at, m.begin - at));
          if (m.end > m.begin) next.push_back(piece.substr(m.begin, m.end - m.begin));
          at = m.end;
        }
        if (at < piece.size()) next.push_back(piece.substr(at));
      }
      pieces.swap(next);
    }
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text().size()));
  state.counters["pieces"] = double(pieces.size());
}

void BM_DecodeUtf8(benchmark::State& state) {
  std::u32string out;
  for (auto _ : state) {
    out.clear();
    tandem::text::decode_utf8_append(text(), out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text().size()));
}

void BM_Nfc(benchmark::State& state) {
  // An accented letter every 4 KiB keeps the text off the ASCII fast path.
  std::string t = text();
  for (size_t i = 0; i + 2 < t.size(); i += 4096) t.replace(i, 2, "\xC3\xA9");
  for (auto _ : state) benchmark::DoNotOptimize(tandem::text::nfc(t));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(t.size()));
}

}  // namespace

BENCHMARK(BM_SplitQwen)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SplitDeepSeek)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeUtf8)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Nfc)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
