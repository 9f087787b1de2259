// Pinning the OpenMP worker threads to chosen PUs, once at startup. libgomp keeps its worker threads alive
// between parallel regions, so a pin made inside one region holds for every later region of the same or a
// smaller team. Thread 0 is the calling thread, which is pinned too.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/topology.h"

namespace tandem {

// Sets the OpenMP team size to pus.size() and, inside one parallel region of that size, binds thread i to the
// PU whose os index is pus[i]. `topo` must be the host topology (Topology::Host()): binding against a
// synthetic or XML topology would silently do nothing. Fails when a PU is not in the topology, a PU repeats,
// OpenMP gives a smaller team, or the kernel refuses a binding.
absl::Status PinOpenMpThreads(const Topology& topo, std::span<const int> pus);

// For each of the first n_threads OpenMP threads (one parallel region of that size), the os index of the single
// PU it is bound to, or -1 when its binding allows more than one PU.
absl::StatusOr<std::vector<int>> OpenMpThreadBindings(const Topology& topo, int n_threads);

// For each of the first n_threads OpenMP threads, the os index of the PU it last ran on, or -1 when the
// system cannot say.
absl::StatusOr<std::vector<int>> OpenMpThreadLastPus(const Topology& topo, int n_threads);

}  // namespace tandem
