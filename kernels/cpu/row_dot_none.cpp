// Builds for CPUs other than x86: no vector variants, the generic kernels
// serve every level.
#include "kernels/cpu/row_dot.h"

namespace tandem::kernels {
namespace avx2 { RowDotFn find(DType) { return nullptr; } }
namespace avx512 { RowDotFn find(DType) { return nullptr; } }
namespace avx512bf16 { RowDotFn find(DType) { return nullptr; } }
namespace amx { RowDotFn find(DType) { return nullptr; } }
}  // namespace tandem::kernels

#include "kernels/cpu/vec_ops.h"

namespace tandem::kernels {
namespace avx2 { VecOps vec_ops() { return generic::vec_ops(); } }
namespace avx512 { VecOps vec_ops() { return generic::vec_ops(); } }
namespace avx512bf16 { VecOps vec_ops() { return generic::vec_ops(); } }
}  // namespace tandem::kernels
