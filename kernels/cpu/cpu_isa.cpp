#include "kernels/cpu/cpu_isa.h"

#include <array>
#include <cstdint>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "common/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define TANDEM_X86 1
#endif

namespace tandem::kernels {
namespace {

// An environment variable's value, none when unset (empty counts as unset
// for the choose_* functions).
std::optional<std::string_view> env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string_view>(v) : std::nullopt;
}

constexpr std::array<std::string_view, kCpuIsaCount> kNames = {"generic", "avx2", "avx512",
                                                                "avx512bf16", "amx"};

#ifdef TANDEM_X86
// Linux keeps AMX tile data (8 KiB of state) off until a process asks; a
// tile instruction before that raises SIGILL.
bool amx_granted() {
#if defined(__linux__) && defined(__x86_64__)  // AMX is 64-bit only
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#ifdef TANDEM_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  unsigned vendor_b = 0, vendor_c = 0, vendor_d = 0, max_leaf = 0;
  __cpuid(0, max_leaf, vendor_b, vendor_c, vendor_d);
  f.amd = vendor_b == 0x68747541 && vendor_d == 0x69746e65 && vendor_c == 0x444d4163;  // "AuthenticAMD"
  const unsigned base_family = (a >> 8) & 0xF;
  f.family = int(base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family);
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;  // without XSAVE enabled no YMM/ZMM state is saved
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;     // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;   // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17),
             avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  const bool vnni = c & (1u << 11), vbmi = c & (1u << 1), gfni = c & (1u << 8);
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  const bool bf16 = a1 & (1u << 5);
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_bf16 = f.avx512 && bf16;
  f.avx512_vnni = f.avx512 && vnni;
  f.avx512_vbmi = f.avx512 && vbmi;
  f.gfni = f.avx512 && gfni;
  f.amx_tile = amx_tile && tile_state && amx_granted();
  f.amx_bf16 = f.amx_tile && amx_bf16;
  f.amx_int8 = f.amx_tile && amx_int8;
#endif
  return f;
}

bool supports(const CpuFeatures& f, CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric: return true;
    case CpuIsa::kAvx2: return f.avx2;
    case CpuIsa::kAvx512: return f.avx512;
    case CpuIsa::kAvx512Bf16: return f.avx512_bf16 && f.avx512_vnni && f.avx512_vbmi && f.gfni;
    case CpuIsa::kAmx: return supports(f, CpuIsa::kAvx512Bf16) && f.amx_tile && f.amx_bf16 && f.amx_int8;
  }
  return false;
}

CpuIsa best_isa(const CpuFeatures& f) {
  for (int i = kCpuIsaCount - 1; i > 0; --i)
    if (supports(f, CpuIsa(i))) return CpuIsa(i);
  return CpuIsa::kGeneric;
}

std::string_view isa_name(CpuIsa isa) { return kNames.at(size_t(isa)); }

std::optional<CpuIsa> isa_from_name(std::string_view name) {
  for (int i = 0; i < kCpuIsaCount; ++i)
    if (kNames[size_t(i)] == name) return CpuIsa(i);
  return std::nullopt;
}

CpuIsa choose_isa(const CpuFeatures& f, std::optional<std::string_view> forced) {
  if (!forced || forced->empty()) return best_isa(f);
  auto isa = isa_from_name(*forced);
  if (!isa)
    throw Error(ErrorKind::kInvalidInput,
                "TANDEM_CPU_ISA=" + std::string(*forced) +
                    " is not a kernel level (generic, avx2, avx512, avx512bf16, amx)");
  if (!supports(f, *isa))
    throw Error(ErrorKind::kUnsupported,
                "TANDEM_CPU_ISA=" + std::string(*forced) + " asks for a level this CPU lacks (has: " +
                    describe(f) + "; best level " + std::string(isa_name(best_isa(f))) + ")");
  return *isa;
}

CpuIsa choose_isa_from_environment() {
  const CpuFeatures f = detect_cpu_features();
  const std::optional<std::string_view> env = env_value("TANDEM_CPU_ISA");
  const CpuIsa isa = choose_isa(f, env);
  spdlog::info("cpu kernels: {} (cpu has {}{})", isa_name(isa), describe(f),
               env && !env->empty() ? ", forced by TANDEM_CPU_ISA" : "");
  const std::optional<std::string_view> pf = env_value("TANDEM_CPU_PREFETCH");
  const CpuPrefetch prefetch = choose_prefetch(f, pf);
  spdlog::info("cpu kernels' one-token weight streams: {} prefetch ({}family {:x}h{})", prefetch_name(prefetch),
               f.amd ? "AMD " : "", f.family, pf && !pf->empty() ? ", forced by TANDEM_CPU_PREFETCH" : "");
  return isa;
}

CpuPrefetch best_prefetch(const CpuFeatures& f) {
  return f.amd && f.family == 0x19 && f.avx512 ? CpuPrefetch::kHardware : CpuPrefetch::kSoftware;
}

std::string_view prefetch_name(CpuPrefetch p) { return p == CpuPrefetch::kHardware ? "hardware" : "software"; }

CpuPrefetch choose_prefetch(const CpuFeatures& f, std::optional<std::string_view> forced) {
  if (!forced || forced->empty()) return best_prefetch(f);
  if (*forced == "software") return CpuPrefetch::kSoftware;
  if (*forced == "hardware") return CpuPrefetch::kHardware;
  throw Error(ErrorKind::kInvalidInput,
              "TANDEM_CPU_PREFETCH=" + std::string(*forced) + " is neither software nor hardware");
}

CpuPrefetch cpu_prefetch() {
  static const CpuPrefetch chosen = [] {
    const CpuFeatures f = detect_cpu_features();
    try {
      return choose_prefetch(f, env_value("TANDEM_CPU_PREFETCH"));
    } catch (const Error&) {
      return best_prefetch(f);
    }
  }();
  return chosen;
}

std::string describe(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* what) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += what;
  };
  add(f.avx2, "avx2+fma+f16c");
  add(f.avx512, "avx512(f,bw,dq,vl)");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_vbmi, "avx512_vbmi");
  add(f.gfni, "gfni");
  add(f.amx_tile, "amx_tile");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_int8, "amx_int8");
  return s.empty() ? "no vector extensions used by Tandem" : s;
}

}  // namespace tandem::kernels
