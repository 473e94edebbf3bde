// Where the processes of a graph run, planned from the machine's topology
// (hwloc): its NUMA nodes with their CPUs and memory, and its GPUs with the
// node they hang off. Expert workers go one per node by default; with
// --expert-workers N they spread over the nodes (several per node become
// virtual nodes), and each worker is pinned to its share of its own node's
// CPUs — never to CPUs of another node. Only CPUs this process may use count
// (taskset, cgroups).
#pragma once

#include <hwloc.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct NumaNodeInfo {
  int os_index = 0;
  std::vector<int> cpus;  // OS indexes of its processing units that this process may use
  uint64_t memory_bytes = 0;
};

struct GpuInfo {
  std::string name;   // e.g. "cuda0" or the PCI device's name
  std::string pci;    // bus id
  int numa_node = -1; // the nearest node, -1 unknown
};

struct Topology {
  std::vector<NumaNodeInfo> nodes;  // nodes without usable CPUs are left out
  std::vector<GpuInfo> gpus;
  std::string describe() const;     // one line for the log
};

// The machine as hwloc sees it. `synthetic` (for tests) is an hwloc
// synthetic description such as "pack:2 numa:1 core:4 pu:2", or an hwloc XML
// topology (starting with '<'; it can hold PCI devices); its CPUs are taken
// as usable. GPUs: one per PCI device that is_compute_gpu() accepts, with its
// nearest NUMA node. Throws tandem::Error(kSystem) if hwloc fails, and
// kInvalidInput for a bad description.
Topology read_topology(const std::string& synthetic = "");

// Whether a PCI device (class, vendor, and the names and types of its hwloc
// OS devices) is a GPU to compute on: named by a compute runtime or GPU
// library (cudaN, openclN, nvmlN, rsmiN), or a display/3D controller from
// NVIDIA, AMD or Intel (not Intel's VGA, and not BMC VGAs such as ASPEED's).
bool is_compute_gpu(uint16_t pci_class, uint16_t vendor,
                    const std::vector<std::pair<std::string, hwloc_obj_osdev_type_e>>& osdevs);

struct WorkerPlacement {
  int node = 0;           // OS index of its NUMA node
  std::vector<int> cpus;  // pinned there
};

// n workers (0: one per node). Workers are spread as evenly as possible over
// the nodes in order; the CPUs of a node are split evenly among its workers
// (a worker gets at least one; when a node has fewer CPUs than workers they
// share them round-robin).
std::vector<WorkerPlacement> plan_expert_workers(const Topology& t, int n);

}  // namespace tandem
