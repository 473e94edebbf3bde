#include "services/gpu_worker/step_runner.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unordered_set>

#include "common/error.h"
#include "common/shm/process.h"
#include "services/gpu_worker/sequence_file.h"

namespace tandem::gpu {

void token_logprobs(std::span<const float> logits, uint32_t chosen, int top, SampledToken& out) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v - mx));
  const float lse = mx + float(std::log(sum));
  out.logprob = logits[chosen] - lse;
  if (top <= 0) return;
  std::vector<uint32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = uint32_t(i);
  const size_t k = std::min(idx.size(), size_t(top));
  std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(), [&](uint32_t a, uint32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < k; ++i) out.top.emplace_back(idx[i], logits[idx[i]] - lse);
}

void StepRunner::validate(const SequenceParams& p, uint64_t sequence, int64_t first_tokens) {
  if (p.capacity < first_tokens)
    fail_invalid("sequence {}: capacity {} is less than its first {} tokens", sequence, p.capacity, first_tokens);
  if (p.top_logprobs > 20) fail_invalid("sequence {}: top_logprobs above 20", sequence);
  engine::validate(p.sampling);
}

void StepRunner::Sequence::import_from(const engine::Model& m, const std::string& path) {
  history = read_sequence_file(path, cache, m.config().n_layers);
}

void StepRunner::Sequence::export_to(const engine::Model& m, const std::string& path) const {
  write_sequence_file(path, cache, m.config().n_layers, history);
}

void StepRunner::Sequence::commit() {
  if (!file) return;
  std::span<uint32_t> h = file->history();
  const int64_t from = std::min(file->committed(), int64_t(history.size()));
  std::copy(history.begin() + from, history.end(), h.begin() + from);
  file->commit(cache.size());
}

std::unique_ptr<StepRunner::Sequence> StepRunner::open(uint64_t sequence, const SequenceParams& p) {
  if (!persist_) return std::make_unique<Sequence>(model_, p);
  return std::make_unique<Sequence>(model_, KvFile::create(path_of(sequence), model_.config(), sequence, p,
                                                           persist_->coordinator), 0);
}

StepRunner::Sequence* StepRunner::find_at(uint64_t sequence, int64_t position) {
  auto f = seqs_.find(sequence);
  if (f == seqs_.end() && persist_) {
    std::optional<KvFile> kv = KvFile::adopt(path_of(sequence), model_.config(), sequence, persist_->coordinator);
    if (kv && kv->committed() >= position) {
      auto s = std::make_unique<Sequence>(model_, std::move(*kv), position);
      std::span<const uint32_t> h = s->file->history();
      s->history.assign(h.begin(), h.begin() + position);
      f = seqs_.emplace(sequence, std::move(s)).first;
      ++adopted_;
    }
  }
  if (f == seqs_.end()) return nullptr;
  Sequence& s = *f->second;
  if (s.cache.size() > position) {  // answered, but the answer was lost
    s.cache.truncate(position);
    s.history.resize(size_t(position));
  }
  // The rows beyond are about to be rewritten: the file must not claim them.
  if (s.file && s.file->committed() > position) s.file->commit(position);
  return &s;
}

void StepRunner::release(uint64_t sequence) {
  seqs_.erase(sequence);
  if (persist_) remove_quietly(path_of(sequence));  // also when held by a predecessor only
}

void StepRunner::clear() {
  for (auto& [id, s] : seqs_)
    if (s && s->file) s->file->remove();
  seqs_.clear();
}

void StepRunner::persist(std::optional<KvPersistence> p) {
  persist_ = std::move(p);
  if (!persist_) return;
  const std::filesystem::path prefix(persist_->prefix);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(prefix.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix.filename().string()) || e.path().extension() != ".kv") continue;
    if (KvFile::owner(e.path().string()) != persist_->coordinator) remove_quietly(e.path().string());
  }
}

