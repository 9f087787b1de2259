#include "cpu_backend/numa_memory.h"

#include <hwloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/status.h"

namespace tandem {
namespace {

using Bitmap = std::unique_ptr<hwloc_bitmap_s, void (*)(hwloc_bitmap_t)>;
Bitmap NewBitmap() { return Bitmap(hwloc_bitmap_alloc(), hwloc_bitmap_free); }

size_t PageSize() {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 4096;
}

// The nodeset a region goes to: one node, or every node with memory (all of them when none reports any).
absl::Status FillNodeset(const Topology& topo, int node, hwloc_bitmap_t set) {
  const auto& nodes = topo.nodes();
  if (node != kInterleavedNode && (node < 0 || node >= static_cast<int>(nodes.size()))) {
    return InvalidArgument("NUMA node index ", node, " out of range: the topology has ", nodes.size(), " nodes");
  }
  hwloc_bitmap_zero(set);
  if (node != kInterleavedNode) {
    hwloc_bitmap_set(set, static_cast<unsigned>(nodes[node].os_index));
    return absl::OkStatus();
  }
  for (const TopoNumaNode& n : nodes) {
    if (n.memory_bytes > 0) hwloc_bitmap_set(set, static_cast<unsigned>(n.os_index));
  }
  if (hwloc_bitmap_iszero(set)) {
    for (const TopoNumaNode& n : nodes) hwloc_bitmap_set(set, static_cast<unsigned>(n.os_index));
  }
  return absl::OkStatus();
}

// Reads one byte per page so that each page is faulted in by this thread.
void TouchPages(uintptr_t start, size_t len, size_t page) {
  const volatile uint8_t* p = reinterpret_cast<const volatile uint8_t*>(start);
  uint8_t sink = 0;
  for (size_t off = 0; off < len; off += page) sink ^= p[off];
  (void)sink;
}

std::string Describe(const Topology& topo, const MemoryRegion& r) {
  const std::string where =
      r.node == kInterleavedNode ? std::string("interleaved") : Cat("node ", topo.nodes()[r.node].os_index);
  return Cat(r.bytes, " bytes at ", absl::StrFormat("%p", r.addr), " (", where, ")");
}

absl::Status BindOne(const Topology& topo, const MemoryRegion& r, hwloc_bitmap_t set, const MembindOptions& opts,
                     bool& bound, uint64_t& bytes_bound) {
  hwloc_topology_t h = topo.hwloc();
  const auto [start, len] = PageInterior(reinterpret_cast<uintptr_t>(r.addr), r.bytes, PageSize());
  bound = false;
  if (len == 0) return absl::OkStatus();
  const hwloc_membind_policy_t policy =
      r.node == kInterleavedNode ? HWLOC_MEMBIND_INTERLEAVE : HWLOC_MEMBIND_BIND;
  const hwloc_topology_support* support = hwloc_topology_get_support(h);
  if (topo.is_this_system() && !support->membind->set_area_membind) {
    return Unimplemented("this system cannot bind memory ranges to NUMA nodes");
  }
  if (opts.populate) {
    if (hwloc_set_membind(h, set, policy, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
      return FailedPrecondition("cannot set this thread's memory policy for ", Describe(topo, r), ": ",
                                std::strerror(errno));
    }
    TouchPages(start, len, PageSize());
    // Back to the default policy so later allocations of this thread are not pinned.
    (void)hwloc_set_membind(h, hwloc_topology_get_complete_nodeset(h), HWLOC_MEMBIND_DEFAULT,
                            HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
  }
  int flags = HWLOC_MEMBIND_BYNODESET;
  if (opts.migrate && (!topo.is_this_system() || support->membind->migrate_membind)) flags |= HWLOC_MEMBIND_MIGRATE;
  if (hwloc_set_area_membind(h, reinterpret_cast<const void*>(start), len, set, policy, flags) != 0) {
    return FailedPrecondition("cannot bind ", Describe(topo, r), ": ", std::strerror(errno));
  }
  bound = true;
  bytes_bound += len;
  return absl::OkStatus();
}

}  // namespace

std::pair<uintptr_t, size_t> PageInterior(uintptr_t addr, size_t bytes, size_t page_size) {
  const uintptr_t first = (addr + page_size - 1) / page_size * page_size;
  const uintptr_t end = (addr + bytes) / page_size * page_size;
  if (bytes == 0 || end <= first) return {first, 0};
  return {first, static_cast<size_t>(end - first)};
}

absl::StatusOr<MembindReport> BindRegions(const Topology& topo, std::span<const MemoryRegion> regions,
                                          const MembindOptions& opts) {
  MembindReport report;
  Bitmap set = NewBitmap();
  if (set == nullptr) return ResourceExhausted("hwloc_bitmap_alloc failed");
  // Validate everything first so a bad plan fails the same way on one node as on many.
  for (const MemoryRegion& r : regions) {
    TANDEM_RETURN_IF_ERROR(FillNodeset(topo, r.node, set.get()));
    if (r.addr == nullptr && r.bytes > 0) return InvalidArgument("memory region of ", r.bytes, " bytes at null");
  }
  if (topo.nodes().size() <= 1 && !opts.even_on_one_node) {
    report.single_node = true;
    return report;
  }
  for (const MemoryRegion& r : regions) {
    TANDEM_RETURN_IF_ERROR(FillNodeset(topo, r.node, set.get()));
    bool bound = false;
    TANDEM_RETURN_IF_ERROR(BindOne(topo, r, set.get(), opts, bound, report.bytes));
    report.regions += bound ? 1 : 0;
  }
  return report;
}

absl::Status BindToNode(const Topology& topo, const void* addr, size_t bytes, int node, const MembindOptions& opts) {
  if (node == kInterleavedNode) return InvalidArgument("BindToNode needs a node index, not the interleave marker");
  const MemoryRegion r{.addr = addr, .bytes = bytes, .node = node};
  return BindRegions(topo, std::span<const MemoryRegion>(&r, 1), opts).status();
}

absl::Status InterleaveAcrossNodes(const Topology& topo, const void* addr, size_t bytes, const MembindOptions& opts) {
  const MemoryRegion r{.addr = addr, .bytes = bytes, .node = kInterleavedNode};
  return BindRegions(topo, std::span<const MemoryRegion>(&r, 1), opts).status();
}

}  // namespace tandem
