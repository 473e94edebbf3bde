#include "kernels/cpu/bf16_x16z.h"

#include <algorithm>
#include <cstring>

namespace tandem::kernels {

int bf16_x16z_window(const int (&count)[128], int* base) {
  int in = 0, best = -1, total = 0;
  for (int e = 0; e < 128; ++e) total += count[e];
  for (int e = 0; e < 8; ++e) in += count[e];
  for (int b = 0;; ++b) {  // in: the values in [b, b + 8)
    if (in > best) best = in, *base = b;
    if (b == 120) break;
    in += count[b + 8] - count[b];
  }
  return total - best;
}

bool bf16_x16z_code(const uint8_t* x16, uint8_t* core, uint8_t* spare) {
  int count[128] = {}, base = 0;
  for (size_t i = 0; i < kBf16X16ZUnit / 2; ++i) ++count[x16[2 * i + 1] & 0x7f];
  if (bf16_x16z_window(count, &base) > kBf16X16ZMaxExceptions) return false;
  std::memset(core, 0, kBf16X16ZCore);
  std::memset(spare, 0, kBf16X16ZSpare);
  uint64_t mask = 0;
  int n = 0;
  for (int v = 0; v < 64; ++v)
    for (int w = 0; w < 32; ++w) {
      const uint8_t lo = x16[64 * v + 2 * w], hi = x16[64 * v + 2 * w + 1];
      const int i = v / 2, s = bf16_x16z_slot(v % 2, w), e7 = hi & 0x7f;
      core[bf16_x16z_lo(i) + size_t(s)] = lo;
      int code = 0;
      if (e7 >= base && e7 < base + 8) {
        code = (hi >> 7) << 3 | (e7 - base);
      } else {
        uint8_t* x = bf16_x16z_exception(core, spare, n++);
        const int pos = 32 * v + w;
        x[0] = uint8_t(pos), x[1] = uint8_t(pos >> 8), x[2] = hi;
        mask |= uint64_t(1) << v;
      }
      core[bf16_x16z_codes(i) + size_t(s % 32)] |= uint8_t(s < 32 ? code : code << 4);
    }
  std::memcpy(core, &mask, 8);
  core[8] = uint8_t(base);
  core[10] = uint8_t(n), core[11] = uint8_t(n >> 8);
  return true;
}

void bf16_x16z_decode(const uint8_t* core, const uint8_t* spare, uint8_t* x16) {
  const int base = core[8];
  for (int v = 0; v < 64; ++v)
    for (int w = 0; w < 32; ++w) {
      const int i = v / 2, s = bf16_x16z_slot(v % 2, w);
      const uint8_t c = core[bf16_x16z_codes(i) + size_t(s % 32)];
      const int code = s < 32 ? c & 15 : c >> 4;
      x16[64 * v + 2 * w] = core[bf16_x16z_lo(i) + size_t(s)];
      x16[64 * v + 2 * w + 1] = uint8_t((code & 8) << 4 | (base + (code & 7)));
    }
  // The count and positions as the coder writes them; a damaged unit's
  // others are ignored rather than read or written out of bounds.
  const int n = std::min(bf16_x16z_count(core), kBf16X16ZMaxExceptions);
  for (int k = 0; k < n; ++k) {
    const uint8_t* x = bf16_x16z_exception(core, spare, k);
    const size_t pos = size_t(x[0] | x[1] << 8);
    if (pos < kBf16X16ZUnit / 2) x16[2 * pos + 1] = x[2];
  }
}

}  // namespace tandem::kernels
