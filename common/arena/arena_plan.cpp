#include "common/arena/arena_plan.h"

#include <algorithm>
#include <numeric>

#include "common/arena/arena_format.h"
#include "common/arena/identity.h"
#include "common/error.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/row_dot.h"

namespace tandem::arena {
namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t numel(const std::vector<uint64_t>& s) {
  return std::accumulate(s.begin(), s.end(), uint64_t{1}, std::multiplies<>());
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "blk.7.ffn_up_exps.weight" -> "blk.7."
std::string layer_prefix(const std::string& name) {
  size_t dot = name.find('.', 4);
  return name.substr(0, dot + 1);
}

struct FRange {
  uint64_t begin, end;
};

// Splits F into `workers` contiguous ranges of whole `granule`s, as even as
// the granule allows (earlier workers take the remainder); with
// partial_last, F's last granule may be partial (FP8 scale blocks).
std::vector<FRange> split_f(uint64_t f, uint64_t granule, size_t workers, const std::string& what,
                            bool partial_last = false) {
  if (f % granule != 0 && !partial_last)
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("{}: intermediate size {} is not a whole number of {}-element blocks",
                            what, f, granule));
  uint64_t units = (f + granule - 1) / granule;
  std::vector<FRange> out;
  uint64_t at = 0;
  for (size_t w = 0; w < workers; ++w) {
    uint64_t n = units / workers + (w < units % workers ? 1 : 0);
    out.push_back({std::min(f, at * granule), std::min(f, (at + n) * granule)});
    at += n;
  }
  return out;
}

std::string with_suffix(const std::string& weight_name, std::string_view suffix) {
  return weight_name.substr(0, weight_name.size() - std::string_view(".weight").size()) + std::string(suffix);
}

}  // namespace

uint64_t ArenaPlan::tensor_bytes() const {
  uint64_t n = 0;
  for (const Placement& p : placements) n += p.bytes;
  return n;
}

DType stored_dtype(const MappedTensor& t) {
  if (t.shape.size() == 1) return DType::kF32;
  for (const TensorPiece& p : t.pieces)
    if (p.transpose || !p.src->scale.empty()) return DType::kF32;
  return t.dtype;
}

std::string fp8_scales_name(const std::string& weight_name) { return with_suffix(weight_name, ".scale"); }
std::string fp8_marks_name(const std::string& weight_name) { return with_suffix(weight_name, ".marks"); }

std::vector<uint64_t> fp8_scales_shape(const std::vector<uint64_t>& s) {
  const uint64_t B = kernels::kFp8ScaleBlock;
  return {s[0], (s[1] + B - 1) / B, (s[2] + B - 1) / B};
}
std::vector<uint64_t> fp8_marks_shape(const std::vector<uint64_t>& s) {
  return {s[0], s[1], uint64_t(kernels::fp8_marks_row_bytes(int64_t(s[2])))};
}

bool stores_fp8_experts(const MappedTensor& t) {
  if (!is_routed_expert(t.name) || t.shape.size() != 3 || t.pieces.empty()) return false;
  for (const TensorPiece& p : t.pieces) {
    const SourceMatrix& s = *p.src;
    // one piece per expert matrix, from a whole scale block of its source
    if (s.dtype != DType::kF8E4M3 || s.scale.empty() || s.block_rows != uint32_t(kernels::kFp8ScaleBlock) ||
        s.block_cols != uint32_t(kernels::kFp8ScaleBlock) || p.transpose || !p.gather.empty() ||
        p.first_row % s.block_rows != 0 || p.n_rows != t.shape[1] || s.cols != t.shape[2])
      return false;
  }
  return true;
}

bool is_routed_expert(const std::string& name) {
  return name.rfind("blk.", 0) == 0 &&
         (ends_with(name, ".ffn_gate_exps.weight") || ends_with(name, ".ffn_up_exps.weight") ||
          ends_with(name, ".ffn_down_exps.weight"));
}

