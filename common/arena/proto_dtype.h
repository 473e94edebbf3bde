// Tandem's DType and the manifest's proto::DType list the same types in the
// same order; these convert between them and say so at compile time.
#pragma once

#include <optional>

#include "common/dtype.h"
#include "proto/manifest.capnp.h"

namespace tandem::arena {

static_assert(uint16_t(proto::DType::F32) == uint16_t(DType::kF32));
static_assert(uint16_t(proto::DType::F8_E4M3) == uint16_t(DType::kF8E4M3));
static_assert(uint16_t(proto::DType::Q4_K) == uint16_t(DType::kQ4_K));
static_assert(uint16_t(proto::DType::Q8_K) == uint16_t(DType::kQ8_K) && kDTypeCount == 14);

inline proto::DType to_proto(DType t) { return proto::DType(uint16_t(t)); }
inline std::optional<DType> from_proto(proto::DType t) {
  if (uint16_t(t) >= kDTypeCount) return std::nullopt;
  return DType(uint16_t(t));
}

}  // namespace tandem::arena
