// tandem-bench-moe's compute peaks: register-only loops of independent
// chains, timed on every pool thread at once (bench/flops_peak.h).
#include "bench/flops_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace bench {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// kChains independent vdpbf16ps chains per thread (enough to cover the
// instruction's latency on every pipe), `iters` times: 64 flops each.
constexpr int kChains = 24;
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_loop(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80), b = (__m512bh)_mm512_set1_epi16(0x3C00);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 32
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
// The same with kChains / 2 vfmadd231ps chains of 8 floats (16 flops each)
// or 16 (32): the peak of machines without AVX512_BF16, whose kernels widen
// every weight to f32 (the avx2 and avx512 levels).
__attribute__((target("avx2,fma"))) double fma256_loop(int64_t iters) {
  __m256 acc[kChains / 2];
  for (int i = 0; i < kChains / 2; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(0.5f);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains / 2; ++i) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kChains / 2; ++i) s = _mm256_add_ps(s, acc[i]);
  return double(_mm256_cvtss_f32(s));
}
__attribute__((target("avx512f"))) double fma512_loop(int64_t iters) {
  __m512 acc[kChains / 2];
  for (int i = 0; i < kChains / 2; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0.5f);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains / 2; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains / 2; ++i) s = _mm512_add_ps(s, acc[i]);
  return double(_mm512_reduce_add_ps(s));
}

}  // namespace

double flops_peak(tandem::kernels::ThreadPool& pool, PeakLoop loop, int64_t iters, int passes) {
  volatile double sink = 0;
  double best = 0;
  for (int r = 0; r < passes; ++r) {
    double sums[64] = {};
    auto job = [&](int i, int) {
      sums[i] = loop == PeakLoop::kBf16     ? dpbf16_loop(iters)
                : loop == PeakLoop::kFma512 ? fma512_loop(iters)
                                            : fma256_loop(iters);
    };
    const double t0 = now();
    pool.run(job);
    const double dt = now() - t0;
    sink = sink + sums[0];
    const double flops = loop == PeakLoop::kBf16 ? kChains * 64.0 : loop == PeakLoop::kFma512 ? kChains * 16.0
                                                                                            : kChains * 8.0;
    best = std::max(best, double(pool.size()) * double(iters) * flops / dt / 1e9);
  }
  return best;
}

std::optional<PeakLoop> level_peak_loop(tandem::kernels::CpuIsa isa) {
  using tandem::kernels::CpuIsa;
  if (isa >= CpuIsa::kAvx512Bf16) return PeakLoop::kBf16;
  if (isa >= CpuIsa::kAvx512) return PeakLoop::kFma512;
  if (isa >= CpuIsa::kAvx2) return PeakLoop::kFma256;
  return std::nullopt;
}

double level_peak(tandem::kernels::ThreadPool& pool, tandem::kernels::CpuIsa isa) {
  const int n = pool.size();
  const std::string level(tandem::kernels::isa_name(isa));
  const std::optional<PeakLoop> loop = level_peak_loop(isa);
  if (loop == PeakLoop::kBf16) {
    const double peak = flops_peak(pool, *loop);
    std::printf("avx512 bf16 peak (vdpbf16ps, %d threads): %.1f GFLOP/s\n", n, peak);
    return peak;
  }
  if (loop) {
    const bool wide = loop == PeakLoop::kFma512;
    const double peak = flops_peak(pool, *loop);
    std::printf("kernels without AVX512_BF16 (%s); f32 fma peak instead (%d-bit vfmadd231ps, %d threads): "
                "%.1f GFLOP/s\n", level.c_str(), wide ? 512 : 256, n, peak);
    return peak;
  }
  std::printf("no peak: the kernels (%s) have neither AVX512_BF16 nor AVX2 with FMA\n", level.c_str());
  return 0;
}

}  // namespace bench
