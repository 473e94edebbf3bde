#include "common/shm/numa.h"

#include <numa.h>
#include <numaif.h>
#include <unistd.h>

#include <cstring>

#include "common/error.h"

namespace tandem {
namespace {

// Bits in the node masks we pass: enough for any machine Tandem targets.
constexpr unsigned long kMaxNodes = 1024;
constexpr size_t kMaskWords = kMaxNodes / (8 * sizeof(unsigned long));

}  // namespace

int numa_node_count() {
  if (::numa_available() < 0) return 1;
  return ::numa_max_node() + 1;
}

bool bind_to_node(void* addr, size_t bytes, int node) {
  if (bytes == 0) return true;
  if (node < 0 || unsigned(node) >= kMaxNodes)
    throw Error(ErrorKind::kInvalidInput, fmt::format("NUMA node {} is out of range", node));
  unsigned long mask[kMaskWords] = {};
  mask[size_t(node) / (8 * sizeof(unsigned long))] |= 1ul << (size_t(node) % (8 * sizeof(unsigned long)));
  if (::mbind(addr, bytes, MPOL_BIND, mask, kMaxNodes + 1, 0) == 0) return true;
  int err = errno;
  if (err == ENOSYS || err == EPERM) return false;
  throw Error(ErrorKind::kSystem,
              fmt::format("mbind of {} bytes to NUMA node {}: {}{}", bytes, node, std::strerror(err),
                          err == EINVAL ? " (is that node online?)" : ""),
              err);
}

MemoryPolicy policy_at(const void* addr) {
  unsigned long mask[kMaskWords] = {};
  int mode = 0;
  if (::get_mempolicy(&mode, mask, kMaxNodes + 1, const_cast<void*>(addr), MPOL_F_ADDR) != 0)
    fail_errno(errno, "get_mempolicy(MPOL_F_ADDR)", __FILE__, __LINE__);
  MemoryPolicy p;
  p.mode = mode;
  for (unsigned n = 0; n < kMaxNodes; ++n)
    if (mask[n / (8 * sizeof(unsigned long))] & (1ul << (n % (8 * sizeof(unsigned long)))))
      p.nodes.push_back(int(n));
  return p;
}

std::vector<int> nodes_of_pages(const void* addr, size_t bytes) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  uintptr_t first = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(addr) + bytes;
  std::vector<void*> pages;
  for (uintptr_t p = first; p < end; p += page) pages.push_back(reinterpret_cast<void*>(p));
  std::vector<int> status(pages.size(), 0);
  if (!pages.empty() &&
      ::move_pages(0, pages.size(), pages.data(), nullptr, status.data(), 0) != 0)
    fail_errno(errno, "move_pages (query)", __FILE__, __LINE__);
  return status;
}

}  // namespace tandem
