#include "common/text/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "common/error.h"

namespace tandem::text {
namespace {

constexpr uint32_t kNoId = UINT32_MAX;

// Length of the UTF-8 character starting at s[i] (1 for a stray byte, so
// malformed input still advances; the tokenizer hands us valid UTF-8).
size_t char_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (c >= 0x80 && c < 0xC0) n = 1;
  return std::min(n, s.size() - i);
}

struct Symbol {
  uint32_t id;      // kNoId: a character the vocabulary lacks
  uint32_t begin;   // byte range of the word this symbol covers
  uint32_t end;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Candidate {
  uint32_t rank;
  int32_t left;  // symbol index; original character order breaks rank ties
  uint32_t left_id;
  uint32_t right_id;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

BpeModel BpeModel::from_spec(const TokenizerSpec& spec) {
  if (spec.model != TokenizerModel::kBPE)
    fail(ErrorKind::kUnsupported, "{}: the BPE model was asked to load a {} model", spec.source,
         to_string(spec.model));
  BpeModel m;
  m.vocab_ = spec.vocab;
  m.byte_fallback_ = spec.byte_fallback;
  m.fuse_unk_ = spec.fuse_unk;
  m.ignore_merges_ = spec.ignore_merges;
  m.end_of_word_suffix_ = spec.end_of_word_suffix;
  m.continuing_subword_prefix_ = spec.continuing_subword_prefix;
  if (spec.unk_token) {
    auto it = spec.vocab.find(*spec.unk_token);
    if (it == spec.vocab.end()) {
      // Hugging Face only fails once the unknown token is needed; a missing
      // one is harmless for vocabularies that cover every byte.
      if (auto id = spec.find(*spec.unk_token)) m.unk_id_ = *id;
    } else {
      m.unk_id_ = it->second;
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = spec.vocab.find(fmt::format("<0x{:02X}>", b));
    if (it != spec.vocab.end()) {
      m.byte_ids_[b] = it->second;
      m.have_byte_[b] = true;
    }
  }
  m.merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    // The merged token drops the right part's continuing-subword prefix.
    const std::string& prefix = spec.continuing_subword_prefix;
    const bool prefixed = !prefix.empty() && b.compare(0, prefix.size(), prefix) == 0;
    const std::string merged = a + (prefixed ? b.substr(prefix.size()) : b);
    auto ia = spec.vocab.find(a), ib = spec.vocab.find(b), im = spec.vocab.find(merged);
    if (ia == spec.vocab.end() || ib == spec.vocab.end() || im == spec.vocab.end())
      fail_invalid("{}: model.merges[{}] names a token missing from the vocab", spec.source, rank);
    // The first listing of a pair keeps its rank, as in Hugging Face.
    m.merges_.try_emplace(pair_key(ia->second, ib->second),
                          Merge{static_cast<uint32_t>(rank), im->second});
  }
  return m;
}

void BpeModel::encode_word(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() <= kCacheMaxWord) {
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    std::vector<uint32_t> ids;
    merge_word(word, ids);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    out.insert(out.end(), ids.begin(), ids.end());
    cache_.emplace(std::string(word), std::move(ids));
    return;
  }
  merge_word(word, out);
}

void BpeModel::merge_word(std::string_view word, std::vector<uint32_t>& out) const {
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  std::string key;
  for (size_t i = 0; i < word.size();) {
    const size_t n = char_len(word, i);
    const bool first = i == 0, last = i + n == word.size();
    key.assign(word.substr(i, n));
    if (!first && !continuing_subword_prefix_.empty()) key.insert(0, continuing_subword_prefix_);
    if (last && !end_of_word_suffix_.empty()) key += end_of_word_suffix_;
    auto it = vocab_.find(key);
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{it == vocab_.end() ? kNoId : it->second, static_cast<uint32_t>(i),
                          static_cast<uint32_t>(i + n), idx - 1, idx + 1, true});
    i += n;
  }
  syms.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[left].next;
    if (right < 0 || syms[left].id == kNoId || syms[right].id == kNoId) return;
    auto it = merges_.find(pair_key(syms[left].id, syms[right].id));
    if (it != merges_.end())
      queue.push(Candidate{it->second.rank, left, syms[left].id, syms[right].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    // Stale entries (a side already merged into something else) are skipped.
    if (!l.alive || l.id != c.left_id || l.next < 0) continue;
    Symbol& r = syms[l.next];
    if (r.id != c.right_id) continue;
    l.id = merges_.at(pair_key(c.left_id, c.right_id)).merged;
    l.end = r.end;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    consider(l.prev);
    consider(c.left);
  }

  bool last_unk = false;
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const Symbol& s = syms[i];
    if (s.id != kNoId) {
      out.push_back(s.id);
      last_unk = false;
      continue;
    }
    const size_t before = out.size();
    emit_unknown(word.substr(s.begin, s.end - s.begin), out);
    // fuse_unk: a run of unknown tokens becomes one.
    const bool is_unk = out.size() == before + 1 && unk_id_ && out.back() == *unk_id_;
    if (is_unk && last_unk && fuse_unk_) out.pop_back();
    last_unk = is_unk;
  }
}

void BpeModel::emit_unknown(std::string_view chars, std::vector<uint32_t>& out) const {
  if (byte_fallback_) {
    bool all = true;
    for (char ch : chars) all = all && have_byte_[static_cast<unsigned char>(ch)];
    if (all) {
      for (char ch : chars) out.push_back(byte_ids_[static_cast<unsigned char>(ch)]);
      return;
    }
  }
  if (unk_id_) out.push_back(*unk_id_);
}

}  // namespace tandem::text
