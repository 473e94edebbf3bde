// Which x86 instruction-set level the CPU kernels run at, decided once per
// process from CPUID and the OS's saved-register state (XCR0), never by
// #ifdef: one binary serves every machine. A lower level can be forced with
// TANDEM_CPU_ISA (for tests, and to compare variants on one machine); a
// level the machine cannot run is refused with an error, not ignored.
//
//   level        needs                                         used for
//   generic      nothing                                       the reference
//   avx2         AVX2, FMA, F16C; OS saves YMM                  256-bit
//   avx512       AVX-512 F, BW, DQ, VL; OS saves ZMM + opmask   512-bit
//   avx512bf16   avx512 + AVX512_BF16, _VNNI, _VBMI, GFNI       vdpbf16ps, vpdpbusd, vpermi2b,
//                                                              vgf2p8affineqb
//                (Zen 4 and later, Sapphire Rapids and later)
//   amx          avx512bf16 + AMX-TILE, -BF16, -INT8; OS       tdpbf16ps for BF16 and FP8
//                saves tile data and grants it (arch_prctl)    prefill, tdpbssd for Q8_0's;
//                                                              avx512bf16 for the rest
//                (Sapphire Rapids and later)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::kernels {

enum class CpuIsa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kAmx = 4 };
inline constexpr int kCpuIsaCount = 5;

struct CpuFeatures {
  bool avx2 = false;        // AVX2 + FMA + F16C, with YMM state enabled by the OS
  bool avx512 = false;      // F + BW + DQ + VL, with ZMM and opmask state enabled
  bool avx512_bf16 = false;  // AVX512_BF16
  bool avx512_vnni = false;  // AVX512_VNNI
  bool avx512_vbmi = false;  // AVX512_VBMI
  bool gfni = false;         // GFNI (its 512-bit forms with avx512)
  // AMX-TILE with tile state enabled in XCR0 and this process granted it
  // (Linux hands tile data only to processes that ask, ARCH_REQ_XCOMP_PERM).
  bool amx_tile = false;
  bool amx_bf16 = false;  // AMX-BF16 (tdpbf16ps)
  bool amx_int8 = false;  // AMX-INT8 (tdpbssd and kin)
  bool amd = false;       // vendor AuthenticAMD
  int family = 0;         // display family (base + extended): 0x19 Zen 3/4, 0x1A Zen 5
};

// Reads CPUID and XGETBV; where the CPU has AMX tiles, asks Linux for this
// process's permission to use them (once; idempotent, process-wide). All
// false on a non-x86 build.
CpuFeatures detect_cpu_features();

// The highest level `f` supports.
CpuIsa best_isa(const CpuFeatures& f);
bool supports(const CpuFeatures& f, CpuIsa isa);

std::string_view isa_name(CpuIsa isa);
std::optional<CpuIsa> isa_from_name(std::string_view name);

// The level to run at: best_isa(f), or `forced` (the value of TANDEM_CPU_ISA
// when set and non-empty). Throws tandem::Error(kInvalidInput) for an unknown
// name and kUnsupported for a level `f` lacks, naming both.
CpuIsa choose_isa(const CpuFeatures& f, std::optional<std::string_view> forced);

// choose_isa(detect_cpu_features(), getenv("TANDEM_CPU_ISA")); logs the
// choice and the features once per call. Call it in main() and pass the
// result down.
CpuIsa choose_isa_from_environment();

// Who keeps a one-token kernel's weight stream in flight. bf16_x16z's
// decoding takes about ten instructions a line, so the out-of-order window
// holds few of the stream's loads: on a Zen 5 the hardware prefetchers then
// leave DRAM idle and the kernel's own requests, two and three cores ahead,
// are what keeps it busy (row_dot_x86_x16z.cpp). A Zen 4's prefetchers keep
// it busy themselves, and the same requests only cost issue slots and miss
// buffers there. Stop 59, a Zen 4 EPYC (family 19h model 11h): one thread
// from DRAM, bf16_x16z's values per second 1.27-1.32 times as high without
// them (three shapes); the layer at batch 1, the two alternated in five
// runs, of a plain read (medians): BF16 0.91 -> 1.01 (DeepSeek-V3) and
// 0.92 -> 0.99 (Qwen3) at reads of 30-35 GB/s, Qwen3 0.63 -> 0.97 at 54;
// FP8 0.94-0.98 -> 1.02-1.03, Q8_0 0.93-0.95 -> 0.95-0.99 (0.76 -> 0.91 at
// 57), Q4_K 0.96-0.99 -> 0.98-1.04 (0.88 -> 1.06 at 55). The tiles of
// more tokens keep their requests from 5 tokens (the x16 layouts, stop 64)
// or 2 (x4) (asks_for_stream, row_dot.h; not the rowmajor tiles,
// row_dot_x86_tile.h, stop 62). kSoftware: the kernels ask; kHardware: they
// leave it to the CPU.
enum class CpuPrefetch : uint8_t { kSoftware = 0, kHardware = 1 };
// kHardware for AMD's family 19h with AVX-512 (Zen 4; measured); kSoftware
// everywhere else (Zen 5 measured; the rest as the kernels were tuned).
CpuPrefetch best_prefetch(const CpuFeatures& f);
std::string_view prefetch_name(CpuPrefetch p);  // "software", "hardware"
// best_prefetch(f), or `forced` (TANDEM_CPU_PREFETCH when set and non-empty).
// Throws tandem::Error(kInvalidInput) for a name that is neither.
CpuPrefetch choose_prefetch(const CpuFeatures& f, std::optional<std::string_view> forced);
// choose_prefetch(detect_cpu_features(), getenv("TANDEM_CPU_PREFETCH")),
// decided once per process (the kernels ask it per call;
// choose_isa_from_environment() logs it and, by asking first, refuses a bad
// value at start-up; a bad value met first here falls back to
// best_prefetch).
CpuPrefetch cpu_prefetch();

// "avx2 fma f16c avx512(f,bw,dq,vl) avx512_bf16 avx512_vnni" style summary.
std::string describe(const CpuFeatures& f);

}  // namespace tandem::kernels
