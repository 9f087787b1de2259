// Topology from hwloc: the host (checked against sysfs), synthetic descriptions (shapes computed by hand from
// the description) and the XML files in tests/data/topology (facts read from the files, see its README).
#include "core/topology.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "tests/testutil.h"

namespace tandem {
namespace {

std::vector<int> Range(int begin, int end) {
  std::vector<int> v;
  for (int i = begin; i < end; ++i) v.push_back(i);
  return v;
}

std::vector<int> NodePus(const TopoNumaNode& n) {
  std::vector<int> pus;
  for (const TopoCore& c : n.cores) pus.insert(pus.end(), c.pus.begin(), c.pus.end());
  std::sort(pus.begin(), pus.end());
  return pus;
}

std::string ReadTrimmed(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

TEST(Topology, HostMatchesSysfs) {
  absl::StatusOr<std::unique_ptr<Topology>> t = Topology::Host();
  ASSERT_TRUE(t.ok()) << t.status();
  const Topology& topo = **t;
  std::printf("host: %s\n", topo.Summary().c_str());
  EXPECT_TRUE(topo.is_this_system());
  EXPECT_EQ(topo.source(), "host");

  // Every CPU this process may run on is a PU of the topology.
  std::set<int> pus;
  for (const TopoNumaNode& n : topo.nodes()) {
    for (int pu : NodePus(n)) {
      EXPECT_TRUE(pus.insert(pu).second) << "PU " << pu << " listed twice";
    }
  }
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) {
      EXPECT_TRUE(pus.count(cpu)) << "CPU " << cpu << " is missing";
    }
  }

  // Physical cores: distinct (package, core id) pairs of the topology's PUs, as the kernel reports them.
  std::set<std::pair<std::string, std::string>> cores;
  for (int pu : pus) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(pu) + "/topology/";
    cores.insert({ReadTrimmed(dir + "physical_package_id"), ReadTrimmed(dir + "core_id")});
  }
  EXPECT_EQ(topo.n_cores(), static_cast<int>(cores.size()));
  EXPECT_EQ(topo.n_pus(), static_cast<int>(pus.size()));

  // NUMA nodes: the kernel's node directories (absent on kernels without NUMA: then hwloc makes one node).
  int sys_nodes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) == 0 && name.size() > 4 && std::isdigit(static_cast<unsigned char>(name[4]))) {
      ++sys_nodes;
    }
  }
  EXPECT_EQ(static_cast<int>(topo.nodes().size()), std::max(sys_nodes, 1));
  for (const TopoNumaNode& n : topo.nodes()) EXPECT_GT(n.memory_bytes, 0u);
}

TEST(Topology, SyntheticTwoPackagesTwoNodesEach) {
  absl::StatusOr<std::unique_ptr<Topology>> t = Topology::Synthetic("pack:2 numa:2 core:8 pu:2");
  ASSERT_TRUE(t.ok()) << t.status();
  const Topology& topo = **t;
  EXPECT_FALSE(topo.is_this_system());
  EXPECT_EQ(topo.n_packages(), 2);
  ASSERT_EQ(topo.nodes().size(), 4u);
  EXPECT_EQ(topo.n_cores(), 32);
  EXPECT_EQ(topo.n_pus(), 64);
  for (int k = 0; k < 4; ++k) {
    const TopoNumaNode& n = topo.nodes()[k];
    EXPECT_EQ(n.os_index, k);
    EXPECT_EQ(n.package, k / 2);
    EXPECT_GT(n.memory_bytes, 0u);
    EXPECT_EQ(n.memory_bytes, topo.nodes()[0].memory_bytes);
    ASSERT_EQ(n.cores.size(), 8u);
    // Synthetic PUs are numbered depth-first: core c of node k holds PUs 16k + 2c and 16k + 2c + 1.
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(n.cores[c].pus, (std::vector<int>{16 * k + 2 * c, 16 * k + 2 * c + 1}));
      EXPECT_EQ(n.cores[c].logical_index, 8 * k + c);
    }
  }
  EXPECT_NE(topo.Summary().find("2 packages, 4 NUMA nodes"), std::string::npos) << topo.Summary();
}

