// tandem-bench-moe: the routed-expert layer (kernels/cpu/moe.h) against this
// machine's limits, measured in the same run:
//  1. read bandwidth, STREAM-style (sum of a buffer far larger than the
//     caches), with 1..N pinned threads;
//  2. the AVX-512 BF16 peak (vdpbf16ps on registers only) of N threads, or
//     where the kernels' level has no AVX512_BF16 (the CPU's, or a lower
//     one forced) the f32 one (vfmadd231ps, 512-bit from avx512 up);
//  3. one MoE layer of DeepSeek-V3 (7168 x 2048, 256 experts) and
//     Qwen3-30B-A3B (2048 x 768, 128 experts) expert shapes with top-8
//     random routing (so tokens per expert are the model's), at 1, 2, 4, 8,
//     32 and 256 tokens, per weight type: GB/s of the weight bytes the routed
//     experts span and its ratio to the read bandwidth measured just before,
//     GFLOP/s and its fraction of the peak; beside it, a plain read of the
//     same experts' bytes ("plain", read before the probe), which shows
//     what DRAM gives a job that size (a Qwen3 layer is 21-75 MB, so its
//     start and end weigh more than in the 2 GiB probe). The experts' weights share a
//     --pool-gib buffer far larger than the caches (expert e uses slot
//     e % slots), so every expert's bytes come from DRAM;
//  4. a summary of issue 7's bars over this run's rows: how many batch-1
//     rows of the four bar types reached 85% of the read, and which BF16
//     256-token rows fell under 50% of the peak, with their roof (moe_bars.h).
// Bandwidth and peak are the best of --reps passes (as STREAM reports); the
// layer rows are medians over --reps repetitions.
// The pool's threads spin up to --spin-us (default 100 ms) between jobs, so
// each layer starts with them awake, as a decode step's back-to-back layers
// do; the bench prints what waking a sleeping thread costs here instead (on
// the development VM about 60 us for the caller's futex wake and 120 us
// until the thread runs: a third of a Qwen3 layer's batch-1 time).
// TANDEM_CPU_ISA=avx2|avx512|generic forces a lower kernel level. Q4_K,
// Q8_0 and BF16 are stored as the loader stores them on this machine
// (q8_0_x4 from avx512 up, q4_k_x4, q5_k_x4 and q6_k_x4 from avx2 up, "/x4" in the table; fp8_x16 and
// q8_0_x16 with avx512bf16, "/x16"; bf16_x16z with avx512bf16, "/x16z");
// --types takes any weight type, and a layer's gate/up and down types as
// q4_k+q6_k (a Q4_K_M layer whose ffn_down is Q6_K; outside the bars).
// --rowmajor keeps plain rows; --bf16-x16 stores BF16 as bf16_x16 (the
// loader's layout before stop 50) instead of bf16_x16z ("/x16z"), whose GB/s
// count the coded bytes a kernel reads (0.77 of the matrices'; "plain" still
// reads the whole matrices). FP8 experts carry their marks (fp8_marks.h,
// made once here from the rows, as a loader would; "/mk" in the table),
// which --fp8-unmarked leaves out. --split-bf16 runs BF16 and FP8 with
// activations of f32 precision ("/sp": MoeShape::split_bf16_activations, as
// the expert workers run Hugging Face models). --hot skips the
// read before each repetition (with a small --pool-gib: the kernels' speed
// with weights in cache, their compute ceiling).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/flops_peak.h"
#include "bench/moe_bars.h"
#include "bench/read_probe.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/cpu/bf16_x16z.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_layout.h"

namespace tk = tandem::kernels;
using bench::Buffer;
using bench::ReadPattern;
using tandem::DType;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A layer's weight types: gate and up, down. "q4_k+q6_k" on the command
// line: llama.cpp's Q4_K_M and Q5_K_M files keep ffn_down in Q6_K in about
// 40% of the layers (the first and last eighth and every third between).
struct LayerTypes {
  DType gate_up, down;
};

