// The CUDA backend: the Backend interface (runtime/backend.h) on one NVIDIA GPU. Everything CUDA-specific stays
// behind this factory, so callers need no CUDA headers and no #ifdef: a build without nvcc gets the inline stubs
// below, which report that CUDA is missing.
//
// Pointer conventions beyond runtime/backend.h: GetRows ids and Rope positions may be device memory, pinned host
// memory or ordinary host memory (detected per call). Routing (MoeRoute, MoeExperts) stays in device memory.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "gpu_backend/dequant.h"
#include "runtime/backend.h"

namespace tandem {

struct CudaOptions {
  int device = 0;
  uint64_t vram_budget = 0;  // hard cap on what the backend allocates; 0 = all free memory (less a safety margin)
  // Token counts up to this many take the custom dequantize-in-registers matvec for quantized weights; larger
  // batches dequantize to f16 tiles and run cuBLAS. 0 = built-in default. Tests and benchmarks set it to force a path.
  int matvec_max_tokens = 0;
};

// What the CUDA backend runs (Backend::Supports), known without a device: ops with weights take the plain float
// and quantized GGUF types, norms F32 scales. Every op's parameters of runtime/ops.h are implemented; the MoE ops
// take at most 256 experts (launch.h's kMoeMaxExperts), which a weight type cannot say.
inline bool CudaSupports(Op op, DType weight_type) {
  switch (op) {
    case Op::kGetRows:
    case Op::kMatMul:
    case Op::kMoeExperts:
      return gpu::IsPlainFloat(weight_type) || gpu::IsQuantized(weight_type);
    case Op::kRmsNorm:
      return weight_type == DType::kF32;
    default:
      return true;  // ops without weights of their own
  }
}

#if defined(TANDEM_HAVE_CUDA)

// A ready backend on options.device, or FailedPrecondition with a one-line reason when there is no usable device.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaOptions& options);
// Number of CUDA devices; 0 when there is no driver or no device. Never throws or aborts.
int CudaDeviceCount();

#else

inline absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaOptions&) {
  return absl::FailedPreconditionError("cuda: this tandem was built without CUDA support (no nvcc at build time)");
}
inline int CudaDeviceCount() { return 0; }

#endif

}  // namespace tandem
