// Building the arena: plan, create a temporary file beside the target, bind
// each worker's region to its NUMA node before any page exists, copy every
// tensor (converting where the kernels want another type), write the
// manifest, mark the header ready and rename the file into place.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <spdlog/spdlog.h>

#include "common/arena/arena.h"
#include "common/arena/arena_plan.h"
#include "common/arena/identity.h"
#include "common/arena/proto_dtype.h"
#include "common/arena/tensor_rows.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/numa.h"
#include "common/shm/process.h"
#include "common/shm/run_dir.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/weight_layout.h"
#include "proto/manifest.capnp.h"

namespace tandem::arena {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string parent_dir(const std::string& path) {
  fs::path p = fs::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

// Reports progress about once a second: to the caller's callback, or to the
// log as bytes, rate and ETA.
class ProgressMeter {
 public:
  ProgressMeter(uint64_t total, const BuildOptions& o) : total_(total), options_(o) {}
  void add(uint64_t bytes) {
    done_ += bytes;
    auto now = Clock::now();
    if (now - last_ >= std::chrono::seconds(1)) {
      last_ = now;
      report();
    }
  }
  void report() const {
    BuildProgress p{done_, total_, std::chrono::duration<double>(Clock::now() - start_).count()};
    if (options_.on_progress) return options_.on_progress(p);
    double rate = p.seconds > 0 ? double(done_) / p.seconds : 0;
    double eta = rate > 0 ? double(total_ - done_) / rate : 0;
    spdlog::info("building arena: {:.1f} / {:.1f} MiB ({:.0f}%), {:.0f} MiB/s, ETA {:.0f} s",
                 double(done_) / (1 << 20), double(total_) / (1 << 20),
                 total_ ? 100.0 * double(done_) / double(total_) : 100.0, rate / (1 << 20), eta);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  uint64_t total_, done_ = 0;
  const BuildOptions& options_;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

// The block scales of a worker's slice of FP8 experts ([E, row blocks,
// column blocks] of the slice, F32), read from each expert's source scales:
// gate/up slices start at source block row f0 / 128, down slices at column
// block f0 / 128 (F ranges are whole blocks, arena_plan.h).
void write_fp8_scales(const MappedTensor& t, const Placement& p, std::byte* base) {
  const uint64_t B = kernels::kFp8ScaleBlock, nrb = p.shape[1], ncb = p.shape[2];
  if (p.slice_begin == p.slice_end) return;  // a worker with no part of F
  float* out = reinterpret_cast<float*>(base + p.offset);
  if (t.pieces.size() != p.shape[0] || p.slice_begin % B != 0)
    throw Error(ErrorKind::kInternal, fmt::format("{}: {} pieces for {} experts, slice at {}", p.name,
                                                  t.pieces.size(), p.shape[0], p.slice_begin));
  const uint64_t r0 = p.split == SplitAxis::kRows ? p.slice_begin / B : 0;
  const uint64_t c0 = p.split == SplitAxis::kCols ? p.slice_begin / B : 0;
  for (uint64_t e = 0; e < p.shape[0]; ++e) {
    const TensorPiece& piece = t.pieces[e];
    const SourceMatrix& s = *piece.src;
    const uint64_t src_cb = (s.cols + B - 1) / B;
    const size_t esz = info(s.scale_dtype).block_bytes;
    for (uint64_t j = 0; j < nrb; ++j)
      for (uint64_t k = 0; k < ncb; ++k) {
        const uint64_t at = (piece.first_row / B + r0 + j) * src_cb + c0 + k;
        if ((at + 1) * esz > s.scale.size())
          throw Error(ErrorKind::kInternal, fmt::format("{}: scale {} outside {}", p.name, at, s.tensor));
        kernels::dequantize_generic(s.scale_dtype, s.scale.data() + at * esz, out + (e * nrb + j) * ncb + k, 1);
      }
  }
}

// Copies one canonical tensor into its placements: the whole tensor for a
// dense one, or each worker's rows (gate/up) or columns (down) of every expert.
void write_tensor(const MappedTensor& t, const std::vector<Placement*>& dst, std::byte* base,
                  ProgressMeter& progress) {
  const Placement& first = *dst.front();
  const DType dt = first.dtype;
  const uint64_t cols = t.shape.back();
  const uint64_t row_bytes = *bytes_for(dt, cols);
  const uint64_t rows_per_matrix = t.shape.size() >= 2 ? t.shape[t.shape.size() - 2] : 1;
  for_each_row(t, dt, [&](uint64_t r, const std::byte* row) {
    for (const Placement* p : dst) {
      if (p->role != PlacementRole::kValues) continue;
      std::byte* out = base + p->offset;
      switch (p->split) {
        case SplitAxis::kNone:
          std::memcpy(out + r * row_bytes, row, row_bytes);
          break;
        case SplitAxis::kRows: {  // [E, F, H]: row r is (expert r / F, f = r % F)
          uint64_t e = r / rows_per_matrix, f = r % rows_per_matrix;
          if (f < p->slice_begin || f >= p->slice_end) break;
          uint64_t n = p->slice_end - p->slice_begin;
          std::memcpy(out + (e * n + f - p->slice_begin) * row_bytes, row, row_bytes);
          break;
        }
        case SplitAxis::kCols: {  // [E, H, F]: columns [f0, f1) of every row
          const auto& bi = info(dt);
          uint64_t b0 = p->slice_begin / bi.block_elems * bi.block_bytes;
          uint64_t nb = (p->slice_end - p->slice_begin) / bi.block_elems * bi.block_bytes;
          std::memcpy(out + r * nb, row + b0, nb);
          break;
        }
      }
    }
    progress.add(row_bytes);
  });
  // FP8 experts: each slice's block scales and marks, from the rows.
  for (const Placement* p : dst) {
    if (p->role == PlacementRole::kFp8Scales) write_fp8_scales(t, *p, base);
    if (p->role == PlacementRole::kFp8Marks) {
      auto values = std::find_if(dst.begin(), dst.end(), [&](const Placement* v) {
        return v->role == PlacementRole::kValues && v->worker == p->worker;
      });
      if (values == dst.end())
        throw Error(ErrorKind::kInternal, fmt::format("{}: marks without their weights", p->name));
      const Placement& v = **values;
      const uint64_t rows = v.shape[1], n = v.shape[2];
      for (uint64_t e = 0; e < v.shape[0]; ++e)
        kernels::fp8_mark_blocks(reinterpret_cast<const uint8_t*>(base + v.offset + e * rows * n), n,
                                 int64_t(rows), int64_t(n),
                                 reinterpret_cast<uint8_t*>(base + p->offset) + e * rows * p->shape[2]);
    }
    if (p->role != PlacementRole::kValues) progress.add(p->bytes);
  }
  // Then each placement's layout, expert matrix by expert matrix, after the
  // marks: they are made from the rows (fp8_marks.h). A layout that codes
  // values (bf16_x16z) may not hold a tensor's (random bits do not code):
  // then the tensor takes the layout's fallback, which holds any, and the
  // manifest says so (Arena::build rewrites it).
  for (Placement* p : dst) {
    if (p->role != PlacementRole::kValues || p->layout == kernels::WeightLayout::kRowMajor) continue;
    uint8_t* w = reinterpret_cast<uint8_t*>(base + p->offset);
    const int64_t experts = int64_t(p->shape[0]), rows = int64_t(p->shape[1]), n = int64_t(p->shape[2]);
    const size_t matrix_bytes = size_t(rows) * *bytes_for(p->dtype, uint64_t(n));
    // Each expert is coded as it is repacked, with no pass of its own to
    // check first (an extra read of every BF16 expert): the rare expert that
    // does not code takes the ones before it along to the fallback.
    for (int64_t e = 0; e < experts; ++e) {
      uint8_t* m = w + size_t(e) * matrix_bytes;
      if (kernels::try_repack_rows(p->layout, p->dtype, m, rows, n)) continue;
      const kernels::WeightLayout fb = kernels::layout_fallback(p->layout);
      spdlog::warn("{} (worker {}): expert {} does not code as {}: the slice is stored as {}", p->name, p->worker, e,
                   kernels::layout_name(p->layout), kernels::layout_name(fb));
      for (int64_t d = 0; d < e; ++d)
        kernels::relayout_rows(p->layout, fb, p->dtype, w + size_t(d) * matrix_bytes, rows, n);
      p->layout = fb;
      kernels::repack_rows(p->layout, p->dtype, m, rows, n);
    }
  }
}

// The expert kernels take one layout for a layer's gate and up (MoeShape):
// where one of a worker's pair fell back (write_tensor), the other is
// rewritten from its layout into the same fallback.
void match_gate_up_layouts(ArenaPlan& plan, std::byte* base) {
  const std::string gate = "ffn_gate_exps.weight", up = "ffn_up_exps.weight";
  for (Placement& g : plan.placements) {
    if (g.role != PlacementRole::kValues || !g.name.ends_with(gate)) continue;
    const std::string up_name = g.name.substr(0, g.name.size() - gate.size()) + up;
    for (Placement& u : plan.placements) {
      if (u.role != PlacementRole::kValues || u.name != up_name || u.worker != g.worker || u.layout == g.layout)
        continue;
      Placement& coded = kernels::layout_fallback(g.layout) == u.layout ? g : u;
      const kernels::WeightLayout to = kernels::layout_fallback(coded.layout);
      if (to == coded.layout || (&coded == &g ? u.layout : g.layout) != to)
        throw Error(ErrorKind::kInternal, fmt::format("{} and {} (worker {}) have layouts {} and {}", g.name, u.name,
                                                      g.worker, kernels::layout_name(g.layout),
                                                      kernels::layout_name(u.layout)));
      spdlog::warn("{} (worker {}): stored as {} too, as its pair", coded.name, coded.worker,
                   kernels::layout_name(to));
      const int64_t rows = int64_t(coded.shape[1]), n = int64_t(coded.shape[2]);
      const size_t matrix_bytes = size_t(rows) * *bytes_for(coded.dtype, uint64_t(n));
      for (uint64_t e = 0; e < coded.shape[0]; ++e)
        kernels::relayout_rows(coded.layout, to, coded.dtype,
                               reinterpret_cast<uint8_t*>(base + coded.offset) + e * matrix_bytes, rows, n);
      coded.layout = to;
    }
  }
}

kj::Array<capnp::word> make_manifest(const ArenaPlan& plan, const ModelSource& src,
                                     const ModelIdentity& id) {
  capnp::MallocMessageBuilder b;
  auto m = b.initRoot<proto::Manifest>();
  m.setVersion(kFormatVersion);
  m.setLayoutVersion(kLayoutVersion);
  m.setArchitecture(to_string(src.config().arch));
  m.setSourcePath(src.path());
  m.setSourceFormat(src.format() == SourceFormat::kHuggingFace ? proto::SourceFormat::HUGGING_FACE
                                                               : proto::SourceFormat::GGUF);
  auto ident = m.initIdentity();
  ident.setHash(id.hash);
  auto files = ident.initFiles(unsigned(id.files.size()));
  for (size_t i = 0; i < id.files.size(); ++i) {
    files[unsigned(i)].setPath(id.files[i].path);
    files[unsigned(i)].setSize(id.files[i].size);
    files[unsigned(i)].setMtimeNs(id.files[i].mtime_ns);
  }
  auto nodes = m.initWorkerNodes(unsigned(plan.worker_nodes.size()));
  for (size_t i = 0; i < plan.worker_nodes.size(); ++i) nodes.set(unsigned(i), plan.worker_nodes[i]);
  auto list = m.initTensors(unsigned(plan.placements.size()));
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    const Placement& p = plan.placements[i];
    auto e = list[unsigned(i)];
    e.setName(p.name);
    e.setDtype(to_proto(p.dtype));
    auto shape = e.initShape(unsigned(p.shape.size()));
    for (size_t d = 0; d < p.shape.size(); ++d) shape.set(unsigned(d), p.shape[d]);
    e.setOffset(p.offset);
    e.setBytes(p.bytes);
    e.setLayout(std::string(kernels::layout_name(p.layout)));
    e.setNumaNode(p.node);
    e.setWorker(p.worker);
    e.setSliceBegin(p.slice_begin);
    e.setSliceEnd(p.slice_end);
  }
  return capnp::messageToFlatArray(b);
}

// Temporary files of builders that died mid-build: "<name>.building-<pid>-<ticks>".
void remove_dead_builds(const std::string& path) {
  std::string prefix = fs::path(path).filename().string() + ".building-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent_dir(path), ec)) {
    std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0) continue;
    auto owner = run_owner_from_name("run-" + n.substr(prefix.size()) + "-0");
    if (owner && !is_alive(*owner)) {
      spdlog::info("removing {}, left by a builder (pid {}) that died", e.path().string(), owner->pid);
      fs::remove(e.path(), ec);
    }
  }
}

}  // namespace

