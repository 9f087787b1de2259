#include "gpu_backend/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/status.h"

namespace tandem {
namespace {

// The soname this toolkit's cuBLAS has, then the toolkit's own directory (tandem is not linked against it, so
// the loader's search path may not know it).
#define TANDEM_STR2(x) #x
#define TANDEM_STR(x) TANDEM_STR2(x)
const char* const kCandidates[] = {
    "libcublas.so." TANDEM_STR(CUBLAS_VER_MAJOR),
#if defined(TANDEM_CUDA_LIBRARY_DIR)
    TANDEM_CUDA_LIBRARY_DIR "/libcublas.so." TANDEM_STR(CUBLAS_VER_MAJOR),
#endif
    "/usr/local/cuda/lib64/libcublas.so." TANDEM_STR(CUBLAS_VER_MAJOR),
    "/usr/local/cuda/lib/libcublas.so." TANDEM_STR(CUBLAS_VER_MAJOR),
};

template <typename Fn>
absl::Status Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) return FailedPrecondition("cublas: the library lacks ", name);
  return absl::OkStatus();
}

absl::StatusOr<CublasApi> Load() {
  void* lib = nullptr;
  std::string tried;
  for (const char* path : kCandidates) {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    tried += tried.empty() ? path : Cat(", ", path);
  }
  if (lib == nullptr) return FailedPrecondition("cublas: cannot load the library (tried ", tried, ")");
  CublasApi api;
  TANDEM_RETURN_IF_ERROR(Resolve(lib, "cublasCreate_v2", &api.create));
  TANDEM_RETURN_IF_ERROR(Resolve(lib, "cublasDestroy_v2", &api.destroy));
  TANDEM_RETURN_IF_ERROR(Resolve(lib, "cublasSetStream_v2", &api.set_stream));
  TANDEM_RETURN_IF_ERROR(Resolve(lib, "cublasSetWorkspace_v2", &api.set_workspace));
  TANDEM_RETURN_IF_ERROR(Resolve(lib, "cublasGemmEx", &api.gemm_ex));
  TANDEM_RETURN_IF_ERROR(Resolve(lib, "cublasGetStatusString", &api.status_string));
  TANDEM_RETURN_IF_ERROR(Resolve(lib, "cublasGetStatusName", &api.status_name));
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

absl::StatusOr<const CublasApi*> LoadCublas() {
  static std::once_flag once;
  static absl::StatusOr<CublasApi>* loaded = nullptr;
  std::call_once(once, [] { loaded = new absl::StatusOr<CublasApi>(Load()); });
  if (!loaded->ok()) return loaded->status();
  return &loaded->value();
}

}  // namespace tandem
