// A sequence's state as one gpu worker hands it to another (a prefill worker
// to the decode worker): its KV cache rows [0, size) of every layer and its
// token history, in one file in the run directory, created 0600 and
// exclusively, read once and removed by the reader.
//
// Layout (native byte order; both ends are processes of one machine):
//   SequenceFileHeader
//   history: size uint32 token ids, padded to 8 bytes
//   per layer: k rows (size * k_width floats), then v rows (size * v_width)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/engine/kv_cache.h"

namespace tandem::gpu {

struct SequenceFileHeader {
  char magic[8];  // "TNDMSEQ\0"
  uint32_t version;
  uint32_t n_layers;
  int64_t k_width, v_width;
  int64_t size;  // positions, = history length
};

// Writes the cache's filled rows and `history` (history.size() must equal
// cache.size()). Throws tandem::Error (kSystem with errno, naming the file)
// and removes a half-written file.
void write_sequence_file(const std::string& path, const engine::KvCache& cache, int64_t n_layers,
                         std::span<const uint32_t> history);

// Reads a file written by write_sequence_file into `cache` (which must be
// empty and have the model's widths) and returns its history; then removes
// the file. Throws kInvalidInput naming the file and the mismatch (another
// model's, truncated, too long for the cache, not private), kNotFound if it
// is missing.
std::vector<uint32_t> read_sequence_file(const std::string& path, engine::KvCache& cache, int64_t n_layers);

}  // namespace tandem::gpu
