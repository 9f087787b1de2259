// The pool's accounting, with host malloc standing in for cudaMalloc: runs without a GPU.
#include "gpu_backend/memory_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tandem::gpu {
namespace {

struct Counting {
  int allocs = 0;
  int frees = 0;
  bool fail_next = false;
};

MemoryPool MakePool(size_t capacity, Counting* c) {
  return MemoryPool(
      "test:0", capacity,
      [c](size_t bytes) -> absl::StatusOr<void*> {
        if (c->fail_next) {
          c->fail_next = false;
          return absl::ResourceExhaustedError("raw allocator refused");
        }
        ++c->allocs;
        return std::malloc(bytes);
      },
      [c](void* p) {
        ++c->frees;
        std::free(p);
      });
}

TEST(MemoryPool, ChargesRoundedSizesAgainstTheCapacity) {
  Counting c;
  MemoryPool pool = MakePool(4096, &c);
  absl::StatusOr<void*> a = pool.Alloc(1, "a");  // charged one 256-byte granule
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(pool.bytes_in_use(), 256u);
  absl::StatusOr<void*> b = pool.Alloc(3000, "b");  // 3072
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(pool.bytes_in_use(), 256u + 3072u);
  absl::StatusOr<void*> c3 = pool.Alloc(1024, "third");  // 4352 > 4096
  ASSERT_FALSE(c3.ok());
  EXPECT_EQ(c3.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(c3.status().message());
  EXPECT_NE(msg.find("third"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test:0"), std::string::npos) << msg;
  absl::StatusOr<void*> d = pool.Alloc(768, "fits exactly");  // 256 + 3072 + 768 = 4096
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(pool.bytes_in_use(), 4096u);
  EXPECT_EQ(c.allocs, 3);
}

TEST(MemoryPool, PeakSurvivesFrees) {
  Counting c;
  MemoryPool pool = MakePool(1 << 20, &c);
  void* a = *pool.Alloc(1000, "a");
  void* b = *pool.Alloc(5000, "b");
  EXPECT_EQ(pool.peak_bytes(), 1024u + 5120u);
  ASSERT_TRUE(pool.Free(b).ok());
  EXPECT_EQ(pool.bytes_in_use(), 1024u);
  EXPECT_EQ(pool.peak_bytes(), 1024u + 5120u);
  ASSERT_TRUE(pool.Free(a).ok());
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.live_allocations(), 0u);
  EXPECT_EQ(c.frees, 2);
}

TEST(MemoryPool, ForeignPointersAndNull) {
  Counting c;
  MemoryPool pool = MakePool(1 << 20, &c);
  int x = 0;
  EXPECT_EQ(pool.Free(&x).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool.Free(nullptr).ok());
  void* a = *pool.Alloc(10, "a");
  ASSERT_TRUE(pool.Free(a).ok());
  EXPECT_EQ(pool.Free(a).code(), absl::StatusCode::kInvalidArgument);  // double free
  EXPECT_EQ(c.frees, 1);
}

TEST(MemoryPool, RawAllocatorFailureIsResourceExhaustedAndChargesNothing) {
  Counting c;
  MemoryPool pool = MakePool(1 << 20, &c);
  c.fail_next = true;
  absl::StatusOr<void*> a = pool.Alloc(100, "weights");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(MemoryPool, ZeroBytesGetDistinctPointers) {
  Counting c;
  MemoryPool pool = MakePool(1 << 20, &c);
  void* a = *pool.Alloc(0, "a");
  void* b = *pool.Alloc(0, "b");
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.bytes_in_use(), 512u);
}

TEST(MemoryPool, HugeRequestsDoNotWrap) {
  Counting c;
  MemoryPool pool = MakePool(1 << 20, &c);
  EXPECT_EQ(pool.Alloc(SIZE_MAX - 10, "huge").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.allocs, 0);
}

TEST(MemoryPool, DestructorFreesLeftovers) {
  Counting c;
  {
    MemoryPool pool = MakePool(1 << 20, &c);
    (void)*pool.Alloc(10, "a");
    (void)*pool.Alloc(10, "b");
  }
  EXPECT_EQ(c.frees, 2);
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(size_t{3} << 20), "3.0 MiB");
  EXPECT_EQ(FormatBytes(size_t{3} << 30), "3.00 GiB");
}

}  // namespace
}  // namespace tandem::gpu