ArenaPlan plan_arena(const TensorMap& map, const std::vector<int>& worker_nodes,
                     uint64_t alignment, kernels::CpuIsa repack_for) {
  if (worker_nodes.empty())
    throw Error(ErrorKind::kInvalidInput, "an arena needs at least one expert worker");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw Error(ErrorKind::kInvalidInput, fmt::format("arena alignment {} is not a power of two", alignment));
  ArenaPlan plan;
  plan.worker_nodes = worker_nodes;
  plan.alignment = alignment;
  Hasher h;
  h.add(kLayoutVersion).add(alignment).add(uint64_t(repack_for)).add(uint64_t(worker_nodes.size()));
  for (int n : worker_nodes) h.add(int64_t(n));
  plan.hash = h.value();

  uint64_t at = align_up(kHeaderBytes, alignment);
  // Values start at `alignment` (pages, huge pages); an FP8 slice's scales and
  // marks follow its values at cache-line alignment, so the ~350 small
  // placements of a DeepSeek-V3 worker do not each take a 2 MiB page.
  auto place = [&](Placement p) {
    auto bytes = bytes_for(p.dtype, numel(p.shape));
    if (!bytes)
      throw Error(ErrorKind::kInvalidInput,
                  fmt::format("{}: {} elements are not whole {} blocks", p.name, numel(p.shape),
                              name(p.dtype)));
    p.bytes = *bytes;
    p.offset = align_up(at, p.role == PlacementRole::kValues ? alignment : kSmallAlignment);
    at = p.offset + p.bytes;
    plan.placements.push_back(std::move(p));
  };

  plan.dense.begin = at;
  for (const MappedTensor& t : map.tensors()) {
    if (is_routed_expert(t.name)) continue;
    place({.name = t.name, .source = &t, .dtype = stored_dtype(t), .shape = t.shape});
  }
  at = align_up(at, alignment);
  plan.dense.end = at;

  // F ranges per MoE layer, from that layer's down projection: its columns
  // are split, so they must be whole blocks of its stored type; whole
  // 128-blocks where the layer's experts stay FP8 (their scale blocks).
  const size_t W = worker_nodes.size();
  auto ranges_for = [&](const std::string& name) {
    const std::string prefix = layer_prefix(name);
    const MappedTensor& down = map.at(prefix + "ffn_down_exps.weight");
    if (down.shape.size() != 3)
      throw Error(ErrorKind::kInvalidInput, fmt::format("{}: expected [experts, hidden, ffn]", down.name));
    bool fp8 = false;
    for (const char* n : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"})
      if (const MappedTensor* x = map.find(prefix + n)) fp8 |= stores_fp8_experts(*x);
    if (fp8) return split_f(down.shape[2], kernels::kFp8ScaleBlock, W, down.name, true);
    return split_f(down.shape[2], info(stored_dtype(down)).block_elems, W, down.name);
  };
  for (size_t w = 0; w < W; ++w) {
    Region region{at, at, worker_nodes[w]};
    for (const MappedTensor& t : map.tensors()) {
      if (!is_routed_expert(t.name)) continue;
      if (t.shape.size() != 3)
        throw Error(ErrorKind::kInvalidInput,
                    fmt::format("{}: routed experts must be [experts, rows, cols]", t.name));
      FRange r = ranges_for(t.name)[w];
      bool down = ends_with(t.name, ".ffn_down_exps.weight");
      const bool fp8 = stores_fp8_experts(t);
      Placement p{.name = t.name, .source = &t, .dtype = fp8 ? DType::kF8E4M3 : stored_dtype(t), .shape = t.shape,
                  .worker = int(w), .node = worker_nodes[w],
                  .split = down ? SplitAxis::kCols : SplitAxis::kRows,
                  .slice_begin = r.begin, .slice_end = r.end};
      p.shape[down ? 2 : 1] = r.end - r.begin;
      p.layout = kernels::expert_matrix_layout(p.dtype, repack_for, int64_t(p.shape[1]), int64_t(p.shape[2]));
      if (fp8) {
        Placement sc = p, mk = p;
        sc.layout = mk.layout = kernels::WeightLayout::kRowMajor;  // their own rows, whatever the values'
        sc.name = fp8_scales_name(t.name);
        sc.role = PlacementRole::kFp8Scales;
        sc.dtype = DType::kF32;
        sc.shape = fp8_scales_shape(p.shape);
        mk.name = fp8_marks_name(t.name);
        mk.role = PlacementRole::kFp8Marks;
        mk.dtype = DType::kU8;
        mk.shape = fp8_marks_shape(p.shape);
        place(std::move(p));
        place(std::move(sc));
        place(std::move(mk));
        continue;
      }
      place(std::move(p));
    }
    at = align_up(at, alignment);
    region.end = at;
    plan.workers.push_back(region);
  }
  plan.data_end = at;
  return plan;
}

}  // namespace tandem::arena
