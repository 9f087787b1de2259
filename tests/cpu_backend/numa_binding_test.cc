// Memory binding and thread pinning. On the host (one NUMA node here) binding validates and succeeds without
// calling the kernel; on a synthetic 4-node topology the whole path runs against hwloc's empty hooks. Pinning is
// checked on the host against the kernel's own answer (sched_getcpu) as well as hwloc's.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "core/topology.h"
#include "cpu_backend/numa_memory.h"
#include "cpu_backend/thread_pinning.h"

namespace tandem {
namespace {

constexpr size_t kPage = 4096;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
std::unique_ptr<uint8_t, FreeDeleter> PageBuffer(size_t bytes) {
  return std::unique_ptr<uint8_t, FreeDeleter>(static_cast<uint8_t*>(std::aligned_alloc(kPage, bytes)));
}

std::unique_ptr<Topology> Host() {
  absl::StatusOr<std::unique_ptr<Topology>> t = Topology::Host();
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int> FirstPuOfEachCore(const Topology& topo) {
  std::vector<int> pus;
  for (const TopoNumaNode& n : topo.nodes()) {
    for (const TopoCore& c : n.cores) pus.push_back(c.pus[0]);
  }
  return pus;
}

TEST(PageInterior, ByHand) {
  EXPECT_EQ(PageInterior(4096, 8192, kPage), (std::pair<uintptr_t, size_t>{4096, 8192}));
  EXPECT_EQ(PageInterior(100, 8200, kPage), (std::pair<uintptr_t, size_t>{4096, 4096}));  // [100, 8300)
  EXPECT_EQ(PageInterior(100, 4096, kPage).second, 0u);                                  // no whole page
  EXPECT_EQ(PageInterior(8192, 0, kPage).second, 0u);
}

TEST(NumaMemory, NoOpsOnOneNode) {
  auto topo = Host();
  ASSERT_TRUE(topo);
  if (topo->nodes().size() != 1) GTEST_SKIP() << "host has " << topo->nodes().size() << " NUMA nodes";
  auto buf = PageBuffer(16 * kPage);
  ASSERT_TRUE(buf);
  EXPECT_TRUE(BindToNode(*topo, buf.get(), 16 * kPage, 0).ok());
  EXPECT_TRUE(InterleaveAcrossNodes(*topo, buf.get(), 16 * kPage).ok());
  const std::vector<MemoryRegion> regions = {{buf.get(), 8 * kPage, 0}, {buf.get() + 8 * kPage, 8 * kPage, 0}};
  absl::StatusOr<MembindReport> r = BindRegions(*topo, regions);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->single_node);
  EXPECT_EQ(r->regions, 0u);
  EXPECT_EQ(r->bytes, 0u);
}

TEST(NumaMemory, KernelAcceptsTheCallsOnTheHost) {
  auto topo = Host();
  ASSERT_TRUE(topo);
  auto buf = PageBuffer(32 * kPage);
  ASSERT_TRUE(buf);
  for (size_t i = 0; i < 32 * kPage; ++i) buf.get()[i] = static_cast<uint8_t>(i);
  const std::vector<MemoryRegion> regions = {{buf.get() + 100, 16 * kPage, 0},  // whole pages 1..15
                                             {buf.get() + 16 * kPage, 16 * kPage, kInterleavedNode}};
  absl::StatusOr<MembindReport> r = BindRegions(*topo, regions, {.even_on_one_node = true});
  if (!r.ok() && r.status().message().find("not permitted") != std::string_view::npos) {
    GTEST_SKIP() << "this sandbox forbids mbind: " << r.status();
  }
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->regions, 2u);
  EXPECT_EQ(r->bytes, 31 * kPage);
  // Binding and migrating leave the contents alone.
  for (size_t i = 0; i < 32 * kPage; ++i) ASSERT_EQ(buf.get()[i], static_cast<uint8_t>(i)) << i;
}

TEST(NumaMemory, BadArgumentsFailEvenOnOneNode) {
  auto topo = Host();
  ASSERT_TRUE(topo);
  auto buf = PageBuffer(kPage);
  const int past_end = static_cast<int>(topo->nodes().size());
  EXPECT_EQ(BindToNode(*topo, buf.get(), kPage, past_end).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BindToNode(*topo, buf.get(), kPage, -2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BindToNode(*topo, buf.get(), kPage, kInterleavedNode).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BindToNode(*topo, nullptr, kPage, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NumaMemory, FourNodePathOnSyntheticTopology) {
  absl::StatusOr<std::unique_ptr<Topology>> topo = Topology::Synthetic("pack:2 numa:2 core:2 pu:1");
  ASSERT_TRUE(topo.ok()) << topo.status();
  ASSERT_EQ((*topo)->nodes().size(), 4u);
  auto buf = PageBuffer(64 * kPage);
  ASSERT_TRUE(buf);
  // Four page-aligned quarters on nodes 0-3, a misaligned tail interleaved, and a sliver with no whole page.
  std::vector<MemoryRegion> regions;
  for (int k = 0; k < 4; ++k) regions.push_back({buf.get() + 12 * k * kPage, 12 * kPage, k});
  regions.push_back({buf.get() + 48 * kPage + 100, 15 * kPage, kInterleavedNode});  // whole pages: 49..62
  regions.push_back({buf.get() + 63 * kPage + 8, 64, 2});
  absl::StatusOr<MembindReport> r = BindRegions(**topo, regions);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->single_node);
  EXPECT_EQ(r->regions, 5u);
  EXPECT_EQ(r->bytes, (4 * 12 + 14) * kPage);

  regions.push_back({buf.get(), kPage, 4});  // no node 4
  EXPECT_EQ(BindRegions(**topo, regions).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ThreadPinning, PinsEveryWorkerToItsPu) {
  auto topo = Host();
  ASSERT_TRUE(topo);
  const std::vector<int> pus = FirstPuOfEachCore(*topo);
  const int n = static_cast<int>(pus.size());
  ASSERT_TRUE(PinOpenMpThreads(*topo, pus).ok());
  EXPECT_EQ(omp_get_max_threads(), n);

  absl::StatusOr<std::vector<int>> bound = OpenMpThreadBindings(*topo, n);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(*bound, pus);
  absl::StatusOr<std::vector<int>> last = OpenMpThreadLastPus(*topo, n);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, pus);

  // A later, ordinary parallel region runs each thread where it was pinned, as the kernel sees it.
  std::vector<int> cpu(n, -1);
#pragma omp parallel num_threads(n)
  {
    volatile double x = 0;
    for (int i = 0; i < 100000; ++i) x = x + i;  // some work first: an unpinned thread could have moved by now
    cpu[omp_get_thread_num()] = sched_getcpu();
  }
  EXPECT_EQ(cpu, pus);
}

TEST(ThreadPinning, RejectsBadRequests) {
  auto topo = Host();
  ASSERT_TRUE(topo);
  const int pu = topo->nodes()[0].cores[0].pus[0];
  EXPECT_EQ(PinOpenMpThreads(*topo, std::vector<int>{}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PinOpenMpThreads(*topo, std::vector<int>{pu, pu}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PinOpenMpThreads(*topo, std::vector<int>{1 << 20}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PinOpenMpThreads(*topo, std::vector<int>{-1}).code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<Topology>> synthetic = Topology::Synthetic("numa:2 core:2 pu:1");
  ASSERT_TRUE(synthetic.ok());
  EXPECT_EQ(PinOpenMpThreads(**synthetic, std::vector<int>{0}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(OpenMpThreadBindings(*topo, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
