// tandem-bench-moe's read probe: the STREAM-style read of a buffer far
// larger than the caches that every layer row is rated against, in the
// patterns it tries (one stream or four side by side a thread, software
// prefetch distances), and a plain read of a layer's own weight spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace bench {

// Memory for large buffers: page-aligned, transparent huge pages asked for
// (as the arena gets them from hugetlbfs where there is one), touched once.
struct Buffer {
  uint8_t* p = nullptr;
  size_t n = 0;
  explicit Buffer(size_t bytes);  // throws with errno where mmap fails
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// How a thread reads its part of the probe buffer.
struct ReadPattern {
  int streams = 1;  // 1, or 4 side by side
  size_t pf = 0;    // software prefetch distance, 0: none
};

// GB/s of one pass over `buf` by `threads` threads, each its own contiguous part.
double read_once(tandem::kernels::ThreadPool& pool, int threads, const Buffer& buf, ReadPattern rp, bool avx512);

// GB/s of one pass over the layer's own weights (the routed experts' gate,
// up and down matrices), each thread its share of every matrix, read with
// the probe's pattern: what DRAM gives a job of this size and shape.
double read_spans(tandem::kernels::ThreadPool& pool, const std::vector<std::pair<const uint8_t*, size_t>>& spans,
                  ReadPattern rp, bool avx512);

// The best pattern for `threads` threads (over 1 or 4 streams and prefetch
// distances 0, 1, 2, 4 KiB) and its best GB/s over `reps` passes.
std::pair<ReadPattern, double> read_bandwidth(tandem::kernels::ThreadPool& pool, int threads, const Buffer& buf,
                                              int reps, bool avx512);

}  // namespace bench
