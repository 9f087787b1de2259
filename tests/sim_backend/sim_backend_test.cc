// The simulated GPU: spec parsing, the capacity, throttled copies, event ordering across streams, the trace,
// and its kernels against references computed on the host.
#include "sim_backend/sim_backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "arch/arch.h"
#include "core/gguf.h"
#include "core/status.h"
#include "cpu_backend/cpu_backend.h"
#include "cpu_backend/kernels.h"
#include "graph/executor.h"
#include "graph/partitioner.h"
#include "graph/placement.h"
#include "tests/graph/mixtral_units.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Device copies of host data, freed with the backend.
float* ToDevice(SimBackend& sim, const std::vector<float>& h) {
  void* d = sim.Alloc(h.size() * sizeof(float), "test").value();
  EXPECT_TRUE(sim.CopyHostToDevice(d, h.data(), h.size() * sizeof(float), Stream::kCompute).ok());
  return static_cast<float*>(d);
}
std::vector<float> ToHost(SimBackend& sim, const float* d, size_t n) {
  std::vector<float> h(n);
  EXPECT_TRUE(sim.CopyDeviceToHost(h.data(), d, n * sizeof(float), Stream::kCompute).ok());
  EXPECT_TRUE(sim.Synchronize(Stream::kCompute).ok());
  return h;
}

TEST(SimSpec, Parses) {
  SimOptions o = ParseSimSpec("sim:12GiB").value();
  EXPECT_EQ(o.capacity, 12ull << 30);
  EXPECT_DOUBLE_EQ(o.pcie_gbps, 25);
  EXPECT_DOUBLE_EQ(o.gpu_gbps, 900);
  EXPECT_EQ(o.spec, "sim:12GiB");
  o = ParseSimSpec("sim:24G,pcie=2,gpu_gbps=0").value();
  EXPECT_EQ(o.capacity, 24ull << 30);
  EXPECT_DOUBLE_EQ(o.pcie_gbps, 2);
  EXPECT_DOUBLE_EQ(o.gpu_gbps, 0);
  EXPECT_EQ(ParseSimSpec("sim:512MiB,pcie=12.5")->capacity, 512 * kMiB);
  EXPECT_EQ(ParseSimSpec("sim:4096")->capacity, 4096u);
}

TEST(SimSpec, RejectsBadSpecs) {
  for (const char* bad : {"sim:", "sim:abc", "sim:0", "sim:1GiB,foo=2", "sim:1GiB,pcie=0", "sim:1GiB,pcie=x",
                          "sim:1GiB,pcie", "sim:1GiB,gpu_gbps=-1", "cuda:0", "sim"}) {
    EXPECT_FALSE(ParseSimSpec(bad).ok()) << bad;
  }
}

TEST(SimBackend, EnforcesCapacityAndTracksPeak) {
  SimBackend sim(ParseSimSpec("sim:1MiB").value());
  EXPECT_FALSE(sim.host_memory());
  EXPECT_EQ(sim.capacity(), kMiB);
  void* a = sim.Alloc(600 << 10, "a").value();
  absl::StatusOr<void*> b = sim.Alloc(600 << 10, "b");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(Message(b.status()).find("b"), std::string::npos);
  void* c = sim.Alloc(400 << 10, "c").value();
  EXPECT_EQ(sim.bytes_in_use(), 1000u << 10);
  sim.Free(a);
  EXPECT_EQ(sim.bytes_in_use(), 400u << 10);
  void* d = sim.Alloc(600 << 10, "d").value();  // fits again after the free
  EXPECT_EQ(sim.peak_bytes(), 1000u << 10);
  sim.Free(c);
  sim.Free(d);
  EXPECT_EQ(sim.bytes_in_use(), 0u);
  // Pinned host memory does not count.
  void* pinned = sim.AllocHostPinned(4 * kMiB).value();
  EXPECT_EQ(sim.bytes_in_use(), 0u);
  sim.FreeHostPinned(pinned);
}

