#include "common/arena/arena.h"

#include <sys/mman.h>

#include <capnp/serialize.h>

#include <atomic>
#include <numeric>

#include "common/arena/proto_dtype.h"
#include "common/error.h"
#include "kernels/cpu/weight_layout.h"
#include "proto/manifest.capnp.h"

namespace tandem::arena {
namespace {

uint64_t numel(const std::vector<uint64_t>& s) {
  return std::accumulate(s.begin(), s.end(), uint64_t{1}, std::multiplies<>());
}

// The manifest is validated entry by entry below; these limits only bound
// the work a corrupt message can cause.
capnp::ReaderOptions manifest_limits(uint64_t bytes) {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = bytes / 8 * 4 + 1024;
  o.nestingLimit = 16;
  return o;
}

}  // namespace

Arena::Arena(Arena&&) noexcept = default;
Arena& Arena::operator=(Arena&&) noexcept = default;
Arena::~Arena() = default;

const ArenaHeader& Arena::header() const { return *reinterpret_cast<const ArenaHeader*>(map_.data()); }

std::span<const std::byte> Arena::manifest_bytes() const {
  return {map_.data() + header().manifest_offset, header().manifest_bytes};
}

Arena Arena::open(const std::string& path) {
  return with_context([&] { return "while opening the weight arena " + path; }, [&] {
    Arena a;
    a.path_ = path;
    a.fd_ = open_shared_file(path, Access::kReadOnly);
    uint64_t size = file_size(a.fd_.get(), path);
    if (size < kHeaderBytes)
      fail_invalid("the file has {} bytes, less than an arena header", size);
    a.map_ = Mapping::map_shared(a.fd_.get(), size, Access::kReadOnly, path);
    const ArenaHeader& h = a.header();
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) fail_invalid("not a Tandem weight arena (bad magic)");
    if (h.format_version != kFormatVersion)
      fail_invalid("arena format version {}, this build reads version {}", h.format_version, kFormatVersion);
    uint32_t state = std::atomic_ref<const uint32_t>(h.state).load(std::memory_order_acquire);
    if (state != uint32_t(ArenaState::kReady))
      fail_invalid("the arena is not complete (state {}): its build did not finish", state);
    if (h.file_bytes != size)
      fail_invalid("the header says {} bytes, the file has {} (truncated or extended)", h.file_bytes, size);
    if (h.manifest_offset % 8 != 0 || h.manifest_bytes % 8 != 0 || h.manifest_bytes == 0 ||
        h.data_offset < kHeaderBytes || h.manifest_offset < h.data_offset ||
        h.manifest_offset > size || h.manifest_bytes > size - h.manifest_offset)
      fail_invalid("manifest range [{}, +{}) does not fit the file of {} bytes", h.manifest_offset,
                   h.manifest_bytes, size);

    kj::ArrayPtr<const capnp::word> words(
        reinterpret_cast<const capnp::word*>(a.map_.data() + h.manifest_offset), h.manifest_bytes / 8);
    proto::Manifest::Reader m;
    try {
      a.reader_ = std::make_unique<capnp::FlatArrayMessageReader>(words, manifest_limits(h.manifest_bytes));
      m = a.reader_->getRoot<proto::Manifest>();
      // Another layout version stores some layout's bytes otherwise (q4_k_x4's
      // meta in 5, q8_0_x4's w + 128 in 4) under the same name.
      if (m.getLayoutVersion() != kLayoutVersion)
        fail_invalid("built for kernel layout version {}, this build reads version {}", m.getLayoutVersion(),
                     kLayoutVersion);
      a.source_path_ = m.getSourcePath();
      a.architecture_ = m.getArchitecture();
      a.source_is_hf_ = m.getSourceFormat() == proto::SourceFormat::HUGGING_FACE;
      for (int32_t n : m.getWorkerNodes()) a.worker_nodes_.push_back(n);
      const int workers = int(a.worker_nodes_.size());
      for (auto e : m.getTensors()) {
        ArenaTensor t;
        t.name = e.getName();
        t.worker = e.getWorker();
        t.node = e.getNumaNode();
        t.layout = e.getLayout();
        if (!kernels::layout_from_name(t.layout))
          fail_invalid("tensor {}: unknown layout '{}'", t.name, t.layout);
        t.slice_begin = e.getSliceBegin();
        t.slice_end = e.getSliceEnd();
        for (uint64_t d : e.getShape()) t.shape.push_back(d);
        auto dt = from_proto(e.getDtype());
        if (!dt) fail_invalid("tensor {}: unknown dtype {}", t.name, uint16_t(e.getDtype()));
        t.dtype = *dt;
        if (t.name.empty()) fail_invalid("a manifest entry has no name");
        if (t.worker < -1 || t.worker >= workers)
          fail_invalid("tensor {}: worker {} but the arena has {} workers", t.name, t.worker, workers);
        auto want = bytes_for(t.dtype, numel(t.shape));
        if (!want || *want != e.getBytes())
          fail_invalid("tensor {}: {} bytes for {} {} elements", t.name, e.getBytes(), name(t.dtype),
                       numel(t.shape));
        uint64_t off = e.getOffset();
        if (off < h.data_offset || off > h.manifest_offset || e.getBytes() > h.manifest_offset - off)
          fail_invalid("tensor {}: bytes [{}, +{}) lie outside the data region", t.name, off, e.getBytes());
        t.bytes = {a.map_.data() + off, size_t(e.getBytes())};
        a.tensors_.push_back(std::move(t));
      }
    } catch (const kj::Exception& e) {
      fail_invalid("corrupt manifest: {}", e.getDescription().cStr());
    }
    return a;
  });
}

const ArenaTensor* Arena::find(std::string_view name, int worker) const {
  for (const ArenaTensor& t : tensors_)
    if (t.worker == worker && t.name == name) return &t;
  return nullptr;
}

const ArenaTensor& Arena::at(std::string_view name, int worker) const {
  if (const ArenaTensor* t = find(name, worker)) return *t;
  throw Error(ErrorKind::kNotFound,
              worker < 0 ? fmt::format("tensor {} is not in the arena {}", name, path_)
                         : fmt::format("tensor {} has no slice for expert worker {} in {}", name,
                                       worker, path_));
}

}  // namespace tandem::arena
