// cuBLAS, loaded when the first CUDA backend is made rather than when tandem starts: linking libcublas and
// libcublasLt costs every run about 200 MiB of resident memory and 0.1 s of relocations, GPU or not. The handful
// of functions the backend calls are resolved from the shared library by name; their signatures come from
// cuBLAS's own header, so a mismatch does not compile.
#pragma once

#include <cublas_api.h>

#include "absl/status/statusor.h"

namespace tandem {

// The exported C function (the header adds a C++ overload that takes a cudaDataType compute type).
using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType a_type, int lda,
                                          const void* b, cudaDataType b_type, int ldb, const void* beta, void* c,
                                          cudaDataType c_type, int ldc, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo);

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  CublasGemmExFn gemm_ex = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
};

// Loads libcublas once per process (later calls return the same table) or says why it could not: the library
// was not found, or lacks one of the functions.
absl::StatusOr<const CublasApi*> LoadCublas();

}  // namespace tandem
