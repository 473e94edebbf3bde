// NUMA placement of shared memory: binding a range of a mapping to one node
// (mbind), and asking the kernel where pages are and which policy governs
// them, so tests can check that placement was honoured. Thin wrappers over
// the syscalls (libnuma's numaif.h), throwing tandem::Error with errno.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

// Number of NUMA nodes the kernel knows (1 on a machine without NUMA).
int numa_node_count();

// Binds [addr, addr + bytes) to `node` with MPOL_BIND. addr must be page
// aligned; the kernel rounds the length up to whole pages. On a shared file
// mapping the policy is recorded on the file's pages (tmpfs/hugetlbfs shared
// policy), so pages allocated later — by fallocate or first touch, from any
// process — come from that node. Returns false (and changes nothing) where
// the kernel refuses memory policies (ENOSYS/EPERM in containers).
bool bind_to_node(void* addr, size_t bytes, int node);

struct MemoryPolicy {
  int mode = 0;             // MPOL_DEFAULT, MPOL_BIND, ...
  std::vector<int> nodes;   // nodes in the policy's mask
};
// The policy that governs the page at addr.
MemoryPolicy policy_at(const void* addr);

// The node each page of [addr, addr + bytes) lives on (move_pages query);
// a negative value is -errno for that page (-ENOENT: not yet allocated).
std::vector<int> nodes_of_pages(const void* addr, size_t bytes);

}  // namespace tandem
