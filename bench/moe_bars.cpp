#include "bench/moe_bars.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace bench {

void MoeBars::add(const std::string& what, tandem::DType type, int64_t batch, double of_read, double read,
                  double of_peak, double roof, double cpu) {
  using tandem::DType;
  const bool decode_type = type == DType::kBF16 || type == DType::kF8E4M3 || type == DType::kQ8_0 ||
                           type == DType::kQ4_K;
  if (batch == 1 && decode_type) decode_.push_back({what, of_read, read, cpu});
  if (batch == 256 && type == DType::kBF16 && of_peak > 0) prefill_.push_back({what, of_peak, roof, cpu});
}

namespace {
// ", the cores at 78% of the peak loop's speed" where they ran slower than
// the run's peak (a neighbour's load): the row's arithmetic was slowed too.
std::string cpu_note(const MoeBars::Row& r) {
  if (r.cpu <= 0 || r.cpu >= MoeBars::kSlowCpu) return "";
  char s[96];
  std::snprintf(s, sizeof s, ", the cores at %.0f%% of the peak loop's speed", r.cpu);
  return s;
}
}  // namespace

void MoeBars::print() const {
  if (decode_.empty() && prefill_.empty()) return;
  std::printf("\nissue 7's bars in this run:\n");
  if (!decode_.empty()) {
    const auto low = std::min_element(decode_.begin(), decode_.end(),
                                      [](const Row& x, const Row& y) { return x.value < y.value; });
    const auto met = std::count_if(decode_.begin(), decode_.end(), [](const Row& r) { return r.value >= kDecodeBar; });
    std::printf("  batch 1 at >= %.0f%% of the read: %td of %zu rows (lowest: %s, %.1f%% at a read of %.1f GB/s%s)\n",
                kDecodeBar, met, decode_.size(), low->what.c_str(), low->value, low->other, cpu_note(*low).c_str());
    for (const Row& r : decode_)
      if (r.value < kDecodeBar && &r != &*low)
        std::printf("    also under it: %s, %.1f%% at a read of %.1f GB/s%s\n", r.what.c_str(), r.value, r.other,
                    cpu_note(r).c_str());
  }
  if (!prefill_.empty()) {
    const auto met =
        std::count_if(prefill_.begin(), prefill_.end(), [](const Row& r) { return r.value >= kPrefillBar; });
    std::printf("  BF16 at 256 tokens at >= %.0f%% of the peak: %td of %zu rows", kPrefillBar, met, prefill_.size());
    for (const Row& r : prefill_)
      if (r.value < kPrefillBar)
        std::printf("; %s %.1f%% at a roof of %.1f%%%s%s", r.what.c_str(), r.value, r.other,
                    r.other < kPrefillBar ? " (this read allows no more)" : "", cpu_note(r).c_str());
    std::printf("\n");
  }
}

}  // namespace bench
