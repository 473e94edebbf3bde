#include "launcher/placement.h"

#include <hwloc.h>

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "common/error.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

TopologyPtr load(const std::string& synthetic) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error(ErrorKind::kSystem, "hwloc_topology_init failed", errno);
  TopologyPtr t(raw);
  if (synthetic.starts_with("<")) {
    if (hwloc_topology_set_xmlbuffer(raw, synthetic.data(), int(synthetic.size()) + 1) != 0)
      fail_invalid("the hwloc XML topology is not valid");
  } else if (!synthetic.empty() && hwloc_topology_set_synthetic(raw, synthetic.c_str()) != 0) {
    fail_invalid("hwloc synthetic topology '{}' is not valid", synthetic);
  }
  // GPUs are PCI/OS devices: keep the important ones.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(raw) != 0) throw Error(ErrorKind::kSystem, "hwloc_topology_load failed", errno);
  return t;
}

}  // namespace

bool is_compute_gpu(uint16_t pci_class, uint16_t vendor,
                    const std::vector<std::pair<std::string, hwloc_obj_osdev_type_e>>& osdevs) {
  // A compute runtime (CUDA, OpenCL, Level Zero) or a GPU management library
  // (NVML, RSMI) names it: a GPU.
  for (const auto& [name, type] : osdevs)
    if (type == HWLOC_OBJ_OSDEV_COPROC || name.starts_with("nvml") || name.starts_with("rsmi")) return true;
  // Without those plugins: a display or 3D controller from a GPU vendor; the
  // VGA controllers of server BMCs (ASPEED, Matrox) are not.
  const bool display = (pci_class >> 8) == 0x03;
  return display && (vendor == 0x10de || vendor == 0x1002 || (vendor == 0x8086 && pci_class != 0x0300));
}

std::string Topology::describe() const {
  std::string s = fmt::format("{} NUMA node(s):", nodes.size());
  for (const NumaNodeInfo& n : nodes)
    s += fmt::format(" node {} ({} cpus, {:.1f} GiB)", n.os_index, n.cpus.size(), double(n.memory_bytes) / (1ull << 30));
  s += fmt::format("; {} GPU(s)", gpus.size());
  for (const GpuInfo& g : gpus) s += fmt::format(" {} (node {})", g.name, g.numa_node);
  return s;
}

Topology read_topology(const std::string& synthetic) {
  TopologyPtr topo = load(synthetic);
  hwloc_topology_t t = topo.get();
  std::vector<int> allowed;
  if (synthetic.empty()) allowed = kernels::allowed_cpus();
  auto usable = [&](int cpu) { return synthetic.empty() ? std::find(allowed.begin(), allowed.end(), cpu) != allowed.end() : true; };
  Topology out;
  const int n_nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n_nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, unsigned(i));
    NumaNodeInfo info;
    info.os_index = int(node->os_index);
    info.memory_bytes = node->attr ? node->attr->numanode.local_memory : 0;
    for (hwloc_obj_t pu = hwloc_get_next_obj_covering_cpuset_by_type(t, node->cpuset, HWLOC_OBJ_PU, nullptr); pu;
         pu = hwloc_get_next_obj_covering_cpuset_by_type(t, node->cpuset, HWLOC_OBJ_PU, pu))
      if (usable(int(pu->os_index))) info.cpus.push_back(int(pu->os_index));
    if (!info.cpus.empty()) out.nodes.push_back(std::move(info));
  }
  if (out.nodes.empty()) {
    // No NUMA information (or none usable): one node with every usable CPU.
    NumaNodeInfo all;
    all.cpus = synthetic.empty() ? allowed : std::vector<int>{};
    if (all.cpus.empty())
      for (hwloc_obj_t pu = nullptr; (pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu));) all.cpus.push_back(int(pu->os_index));
    out.nodes.push_back(std::move(all));
  }
  // One entry per PCI device, whatever number of OS devices (card1,
  // renderD128, nvml0, cuda0, …) the drivers give it.
  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(t, pci));) {
    std::vector<std::pair<std::string, hwloc_obj_osdev_type_e>> osdevs;
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE) osdevs.emplace_back(c->name ? c->name : "", c->attr->osdev.type);
    if (!is_compute_gpu(pci->attr->pcidev.class_id, pci->attr->pcidev.vendor_id, osdevs)) continue;
    GpuInfo g;
    g.pci = fmt::format("{:04x}:{:02x}:{:02x}.{:01x}", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
                        pci->attr->pcidev.dev, pci->attr->pcidev.func);
    // The compute runtime's name first (cuda0, opencl0d0), then nvml/rsmi/DRM.
    for (auto want : {HWLOC_OBJ_OSDEV_COPROC, HWLOC_OBJ_OSDEV_GPU})
      for (const auto& [name, type] : osdevs)
        if (g.name.empty() && type == want && !name.empty()) g.name = name;
    if (g.name.empty()) g.name = "pci " + g.pci;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, pci);
    if (anc && anc->nodeset && !hwloc_bitmap_iszero(anc->nodeset)) g.numa_node = hwloc_bitmap_first(anc->nodeset);
    out.gpus.push_back(std::move(g));
  }
  return out;
}

std::vector<WorkerPlacement> plan_expert_workers(const Topology& t, int n) {
  if (t.nodes.empty()) fail(ErrorKind::kInternal, "a topology without NUMA nodes");
  const int nodes = int(t.nodes.size());
  if (n <= 0) n = nodes;
  // Worker w goes to node w * nodes / n: consecutive workers fill a node.
  std::vector<int> per_node(size_t(nodes), 0);
  for (int w = 0; w < n; ++w) ++per_node[size_t(int64_t(w) * nodes / n)];
  std::vector<WorkerPlacement> out;
  for (int k = 0; k < nodes; ++k) {
    const std::vector<int>& cpus = t.nodes[size_t(k)].cpus;
    const size_t c = cpus.size();
    const int m = per_node[size_t(k)];
    for (int j = 0; j < m; ++j) {
      WorkerPlacement p;
      p.node = t.nodes[size_t(k)].os_index;
      size_t b = size_t(j) * c / size_t(m), e = size_t(j + 1) * c / size_t(m);
      if (e <= b) {  // fewer CPUs than workers: share them round-robin
        b = size_t(j) % c;
        e = b + 1;
      }
      p.cpus.assign(cpus.begin() + long(b), cpus.begin() + long(e));
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace tandem
