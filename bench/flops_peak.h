// tandem-bench-moe's compute peak, measured in the same run as the layers
// it rates: GFLOP/s of every thread of the pool at once, best of 3 passes;
// and short passes of the same loop, the cores' speed before each row's
// repetitions.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/thread_pool.h"

namespace bench {

// vdpbf16ps (AVX512_BF16), or vfmadd231ps on 512 or 256 bits: the f32
// multiplies of the levels without AVX512_BF16.
enum class PeakLoop { kBf16, kFma512, kFma256 };

// GFLOP/s of `loop` on every pool thread at once, the best of `passes`
// passes of `iters` iterations (the default: about 0.1 s a pass).
double flops_peak(tandem::kernels::ThreadPool& pool, PeakLoop loop, int64_t iters = 10'000'000, int passes = 3);

// The loop level_peak() times for the kernels' level; none below avx2.
std::optional<PeakLoop> level_peak_loop(tandem::kernels::CpuIsa isa);

// The peak of the level the kernels run at (TANDEM_CPU_ISA may force a
// lower one than the CPU's): vdpbf16ps where they have AVX512_BF16, else an
// f32 fma of their width; 0 below avx2. Prints which, with its GFLOP/s.
double level_peak(tandem::kernels::ThreadPool& pool, tandem::kernels::CpuIsa isa);

}  // namespace bench
