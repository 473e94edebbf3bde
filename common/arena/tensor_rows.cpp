#include "common/arena/tensor_rows.h"

#include <vector>

#include "common/error.h"

namespace tandem::arena {

void for_each_row(const MappedTensor& t, DType dtype,
                  const std::function<void(uint64_t, const std::byte*)>& fn) {
  const uint64_t cols = t.shape.back();
  uint64_t row = 0;
  std::vector<float> f32;
  for (const TensorPiece& p : t.pieces) {
    if (p.out_cols() != cols)
      throw Error(ErrorKind::kInternal,
                  fmt::format("{}: a piece has {} columns, the tensor {}", t.name, p.out_cols(), cols));
    const bool convert = dtype == DType::kF32 && (p.src->dtype != DType::kF32 || p.transpose ||
                                                  !p.src->scale.empty());
    if (!convert) {
      if (p.src->dtype != dtype)
        throw Error(ErrorKind::kInternal, fmt::format("{}: piece of type {} stored as {}", t.name,
                                                      name(p.src->dtype), name(dtype)));
      const uint64_t n = p.gather.empty() ? p.n_rows : p.gather.size();
      for (uint64_t i = 0; i < n; ++i)
        fn(row++, p.src->row(p.gather.empty() ? p.first_row + i : p.gather[i]).data());
      continue;
    }
    // read_f32 of a one-piece tensor applies the piece's gather, transpose
    // and block scales exactly as the engine's reader does.
    MappedTensor one{t.name, {p.out_rows(), cols}, t.dtype, {p}};
    f32.resize(p.out_rows() * cols);
    read_f32(one, f32);
    for (uint64_t i = 0; i < p.out_rows(); ++i)
      fn(row++, reinterpret_cast<const std::byte*>(f32.data() + i * cols));
  }
}

}  // namespace tandem::arena
