// The host as a Backend: memory is plain aligned host memory under a capacity, copies are memcpy, and the
// compute methods call the cpu:: kernels (threaded with OpenMP).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu_backend/kernels.h"
#include "runtime/backend.h"

namespace tandem {

// Whether MatMul weights are repacked at load into the 16-row interleaved layout of cpu_backend/repack.h
// (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K). kAuto: where the AVX-512 VNNI kernels run (the portable packed kernel is slower
// than the AVX2 GGUF-layout kernels). Env TANDEM_REPACK=0|1 overrides kAuto, so tests can force either path.
enum class Repack { kAuto, kOff, kOn };

struct CpuBackendOptions {
  int n_threads = 0;          // OpenMP threads for the kernels; 0 = OpenMP's default (all cores)
  size_t capacity = SIZE_MAX; // bytes Alloc may hand out in total (workspace included)
  Repack repack = Repack::kAuto;
};

// kAuto resolved against the environment and the active ISA.
bool ResolveRepack(Repack r);

// The CPU backend's own extras beyond Backend: where repacked weights live on a multi-socket machine, so that each
// thread computes the rows in its own node's memory (cpu::MatMulAffinity).
class CpuBackendApi : public Backend {
 public:
  // Bytes Alloc has handed out and not taken back (for tests of the accounting).
  virtual size_t bytes_in_use() const = 0;
  // OpenMP thread i runs on NUMA node thread_node[i] (the pinned workers of graph/numa_plan.h).
  virtual void SetThreadNodes(std::vector<int> thread_node) = 0;
  // The row groups of the repacked matrix at `data` (as returned by PrepareMatMulWeights) and their nodes.
  virtual void SetRowNodes(const void* data, std::vector<cpu::RowNodeRange> ranges) = 0;
};

std::unique_ptr<CpuBackendApi> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace tandem