TEST(SimBackend, CopiesAreThrottledToTheLinkRate) {
  SimBackend sim(ParseSimSpec("sim:256MiB,pcie=1").value());
  const size_t n = 100'000'000;  // 100 MB at 1 GB/s: at least 0.1 s
  // Pinned buffers: the copies are asynchronous and read the source in place, as with CUDA.
  auto* src = static_cast<uint8_t*>(sim.AllocHostPinned(n).value());
  auto* back = static_cast<uint8_t*>(sim.AllocHostPinned(n).value());
  std::memset(src, 0, n);
  for (size_t i = 0; i < n; i += 4096) src[i] = static_cast<uint8_t>(i / 4096 * 7 + 1);
  void* d = sim.Alloc(n, "big").value();
  sim.SetTraceLabel("blk.0.ffn");
  const auto t0 = Clock::now();
  ASSERT_TRUE(sim.CopyHostToDevice(d, src, n, Stream::kCopy).ok());
  ASSERT_TRUE(sim.Synchronize(Stream::kCopy).ok());
  const double s = Seconds(t0, Clock::now());
  EXPECT_GE(s, 0.095) << "a 100 MB copy at 1 GB/s finished in " << s << " s";
  ASSERT_TRUE(sim.CopyDeviceToHost(back, d, n, Stream::kCopy).ok());
  ASSERT_TRUE(sim.Synchronize(Stream::kCopy).ok());
  EXPECT_EQ(std::memcmp(src, back, n), 0);
  const std::vector<TraceEvent> trace = sim.Trace();
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace[0].kind, TraceEvent::Kind::kCopy);
  EXPECT_EQ(trace[0].op, "H2D");
  EXPECT_EQ(trace[0].label, "blk.0.ffn");
  EXPECT_EQ(trace[0].bytes, n);
  EXPECT_EQ(trace[0].stream, Stream::kCopy);
  EXPECT_GE(trace[0].end_ns - trace[0].start_ns, 95'000'000);
  EXPECT_LE(trace[0].end_ns, trace[1].start_ns);  // same stream: in order
  EXPECT_EQ(sim.h2d_bytes(), n);
  EXPECT_EQ(sim.d2h_bytes(), n);
  sim.Free(d);
  sim.FreeHostPinned(src);
  sim.FreeHostPinned(back);
}

TEST(SimBackend, EventsOrderCopyBeforeComputeAcrossStreams) {
  // The weight copy on the copy stream takes ~50 ms (256 KiB at 5 MB/s); the compute stream waits on an event.
  SimBackend sim(ParseSimSpec("sim:16MiB,pcie=0.005,gpu_gbps=0").value());
  const int64_t rows = 256, cols = 256;
  const std::vector<float> w = test::RandomNormal(rows * cols, 1);
  const std::vector<float> x = test::RandomNormal(cols, 2);
  WorkspaceSpec ws;
  ws.max_tokens = 1;
  ws.max_cols = cols;
  ws.max_rows = rows;
  ws.n_ctx = 16;
  ws.n_head = 1;
  ASSERT_TRUE(sim.ReserveWorkspace(ws).ok());
  // Device weights start as NaN: a matmul that ran before the copy would produce NaN.
  std::vector<float> nan(rows * cols);
  test::Poison(nan);
  float* dw = ToDevice(sim, nan);
  float* dx = ToDevice(sim, x);
  float* dy = static_cast<float*>(sim.Alloc(rows * sizeof(float), "y").value());
  ASSERT_TRUE(sim.Synchronize(Stream::kCompute).ok());
  sim.ClearTrace();

  const int ev = sim.CreateEvent().value();
  sim.SetTraceLabel("weights");
  ASSERT_TRUE(sim.CopyHostToDevice(dw, w.data(), w.size() * sizeof(float), Stream::kCopy).ok());
  ASSERT_TRUE(sim.RecordEvent(ev, Stream::kCopy).ok());
  ASSERT_TRUE(sim.WaitEvent(ev, Stream::kCompute).ok());
  sim.SetTraceLabel("matmul");
  const WeightMatrix wm{DType::kF32, dw, rows, cols, cols * sizeof(float)};
  sim.MatMul(wm, dx, 1, dy);
  const std::vector<float> y = ToHost(sim, dy, rows);
  ASSERT_TRUE(sim.TakeError().ok());

  std::vector<float> ref(rows);
  cpu::MatMulRef({DType::kF32, w.data(), rows, cols, cols * sizeof(float)}, x.data(), 1, ref.data());
  EXPECT_LT(test::Nmse(y, ref), 1e-10);  // F32 weights: only summation order differs

  const std::vector<TraceEvent> trace = sim.Trace();
  const TraceEvent* copy = nullptr;
  const TraceEvent* mm = nullptr;
  for (const TraceEvent& e : trace) {
    if (e.op == "H2D" && e.label == "weights") copy = &e;
    if (e.op == "MatMul") mm = &e;
  }
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->label, "matmul");
  EXPECT_EQ(mm->kind, TraceEvent::Kind::kCompute);
  EXPECT_GE(mm->start_ns, copy->end_ns);
  EXPECT_LE(mm->start_ns, mm->end_ns);
}

