// tandem-bench-moe's compute peak, measured in the same run as the layers
// it rates: GFLOP/s of every thread of the pool at once, best of 3.
#pragma once

#include "kernels/cpu/thread_pool.h"

namespace bench {

// vdpbf16ps (AVX512_BF16), or vfmadd231ps on 512 or 256 bits: the f32
// multiplies of the levels without AVX512_BF16.
enum class PeakLoop { kBf16, kFma512, kFma256 };

double flops_peak(tandem::kernels::ThreadPool& pool, PeakLoop loop);

}  // namespace bench
