// Fixture for the CUDA backend tests: skips without a device, owns a backend, moves data in and out, poisons
// outputs, and checks that no error is left pending after each test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "runtime/backend.h"
#include "gpu_backend/cuda_backend.h"

namespace tandem::test {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend(Options());
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
    const absl::Status ws = backend_->ReserveWorkspace(Workspace());
    ASSERT_TRUE(ws.ok()) << ws;
  }

  void TearDown() override {
    if (!backend_) return;
    const absl::Status err = backend_->TakeError();
    EXPECT_TRUE(err.ok()) << "error left pending: " << err;
    for (void* p : allocations_) backend_->Free(p);
    EXPECT_TRUE(backend_->TakeError().ok());
  }

  virtual CudaOptions Options() const { return {}; }
  virtual WorkspaceSpec Workspace() const {
    WorkspaceSpec spec;
    spec.max_tokens = 64;
    spec.max_cols = 2048;
    spec.max_rows = 2048;
    spec.n_ctx = 4096;
    spec.n_head = 32;
    return spec;
  }

  Backend& gpu() { return *backend_; }

  void* AllocBytes(size_t bytes) {
    absl::StatusOr<void*> p = backend_->Alloc(bytes, "test");
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    allocations_.push_back(*p);
    return *p;
  }

  // Device copy of host data (ordered on the compute stream, so kernels queued after it see it).
  template <typename T>
  T* Upload(std::span<const T> host) {
    void* p = AllocBytes(std::max<size_t>(host.size_bytes(), 1));
    if (p != nullptr && !host.empty()) {
      const absl::Status st = backend_->CopyHostToDevice(p, host.data(), host.size_bytes(), Stream::kCompute);
      EXPECT_TRUE(st.ok()) << st;
    }
    return static_cast<T*>(p);
  }
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    return Upload(std::span<const T>(host));
  }

  // A device array of n floats filled with NaN, so an element a kernel forgets to write shows up.
  float* PoisonedFloats(size_t n) {
    const std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
    return Upload(nan);
  }

  template <typename T>
  std::vector<T> Download(const T* dev, size_t n) {
    std::vector<T> host(n);
    if (n == 0) return host;
    absl::Status st = backend_->CopyDeviceToHost(host.data(), dev, n * sizeof(T), Stream::kCompute);
    EXPECT_TRUE(st.ok()) << st;
    st = backend_->Synchronize(Stream::kCompute);
    EXPECT_TRUE(st.ok()) << st;
    return host;
  }

  // The pending error (clears it). Tests that expect success assert this is OK after their kernels.
  absl::Status Error() { return backend_->TakeError(); }

  std::unique_ptr<Backend> backend_;
  std::vector<void*> allocations_;
};

}  // namespace tandem::test
