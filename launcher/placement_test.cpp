// Placement from hwloc topologies: synthetic multi-node machines (workers
// stay on their node's CPUs, spread evenly, share when they must) and this
// machine (the CPUs this process may use, each on exactly one node).
#include "launcher/placement.h"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "common/error.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem {
namespace {

// Two packages with a node each; package 1 hosts an NVIDIA 3D controller with
// the four OS devices its drivers give it, package 0 the server's BMC VGA.
const char* kTwoNodesOneGpuXml = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" allowed_cpuset="0x0000000f" nodeset="0x00000003" complete_nodeset="0x00000003" allowed_nodeset="0x00000003" gp_index="1">
  <object type="Package" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="8">
   <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="6" local_memory="1073741824"/>
   <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3">
    <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5">
    <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4"/>
   </object>
   <object type="Bridge" gp_index="30" bridge_type="0-1" depth="0" bridge_pci="0000:[02-02]">
    <object type="PCIDev" gp_index="31" pci_busid="0000:02:00.0" pci_type="0300 [1a03:2000] [1a03:2000] 41" pci_link_speed="0.000000">
     <object type="OSDev" gp_index="32" name="card0" subtype="DRM" osdev_type="1"/>
    </object>
   </object>
  </object>
  <object type="Package" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="15">
   <object type="NUMANode" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="13" local_memory="1073741824"/>
   <object type="Core" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="10">
    <object type="PU" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="9"/>
   </object>
   <object type="Core" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="12">
    <object type="PU" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="11"/>
   </object>
   <object type="Bridge" gp_index="20" bridge_type="0-1" depth="0" bridge_pci="0000:[41-41]">
    <object type="PCIDev" gp_index="21" pci_busid="0000:41:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1" pci_link_speed="0.000000">
     <object type="OSDev" gp_index="22" name="card1" subtype="DRM" osdev_type="1"/>
     <object type="OSDev" gp_index="23" name="renderD128" subtype="DRM" osdev_type="1"/>
     <object type="OSDev" gp_index="24" name="nvml0" subtype="NVML" osdev_type="1"/>
     <object type="OSDev" gp_index="25" name="cuda0" subtype="CUDA" osdev_type="5"/>
    </object>
   </object>
  </object>
 </object>
</topology>
)";

TEST(Placement, OneGpuPerPciDeviceWithItsNodeAndNoBmcVga) {
  const Topology t = read_topology(kTwoNodesOneGpuXml);
  ASSERT_EQ(t.nodes.size(), 2u) << t.describe();
  ASSERT_EQ(t.gpus.size(), 1u) << t.describe();
  EXPECT_EQ(t.gpus[0].name, "cuda0");
  EXPECT_EQ(t.gpus[0].pci, "0000:41:00.0");
  EXPECT_EQ(t.gpus[0].numa_node, 1);
  EXPECT_NE(t.describe().find("1 GPU(s) cuda0 (node 1)"), std::string::npos) << t.describe();
  EXPECT_THROW(read_topology("<topology>broken"), Error);
}

TEST(Placement, ComputeGpusAreNamedByARuntimeOrComeFromAGpuVendor) {
  using OsDevs = std::vector<std::pair<std::string, hwloc_obj_osdev_type_e>>;
  const OsDevs none;
  EXPECT_TRUE(is_compute_gpu(0x0302, 0x10de, none));   // NVIDIA 3D controller, no plugins
  EXPECT_TRUE(is_compute_gpu(0x0300, 0x1002, none));   // AMD VGA
  EXPECT_TRUE(is_compute_gpu(0x0380, 0x8086, none));   // Intel data-center GPU
  EXPECT_FALSE(is_compute_gpu(0x0300, 0x8086, none));  // Intel integrated VGA
  EXPECT_FALSE(is_compute_gpu(0x0300, 0x1a03, {{"card0", HWLOC_OBJ_OSDEV_GPU}}));  // ASPEED BMC
  EXPECT_FALSE(is_compute_gpu(0x0200, 0x10de, {{"eth0", HWLOC_OBJ_OSDEV_NETWORK}}));  // a NIC
  EXPECT_TRUE(is_compute_gpu(0x0300, 0x1234, {{"opencl0d0", HWLOC_OBJ_OSDEV_COPROC}}));
  EXPECT_TRUE(is_compute_gpu(0x0300, 0x1234, {{"rsmi0", HWLOC_OBJ_OSDEV_GPU}}));
}

