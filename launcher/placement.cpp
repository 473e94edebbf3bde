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
  if (!synthetic.empty() && hwloc_topology_set_synthetic(raw, synthetic.c_str()) != 0)
    fail_invalid("hwloc synthetic topology '{}' is not valid", synthetic);
  // GPUs are PCI/OS devices: keep the important ones.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(raw) != 0) throw Error(ErrorKind::kSystem, "hwloc_topology_load failed", errno);
  return t;
}

}  // namespace

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
  for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(t, os));) {
    if (os->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU && os->attr->osdev.type != HWLOC_OBJ_OSDEV_COPROC) continue;
    GpuInfo g;
    g.name = os->name ? os->name : "gpu";
    hwloc_obj_t pci = os->parent;
    while (pci && pci->type != HWLOC_OBJ_PCI_DEVICE) pci = pci->parent;
    if (pci)
      g.pci = fmt::format("{:04x}:{:02x}:{:02x}.{:01x}", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
                          pci->attr->pcidev.dev, pci->attr->pcidev.func);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, os);
    if (anc && anc->nodeset) {
      const int first = hwloc_bitmap_first(anc->nodeset);
      g.numa_node = first;
    }
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
