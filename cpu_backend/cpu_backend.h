// The host as a Backend: memory is plain aligned host memory under a capacity, copies are memcpy, and the
// compute methods call the cpu:: kernels (threaded with OpenMP).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "graph/backend.h"

namespace tandem {

struct CpuBackendOptions {
  int n_threads = 0;          // OpenMP threads for the kernels; 0 = OpenMP's default (all cores)
  size_t capacity = SIZE_MAX; // bytes Alloc may hand out in total (workspace included)
};

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace tandem