TEST(Placement, SyntheticTwoNodesGetOneWorkerEachOnTheirOwnCpus) {
  const Topology t = read_topology("pack:2 numa:1 core:4 pu:1");
  ASSERT_EQ(t.nodes.size(), 2u) << t.describe();
  EXPECT_EQ(t.nodes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t.nodes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  const auto p = plan_expert_workers(t, 0);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].node, 0);
  EXPECT_EQ(p[0].cpus, t.nodes[0].cpus);
  EXPECT_EQ(p[1].node, 1);
  EXPECT_EQ(p[1].cpus, t.nodes[1].cpus);
}

TEST(Placement, VirtualNodesSplitANodesCpusAndNeverCrossNodes) {
  const Topology t = read_topology("pack:2 numa:1 core:4 pu:2");  // 8 PUs per node
  ASSERT_EQ(t.nodes.size(), 2u);
  for (int n : {2, 3, 4, 5, 8, 16, 24}) {
    const auto p = plan_expert_workers(t, n);
    ASSERT_EQ(int(p.size()), n);
    std::vector<int> per_node(2, 0);
    for (const WorkerPlacement& w : p) {
      ++per_node[size_t(w.node)];
      const std::vector<int>& mine = t.nodes[size_t(w.node)].cpus;
      ASSERT_FALSE(w.cpus.empty());
      for (int c : w.cpus) EXPECT_NE(std::find(mine.begin(), mine.end(), c), mine.end()) << "n=" << n << " cpu " << c;
    }
    EXPECT_LE(std::abs(per_node[0] - per_node[1]), 1) << "n=" << n;  // spread evenly
    // Workers of a node do not overlap while it has CPUs enough.
    for (int k = 0; k < 2; ++k) {
      std::multiset<int> used;
      for (const WorkerPlacement& w : p)
        if (w.node == k) used.insert(w.cpus.begin(), w.cpus.end());
      if (per_node[size_t(k)] <= 8) {
        EXPECT_EQ(std::set<int>(used.begin(), used.end()).size(), used.size()) << "n=" << n;
        EXPECT_EQ(used.size(), 8u) << "n=" << n;  // and every CPU of the node is used
      }
    }
  }
  // Three workers on two nodes: two share node 0 (4 PUs each), one has node 1.
  const auto three = plan_expert_workers(t, 3);
  EXPECT_EQ(three[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(three[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(three[2].cpus, t.nodes[1].cpus);
}

TEST(Placement, ThisMachineCoversTheAllowedCpusOnce) {
  const Topology t = read_topology();
  ASSERT_FALSE(t.nodes.empty());
  std::vector<int> seen;
  for (const NumaNodeInfo& n : t.nodes) seen.insert(seen.end(), n.cpus.begin(), n.cpus.end());
  std::sort(seen.begin(), seen.end());
  std::vector<int> allowed = kernels::allowed_cpus();
  std::sort(allowed.begin(), allowed.end());
  EXPECT_EQ(seen, allowed) << t.describe();
  const auto p = plan_expert_workers(t, 2);
  ASSERT_EQ(p.size(), 2u);
  for (const WorkerPlacement& w : p) EXPECT_FALSE(w.cpus.empty());
}

TEST(Placement, BadSyntheticDescriptionIsRefused) {
  try {
    read_topology("pack:two");
    FAIL() << "expected kInvalidInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("pack:two"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem
