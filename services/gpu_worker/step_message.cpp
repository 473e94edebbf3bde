#include "services/gpu_worker/step_message.h"

#include "common/error.h"

namespace tandem::gpu {

namespace {

void encode_params(const SequenceParams& params, proto::Sampling::Builder sp) {
  const engine::SamplingParams& p = params.sampling;
  sp.setTemperature(p.temperature);
  sp.setTopK(p.top_k);
  sp.setTopP(p.top_p);
  sp.setMinP(p.min_p);
  sp.setRepetitionPenalty(p.repetition_penalty);
  sp.setRepeatLastN(p.repeat_last_n);
  sp.setSeed(p.seed);
}

SequenceParams decode_params(uint64_t id, uint64_t capacity, int32_t top_logprobs, proto::Sampling::Reader sp) {
  SequenceParams p;
  if (capacity > uint64_t(INT32_MAX)) fail_invalid("sequence {}: capacity {} is too large", id, capacity);
  p.capacity = int64_t(capacity);
  p.top_logprobs = top_logprobs;
  if (p.top_logprobs < -1 || p.top_logprobs > 20)
    fail_invalid("sequence {}: topLogprobs {} is outside -1..20", id, p.top_logprobs);
  p.sampling.temperature = sp.getTemperature();
  p.sampling.top_k = sp.getTopK();
  p.sampling.top_p = sp.getTopP();
  p.sampling.min_p = sp.getMinP();
  p.sampling.repetition_penalty = sp.getRepetitionPenalty();
  p.sampling.repeat_last_n = sp.getRepeatLastN();
  p.sampling.seed = sp.getSeed();
  return p;
}

void encode_transfers(capnp::List<proto::SequenceTransfer>::Builder out, std::span<const SequenceTransfer> ts) {
  for (size_t i = 0; i < ts.size(); ++i) {
    auto t = out[unsigned(i)];
    t.setId(ts[i].sequence);
    t.setPath(ts[i].path);
    t.setCapacity(uint64_t(ts[i].params.capacity));
    t.setTopLogprobs(ts[i].params.top_logprobs);
    encode_params(ts[i].params, t.initSampling());
  }
}

std::vector<SequenceTransfer> decode_transfers(capnp::List<proto::SequenceTransfer>::Reader in) {
  std::vector<SequenceTransfer> out;
  for (auto t : in) {
    SequenceTransfer& x = out.emplace_back();
    x.sequence = t.getId();
    x.path = t.getPath().cStr();
    if (x.path.empty()) fail_invalid("sequence {}: a transfer without a file", x.sequence);
    x.params = decode_params(x.sequence, t.getCapacity(), t.getTopLogprobs(), t.getSampling());
  }
  return out;
}

}  // namespace

void encode_step_request(proto::StepRequest::Builder out, std::span<const StepItem> items,
                         std::span<const uint64_t> release, std::span<const SequenceTransfer> imports,
                         std::span<const SequenceTransfer> exports) {
  auto seqs = out.initSequences(unsigned(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    auto s = seqs[unsigned(i)];
    s.setId(it.sequence);
    s.setPosition(uint64_t(it.position));
    auto toks = s.initTokens(unsigned(it.tokens.size()));
    for (size_t k = 0; k < it.tokens.size(); ++k) toks.set(unsigned(k), it.tokens[k]);
    s.setSample(it.sample);
    s.setAllLogits(it.all_logits);
    s.setTopLogprobs(-1);
    if (it.params) {
      s.setCapacity(uint64_t(it.params->capacity));
      s.setTopLogprobs(it.params->top_logprobs);
      encode_params(*it.params, s.initSampling());
    }
  }
  auto rel = out.initRelease(unsigned(release.size()));
  for (size_t i = 0; i < release.size(); ++i) rel.set(unsigned(i), release[i]);
  if (!imports.empty()) encode_transfers(out.initImports(unsigned(imports.size())), imports);
  if (!exports.empty()) encode_transfers(out.initExports(unsigned(exports.size())), exports);
}

DecodedStep decode_step_request(proto::StepRequest::Reader in) {
  DecodedStep d;
  for (uint64_t r : in.getRelease()) d.release.push_back(r);
  for (auto s : in.getSequences()) {
    StepItem it;
    it.sequence = s.getId();
    if (s.getPosition() > uint64_t(INT32_MAX)) fail_invalid("sequence {}: position {} is too large", it.sequence, s.getPosition());
    it.position = int64_t(s.getPosition());
    auto& toks = d.tokens.emplace_back();
    for (uint32_t t : s.getTokens()) toks.push_back(t);
    it.tokens = toks;
    it.sample = s.getSample();
    it.all_logits = s.getAllLogits();
    if (it.position == 0) {
      d.params.push_back(decode_params(it.sequence, s.getCapacity(), s.getTopLogprobs(), s.getSampling()));
      it.params = &d.params.back();
    }
    d.items.push_back(it);
  }
  d.imports = decode_transfers(in.getImports());
  d.exports = decode_transfers(in.getExports());
  return d;
}

void encode_step_reply(proto::StepReply::Builder out, std::span<const SampledToken> results) {
  auto rs = out.initResults(unsigned(results.size()));
  for (size_t i = 0; i < results.size(); ++i) {
    const SampledToken& t = results[i];
    auto r = rs[unsigned(i)];
    r.setSampled(t.sampled);
    r.setToken(t.token);
    r.setLogprob(t.logprob);
    auto ids = r.initTopIds(unsigned(t.top.size()));
    auto lps = r.initTopLogprobs(unsigned(t.top.size()));
    for (size_t k = 0; k < t.top.size(); ++k) {
      ids.set(unsigned(k), t.top[k].first);
      lps.set(unsigned(k), t.top[k].second);
    }
    if (!t.logits.empty()) {
      auto l = r.initLogits(unsigned(t.logits.size()));
      for (size_t k = 0; k < t.logits.size(); ++k) l.set(unsigned(k), t.logits[k]);
    }
  }
}

std::vector<SampledToken> decode_step_reply(proto::StepReply::Reader in, size_t expected) {
  auto rs = in.getResults();
  if (rs.size() != expected)
    fail_invalid("the step reply has {} results for {} sequences", rs.size(), expected);
  std::vector<SampledToken> out(rs.size());
  for (unsigned i = 0; i < rs.size(); ++i) {
    auto r = rs[i];
    out[i].sampled = r.getSampled();
    out[i].token = r.getToken();
    out[i].logprob = r.getLogprob();
    auto ids = r.getTopIds();
    auto lps = r.getTopLogprobs();
    if (ids.size() != lps.size()) fail_invalid("step reply {}: {} top ids but {} log-probabilities", i, ids.size(), lps.size());
    for (unsigned k = 0; k < ids.size(); ++k) out[i].top.emplace_back(ids[k], lps[k]);
    for (float v : r.getLogits()) out[i].logits.push_back(v);
  }
  return out;
}

}  // namespace tandem::gpu
