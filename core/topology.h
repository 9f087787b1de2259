// The machine's packages, NUMA nodes, physical cores and PUs, read through hwloc: from the host, from a synthetic
// description ("pack:2 numa:2 core:8 pu:2") or from an exported XML file. Topologies that are not the host are
// for planning and tests; binding against them does nothing (hwloc gives them empty hooks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct hwloc_topology;  // hwloc's opaque handle (hwloc_topology_t); only binding code needs it

namespace tandem {

struct TopoCore {
  int logical_index = 0;  // hwloc's logical index among cores (os indexes of cores repeat across packages)
  std::vector<int> pus;   // os indexes (the kernel's CPU numbers) of its hardware threads, ascending
};

struct TopoNumaNode {
  int os_index = 0;             // the kernel's node number
  uint64_t memory_bytes = 0;    // local memory; 0 when hwloc does not know it
  int package = -1;             // logical index of the enclosing package, -1 when there is none
  std::vector<TopoCore> cores;  // cores whose nearest memory is this node; empty for memory-only nodes (CXL)
};

class Topology {
 public:
  static absl::StatusOr<std::unique_ptr<Topology>> Host();
  // hwloc's synthetic syntax, e.g. "pack:2 numa:2 core:8 pu:2".
  static absl::StatusOr<std::unique_ptr<Topology>> Synthetic(std::string_view description);
  // An XML file written by `lstopo --of xml` (hwloc 2.x format).
  static absl::StatusOr<std::unique_ptr<Topology>> FromXmlFile(const std::string& path);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  int n_packages() const { return n_packages_; }
  const std::vector<TopoNumaNode>& nodes() const { return nodes_; }  // hwloc's logical order
  int n_cores() const;
  int n_pus() const;
  uint64_t total_memory() const;
  // The first package's CPU model as the system names it ("AMD EPYC 9654 96-Core Processor"); empty when unknown.
  const std::string& cpu_model() const { return cpu_model_; }
  // True for the host: only then do binding calls reach the kernel.
  bool is_this_system() const { return this_system_; }
  const std::string& source() const { return source_; }  // "host", "synthetic:<desc>" or "xml:<path>"
  // "2 packages, 2 NUMA nodes: node 0 (32.0 GiB, 8 cores, PUs 0-7,16-23), node 1 (...)"
  std::string Summary() const;

  hwloc_topology* hwloc() const { return topo_; }

 private:
  Topology() = default;
  static absl::StatusOr<std::unique_ptr<Topology>> Load(std::string source,
                                                        int (*configure)(hwloc_topology*, const std::string&),
                                                        const std::string& arg);
  absl::Status Extract();

  hwloc_topology* topo_ = nullptr;
  std::string source_;
  bool this_system_ = false;
  int n_packages_ = 0;
  std::string cpu_model_;
  std::vector<TopoNumaNode> nodes_;
};

}  // namespace tandem