TEST(Topology, SyntheticSingleNode) {
  absl::StatusOr<std::unique_ptr<Topology>> t = Topology::Synthetic("numa:1 core:4 pu:1");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ((*t)->nodes().size(), 1u);
  EXPECT_EQ(NodePus((*t)->nodes()[0]), Range(0, 4));
  EXPECT_EQ((*t)->nodes()[0].package, -1);  // no package level in the description
}

TEST(Topology, SyntheticTwoPackageXml) {
  absl::StatusOr<std::unique_ptr<Topology>> t =
      Topology::FromXmlFile(test::DataPath("topology/synthetic-2pack-16core.xml"));
  ASSERT_TRUE(t.ok()) << t.status();
  const Topology& topo = **t;
  EXPECT_FALSE(topo.is_this_system());
  EXPECT_EQ(topo.n_packages(), 2);
  ASSERT_EQ(topo.nodes().size(), 2u);
  for (int p = 0; p < 2; ++p) {
    const TopoNumaNode& n = topo.nodes()[p];
    EXPECT_EQ(n.package, p);
    EXPECT_EQ(n.memory_bytes, 1073741824u);  // local_memory in the file
    ASSERT_EQ(n.cores.size(), 16u);
    for (int c = 0; c < 16; ++c) EXPECT_EQ(n.cores[c].pus, (std::vector<int>{32 * p + 2 * c, 32 * p + 2 * c + 1}));
  }
}

TEST(Topology, UnevenFourNodeXml) {
  absl::StatusOr<std::unique_ptr<Topology>> t =
      Topology::FromXmlFile(test::DataPath("topology/synthetic-4node-uneven.xml"));
  ASSERT_TRUE(t.ok()) << t.status();
  const Topology& topo = **t;
  ASSERT_EQ(topo.nodes().size(), 4u);
  // The README's restriction 0x011f03ff keeps PUs 0-9, 16-20 and 24 of nodes holding PUs 8k..8k+7.
  const std::vector<std::vector<int>> want = {Range(0, 8), Range(8, 10), Range(16, 21), {24}};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(topo.nodes()[k].os_index, k);
    EXPECT_EQ(NodePus(topo.nodes()[k]), want[k]) << "node " << k;
    EXPECT_EQ(topo.nodes()[k].cores.size(), want[k].size());
  }
  EXPECT_EQ(topo.n_cores(), 16);
}

TEST(Topology, RealTwoSocketServerXml) {
  absl::StatusOr<std::unique_ptr<Topology>> t =
      Topology::FromXmlFile(test::DataPath("topology/hwloc-32em64t-2n8c2t-pci-noio.xml"));
  ASSERT_TRUE(t.ok()) << t.status();
  const Topology& topo = **t;
  std::printf("real 2-socket: %s\n", topo.Summary().c_str());
  EXPECT_FALSE(topo.is_this_system());
  EXPECT_EQ(topo.n_packages(), 2);
  ASSERT_EQ(topo.nodes().size(), 2u);
  EXPECT_EQ(topo.nodes()[0].memory_bytes, 34330173440u);  // local_memory attributes in the file
  EXPECT_EQ(topo.nodes()[1].memory_bytes, 34359738368u);
  for (int s = 0; s < 2; ++s) {
    const TopoNumaNode& n = topo.nodes()[s];
    EXPECT_EQ(n.os_index, s);
    EXPECT_EQ(n.package, s);
    ASSERT_EQ(n.cores.size(), 8u);
    // Linux numbered the first hardware thread of every core first: core c of socket s is PUs 8s+c and 16+8s+c.
    for (int c = 0; c < 8; ++c) EXPECT_EQ(n.cores[c].pus, (std::vector<int>{8 * s + c, 16 + 8 * s + c}));
  }
}

TEST(Topology, BadInputsAreErrors) {
  EXPECT_EQ(Topology::Synthetic("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Topology::Synthetic("pack:two core:x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Topology::FromXmlFile(test::DataPath("topology/no-such-file.xml")).ok());

  const std::string garbage = ::testing::TempDir() + "/topology_garbage.xml";
  {
    std::ofstream f(garbage);
    f << "<?xml version=\"1.0\"?>\n<topology version=\"2.0\"><object type=\"Banana\"";
  }
  EXPECT_FALSE(Topology::FromXmlFile(garbage).ok());
  std::filesystem::remove(garbage);
}

}  // namespace
}  // namespace tandem
