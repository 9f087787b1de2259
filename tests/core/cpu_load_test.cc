// Other processes' share of the CPUs: /proc/stat parsing, the share's arithmetic, and a real busy child process.
#include "core/cpu_load.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace tandem {
namespace {

constexpr const char* kStat =
    "cpu  1000 50 300 9000 20 5 15 30 0 0\n"
    "cpu0 500 25 150 4500 10 2 7 15 0 0\n"
    "cpu1 500 25 150 4500 10 3 8 15 0 0\n"
    "intr 12345\n"
    "ctxt 999\n";

TEST(CpuLoad, ParsesTheAggregateLineAndCountsCpus) {
  absl::StatusOr<CpuTimes> t = ParseProcStat(kStat, 100);
  ASSERT_TRUE(t.ok()) << t.status();
  // user + nice + system + irq + softirq + steal = 1000 + 50 + 300 + 5 + 15 + 30 ticks; idle and iowait are not busy.
  EXPECT_DOUBLE_EQ(t->machine_busy_s, 14.0);
  EXPECT_EQ(t->n_cpus, 2);
}

TEST(CpuLoad, RefusesWhatIsNotProcStat) {
  EXPECT_FALSE(ParseProcStat("", 100).ok());
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3\n", 100).ok());
  EXPECT_FALSE(ParseProcStat("cpu  a b c d e f g h\n", 100).ok());
  EXPECT_FALSE(ParseProcStat(kStat, 0).ok());
}

TEST(CpuLoad, OthersShareIsTheMachinesBusyTimeLessOurs) {
  const CpuTimes a{.machine_busy_s = 10, .self_s = 1, .n_cpus = 2};
  // 4 s of wall time on 2 CPUs is 8 CPU-seconds; the machine was busy 5 of them, 2 of which were ours.
  const CpuTimes b{.machine_busy_s = 15, .self_s = 3, .n_cpus = 2};
  EXPECT_DOUBLE_EQ(OthersBusyShare(a, b, 4.0), 3.0 / 8.0);
  // Clamped: tick rounding can make ours look larger than the machine's.
  EXPECT_DOUBLE_EQ(OthersBusyShare(a, CpuTimes{.machine_busy_s = 11, .self_s = 3, .n_cpus = 2}, 4.0), 0.0);
  EXPECT_DOUBLE_EQ(OthersBusyShare(a, CpuTimes{.machine_busy_s = 40, .self_s = 1, .n_cpus = 2}, 4.0), 1.0);
  EXPECT_DOUBLE_EQ(OthersBusyShare(a, b, 0.0), 0.0);
}

// A child process spinning for the whole window takes one CPU: at least 1 / n_cpus of the machine, whatever else
// runs (other tests only add to it), and none of it is counted as ours.
TEST(CpuLoad, SeesABusyChildProcess) {
  absl::StatusOr<CpuTimes> before = ReadCpuTimes();
  ASSERT_TRUE(before.ok()) << before.status();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile uint64_t x = 0;
    for (;;) x = x + 1;  // spins until killed
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  absl::StatusOr<CpuTimes> after = ReadCpuTimes();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(after.ok()) << after.status();
  const double share = OthersBusyShare(*before, *after, wall);
  // One CPU of n, less the child's start-up and the 10 ms ticks: 0.8 of it is a safe floor.
  EXPECT_GE(share, 0.8 / after->n_cpus) << share << " on " << after->n_cpus << " CPUs";
  EXPECT_LT(after->self_s - before->self_s, 0.5);  // we slept
}

}  // namespace
}  // namespace tandem
