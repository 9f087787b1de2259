// Placing memory on NUMA nodes through hwloc: bind a range to one node, or spread its pages over all nodes.
// On a topology with one NUMA node every call validates its arguments and then succeeds without touching the
// kernel (many containers forbid mbind, and there is nothing to place). Topologies that are not the host
// (synthetic, XML) run the whole path against hwloc's empty hooks, which is how multi-node placement is tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "core/topology.h"

namespace tandem {

constexpr int kInterleavedNode = -1;  // MemoryRegion::node for pages spread over every node with memory

struct MemoryRegion {
  const void* addr = nullptr;
  size_t bytes = 0;
  int node = 0;  // index into Topology::nodes(), or kInterleavedNode
};

struct MembindOptions {
  // Move pages already resident elsewhere (HWLOC_MEMBIND_MIGRATE), where the system supports it.
  bool migrate = true;
  // Touch every page while the calling thread's own policy points at the target. Page-cache pages of a
  // mmap'd file are allocated by the faulting thread's policy, not the range's, so this is what places a
  // model file that is not cached yet. Costs one read of the range.
  bool populate = true;
  // Make the calls even when the topology has one node, where they change nothing. Tests use it to hold the
  // kernel path (flags, alignment) against a real kernel on single-node machines.
  bool even_on_one_node = false;
};

struct MembindReport {
  bool single_node = false;  // nothing was done: one node
  size_t regions = 0;        // regions bound (those at least one page long)
  uint64_t bytes = 0;        // bytes bound, after shrinking each region to whole pages
};

// The whole pages inside [addr, addr + bytes): {first page address, length}; length 0 when none fits. A page
// that straddles two regions is left to whichever placed it first, so neighbours never fight over it.
std::pair<uintptr_t, size_t> PageInterior(uintptr_t addr, size_t bytes, size_t page_size);

// Binds each region to its node (or interleaves it). Stops at the first failure, naming the region.
absl::StatusOr<MembindReport> BindRegions(const Topology& topo, std::span<const MemoryRegion> regions,
                                          const MembindOptions& opts = {});
absl::Status BindToNode(const Topology& topo, const void* addr, size_t bytes, int node,
                        const MembindOptions& opts = {});
absl::Status InterleaveAcrossNodes(const Topology& topo, const void* addr, size_t bytes,
                                   const MembindOptions& opts = {});

}  // namespace tandem
