// cuBLAS is loaded on demand (gpu_backend/cublas_loader.h): the library is found and every function the backend
// calls resolves. Needs the CUDA toolkit's libraries, not a GPU.
#include "gpu_backend/cublas_loader.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(CublasLoader, FindsTheLibraryAndEveryFunction) {
  absl::StatusOr<const CublasApi*> api = LoadCublas();
  ASSERT_TRUE(api.ok()) << api.status();
  const CublasApi& a = **api;
  EXPECT_NE(a.create, nullptr);
  EXPECT_NE(a.destroy, nullptr);
  EXPECT_NE(a.set_stream, nullptr);
  EXPECT_NE(a.set_workspace, nullptr);
  EXPECT_NE(a.gemm_ex, nullptr);
  // The status names come from the loaded library itself, no device needed.
  EXPECT_EQ(std::string(a.status_name(CUBLAS_STATUS_ALLOC_FAILED)), "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_GT(std::strlen(a.status_string(CUBLAS_STATUS_NOT_INITIALIZED)), 0u);
  // Loaded once: later calls hand out the same table.
  absl::StatusOr<const CublasApi*> again = LoadCublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *api);
}

}  // namespace
}  // namespace tandem
