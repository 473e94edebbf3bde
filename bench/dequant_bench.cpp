// Throughput of the reference dequantisers, per weight type, in GB/s of
// stored bytes read and in values per second. A baseline for the optimised
// kernels of the CPU kernel issue; run: build/bin/tandem-bench-dequant
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/quantize.h"

namespace {

void BM_Dequantize(benchmark::State& state, tandem::DType type) {
  const size_t n = 1 << 20;  // 1 Mi values: a 4 MiB f32 output, larger than L2
  std::vector<float> src(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : src) v = dist(rng);
  std::vector<std::byte> packed(*tandem::bytes_for(type, n));
  tandem::kernels::quantize_generic(type, src.data(), packed.data(), n);
  std::vector<float> out(n);
  for (auto _ : state) {
    tandem::kernels::dequantize_generic(type, packed.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(packed.size()));
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(n));
}

}  // namespace

BENCHMARK_CAPTURE(BM_Dequantize, f16, tandem::DType::kF16);
BENCHMARK_CAPTURE(BM_Dequantize, bf16, tandem::DType::kBF16);
BENCHMARK_CAPTURE(BM_Dequantize, f8_e4m3, tandem::DType::kF8E4M3);
BENCHMARK_CAPTURE(BM_Dequantize, q8_0, tandem::DType::kQ8_0);
BENCHMARK_CAPTURE(BM_Dequantize, q5_0, tandem::DType::kQ5_0);
BENCHMARK_CAPTURE(BM_Dequantize, q4_k, tandem::DType::kQ4_K);
BENCHMARK_CAPTURE(BM_Dequantize, q5_k, tandem::DType::kQ5_K);
BENCHMARK_CAPTURE(BM_Dequantize, q6_k, tandem::DType::kQ6_K);

BENCHMARK_MAIN();
