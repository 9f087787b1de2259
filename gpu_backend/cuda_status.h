// CUDA and cuBLAS error codes become absl::Status here, at the boundary; nothing past the backend sees them.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"
#include "core/status.h"

namespace tandem::gpu {

// OK for cudaSuccess; otherwise "cuda: <what>: <error text> (<error name>)" with a code that fits the error
// (ResourceExhausted for out-of-memory, FailedPrecondition for a missing device or driver, Internal otherwise).
absl::Status CudaStatus(cudaError_t err, std::string_view what);
absl::Status CublasStatus(cublasStatus_t err, std::string_view what);

}  // namespace tandem::gpu

#define TANDEM_CUDA_RETURN_IF_ERROR(expr, what) TANDEM_RETURN_IF_ERROR(::tandem::gpu::CudaStatus((expr), (what)))
#define TANDEM_CUBLAS_RETURN_IF_ERROR(expr, what) \
  TANDEM_RETURN_IF_ERROR(::tandem::gpu::CublasStatus((expr), (what)))
