#include "gpu_backend/cuda_status.h"

#include <cublas_api.h>

#include "core/status.h"
#include "gpu_backend/cublas_loader.h"

namespace tandem::gpu {

absl::Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string msg = Cat("cuda: ", what, ": ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status CublasStatus(cublasStatus_t err, std::string_view what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  // Only reached once cuBLAS is loaded (a status comes from one of its calls), so its names are at hand.
  absl::StatusOr<const CublasApi*> api = LoadCublas();
  const std::string msg = api.ok() ? Cat("cublas: ", what, ": ", (*api)->status_string(err), " (",
                                         (*api)->status_name(err), ")")
                                   : Cat("cublas: ", what, ": status ", static_cast<int>(err));
  switch (err) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(msg);
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::FailedPreconditionError(msg);
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace tandem::gpu