uint64_t default_alignment(const std::string& dir) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC) return uint64_t(fs.f_bsize);
  return uint64_t(::sysconf(_SC_PAGESIZE));
}

BuildStats Arena::build(const std::string& path, const ModelSource& src, const BuildOptions& options) {
  return with_context([&] { return "while building the weight arena " + path; }, [&] {
    const std::string dir = parent_dir(path);
    const uint64_t alignment = options.alignment ? options.alignment : default_alignment(dir);
    ModelIdentity id = identify_files(src.files());
    ArenaPlan plan = plan_arena(src.tensors(), options.worker_nodes, alignment, options.repack_for);
    kj::Array<capnp::word> manifest = make_manifest(plan, src, id);
    const uint64_t manifest_bytes = manifest.asBytes().size();
    const uint64_t file_bytes = align_up(plan.data_end + manifest_bytes, alignment);

    struct statvfs vfs {};
    if (::statvfs(dir.c_str(), &vfs) == 0 && uint64_t(vfs.f_bavail) * vfs.f_frsize < file_bytes)
      throw Error(ErrorKind::kSystem,
                  fmt::format("the arena needs {:.1f} MiB but {} has only {:.1f} MiB free",
                              double(file_bytes) / (1 << 20), dir,
                              double(uint64_t(vfs.f_bavail) * vfs.f_frsize) / (1 << 20)));
    remove_dead_builds(path);
    ProcessId me = self_process();
    std::string tmp = fmt::format("{}.building-{}-{}", path, me.pid, me.start_ticks);
    size_t repacked = 0;
    for (const Placement& p : plan.placements) repacked += p.layout != kernels::WeightLayout::kRowMajor;
    spdlog::info("building arena {} from {}: {} tensors, {:.1f} MiB, {} expert worker(s), {} expert slice(s) "
                 "repacked for the expert workers' kernels",
                 path, src.path(), plan.placements.size(), double(file_bytes) / (1 << 20),
                 plan.worker_nodes.size(), repacked);

    BuildStats stats;
    stats.built = true;
    try {
      FileDescriptor fd = create_shared_file(tmp, file_bytes, /*reserve=*/false);
      Mapping map = Mapping::map_shared(fd.get(), file_bytes, Access::kReadWrite, tmp);
      ProgressMeter progress(plan.tensor_bytes(), options);
      ::madvise(map.data(), file_bytes, MADV_HUGEPAGE);  // a hint; tmpfs may ignore it
      // Policies first: pages are allocated on first touch below, from the node
      // the policy names.
      stats.numa_bound = true;
      for (const Region& r : plan.workers)
        if (r.end > r.begin && !bind_to_node(map.data() + r.begin, r.end - r.begin, r.node))
          stats.numa_bound = false;
      // Allocate every page now, in bulk and under the policies just set, rather
      // than one fault at a time while copying.
      ::madvise(map.data(), file_bytes, MADV_POPULATE_WRITE);
      if (!stats.numa_bound) spdlog::warn("the kernel refuses memory policies here: expert slices are not bound to their nodes");

      ArenaHeader& h = *reinterpret_cast<ArenaHeader*>(map.data());
      std::memcpy(h.magic, kMagic, sizeof kMagic);
      h.format_version = kFormatVersion;
      h.state = uint32_t(ArenaState::kBuilding);
      h.model_hash = id.hash;
      h.plan_hash = plan.hash;
      h.file_bytes = file_bytes;
      h.data_offset = align_up(kHeaderBytes, alignment);
      h.manifest_offset = plan.data_end;
      h.manifest_bytes = manifest_bytes;
      h.builder_pid = me.pid;
      h.builder_start_ticks = me.start_ticks;
      h.numa_bound = stats.numa_bound ? 1 : 0;

      // Placements grouped by source tensor, in plan order: each tensor is read once.
      std::vector<const MappedTensor*> order;
      std::unordered_map<const MappedTensor*, std::vector<Placement*>> groups;
      for (Placement& p : plan.placements) {
        auto& g = groups[p.source];
        if (g.empty()) order.push_back(p.source);
        g.push_back(&p);
      }
      for (const MappedTensor* t : order) {
        const auto& group = groups[t];
        with_context([&] { return "while writing tensor " + t->name; },
                     [&] { write_tensor(*t, group, map.data(), progress); });
        stats.tensors_written += group.size();
      }
      match_gate_up_layouts(plan, map.data());
      // A tensor that took its layout's fallback (write_tensor) changes the
      // manifest, not its size: the layouts' names ("bf16_x16z", "bf16_x16")
      // take two words each.
      kj::Array<capnp::word> written = make_manifest(plan, src, id);
      if (written.asBytes().size() != manifest_bytes)
        throw Error(ErrorKind::kInternal, "the manifest changed size with a fallback layout");
      std::memcpy(map.data() + plan.data_end, written.asBytes().begin(), manifest_bytes);
      h.build_unix_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
      std::atomic_ref<uint32_t>(h.state).store(uint32_t(ArenaState::kReady), std::memory_order_release);
      progress.report();
      stats.bytes_written = plan.tensor_bytes();
      stats.seconds = progress.seconds();
      if (::rename(tmp.c_str(), path.c_str()) != 0)
        fail_errno(errno, "rename " + tmp + " -> " + path, __FILE__, __LINE__);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
    spdlog::info("arena {} built: {} tensors, {:.1f} MiB in {:.2f} s ({:.0f} MiB/s)", path,
                 stats.tensors_written, double(stats.bytes_written) / (1 << 20), stats.seconds,
                 stats.seconds > 0 ? double(stats.bytes_written) / (1 << 20) / stats.seconds : 0.0);
    return stats;
  });
}

Arena Arena::open_or_build(const std::string& path, const ModelSource& src,
                           const BuildOptions& options, BuildStats* stats) {
  BuildStats local;
  BuildStats& s = stats ? *stats : local;
  const uint64_t alignment = options.alignment ? options.alignment : default_alignment(parent_dir(path));
  const uint64_t want_model = identify_files(src.files()).hash;
  const uint64_t want_plan = plan_arena(src.tensors(), options.worker_nodes, alignment, options.repack_for).hash;
  std::string why;
  try {
    Arena a = open(path);
    if (a.header().model_hash != want_model) {
      why = "its model files changed (names, sizes or modification times)";
    } else if (a.header().plan_hash != want_plan) {
      why = "it was built for other expert workers, nodes or layouts";
    } else {
      s = BuildStats{};
      s.reason = "adopted: identity and plan match";
      s.numa_bound = a.header().numa_bound != 0;
      spdlog::info("adopting arena {}: built from the same files with the same plan", path);
      return a;
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) why = std::string("it cannot be used: ") + e.message();
    else why = "none exists yet";
  }
  spdlog::info("building arena {}: {}", path, why);
  s = build(path, src, options);
  s.reason = "built: " + why;
  return open(path);
}

}  // namespace tandem::arena
