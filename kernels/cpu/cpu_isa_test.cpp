#include "kernels/cpu/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "common/error.h"

namespace tandem::kernels {
namespace {

TEST(CpuIsa, BestLevelIsSupportedAndNamesRoundTrip) {
  const CpuFeatures f = detect_cpu_features();
  const CpuIsa best = best_isa(f);
  EXPECT_TRUE(supports(f, best));
  for (int i = int(best) + 1; i < kCpuIsaCount; ++i) EXPECT_FALSE(supports(f, CpuIsa(i)));
  for (int i = 0; i < kCpuIsaCount; ++i) EXPECT_EQ(isa_from_name(isa_name(CpuIsa(i))), CpuIsa(i));
  EXPECT_FALSE(isa_from_name("sse2"));
  std::printf("  this cpu: %s -> %s\n", describe(f).c_str(), std::string(isa_name(best)).c_str());
}

TEST(CpuIsa, LevelsNeedTheirFeatures) {
  CpuFeatures none;
  EXPECT_EQ(best_isa(none), CpuIsa::kGeneric);
  CpuFeatures f;
  f.avx2 = f.avx512 = true;
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512);
  f.avx512_bf16 = true;  // bf16 without VNNI is not the top level
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512);
  f.avx512_vnni = true;
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512);  // Cooper Lake: no VBMI
  f.avx512_vbmi = true;
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512);  // the FP8 one-token kernel widens with GFNI
  f.gfni = true;
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512Bf16);
  f.amx_tile = true;  // tiles without tdpbf16ps are not enough
  f.amx_int8 = true;
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512Bf16);
  f.amx_bf16 = true;
  f.amx_int8 = false;  // nor without tdpbssd (Q8_0 prefill)
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512Bf16);
  f.amx_int8 = true;
  EXPECT_EQ(best_isa(f), CpuIsa::kAmx);
  f.avx512_vbmi = false;  // amx runs the avx512bf16 kernels for everything but its tiles' prefill
  EXPECT_EQ(best_isa(f), CpuIsa::kAvx512);
}

TEST(CpuIsa, ForcingALowerLevelWorksAHigherOneIsRefused) {
  CpuFeatures f;
  f.avx2 = true;
  EXPECT_EQ(choose_isa(f, std::nullopt), CpuIsa::kAvx2);
  EXPECT_EQ(choose_isa(f, ""), CpuIsa::kAvx2);
  EXPECT_EQ(choose_isa(f, "generic"), CpuIsa::kGeneric);
  try {
    choose_isa(f, "avx512bf16");
    FAIL() << "a level the cpu lacks was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("avx512bf16"), std::string::npos) << e.what();
  }
  try {
    choose_isa(f, "avx1024");
    FAIL() << "an unknown level was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("avx1024"), std::string::npos) << e.what();
  }
}

// Zen 4 (AMD family 19h with AVX-512) leaves one-token streams to its own
// prefetchers; Zen 3 (no AVX-512), Zen 5 and other vendors ask; the
// variable forces either and refuses other names.
TEST(CpuIsa, PrefetchProfileFollowsTheFamilyAndCanBeForced) {
  CpuFeatures f;
  f.avx2 = f.avx512 = true;
  f.amd = true;
  f.family = 0x19;
  EXPECT_EQ(best_prefetch(f), CpuPrefetch::kHardware);
  f.family = 0x1A;
  EXPECT_EQ(best_prefetch(f), CpuPrefetch::kSoftware);
  f.family = 0x19;
  f.avx512 = false;
  EXPECT_EQ(best_prefetch(f), CpuPrefetch::kSoftware);
  f.avx512 = true;
  f.amd = false;
  f.family = 6;
  EXPECT_EQ(best_prefetch(f), CpuPrefetch::kSoftware);
  EXPECT_EQ(choose_prefetch(f, std::nullopt), CpuPrefetch::kSoftware);
  EXPECT_EQ(choose_prefetch(f, "hardware"), CpuPrefetch::kHardware);
  EXPECT_EQ(choose_prefetch(f, "software"), CpuPrefetch::kSoftware);
  try {
    choose_prefetch(f, "sometimes");
    FAIL() << "an unknown prefetch profile was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("sometimes"), std::string::npos) << e.what();
  }
  ::setenv("TANDEM_CPU_PREFETCH", "sometimes", 1);
  EXPECT_THROW(choose_isa_from_environment(), Error);
  ::unsetenv("TANDEM_CPU_PREFETCH");
  // This machine's own answer is one of the two, and the process keeps it.
  const CpuFeatures here = detect_cpu_features();
  EXPECT_EQ(cpu_prefetch(), best_prefetch(here));
  std::printf("  this cpu: %s family %xh -> %s prefetch\n", here.amd ? "AMD" : "not AMD", here.family,
              std::string(prefetch_name(cpu_prefetch())).c_str());
}

TEST(CpuIsa, EnvironmentVariableForcesTheLevel) {
  ::setenv("TANDEM_CPU_ISA", "generic", 1);
  EXPECT_EQ(choose_isa_from_environment(), CpuIsa::kGeneric);
  ::setenv("TANDEM_CPU_ISA", "not-a-level", 1);
  EXPECT_THROW(choose_isa_from_environment(), Error);
  ::unsetenv("TANDEM_CPU_ISA");
  EXPECT_EQ(choose_isa_from_environment(), best_isa(detect_cpu_features()));
}

}  // namespace
}  // namespace tandem::kernels
