// Deterministic weights and the tensor producers that encode them.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quantize.h"
#include "tools/gen_model/internal.h"

namespace tandem::genmodel {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's output function.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Runs fn(begin, end) over [0, n) in chunks of `grain` on up to `threads`
// threads; rethrows the first exception.
template <typename Fn>
void parallel_for(uint64_t n, uint64_t grain, unsigned threads, Fn fn) {
  const uint64_t chunks = (n + grain - 1) / grain;
  const unsigned workers = unsigned(std::min<uint64_t>(threads, chunks));
  if (workers <= 1) {
    fn(uint64_t{0}, n);
    return;
  }
  std::atomic<uint64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    try {
      for (uint64_t c; (c = next.fetch_add(1)) < chunks;)
        fn(c * grain, std::min(n, (c + 1) * grain));
    } catch (...) {
      std::lock_guard lock(error_mu);
      if (!error) error = std::current_exception();
      next = chunks;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < workers; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Rows per work item: about 64K values, at least one row.
uint64_t row_grain(uint64_t cols) {
  return std::max<uint64_t>(1, (uint64_t{1} << 16) / std::max<uint64_t>(cols, 1));
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

// Per-block scales of one band of `block` rows (rows_in_band valid),
// appended to `scales`.
void band_scales(const float* band, uint64_t rows_in_band, uint64_t cols, uint32_t block,
                 std::vector<float>& scales) {
  for (uint64_t c0 = 0; c0 < cols; c0 += block) {
    const uint64_t c1 = std::min<uint64_t>(cols, c0 + block);
    float amax = 0.0f;
    for (uint64_t r = 0; r < rows_in_band; ++r)
      for (uint64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(band[r * cols + c]));
    scales.push_back(amax > 0.0f ? amax / 448.0f : 1.0f);
  }
}

// Round to nearest even bfloat16 (inputs are finite).
float round_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

}  // namespace

std::string suffix_of(const TensorSpec& spec) {
  if (spec.layer < 0) return spec.name;
  return spec.name.substr(spec.name.find('.', 4) + 1);
}

WeightGen::WeightGen(uint64_t seed, const TensorSpec& spec) {
  key_ = mix64(seed * kGolden ^ mix64(fnv1a(spec.name)));
  cols_ = spec.shape.empty() ? 1 : spec.shape.back();
  const std::string sfx = suffix_of(spec);
  if (ends_with(sfx, "norm.weight")) {
    mean_ = 1.0, std_ = 0.1;
  } else if (sfx == "exp_probs_b.bias") {
    mean_ = 0.0, std_ = 0.05;
  } else if (ends_with(sfx, ".bias")) {
    mean_ = 0.0, std_ = 0.1;
  } else {
    // Matrices are [out, in] except MLA's k_b [heads, kv_lora, nope], which
    // multiplies kv_lora-dim latents (kv_b_proj's input).
    uint64_t fan_in = sfx == "attn_k_b.weight" ? spec.shape.at(1) : cols_;
    mean_ = 0.0, std_ = 1.0 / std::sqrt(double(std::max<uint64_t>(fan_in, 1)));
  }
}

namespace {

// Irwin-Hall: four 16-bit uniforms of one hash summed, scaled to unit
// variance, then mean + std * n rounded to bf16.
inline float value_at(uint64_t key, double mean, double stddev, uint64_t index) {
  const uint64_t h = mix64(key + (index + 1) * kGolden);
  const double s =
      double((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48)) + 2.0;
  const double n = (s / 65536.0 - 2.0) * 1.7320508075688772;
  return round_bf16(float(mean + stddev * n));
}

}  // namespace

float WeightGen::at(uint64_t index) const { return value_at(key_, mean_, std_, index); }

void WeightGen::row(uint64_t r, float* out) const {
  const uint64_t base = r * cols_;
  const uint64_t key = key_;
  const double mean = mean_, stddev = std_;
  for (uint64_t c = 0; c < cols_; ++c) out[c] = value_at(key, mean, stddev, base + c);
}

float canonical_value(uint64_t seed, const TensorSpec& spec, uint64_t index) {
  return WeightGen(seed, spec).at(index);
}

void canonical_fill(uint64_t seed, const TensorSpec& spec, uint64_t first, std::span<float> out) {
  WeightGen g(seed, spec);
  for (size_t i = 0; i < out.size(); ++i) out[i] = g.at(first + i);
}

Progress::Progress(uint64_t total_bytes, bool enabled)
    : total_(total_bytes), enabled_(enabled && total_bytes > (64ull << 20)), tty_(isatty(2) != 0) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::add(uint64_t bytes) {
  done_ += bytes;
  if (!enabled_) return;
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  auto now = std::chrono::steady_clock::now();
  const auto every = tty_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(5000);
  if (now - last_ < every) return;
  last_ = now;
  print(false);
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  print(true);
}

void Progress::print(bool final) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const uint64_t done = done_;
  const double rate = secs > 0 ? double(done) / secs : 0.0;
  std::string line = fmt::format("tandem-gen-model: {} / {} ({:.0f}%), {}/s", human_bytes(double(done)),
                                 human_bytes(double(total_)),
                                 total_ ? 100.0 * double(done) / double(total_) : 100.0,
                                 human_bytes(rate));
  if (!final && rate > 0 && total_ > done)
    line += fmt::format(", {:.0f} s left", double(total_ - done) / rate);
  if (final) line += fmt::format(" in {:.1f} s", secs);
  std::fprintf(stderr, "%s%s%s", tty_ ? "\r\033[K" : "", line.c_str(), tty_ && !final ? "" : "\n");
  std::fflush(stderr);
}

TensorProducer row_producer(const GenContext& g, DType dtype, uint64_t rows, uint64_t cols,
                            RowFn fn) {
  return [&g, dtype, rows, cols, fn = std::move(fn)](std::span<std::byte> out) {
    const uint64_t rb = bytes_for(dtype, cols).value();
    if (out.size() != rb * rows)
      throw Error(ErrorKind::kInternal, "gen_model: tensor buffer does not match its shape");
    parallel_for(rows, row_grain(cols), g.threads, [&](uint64_t r0, uint64_t r1) {
      std::vector<float> buf(cols);
      for (uint64_t r = r0; r < r1; ++r) {
        fn(r, buf.data());
        kernels::quantize_generic(dtype, buf.data(), out.data() + r * rb, cols);
      }
      if (g.progress) g.progress->add((r1 - r0) * rb);
    });
  };
}

Fp8Producers fp8_producers(const GenContext& g, uint64_t rows, uint64_t cols, uint32_t block,
                           RowFn fn) {
  // The weight is written first (its name sorts first); it leaves its scales
  // for the scale tensor, which recomputes them only if they are missing.
  auto cache = std::make_shared<std::vector<float>>();
  const uint64_t bands = (rows + block - 1) / block, n_bc = (cols + block - 1) / block;
  auto compute = [&g, rows, cols, block, bands, n_bc, fn](std::span<std::byte> out,
                                                          std::vector<float>& scales) {
    scales.assign(bands * n_bc, 0.0f);
    parallel_for(bands, 1, g.threads, [&](uint64_t b0, uint64_t b1) {
      std::vector<float> band(uint64_t(block) * cols), s;
      for (uint64_t b = b0; b < b1; ++b) {
        const uint64_t r0 = b * block, n = std::min<uint64_t>(block, rows - r0);
        for (uint64_t i = 0; i < n; ++i) fn(r0 + i, band.data() + i * cols);
        s.clear();
        band_scales(band.data(), n, cols, block, s);
        std::copy(s.begin(), s.end(), scales.begin() + b * n_bc);
        if (out.empty()) continue;
        for (uint64_t i = 0; i < n; ++i) {
          std::byte* o = out.data() + (r0 + i) * cols;
          const float* x = band.data() + i * cols;
          for (uint64_t bc = 0, c0 = 0; c0 < cols; ++bc, c0 += block) {
            const float scale = s[bc];
            for (uint64_t c = c0, c1 = std::min<uint64_t>(cols, c0 + block); c < c1; ++c)
              o[c] = std::byte{kernels::f32_to_fp8_e4m3(x[c] / scale)};
          }
        }
        if (g.progress) g.progress->add(n * cols);
      }
    });
  };
  Fp8Producers p;
  p.weight = [rows, cols, cache, compute](std::span<std::byte> out) {
    if (out.size() != rows * cols)
      throw Error(ErrorKind::kInternal, "gen_model: fp8 buffer does not match its shape");
    compute(out, *cache);
  };
  p.scale = [bands, n_bc, cache, compute, &g](std::span<std::byte> out) {
    if (out.size() != bands * n_bc * sizeof(float))
      throw Error(ErrorKind::kInternal, "gen_model: scale buffer does not match its shape");
    if (cache->size() != bands * n_bc) compute({}, *cache);
    kernels::quantize_generic(DType::kF32, cache->data(), out.data(), cache->size());
    std::vector<float>().swap(*cache);
    if (g.progress) g.progress->add(out.size());
  };
  return p;
}

}  // namespace tandem::genmodel