struct Options {
  double pool_gib = 2.0;
  int reps = 7;
  double read_gib = 2.0;
  bool hot = false;       // no probe read between repetitions: weights stay in cache where they fit
  bool rowmajor = false;  // plain rows where the arena would repack them
  bool bf16_x16 = false;  // BF16 as bf16_x16 rather than bf16_x16z
  bool fp8_unmarked = false;  // FP8 experts without their marks
  bool split_bf16 = false;    // MoeShape::split_bf16_activations
  int spin_us = 100'000;  // the pool threads' spin between jobs
  std::vector<LayerTypes> types = {{DType::kBF16, DType::kBF16}, {DType::kF8E4M3, DType::kF8E4M3},
                                   {DType::kQ8_0, DType::kQ8_0}, {DType::kQ4_K, DType::kQ4_K}};
  std::vector<int64_t> batches = {1, 2, 4, 8, 32, 256};
  std::vector<std::string> shapes = {"deepseek-v3", "qwen3-30b-a3b"};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Median over a few tries of how long after run() starts the caller and the
// last other thread begin a job, each try after the threads have gone to
// sleep (spin_us plus a margin of idleness).
std::pair<double, double> wake_latency_us(tk::ThreadPool& pool, int spin_us) {
  std::vector<double> caller, others;
  for (int r = 0; r < 5; ++r) {
    std::this_thread::sleep_for(std::chrono::microseconds(spin_us) + std::chrono::milliseconds(20));
    double start[64] = {};
    auto job = [&](int i, int) { start[i] = now(); };
    const double t0 = now();
    pool.run(job);
    caller.push_back((start[0] - t0) * 1e6);
    others.push_back((*std::max_element(start + 1, start + pool.size()) - t0) * 1e6);
  }
  return {median(caller), median(others)};
}

struct ShapeDef {
  std::string name;
  int64_t hidden, ffn, n_experts;  // the model's routed experts per layer
};

// Fills `bytes` of weights of type t from a few hundred quantised random
// rows repeated (the values do not change the speed; quantising gigabytes
// would take minutes).
void fill_weights(DType t, int64_t cols, uint8_t* dst, size_t bytes, std::mt19937& rng) {
  const size_t row = size_t(*tandem::bytes_for(t, uint64_t(cols)));
  const int kRows = 64;
  std::vector<uint8_t> rows(row * kRows);
  std::vector<float> v(static_cast<size_t>(cols));
  std::normal_distribution<float> nd(0.0f, t == DType::kF8E4M3 ? 50.0f : 0.05f);
  for (int r = 0; r < kRows; ++r) {
    for (auto& x : v) x = nd(rng);
    tk::quantize_generic(t, v.data(), rows.data() + row * size_t(r), v.size());
  }
  for (size_t off = 0; off < bytes; off += rows.size())
    std::memcpy(dst + off, rows.data(), std::min(rows.size(), bytes - off));
}

// The layout the loader gives a matrix on this machine (arena.h), or plain
// rows (--rowmajor).
tk::WeightLayout arena_layout(DType type, tk::CpuIsa isa, const Options& o, int64_t rows, int64_t cols) {
  if (o.rowmajor) return tk::WeightLayout::kRowMajor;
  if (o.bf16_x16 && isa == tk::CpuIsa::kAvx512Bf16 && tk::layout_fits(tk::WeightLayout::kBf16X16, type, rows, cols))
    return tk::WeightLayout::kBf16X16;
  return tk::expert_matrix_layout(type, isa, rows, cols);
}

// Iterations of the peak loop before each repetition ('cpu'): about 1 ms
// (the fma loops take half as long an iteration as vdpbf16ps's).
int64_t cpu_check_iters(bench::PeakLoop loop) { return loop == bench::PeakLoop::kBf16 ? 150'000 : 300'000; }

void bench_layer(tk::ThreadPool& pool, tk::CpuIsa isa, const ShapeDef& sd, LayerTypes types,
                 const Options& o, const Buffer& probe, ReadPattern rp, bool avx512, double peak,
                 bench::MoeBars& bars) {
  const std::optional<bench::PeakLoop> cpu_loop = bench::level_peak_loop(isa);
  tk::MoeShape s;
  const DType type = types.gate_up, down_type = types.down;
  s.gate_up_type = type;
  s.down_type = down_type;
  s.hidden = sd.hidden;
  s.ffn = sd.ffn;
  s.gate_up_row_stride = size_t(*tandem::bytes_for(type, uint64_t(sd.hidden)));
  s.down_row_stride = size_t(*tandem::bytes_for(down_type, uint64_t(sd.ffn)));
  s.gate_up_scale_stride = size_t((sd.hidden + 127) / 128);
  s.down_scale_stride = size_t((sd.ffn + 127) / 128);
  s.split_bf16_activations = o.split_bf16;
  const size_t gu_bytes = s.gate_up_row_stride * size_t(sd.ffn);
  const size_t d_bytes = s.down_row_stride * size_t(sd.hidden);
  const size_t per_expert = 2 * gu_bytes + d_bytes;
  const int64_t top_k = 8;
  // The layer has the model's expert count, so tokens per expert are the
  // model's (256 tokens x top-8 over 256 experts: 8 each). Their weights
  // share the --pool-gib buffer (expert e uses slot e % slots), which is far
  // larger than the caches: an expert's bytes still come from DRAM.
  s.n_experts = sd.n_experts;
  const int64_t slots = std::clamp<int64_t>(int64_t(o.pool_gib * double(1ull << 30) / double(per_expert)),
                                            top_k, sd.n_experts);
  Buffer weights(per_expert * size_t(slots));
  std::mt19937 rng(5);
  std::vector<float> scales(size_t(((sd.hidden + 127) / 128) * ((sd.ffn + 127) / 128)) * 2, 0.002f);
  std::vector<tk::MoeExpert> experts(size_t(s.n_experts));
  std::vector<uint8_t> marks;
  {
    std::vector<uint8_t> one(per_expert);
    fill_weights(type, sd.hidden, one.data(), 2 * gu_bytes, rng);
    fill_weights(down_type, sd.ffn, one.data() + 2 * gu_bytes, d_bytes, rng);
    // FP8 marks, one set per slot (as a loader would store them beside each
    // expert's weights): gate, up, down, made from the rows before any repack.
    const size_t gu_marks = size_t(sd.ffn) * tk::fp8_marks_row_bytes(sd.hidden);
    const size_t d_marks = size_t(sd.hidden) * tk::fp8_marks_row_bytes(sd.ffn);
    if (type == DType::kF8E4M3 && down_type == type && !o.fp8_unmarked) {
      marks.resize((2 * gu_marks + d_marks) * size_t(slots));
      tk::fp8_mark_blocks(one.data(), s.gate_up_row_stride, sd.ffn, sd.hidden, marks.data());
      tk::fp8_mark_blocks(one.data() + gu_bytes, s.gate_up_row_stride, sd.ffn, sd.hidden, marks.data() + gu_marks);
      tk::fp8_mark_blocks(one.data() + 2 * gu_bytes, s.down_row_stride, sd.hidden, sd.ffn,
                          marks.data() + 2 * gu_marks);
      for (int64_t e = 1; e < slots; ++e)
        std::memcpy(marks.data() + (2 * gu_marks + d_marks) * size_t(e), marks.data(), 2 * gu_marks + d_marks);
    }
    // The layouts the loader gives these matrices on this machine (arena.h).
    const tk::WeightLayout gu = arena_layout(type, isa, o, sd.ffn, sd.hidden);
    const tk::WeightLayout dn = arena_layout(down_type, isa, o, sd.hidden, sd.ffn);
    if (gu != tk::WeightLayout::kRowMajor) {
      tk::repack_rows(gu, type, one.data(), sd.ffn, sd.hidden);
      tk::repack_rows(gu, type, one.data() + gu_bytes, sd.ffn, sd.hidden);
    }
    if (dn != tk::WeightLayout::kRowMajor) tk::repack_rows(dn, down_type, one.data() + 2 * gu_bytes, sd.hidden, sd.ffn);
    s.gate_up_layout = gu;
    s.down_layout = dn;
    // As the arena lays a layer out: every slot's gate, then every up, then
    // every down (one tensor each), so an expert's gate and up lie far apart.
    uint8_t* gate = weights.p;
    uint8_t* up = gate + gu_bytes * size_t(slots);
    uint8_t* down = up + gu_bytes * size_t(slots);
    for (int64_t e = 0; e < slots; ++e) {
      std::memcpy(gate + gu_bytes * size_t(e), one.data(), gu_bytes);
      std::memcpy(up + gu_bytes * size_t(e), one.data() + gu_bytes, gu_bytes);
      std::memcpy(down + d_bytes * size_t(e), one.data() + 2 * gu_bytes, d_bytes);
    }
    for (int64_t e = 0; e < s.n_experts; ++e) {
      const size_t i = size_t(e % slots);
      experts[size_t(e)] = {gate + gu_bytes * i, up + gu_bytes * i, down + d_bytes * i, scales.data(),
                            scales.data(), scales.data()};
      if (!marks.empty()) {
        const uint8_t* m = marks.data() + (2 * gu_marks + d_marks) * i;
        experts[size_t(e)].gate_marks = m;
        experts[size_t(e)].up_marks = m + gu_marks;
        experts[size_t(e)].down_marks = m + 2 * gu_marks;
      }
    }
  }
  const tk::MoeKernels k = tk::moe_kernels(isa, s);
  const int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  std::vector<uint8_t> ws(tk::moe_workspace_bytes(s, max_batch, int(top_k)) + 64);
  uint8_t* wsp = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
  std::vector<float> x(size_t(max_batch * sd.hidden)), y(x.size());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  // This machine's bandwidth drifts with its neighbours' load: each
  // repetition reads the probe buffer (with the best pattern found at the
  // start) right before the layer, and the row reports medians of the
  // layer's time and of its ratio to the read just before it.
  for (int64_t batch : o.batches) {
    std::vector<double> times, ratios, bws, gbss, plains, plain_ratios, cpus;
    tk::MoeRouteStats st;
    for (int r = 0; r < o.reps + 1; ++r) {  // the first run warms up
      std::vector<int32_t> ids;
      std::vector<float> w;
      std::uniform_int_distribution<int32_t> pick(0, int32_t(s.n_experts - 1));
      for (int64_t t = 0; t < batch; ++t) {
        for (int64_t j = 0; j < top_k; ++j) {
          int32_t e;
          do e = pick(rng);
          while (std::find(ids.end() - j, ids.end(), e) != ids.end());
          ids.push_back(e);
          w.push_back(0.125f);
        }
      }
      tk::MoeBatch b{batch, int(top_k), x.data(), size_t(sd.hidden), ids.data(), w.data(), y.data(),
                     size_t(sd.hidden)};
      // A plain read of the same experts' bytes first (the probe read after it
      // evicts them from the caches).
      std::vector<std::pair<const uint8_t*, size_t>> spans;
      for (size_t i = 0; i < ids.size(); ++i)
        if (std::find(ids.begin(), ids.begin() + ptrdiff_t(i), ids[i]) == ids.begin() + ptrdiff_t(i)) {
          const tk::MoeExpert& ex = experts[size_t(ids[i])];
          spans.push_back({ex.gate, gu_bytes});
          spans.push_back({ex.up, gu_bytes});
          spans.push_back({ex.down, d_bytes});
        }
      // The cores' speed now (tandem-bench-moe's machines share them with
      // neighbours, whose load comes and goes as the read's does).
      const double cpu = cpu_loop && peak > 0 && !o.hot
                             ? bench::flops_peak(pool, *cpu_loop, cpu_check_iters(*cpu_loop), 1) / peak
                             : 0.0;
      const double plain = o.hot ? 1.0 : bench::read_spans(pool, spans, rp, avx512);
      const double bw = o.hot ? 1.0 : bench::read_once(pool, pool.size(), probe, rp, avx512);
      const double t0 = now();
      tk::moe_forward(k, pool, s, experts.data(), b, wsp, ws.size() - 64);
      const double dt = now() - t0;
      if (r == 0) continue;
      st = tk::moe_route_stats(s, b);
      if (s.gate_up_layout == tk::WeightLayout::kBf16X16Z)  // both, for the shapes here: the coded bytes
        st.weight_bytes *= double(tk::kBf16X16ZCore) / double(tk::kBf16X16ZUnit);
      const double gbs = st.weight_bytes / dt / 1e9;
      times.push_back(dt);
      bws.push_back(bw);
      gbss.push_back(gbs);
      ratios.push_back(gbs / bw);
      plains.push_back(plain);
      plain_ratios.push_back(gbs / plain);
      cpus.push_back(cpu);
    }
    const double t = median(times);
    const double flops = 2.0 * double(st.assignments) * 3.0 * double(sd.hidden) * double(sd.ffn);
    std::string tname(tandem::name(type));
    if (down_type != type) tname += "+" + std::string(tandem::name(down_type));
    if (s.gate_up_layout != tk::WeightLayout::kRowMajor || s.down_layout != tk::WeightLayout::kRowMajor)
      tname += tk::layout_group_rows(s.gate_up_layout != tk::WeightLayout::kRowMajor ? s.gate_up_layout
                                                                                     : s.down_layout) == 16
                   ? (s.gate_up_layout == tk::WeightLayout::kBf16X16Z ? "/x16z" : "/x16")
                   : "/x4";
    if (!marks.empty()) tname += "/mk";
    if (o.split_bf16 && tk::row_dot_activation_type(type) == DType::kBF16) tname += "/sp";
    // The most of the peak this run's read allows at the row's flops per
    // weight byte (every routed expert's weights read once): the roofline.
    const double roof =
        peak > 0 && !o.hot ? std::min(1.0, median(bws) * flops / st.weight_bytes / peak) : 0.0;
    const double of_read = 100.0 * median(ratios), of_peak = peak > 0 ? 100.0 * flops / t / 1e9 / peak : 0.0;
    const double cpu_share = 100.0 * median(cpus);  // 0: not measured (--hot, or no peak loop at this level)
    char cpu[16] = "    -";
    if (cpu_share > 0) std::snprintf(cpu, sizeof cpu, "%4.0f%%", cpu_share);
    std::printf("%-14s %-13s %5lld %7.1f %9.3f %7.1f %7.1f %6.1f%% %6.1f %6.1f%% %9.1f %6.1f%% %5.0f%% %s\n",
                sd.name.c_str(), tname.c_str(), (long long)batch,
                double(st.assignments) / double(st.active_experts), t * 1e3, median(gbss), median(bws), of_read,
                median(plains), 100.0 * median(plain_ratios), flops / t / 1e9, of_peak, 100.0 * roof, cpu);
    std::fflush(stdout);
    if (!o.hot && down_type == type)  // the bars are per type
      bars.add(sd.name + " " + tname, type, batch, of_read, median(bws), of_peak, 100.0 * roof, cpu_share);
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw tandem::Error(tandem::ErrorKind::kInvalidInput, a + " needs a value");
      return argv[++i];
    };
    if (a == "--pool-gib") o.pool_gib = std::stod(value());
    else if (a == "--read-gib") o.read_gib = std::stod(value());
    else if (a == "--reps") o.reps = std::stoi(value());
    else if (a == "--hot") o.hot = true;
    else if (a == "--spin-us") o.spin_us = std::stoi(value());
    else if (a == "--rowmajor") o.rowmajor = true;
    else if (a == "--bf16-x16") o.bf16_x16 = true;
    else if (a == "--fp8-unmarked") o.fp8_unmarked = true;
    else if (a == "--split-bf16") o.split_bf16 = true;
    else if (a == "--types") {
      o.types.clear();
      for (const auto& t : split(value())) {
        const size_t plus = t.find('+');
        const std::string gu = t.substr(0, plus), dn = plus == std::string::npos ? gu : t.substr(plus + 1);
        const auto g = tandem::dtype_from_name(gu), d = tandem::dtype_from_name(dn);
        if (!g || !d) throw tandem::Error(tandem::ErrorKind::kInvalidInput, "unknown type " + t);
        o.types.push_back({*g, *d});
      }
    } else if (a == "--batches") {
      o.batches.clear();
      for (const auto& b : split(value())) o.batches.push_back(std::stoll(b));
    } else if (a == "--shapes") {
      o.shapes = split(value());
    } else {
      throw tandem::Error(tandem::ErrorKind::kInvalidInput,
                          "usage: tandem-bench-moe [--types bf16,f8_e4m3,q8_0,q4_k,q4_k+q6_k,...] [--batches 1,2,...] "
                          "[--shapes deepseek-v3,qwen3-30b-a3b] [--pool-gib G] [--read-gib G] [--reps N] "
                          "[--hot] [--rowmajor] [--bf16-x16] [--fp8-unmarked] [--split-bf16] [--spin-us N]");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    tandem::init_logging("bench-moe");
    const Options o = parse(argc, argv);
    const tk::CpuIsa isa = tk::choose_isa_from_environment();
    const tk::CpuFeatures f = tk::detect_cpu_features();
    const std::vector<int> cpus = tk::allowed_cpus();
    const int n = int(cpus.size());
    tk::ThreadPool pool = tk::ThreadPool::create({n, cpus, true, o.spin_us});

    Buffer buf(size_t(o.read_gib * double(1ull << 30)) / 4096 * 4096);
    std::memset(buf.p, 1, buf.n);
    std::printf("read bandwidth (%.1f GiB buffer, best of %d passes over 1 or 4 streams and 4 prefetch distances):\n",
                o.read_gib, o.reps);
    ReadPattern pattern;
    for (int t = 1; t <= n; ++t) {
      const auto [rp, gbs] = bench::read_bandwidth(pool, t, buf, o.reps, f.avx512);
      std::printf("  %2d thread%s %8.1f GB/s  (%d stream%s, prefetch %zu)\n", t, t == 1 ? " " : "s", gbs,
                  rp.streams, rp.streams == 1 ? "" : "s", rp.pf);
      pattern = rp;
    }
    const double peak = bench::level_peak(pool, isa);
    if (n > 1) {
      const auto [caller, others] = wake_latency_us(pool, o.spin_us);
      std::printf("waking the pool after its threads slept: the caller starts after %.1f us, the last thread after "
                  "%.1f us\n(not in the layer times below: the threads spin up to %d us between jobs, as between "
                  "a decode step's layers)\n",
                  caller, others, o.spin_us);
    }
    std::printf("kernels: %s, %d threads pinned to cpus", std::string(tk::isa_name(isa)).c_str(), n);
    for (int c : cpus) std::printf(" %d", c);
    std::printf("\n\nmedians over %d repetitions; 'read' is the read bandwidth measured just before each\n"
                "repetition, 'of read' the median ratio of the layer's weight GB/s to it; 'plain' a plain read\n"
                "of the layer's own weight bytes (its experts' matrices, a share of each per thread) and\n"
                "'of pl' the layer's ratio to it: what DRAM gives a job of that size; 'of pk' the fraction\n"
                "of the peak above, and 'roof' the most of it that 'read' allows at the row's flops per\n"
                "weight byte (each routed expert's weights read once); 'cpu' the peak loop's speed in a 1 ms\n"
                "pass before each repetition as a share of the peak above: well under 100%%, something else\n"
                "was running on these cores, which slows the kernels' arithmetic but not a read\n\n",
                o.reps);
    std::printf("%-14s %-13s %5s %7s %9s %7s %7s %7s %6s %7s %9s %7s %6s %5s\n", "shape", "type", "batch", "tok/exp",
                "ms", "GB/s", "read", "of read", "plain", "of pl", "GFLOP/s", "of pk", "roof", "cpu");
    bench::MoeBars bars;
    for (const auto& name : o.shapes) {
      ShapeDef sd;
      if (name == "deepseek-v3") sd = {name, 7168, 2048, 256};
      else if (name == "qwen3-30b-a3b") sd = {name, 2048, 768, 128};
      else throw tandem::Error(tandem::ErrorKind::kInvalidInput, "unknown shape " + name);
      for (LayerTypes t : o.types) bench_layer(pool, isa, sd, t, o, buf, pattern, f.avx512, peak, bars);
    }
    bars.print();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-bench-moe: %s\n", e.what());
    return 1;
  }
}