TEST(SimBackend, PageableSourcesAreReadAtTheCall) {
  SimBackend sim(ParseSimSpec("sim:1MiB,pcie=0.001").value());  // 4 KiB takes ~4 ms
  std::vector<float> h(1024, 3.0f);
  void* d = sim.Alloc(h.size() * sizeof(float), "d").value();
  ASSERT_TRUE(sim.CopyHostToDevice(d, h.data(), h.size() * sizeof(float), Stream::kCopy).ok());
  std::fill(h.begin(), h.end(), -1.0f);  // reused at once, like a CUDA caller may with pageable memory
  std::vector<float> back(1024, 0.0f);
  ASSERT_TRUE(sim.CopyDeviceToHost(back.data(), d, back.size() * sizeof(float), Stream::kCopy).ok());
  // Into pageable memory the copy is complete when the call returns.
  EXPECT_EQ(back, std::vector<float>(1024, 3.0f));
  sim.Free(d);
}

TEST(SimBackend, WaitOnAnUnrecordedEventDoesNotBlock) {
  SimBackend sim(ParseSimSpec("sim:1MiB").value());
  const int ev = sim.CreateEvent().value();
  EXPECT_TRUE(sim.WaitEvent(ev, Stream::kCompute).ok());
  EXPECT_TRUE(sim.Synchronize(Stream::kCompute).ok());
  EXPECT_FALSE(sim.RecordEvent(ev + 1, Stream::kCopy).ok());
  EXPECT_FALSE(sim.WaitEvent(-1, Stream::kCopy).ok());
}

TEST(SimBackend, MatMulIsThrottledToTheGpuRate) {
  // 256 KiB of F32 weights at 0.005 GB/s: at least ~52 ms.
  SimBackend sim(ParseSimSpec("sim:16MiB,gpu_gbps=0.005").value());
  const int64_t rows = 256, cols = 256;
  WorkspaceSpec ws;
  ws.max_tokens = 1;
  ws.max_cols = cols;
  ASSERT_TRUE(sim.ReserveWorkspace(ws).ok());
  float* dw = ToDevice(sim, test::RandomNormal(rows * cols, 3));
  float* dx = ToDevice(sim, test::RandomNormal(cols, 4));
  float* dy = static_cast<float*>(sim.Alloc(rows * sizeof(float), "y").value());
  sim.MatMul({DType::kF32, dw, rows, cols, cols * sizeof(float)}, dx, 1, dy);
  ASSERT_TRUE(sim.Synchronize(Stream::kCompute).ok());
  ASSERT_TRUE(sim.TakeError().ok());
  const std::vector<TraceEvent> trace = sim.Trace();
  ASSERT_FALSE(trace.empty());
  const TraceEvent& mm = trace.back();
  EXPECT_EQ(mm.op, "MatMul");
  EXPECT_EQ(mm.bytes, static_cast<uint64_t>(rows * cols * 4));
  EXPECT_GE(mm.end_ns - mm.start_ns, 50'000'000);
}

TEST(SimBackend, KernelsRejectHostPointers) {
  SimBackend sim(ParseSimSpec("sim:1MiB").value());
  WorkspaceSpec ws;
  ws.max_cols = 64;
  ASSERT_TRUE(sim.ReserveWorkspace(ws).ok());
  std::vector<float> host_w(64 * 64), host_x(64);
  float* dy = static_cast<float*>(sim.Alloc(64 * sizeof(float), "y").value());
  sim.MatMul({DType::kF32, host_w.data(), 64, 64, 64 * sizeof(float)}, host_x.data(), 1, dy);
  absl::Status s = sim.TakeError();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Message(s).find("not inside one device allocation"), std::string::npos) << s;
  EXPECT_TRUE(sim.TakeError().ok());  // taken: cleared
  // Copies say so at once.
  std::vector<float> h(64);
  EXPECT_FALSE(sim.CopyHostToDevice(h.data(), h.data(), 64, Stream::kCopy).ok());
  EXPECT_FALSE(sim.CopyHostToDevice(dy, h.data(), 65 * sizeof(float), Stream::kCopy).ok());  // past the end
}

