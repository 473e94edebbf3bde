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
