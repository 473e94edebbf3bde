// Issue 7's bars, checked on tandem-bench-moe's rows of one run (README,
// "Performance"): batch-1 decode of BF16, FP8, Q8_0 and Q4_K at >= 85% of
// the read, and BF16 prefill at 256 tokens at >= 50% of the peak. The bench
// hands every layer row to add() and prints the summary last.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace bench {

class MoeBars {
 public:
  static constexpr double kDecodeBar = 85.0, kPrefillBar = 50.0;  // percent
  // Under this share of the peak loop's speed (percent) the summary names a
  // row's cores as slowed.
  static constexpr double kSlowCpu = 90.0;

  // One row of the table: `of_read` and `of_peak` in percent (of_peak 0:
  // no peak measured), `read` in GB/s, `roof` in percent, `cpu` the cores'
  // speed in percent of the peak (0: not measured). Rows no bar covers are
  // ignored.
  void add(const std::string& what, tandem::DType type, int64_t batch, double of_read, double read,
           double of_peak, double roof, double cpu);
  // Nothing when no row counted (e.g. --hot, or other batches only).
  void print() const;

  struct Row {
    std::string what;
    double value;  // percent: of the read (decode), of the peak (prefill)
    double other;  // the read in GB/s (decode), the roof in percent (prefill)
    double cpu;    // percent of the peak loop's speed, 0: not measured
  };

 private:
  std::vector<Row> decode_, prefill_;
};

}  // namespace bench
