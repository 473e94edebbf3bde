// Every row of a canonical tensor in the type the arena stores it in, one
// source piece at a time: rows the map keeps as stored (plain or gathered)
// are handed out in place; transposed or FP8-scaled pieces are converted to
// F32 first (one piece at a time, so memory stays at one expert matrix).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/dtype.h"
#include "common/model/tensor_map.h"

namespace tandem::arena {

// Calls fn(row, bytes) for rows 0 .. n_rows-1 of t flattened to 2-D
// ([prod(shape[:-1]), shape[-1]]), each `bytes_for(dtype, cols)` long. dtype
// must be stored_dtype(t).
void for_each_row(const MappedTensor& t, DType dtype,
                  const std::function<void(uint64_t, const std::byte*)>& fn);

}  // namespace tandem::arena
