#include "services/gpu_worker/step_message.h"

#include "common/error.h"

namespace tandem::gpu {

void encode_step_request(proto::StepRequest::Builder out, std::span<const StepItem> items,
                         std::span<const uint64_t> release) {
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
      const engine::SamplingParams& p = it.params->sampling;
      auto sp = s.initSampling();
      sp.setTemperature(p.temperature);
      sp.setTopK(p.top_k);
      sp.setTopP(p.top_p);
      sp.setMinP(p.min_p);
      sp.setRepetitionPenalty(p.repetition_penalty);
      sp.setRepeatLastN(p.repeat_last_n);
      sp.setSeed(p.seed);
    }
  }
  auto rel = out.initRelease(unsigned(release.size()));
  for (size_t i = 0; i < release.size(); ++i) rel.set(unsigned(i), release[i]);
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
      SequenceParams& p = d.params.emplace_back();
      if (s.getCapacity() > uint64_t(INT32_MAX)) fail_invalid("sequence {}: capacity {} is too large", it.sequence, s.getCapacity());
      p.capacity = int64_t(s.getCapacity());
      p.top_logprobs = s.getTopLogprobs();
      if (p.top_logprobs < -1 || p.top_logprobs > 20)
        fail_invalid("sequence {}: topLogprobs {} is outside -1..20", it.sequence, p.top_logprobs);
      auto sp = s.getSampling();
      p.sampling.temperature = sp.getTemperature();
      p.sampling.top_k = sp.getTopK();
      p.sampling.top_p = sp.getTopP();
      p.sampling.min_p = sp.getMinP();
      p.sampling.repetition_penalty = sp.getRepetitionPenalty();
      p.sampling.repeat_last_n = sp.getRepeatLastN();
      p.sampling.seed = sp.getSeed();
      it.params = &p;
    }
    d.items.push_back(it);
  }
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