std::vector<SampledToken> StepRunner::finish() {
  StepCall call = std::move(call_);
  call_ = {};
  forward_failed_ = false;
  // A handoff that fails (a full /dev/shm, a bad file) is kNotFound: the
  // coordinator replays the sequences from position 0, and this worker, whose
  // expert links are fine, keeps serving.
  for (const SequenceTransfer& t : call.imports) {
    validate(t.params, t.sequence, 1);
    try {
      auto s = open(t.sequence, t.params);
      s->import_from(model_, t.path);
      s->commit();
      seqs_[t.sequence] = std::move(s);
    } catch (const Error& e) {
      fail(ErrorKind::kNotFound, "sequence {} could not be taken over: {}", t.sequence, e.what());
    }
  }
  std::vector<SampledToken> out = run(call.items);
  for (const SequenceTransfer& t : call.exports) {
    auto f = seqs_.find(t.sequence);
    if (f == seqs_.end()) fail(ErrorKind::kNotFound, "sequence {} is not open here: nothing to export", t.sequence);
    try {
      f->second->export_to(model_, t.path);
    } catch (const Error& e) {
      fail(ErrorKind::kNotFound, "sequence {} could not be handed over: {}", t.sequence, e.what());
    }
    if (f->second->file) f->second->file->remove();
    seqs_.erase(f);
  }
  return out;
}

std::vector<SampledToken> StepRunner::run(std::span<const StepItem> items) {
  const ModelConfig& c = model_.config();
  // Everything is checked before anything changes.
  std::unordered_set<uint64_t> seen;
  for (const StepItem& it : items) {
    if (!seen.insert(it.sequence).second) fail_invalid("sequence {} appears twice in one step", it.sequence);
    if (it.tokens.empty()) fail_invalid("sequence {}: a step item without tokens", it.sequence);
    for (uint32_t t : it.tokens)
      if (t >= c.vocab_size) fail_invalid("sequence {}: token {} is outside the vocabulary ({} ids)", it.sequence, t, c.vocab_size);
    if (it.position == 0) {
      if (!it.params) fail_invalid("sequence {}: position 0 without sequence parameters", it.sequence);
      validate(*it.params, it.sequence, int64_t(it.tokens.size()));
      continue;
    }
    Sequence* held = find_at(it.sequence, it.position);
    if (!held)
      fail(ErrorKind::kNotFound, "sequence {} is not open here (position {} asked for)", it.sequence, it.position);
    if (held->cache.size() != it.position)
      fail(ErrorKind::kNotFound, "sequence {} holds {} tokens here, not {}", it.sequence, held->cache.size(),
           it.position);
    if (it.position + int64_t(it.tokens.size()) > held->cache.capacity())
      fail_invalid("sequence {}: {} more tokens exceed its capacity of {}", it.sequence, it.tokens.size(),
                   held->cache.capacity());
  }
  // New sequences (their KV files may fail to be made) before any is stored.
  std::vector<std::unique_ptr<Sequence>> fresh(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].position == 0) fresh[i] = open(items[i].sequence, *items[i].params);
  std::vector<Sequence*> seqs;
  std::vector<engine::Model::Sequence> batch;
  std::vector<size_t> row(items.size());  // an item's row in the batch (all_logits items run alone)
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    auto& slot = seqs_[it.sequence];
    if (fresh[i]) slot = std::move(fresh[i]);
    seqs.push_back(slot.get());
    if (!it.all_logits) {
      row[i] = batch.size();
      batch.push_back({it.tokens, &slot->cache});
    }
  }
  const size_t V = c.vocab_size;
  std::vector<SampledToken> out(items.size());
  std::vector<float> logits;
  try {
    if (!batch.empty()) logits = model_.forward_last(batch);
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].all_logits) out[i].logits = model_.forward(items[i].tokens, seqs[i]->cache);
  } catch (...) {
    for (const StepItem& it : items) seqs_.erase(it.sequence);
    forward_failed_ = true;
    throw;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Sequence& s = *seqs[i];
    s.history.insert(s.history.end(), items[i].tokens.begin(), items[i].tokens.end());
    s.commit();
    if (!items[i].sample) continue;
    const std::span<const float> last = items[i].all_logits ? std::span<const float>(out[i].logits).last(V)
                                                            : std::span<const float>(logits).subspan(row[i] * V, V);
    out[i].sampled = true;
    out[i].token = s.sampler.sample(last, s.history);
    if (s.params.top_logprobs >= 0) token_logprobs(last, out[i].token, s.params.top_logprobs, out[i]);
  }
  return out;
}

}  // namespace tandem::gpu