TEST(SimBackend, MatMulWithoutWorkspaceIsAnError) {
  SimBackend sim(ParseSimSpec("sim:1MiB").value());
  float* dw = ToDevice(sim, std::vector<float>(32 * 32, 1.0f));
  float* dx = ToDevice(sim, std::vector<float>(32, 1.0f));
  float* dy = static_cast<float*>(sim.Alloc(32 * sizeof(float), "y").value());
  sim.MatMul({DType::kF32, dw, 32, 32, 32 * sizeof(float)}, dx, 1, dy);
  EXPECT_EQ(sim.TakeError().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SimBackend, RoutingMatchesHandResults) {
  SimBackend sim(ParseSimSpec("sim:1MiB").value());
  // Router logits for 2 tokens over 3 experts; top-2.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 3.0f, 0.0f, 3.0f};
  float* dl = ToDevice(sim, logits);
  // The routing stays in device memory, as on a GPU: read it back to check.
  auto* d_ids = static_cast<int32_t*>(sim.Alloc(4 * sizeof(int32_t), "ids").value());
  float* d_wts = static_cast<float*>(sim.Alloc(4 * sizeof(float), "weights").value());
  sim.MoeRoute(dl, 2, MoeRouteParams{.n_expert = 3, .k = 2}, d_ids, d_wts);
  int32_t ids[4];
  ASSERT_TRUE(sim.CopyDeviceToHost(ids, d_ids, sizeof(ids), Stream::kCompute).ok());
  const std::vector<float> wts = ToHost(sim, d_wts, 4);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(wts[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);  // e^2 / (e^2 + e^1)
  EXPECT_EQ(ids[2], 0);  // tie: the lower id first
  EXPECT_EQ(ids[3], 2);
  EXPECT_NEAR(wts[2], 0.5, 1e-6);
  // Host arrays are refused: the kernels run on the device's queue.
  int32_t host_ids[4];
  float host_wts[4];
  sim.MoeRoute(dl, 2, MoeRouteParams{.n_expert = 3, .k = 2}, host_ids, host_wts);
  EXPECT_EQ(sim.TakeError().code(), absl::StatusCode::kFailedPrecondition);
}

// The partitioner's plans, run by the executor on the sim: the logits match a CPU-only run (the same CPU kernels
// on both sides, so identical up to summation order: Nmse < 1e-9), and the VRAM the sim really handed out stays
// within the plan's account, which stays within the cap.
TEST(SimBackend, PlansRunWithinTheirAccount) {
  std::unique_ptr<GgufFile> f = GgufFile::Open(test::ModelPath("stories260K-moe4.gguf")).value();
  const ModelSchema model = ReadModelSchema(*f).value();
  const ModelConfig& cfg = model.cfg;
  ExecutorOptions xo;
  xo.n_ctx = 64;
  xo.max_batch = 16;
  std::unique_ptr<Backend> ref_cpu = CreateCpuBackend({});
  const std::vector<Backend*> ref_devices = {ref_cpu.get()};
  std::unique_ptr<Executor> ref = Executor::Create(*f, model, CpuOnlyPlan(cfg), ref_devices, xo).value();
  const std::vector<int32_t> prompt = {1, 20, 30, 40, 50, 60, 70};
  const int32_t next[3] = {100, 101, 102};
  std::vector<std::vector<float>> want;
  std::vector<float> logits(cfg.n_vocab);
  ASSERT_TRUE(ref->Forward(prompt, 0, 1, logits.data()).ok());
  want.push_back(logits);
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(ref->Forward({&next[t], 1}, 7 + t, 1, logits.data()).ok());
    want.push_back(logits);
  }

  struct Case {
    const char* device;
    std::optional<int> stream_layers;
    const char* rule;
  };
  for (const Case& c : {Case{"sim:64MiB", std::nullopt, nullptr}, Case{"sim:64MiB", 5, nullptr},
                        Case{"sim:64MiB", std::nullopt, "ffn_.*_exps=cpu"}, Case{"sim:2MiB", std::nullopt, nullptr}}) {
    const SimOptions so = ParseSimSpec(c.device).value();
    PartitionInput in;
    in.config = cfg;
    in.units = BuildUnits(*f, cfg).value();
    in.profile = SimProfile(test::CpuProfile(5, 20), so);
    in.devices = {DeviceDesc{.name = so.spec, .capacity = so.capacity, .supports = SimSupports}};
    in.n_ctx = xo.n_ctx;
    in.prefill_batch = xo.max_batch;
    in.request.stream_layers = c.stream_layers;
    if (c.rule) in.request.rules.push_back(ParsePlaceRule(c.rule).value());
    const Plan plan = Partition(in).value();
    SCOPED_TRACE(Cat(c.device, " ", plan.why));
    SimBackend sim(so);
    std::unique_ptr<Backend> cpu = CreateCpuBackend({});
    const std::vector<Backend*> devices = {cpu.get(), &sim};
    absl::StatusOr<std::unique_ptr<Executor>> ex = Executor::Create(*f, model, plan, devices, xo);
    ASSERT_TRUE(ex.ok()) << ex.status();
    test::Poison(logits);
    ASSERT_TRUE((*ex)->Forward(prompt, 0, 1, logits.data()).ok());
    EXPECT_LT(test::Nmse(logits, want[0]), 1e-9);
    for (int t = 0; t < 3; ++t) {
      test::Poison(logits);
      ASSERT_TRUE((*ex)->Forward({&next[t], 1}, 7 + t, 1, logits.data()).ok());
      EXPECT_LT(test::Nmse(logits, want[t + 1]), 1e-9) << "decode " << t;
    }
    EXPECT_LE(sim.peak_bytes(), plan.gpu.total());
    EXPECT_LE(plan.gpu.total(), plan.vram_budget);
  }
}

}  // namespace
}  // namespace tandem
