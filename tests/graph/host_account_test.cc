// The plan's host memory account on the Mixtral-8x7B shape without a device: what the CPU computes with (the
// file's pages, or repacked copies of them), held against the available RAM; paging from disk in the predicted
// speed; contexts past the trained one and KV caches that fit nowhere.
#include <gtest/gtest.h>

#include <regex>

#include "cpu_backend/repack.h"
#include "graph/partitioner.h"
#include "tests/graph/mixtral_units.h"

namespace tandem {
namespace {

using test::CpuProfile;
using test::MixtralInput;

constexpr uint64_t kGiB = 1ull << 30;

uint64_t Parts(const MemoryAccount& m) {
  return m.weights + m.mapped + m.repacked + m.kv + m.staging + m.activations + m.workspace;
}

int CountMatching(const std::vector<std::string>& lines, const std::string& needle) {
  int n = 0;
  for (const std::string& l : lines) {
    EXPECT_EQ(l.find('\n'), std::string::npos) << l;  // one line each
    n += l.find(needle) != std::string::npos;
  }
  return n;
}

TEST(HostAccount, AddsUpAndFollowsTheRepackSetting) {
  for (const char* device : {"none", "sim:12GiB"}) {
    SCOPED_TRACE(device);
    PartitionInput in = MixtralInput(device, CpuProfile(50, 500));
    in.cpu_repack = false;
    const Plan off = Partition(in).value();
    in.cpu_repack = true;
    const Plan on = Partition(in).value();
    // The placement does not depend on the CPU's layout; only the host account does.
    ASSERT_EQ(off.units.size(), on.units.size());
    for (size_t i = 0; i < on.units.size(); ++i) EXPECT_EQ(off.units[i].decode, on.units[i].decode);
    for (const Plan* p : {&off, &on}) {
      EXPECT_EQ(p->host.total(), Parts(p->host));
      EXPECT_GT(p->host.mapped, 0u);  // embd at least: row lookups read the file
      EXPECT_GT(p->host.kv + p->host.activations, 0u);
    }
    EXPECT_FALSE(off.cpu_repack);
    EXPECT_TRUE(on.cpu_repack);
    EXPECT_EQ(off.host.repacked, 0u);
    // Without repacking the CPU computes from every page of the units it runs that are not streamed.
    uint64_t cpu_owned = 0;
    for (size_t i = 0; i < off.units.size(); ++i) {
      const UnitPlan& u = off.units[i];
      const bool streams = u.prefill == Placement::kStream || u.decode == Placement::kStream;
      if ((u.prefill == Placement::kCpu || u.decode == Placement::kCpu) && !streams) {
        cpu_owned += in.units[i].owned_bytes;
      }
    }
    EXPECT_EQ(off.host.mapped, cpu_owned);
    // Repacking moves the Q4_K matrices from the mapping into copies: 16 rows' super-blocks (16 x 144 bytes)
    // become one packed block of 2368 bytes.
    const uint64_t moved = off.host.mapped - on.host.mapped;
    EXPECT_GT(moved, 0u);
    const size_t packed_block = cpu::internal::PackedBlockBytes(DType::kQ4_K);
    EXPECT_EQ(on.host.repacked * 16 * 144, moved * packed_block);
    // The GPU side is the same either way.
    EXPECT_EQ(off.gpu.total(), on.gpu.total());
  }
}

TEST(HostAccount, WeightsPastRamArePagedAndSlowDecode) {
  PartitionInput in = MixtralInput("none", CpuProfile(50, 500));
  in.host_ram_available = 1024 * kGiB;  // everything fits
  const Plan fits = Partition(in).value();
  EXPECT_EQ(fits.host_paged_bytes, 0u);
  EXPECT_EQ(fits.disk_bytes_per_decode_token, 0u);
  EXPECT_EQ(CountMatching(fits.warnings, "host memory"), 0);

  in.host_ram_available = 16 * kGiB;  // ~25 GiB of mapped weights
  const Plan paged = Partition(in).value();
  ASSERT_GT(paged.host.total(), in.host_ram_available);
  EXPECT_EQ(paged.host_paged_bytes, paged.host.total() - in.host_ram_available);
  EXPECT_GT(paged.disk_bytes_per_decode_token, 0u);
  // The slower decode is exactly the disk reads at the profile's rate.
  const double extra_s = 1.0 / paged.predicted_decode_tps - 1.0 / fits.predicted_decode_tps;
  const double disk_s = static_cast<double>(paged.disk_bytes_per_decode_token) / (in.profile.disk_read_gbps * 1e9);
  EXPECT_NEAR(extra_s, disk_s, disk_s * 1e-6);
  EXPECT_LT(paged.predicted_prefill_tps, fits.predicted_prefill_tps);
  EXPECT_EQ(CountMatching(paged.warnings, "read from disk"), 1);

  // A faster disk predicts a faster decode.
  in.profile.disk_read_gbps *= 4;
  const Plan fast = Partition(in).value();
  EXPECT_GT(fast.predicted_decode_tps, paged.predicted_decode_tps);
  EXPECT_LT(fast.predicted_decode_tps, fits.predicted_decode_tps);
}

TEST(HostAccount, MemoryThatCannotBePagedWarns) {
  PartitionInput in = MixtralInput("none", CpuProfile(50, 500));
  in.cpu_repack = true;  // 24 GiB of copies, which cannot be paged
  in.host_ram_available = 8 * kGiB;
  const Plan p = Partition(in).value();
  ASSERT_GT(p.host.anonymous(), in.host_ram_available);
  EXPECT_EQ(CountMatching(p.warnings, "cannot be paged"), 1);
  // Nothing mapped is kept in RAM while the copies alone overflow it.
  EXPECT_EQ(p.host_paged_bytes, p.host.mapped);
}

TEST(HostAccount, ContextPastTheTrainedOneWarns) {
  PartitionInput in = MixtralInput("none", CpuProfile(50, 500));
  in.n_ctx = in.config.n_ctx_train;
  EXPECT_EQ(CountMatching(Partition(in).value().warnings, "trained"), 0);
  in.n_ctx = in.config.n_ctx_train + 1;
  EXPECT_EQ(CountMatching(Partition(in).value().warnings, "trained"), 1);
}

TEST(HostAccount, KvThatFitsNowhereSaysTheLargestContextThatDoes) {
  for (const char* device : {"none", "sim:12GiB"}) {
    SCOPED_TRACE(device);
    PartitionInput in = MixtralInput(device, CpuProfile(50, 500));
    in.host_ram_available = 4 * kGiB;
    in.n_ctx = 1000000;
    const absl::StatusOr<Plan> bad = Partition(in);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kResourceExhausted);
    const std::string msg(bad.status().message());
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(msg, m, std::regex("largest context that fits is -c ([0-9]+)"))) << msg;
    const int largest = std::stoi(m[1]);
    in.n_ctx = largest;
    EXPECT_TRUE(Partition(in).ok()) << largest;
    in.n_ctx = largest + 1;
    EXPECT_FALSE(Partition(in).ok()) << largest + 1;
  }
}

TEST(HostAccount, UnknownRamChecksNothing) {
  PartitionInput in = MixtralInput("none", CpuProfile(50, 500));
  in.n_ctx = 1 << 22;
  const Plan p = Partition(in).value();  // 512 GiB of KV, but no RAM size to hold it against
  EXPECT_EQ(p.host_ram_available, 0u);
  EXPECT_EQ(p.host_paged_bytes, 0u);
  EXPECT_EQ(CountMatching(p.warnings, "host memory"), 0);
}

}  // namespace
}  // namespace tandem
