// The vector row dots (row_dot.h), compiled once per level with that level's
// compiler flags (kernels/cpu/CMakeLists.txt): avx2 (256-bit), avx512
// (512-bit F/BW/DQ/VL) and avx512bf16 (+ vdpbf16ps, vpdpbusd, vpermi2b).
// TANDEM_ROW_DOT_NS names the level's namespace. The kernels live in
// row_dot_x86_float.cpp and row_dot_x86_quant.cpp over the shared helpers
// and tile driver of row_dot_x86_tile.h; the differences between levels stay
// inside those helpers.
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

RowDotFn find(DType wtype) {
  if (RowDotFn f = find_float(wtype)) return f;
  return find_quant(wtype);
}

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
