#include "services/coordinator/split_stepper.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/shm/process.h"

namespace tandem::coordinator {

SplitStepper::SplitStepper(gpu::TransferStepper& prefill, gpu::TransferStepper& decode, std::string transfer_dir)
    : prefill_(prefill), decode_(decode), dir_(std::move(transfer_dir)), name_(fmt::format("sequence-{}-", ::getpid())) {
  sweep(std::chrono::seconds(0));  // a killed predecessor's
}

void SplitStepper::sweep(std::chrono::seconds min_age) {
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("sequence-") || e.path().extension() != ".kv") continue;
    if (std::any_of(pending_.begin(), pending_.end(), [&](const auto& t) { return t.path == e.path().string(); }))
      continue;
    std::error_code ec2;
    const auto mtime = std::filesystem::last_write_time(e.path(), ec2);
    if (ec2 || now - mtime < min_age) continue;
    spdlog::info("removing {}, a transfer file no step will read", e.path().string());
    remove_quietly(e.path().string());
  }
}

SplitStepper::~SplitStepper() {
  for (const gpu::SequenceTransfer& t : pending_) remove_quietly(t.path);
}

void SplitStepper::drop_pending(uint64_t sequence) {
  std::erase_if(pending_, [&](const gpu::SequenceTransfer& t) {
    if (t.sequence != sequence) return false;
    remove_quietly(t.path);
    return true;
  });
}

std::vector<gpu::SampledToken> SplitStepper::step(std::span<const gpu::StepItem> items) {
  std::vector<gpu::StepItem> to_prefill, to_decode;
  std::vector<std::pair<bool, size_t>> where(items.size());  // (on the prefill worker, index there)
  std::vector<gpu::SequenceTransfer> exports;
  for (size_t i = 0; i < items.size(); ++i) {
    const gpu::StepItem& it = items[i];
    if (it.all_logits) fail(ErrorKind::kUnsupported, "sequence {}: all_logits with split roles", it.sequence);
    if (it.position == 0) {
      if (!it.params) fail_invalid("sequence {}: position 0 without sequence parameters", it.sequence);
      drop_pending(it.sequence);
      auto old = seqs_.find(it.sequence);
      if (old != seqs_.end() && old->second.phase == Phase::kDecode) decode_.release(it.sequence);  // replayed
      seqs_[it.sequence] = {Phase::kPrefill, *it.params};
    }
    auto s = seqs_.find(it.sequence);
    if (s == seqs_.end())
      fail(ErrorKind::kNotFound, "sequence {} was not opened here (position {} asked for)", it.sequence, it.position);
    if (s->second.phase == Phase::kPrefill) {
      where[i] = {true, to_prefill.size()};
      to_prefill.push_back(it);
      if (it.sample) exports.push_back({it.sequence, fmt::format("{}/{}{}.{}.kv", dir_, name_, it.sequence, files_++), {}});
    } else {
      where[i] = {false, to_decode.size()};
      to_decode.push_back(it);
    }
  }
  std::vector<gpu::SequenceTransfer> imports = std::move(pending_);
  pending_.clear();
  const bool run_prefill = !to_prefill.empty();
  const bool run_decode = !to_decode.empty() || !imports.empty();
  std::vector<gpu::SampledToken> from_prefill, from_decode;
  std::exception_ptr failure;
  // The error the Generator sees: a lost worker first (it waits for it),
  // then a sequence not found (both replay), else the first.
  int rank = 0;
  auto note = [&](std::exception_ptr e) {
    int r = 1;
    try {
      std::rethrow_exception(e);
    } catch (const Error& x) {
      r = x.kind() == ErrorKind::kPeerLost ? 3 : x.kind() == ErrorKind::kNotFound ? 2 : 1;
    } catch (...) {
    }
    if (r > rank) {
      rank = r;
      failure = e;
    }
  };
  // Both are started before either is awaited, so the workers run at once.
  try {
    if (run_prefill) prefill_.begin({to_prefill, {}, exports});
  } catch (...) {
    note(std::current_exception());
  }
  bool decode_begun = false;
  try {
    if (run_decode) decode_.begin({to_decode, imports, {}});
    decode_begun = run_decode;
  } catch (...) {
    note(std::current_exception());
  }
  if (run_prefill && !failure) {
    try {
      from_prefill = prefill_.finish();
    } catch (...) {
      note(std::current_exception());
    }
  } else if (run_prefill) {
    try {
      prefill_.finish();  // a begun step is collected whatever happened to the other
    } catch (...) {
      note(std::current_exception());
    }
  }
  if (decode_begun) {
    try {
      from_decode = decode_.finish();
    } catch (...) {
      note(std::current_exception());
    }
  }
  if (failure) {
    // The Generator replays from position 0 (lost, not found) or ends these
    // requests: no transfer of this step is used.
    for (const gpu::SequenceTransfer& t : imports) remove_quietly(t.path);
    for (const gpu::SequenceTransfer& t : exports) remove_quietly(t.path);
    std::rethrow_exception(failure);
  }
  handoffs_ += imports.size();
  for (gpu::SequenceTransfer& t : exports) {
    State& s = seqs_.at(t.sequence);
    s.phase = Phase::kDecode;
    t.params = s.params;
    pending_.push_back(std::move(t));
  }
  std::vector<gpu::SampledToken> out(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    out[i] = std::move(where[i].first ? from_prefill.at(where[i].second) : from_decode.at(where[i].second));
  return out;
}

void SplitStepper::release(uint64_t sequence) {
  drop_pending(sequence);
  seqs_.erase(sequence);
  prefill_.release(sequence);
  decode_.release(sequence);
}

void SplitStepper::idle() {
  std::exception_ptr e;
  try {
    prefill_.idle();
  } catch (...) {
    e = std::current_exception();
  }
  decode_.idle();
  if (e) std::rethrow_exception(e);
  // Files that a worker wrote after its step was given up (it was thought
  // lost) are read by nobody.
  if (std::chrono::steady_clock::now() >= next_sweep_) {
    sweep(std::chrono::seconds(60));
    next_sweep_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  }
}

bool SplitStepper::wait_ready(std::chrono::steady_clock::time_point deadline) {
  return prefill_.wait_ready(deadline) && decode_.wait_ready(deadline);
}

}  // namespace tandem::coordinator
