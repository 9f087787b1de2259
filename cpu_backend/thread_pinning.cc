#include "cpu_backend/thread_pinning.h"

#include <hwloc.h>
#include <omp.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "core/status.h"

namespace tandem {
namespace {

absl::Status NeedHost(const Topology& topo, const char* what) {
  if (!topo.is_this_system()) {
    return FailedPrecondition(what, " needs the host topology, not ", topo.source());
  }
  return absl::OkStatus();
}

// Runs fn(thread, n) on every thread of one parallel region of n threads; fails when the team is smaller.
template <typename Fn>
absl::Status InTeam(int n, Fn fn) {
  omp_set_dynamic(0);
  int team = 0;
#pragma omp parallel num_threads(n)
  {
#pragma omp single
    team = omp_get_num_threads();
    // The implicit barrier of `single` makes `team` visible to every thread here.
    if (team == n) fn(omp_get_thread_num());
  }
  if (team != n) return ResourceExhausted("OpenMP gave a team of ", team, " threads, ", n, " were asked for");
  return absl::OkStatus();
}

// The single PU in `set`, or -1.
int SinglePu(hwloc_const_bitmap_t set) { return hwloc_bitmap_weight(set) == 1 ? hwloc_bitmap_first(set) : -1; }

}  // namespace

absl::Status PinOpenMpThreads(const Topology& topo, std::span<const int> pus) {
  TANDEM_RETURN_IF_ERROR(NeedHost(topo, "pinning threads"));
  if (pus.empty()) return InvalidArgument("no PU to pin threads to");
  hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(topo.hwloc());
  std::set<int> seen;
  for (int pu : pus) {
    if (pu < 0 || !hwloc_bitmap_isset(allowed, static_cast<unsigned>(pu))) {
      return InvalidArgument("PU ", pu, " is not an allowed PU of this machine");
    }
    if (!seen.insert(pu).second) return InvalidArgument("PU ", pu, " is given to two threads");
  }
  const int n = static_cast<int>(pus.size());
  std::vector<int> errors(n, 0);
  TANDEM_RETURN_IF_ERROR(InTeam(n, [&](int t) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == nullptr) {
      errors[t] = ENOMEM;
      return;
    }
    hwloc_bitmap_only(set, static_cast<unsigned>(pus[t]));
    if (hwloc_set_cpubind(topo.hwloc(), set, HWLOC_CPUBIND_THREAD) != 0) errors[t] = errno != 0 ? errno : EINVAL;
    hwloc_bitmap_free(set);
  }));
  for (int t = 0; t < n; ++t) {
    if (errors[t] != 0) {
      return FailedPrecondition("cannot pin OpenMP thread ", t, " to PU ", pus[t], ": ", std::strerror(errors[t]));
    }
  }
  omp_set_num_threads(n);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> OpenMpThreadBindings(const Topology& topo, int n_threads) {
  TANDEM_RETURN_IF_ERROR(NeedHost(topo, "reading thread bindings"));
  if (n_threads < 1) return InvalidArgument("thread count must be at least 1, got ", n_threads);
  std::vector<int> pu(n_threads, -1), errors(n_threads, 0);
  TANDEM_RETURN_IF_ERROR(InTeam(n_threads, [&](int t) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == nullptr) {
      errors[t] = ENOMEM;
      return;
    }
    if (hwloc_get_cpubind(topo.hwloc(), set, HWLOC_CPUBIND_THREAD) == 0) {
      pu[t] = SinglePu(set);
    } else {
      errors[t] = errno != 0 ? errno : EINVAL;
    }
    hwloc_bitmap_free(set);
  }));
  for (int t = 0; t < n_threads; ++t) {
    if (errors[t] != 0) return FailedPrecondition("cannot read thread ", t, "'s binding: ", std::strerror(errors[t]));
  }
  return pu;
}

absl::StatusOr<std::vector<int>> OpenMpThreadLastPus(const Topology& topo, int n_threads) {
  TANDEM_RETURN_IF_ERROR(NeedHost(topo, "reading thread locations"));
  if (n_threads < 1) return InvalidArgument("thread count must be at least 1, got ", n_threads);
  std::vector<int> pu(n_threads, -1);
  TANDEM_RETURN_IF_ERROR(InTeam(n_threads, [&](int t) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == nullptr) return;
    if (hwloc_get_last_cpu_location(topo.hwloc(), set, HWLOC_CPUBIND_THREAD) == 0) pu[t] = SinglePu(set);
    hwloc_bitmap_free(set);
  }));
  return pu;
}

}  // namespace tandem
