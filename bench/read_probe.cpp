#include "bench/read_probe.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>

#include "common/error.h"

namespace bench {

namespace tk = tandem::kernels;

Buffer::Buffer(size_t bytes) : n(bytes) {
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw tandem::Error(tandem::ErrorKind::kSystem, "mmap of bench buffer", errno);
  madvise(m, n, MADV_HUGEPAGE);
  p = static_cast<uint8_t*>(m);
}
Buffer::~Buffer() { munmap(p, n); }

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums n bytes with 4 independent accumulators, software-prefetching `pf`
// bytes ahead (0: none). The bench tries several distances and keeps the
// best, so the bandwidth the kernels are measured against is the best this
// probe finds, not an easy one.
__attribute__((target("avx512f"))) double read_avx512(const uint8_t* p, size_t n, size_t pf) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    if (pf) {
      for (size_t o = 0; o < 256; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i + pf + o), _MM_HINT_T0);
    }
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 64));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 128));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 192));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
// The same over 4 streams at once (the buffer's quarters, read side by side,
// as the kernels read 4 weight rows): DRAM often serves several streams
// faster than one.
__attribute__((target("avx512f"))) double read4_avx512(const uint8_t* p, size_t n, size_t pf) {
  const size_t q = n / 4 / 256 * 256;
  const uint8_t* s[4] = {p, p + q, p + 2 * q, p + 3 * q};
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (size_t i = 0; i < q; i += 128) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      if (pf) {
        _mm_prefetch(reinterpret_cast<const char*>(s[k] + i + pf), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(s[k] + i + pf + 64), _MM_HINT_T0);
      }
      a[k] = _mm512_add_ps(a[k], _mm512_add_ps(_mm512_load_ps(s[k] + i), _mm512_load_ps(s[k] + i + 64)));
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

__attribute__((target("avx2"))) double read_avx2(const uint8_t* p, size_t n, size_t pf) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    if (pf) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + pf + 64), _MM_HINT_T0);
    }
    a0 = _mm256_add_ps(a0, _mm256_load_ps(reinterpret_cast<const float*>(p + i)));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(reinterpret_cast<const float*>(p + i + 32)));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(reinterpret_cast<const float*>(p + i + 64)));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(reinterpret_cast<const float*>(p + i + 96)));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

__attribute__((target("avx2"))) double read4_avx2(const uint8_t* p, size_t n, size_t pf) {
  const size_t q = n / 4 / 128 * 128;
  const uint8_t* s[4] = {p, p + q, p + 2 * q, p + 3 * q};
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (size_t i = 0; i < q; i += 128) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      if (pf) {
        _mm_prefetch(reinterpret_cast<const char*>(s[k] + i + pf), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(s[k] + i + pf + 64), _MM_HINT_T0);
      }
      const float* f = reinterpret_cast<const float*>(s[k] + i);
      a[k] = _mm256_add_ps(a[k], _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(f), _mm256_load_ps(f + 8)),
                                               _mm256_add_ps(_mm256_load_ps(f + 16), _mm256_load_ps(f + 24))));
    }
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

// Sums n bytes at p the way `rp` says.
double read_pattern(const uint8_t* p, size_t n, ReadPattern rp, bool avx512) {
  if (rp.streams == 4) return avx512 ? read4_avx512(p, n, rp.pf) : read4_avx2(p, n, rp.pf);
  return avx512 ? read_avx512(p, n, rp.pf) : read_avx2(p, n, rp.pf);
}

}  // namespace

double read_once(tk::ThreadPool& pool, int threads, const Buffer& buf, ReadPattern rp, bool avx512) {
  static volatile double sink = 0;
  const size_t part = buf.n / size_t(threads) / 4096 * 4096;
  double sums[64] = {};
  auto job = [&](int i, int) {
    if (i >= threads) return;
    const uint8_t* p = buf.p + part * size_t(i);
    sums[i] = read_pattern(p, part, rp, avx512);
  };
  const double t0 = now();
  pool.run(job);
  const double dt = now() - t0;
  for (int i = 0; i < threads; ++i) sink = sink + sums[i];
  return double(part * size_t(threads)) / dt / 1e9;
}

double read_spans(tk::ThreadPool& pool, const std::vector<std::pair<const uint8_t*, size_t>>& spans,
                  ReadPattern rp, bool avx512) {
  static volatile double sink = 0;
  const int n = pool.size();
  double sums[64] = {};
  size_t bytes[64] = {};
  auto job = [&](int i, int) {
    for (const auto& [p, len] : spans) {
      const size_t a = len * size_t(i) / size_t(n) / 4096 * 4096, b = len * size_t(i + 1) / size_t(n) / 4096 * 4096;
      if (b <= a) continue;
      sums[i] += read_pattern(p + a, b - a, rp, avx512);
      bytes[i] += b - a;
    }
  };
  const double t0 = now();
  pool.run(job);
  const double dt = now() - t0;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    sink = sink + sums[i];
    total += bytes[i];
  }
  return double(total) / dt / 1e9;
}

std::pair<ReadPattern, double> read_bandwidth(tk::ThreadPool& pool, int threads, const Buffer& buf,
                                              int reps, bool avx512) {
  std::pair<ReadPattern, double> best{{}, 0.0};
  for (int streams : {1, 4}) {
    for (size_t pf : {size_t(0), size_t(1024), size_t(2048), size_t(4096)})
      for (int r = 0; r < reps; ++r) {
        const double gbs = read_once(pool, threads, buf, {streams, pf}, avx512);
        if (gbs > best.second) best = {{streams, pf}, gbs};
      }
  }
  return best;
}

}  // namespace bench
