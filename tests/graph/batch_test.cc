// Continuous batching (Executor::Forward over several sequences): each sequence gets the answers it gets alone,
// while the batch mixes prompt chunks of some sequences with decode tokens of others, on the CPU and on every
// kind of simulated-GPU plan; the MoE layers route the whole batch at once; bad batches are refused; the plan
// holds a KV cache per sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/status.h"
#include "cpu_backend/cpu_backend.h"
#include "graph/executor.h"
#include "graph/planning.h"
#include "sim_backend/sim_backend.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

constexpr int kSteps = 4;      // greedy tokens each sequence decodes after its prompt
constexpr int kChunk = 5;      // prompt tokens a sequence feeds per step
constexpr int kMaxBatch = 32;

struct Model {
  std::string name;
  std::unique_ptr<GgufFile> file;
  ModelSchema schema;
};

Model Open(const std::string& name, const std::string& path) {
  Model m{.name = name};
  m.file = GgufFile::Open(path).value();
  m.schema = ReadModelSchema(*m.file).value();
  return m;
}

// Dense and MoE, Llama and the other families; gpt-oss's sliding-window layers keep their cache as a ring here
// (window 8 in a 64-position context), and sinks.
std::vector<std::pair<std::string, std::string>> Models() {
  std::vector<std::pair<std::string, std::string>> m = {
      {"stories260K", test::ModelPath("stories260K.gguf")},
      {"stories260K-moe4", test::ModelPath("stories260K-moe4.gguf")},
      {"tiny-mixtral-Q4_0", test::DataPath("models/tiny-mixtral-Q4_0.gguf")},
      {"tiny-llama-Q4_K_M", test::DataPath("models/tiny-llama-Q4_K_M.gguf")}};
  for (const char* golden : {"synth-qwen3moe", "synth-gpt-oss"}) {
    m.push_back({golden, test::SynthGoldenModel(test::ReadJson(test::DataPath(std::string("goldens/") + golden +
                                                                              ".json")))});
  }
  return m;
}

// Where the units run. The sim GPU computes with the CPU's GGUF-layout kernels, and the CPU does too in those
// plans, so their answers can be compared bit for bit with the CPU-only GGUF-layout run.
enum class Where { kCpuPacked, kCpuGguf, kGpu, kStreamed, kExpertsSplit };
const char* WhereName(Where w) {
  switch (w) {
    case Where::kCpuPacked: return "cpu_packed";
    case Where::kCpuGguf: return "cpu_gguf";
    case Where::kGpu: return "gpu";
    case Where::kStreamed: return "streamed";
    case Where::kExpertsSplit: return "experts_split";
  }
  return "?";
}

Plan PlanFor(const ModelConfig& cfg, Where where) {
  Plan p = CpuOnlyPlan(cfg);
  if (where == Where::kCpuPacked || where == Where::kCpuGguf) return p;
  p.devices = {"cpu", "sim"};
  p.has_gpu = true;
  const Placement g = Placement::kGpu, c = Placement::kCpu, s = Placement::kStream;
  for (UnitPlan& u : p.units) {
    if (u.kind == UnitKind::kEmbd) continue;
    u.device = 1;
    u.prefill = u.decode = where == Where::kStreamed && u.kind != UnitKind::kAttn ? s : g;
    if (where != Where::kExpertsSplit || u.kind != UnitKind::kFfn || cfg.n_expert == 0) continue;
    // A third resident, a third on the CPU, a third streamed (through decode's expert cache).
    for (int e = 0; e < cfg.n_expert; ++e) {
      const Placement at = (e + u.layer) % 3 == 0 ? g : (e + u.layer) % 3 == 1 ? c : s;
      u.experts.push_back({at, at});
    }
  }
  return p;
}

// One sequence's run: the logits it samples from (after its prompt, then after each decoded token) and the greedy
// tokens taken from them.
struct Transcript {
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> tokens;
};

int32_t Argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<std::vector<int32_t>> Prompts(int n_vocab) {
  std::vector<std::vector<int32_t>> p;
  for (int len : {12, 7, 1}) {  // one prompt spans three chunks, one two, one is a single token
    std::vector<int32_t> t;
    for (int i = 0; i < len; ++i) t.push_back((5 + 31 * i + 7 * len) % n_vocab);
    p.push_back(t);
  }
  return p;
}

struct Runner {
  const Model& m;
  Where where;
  std::unique_ptr<Backend> cpu, gpu;
  std::unique_ptr<Executor> ex;
  // Each MoE layer routing the executor reported: (layer, tokens routed).
  std::vector<std::pair<int, int64_t>> routings;

  Runner(const Model& model, Where w, int n_seq) : m(model), where(w) {
    cpu = CreateCpuBackend({.n_threads = 1, .repack = w == Where::kCpuPacked ? Repack::kOn : Repack::kOff});
    std::vector<Backend*> devices = {cpu.get()};
    Plan plan = PlanFor(m.schema.cfg, w);
    if (plan.has_gpu) {
      gpu = std::make_unique<SimBackend>(SimOptions{.capacity = 1ull << 30, .pcie_gbps = 25, .spec = "sim"});
      devices.push_back(gpu.get());
    }
    if (w == Where::kExpertsSplit && m.schema.cfg.n_expert > 0) {
      plan.expert_cache_bytes = 64ull << 20;  // room for every streamed expert of a batch of n_seq tokens
    }
    ExecutorOptions xo{.n_ctx = 64, .n_seq = n_seq, .max_batch = kMaxBatch, .kv_type = DType::kF32};
    xo.on_routing = [this](int layer, std::span<const int32_t>, int64_t n_tok, int) {
      routings.push_back({layer, n_tok});
    };
    absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(*m.file, m.schema, plan, devices, xo);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) ex = *std::move(e);
  }
};

// Each prompt alone in sequence 0, from position 0 (a new prompt overwrites the last one's cache).
std::vector<Transcript> RunAlone(Runner& r, const std::vector<std::vector<int32_t>>& prompts) {
  const int n_vocab = r.m.schema.cfg.n_vocab;
  std::vector<Transcript> out(prompts.size());
  for (size_t q = 0; q < prompts.size(); ++q) {
    std::vector<float> row(n_vocab);
    test::Poison(row);
    absl::Status st = absl::OkStatus();
    for (size_t at = 0; at < prompts[q].size() && st.ok(); at += kChunk) {
      const size_t len = std::min<size_t>(kChunk, prompts[q].size() - at);
      st = r.ex->Forward(std::span(prompts[q]).subspan(at, len), static_cast<int64_t>(at), 1, row.data());
    }
    EXPECT_TRUE(st.ok()) << st;
    for (int step = 0; step <= kSteps; ++step) {
      out[q].rows.push_back(row);
      out[q].tokens.push_back(Argmax(row));
      if (step == kSteps) break;
      const int64_t pos = static_cast<int64_t>(prompts[q].size()) + step;
      st = r.ex->Forward(std::span(&out[q].tokens.back(), 1), pos, 1, row.data());
      EXPECT_TRUE(st.ok()) << st;
    }
  }
  return out;
}

// All together, as the server steps them: sequence q joins at step q; each step batches the prompt chunks of the
// sequences still reading their prompts with one decode token of every other; logits come back for the rows that
// need them only (the trailing rows from the first of them: chunks that finish no prompt go first).
// The MoE layers route each step's whole batch in one go: one routing per layer, of every token (in the last
// layer, of the rows whose logits are asked for: the others' outputs go nowhere).
std::vector<Transcript> RunBatched(Runner& r, const std::vector<std::vector<int32_t>>& prompts,
                                   std::vector<int64_t>* batch_sizes) {
  const ModelConfig& cfg = r.m.schema.cfg;
  const int n_vocab = r.m.schema.cfg.n_vocab;
  const int n = static_cast<int>(prompts.size());
  std::vector<Transcript> out(n);
  std::vector<size_t> fed(n, 0);
  std::vector<float> logits(static_cast<size_t>(kMaxBatch) * n_vocab);
  for (int step = 0;; ++step) {
    struct Entry {
      int seq;
      std::vector<int32_t> tokens;
      int64_t pos0;
      bool wants_logits;
    };
    std::vector<Entry> chunks, finals, decodes;
    for (int q = 0; q < n && q <= step; ++q) {
      if (fed[q] < prompts[q].size()) {
        const size_t len = std::min<size_t>(kChunk, prompts[q].size() - fed[q]);
        Entry e{q, {prompts[q].begin() + fed[q], prompts[q].begin() + fed[q] + len}, static_cast<int64_t>(fed[q]),
                fed[q] + len == prompts[q].size()};
        fed[q] += len;
        (e.wants_logits ? finals : chunks).push_back(std::move(e));
      } else if (out[q].tokens.size() <= kSteps) {
        const int64_t pos = static_cast<int64_t>(prompts[q].size() + out[q].tokens.size()) - 1;
        decodes.push_back({q, {out[q].tokens.back()}, pos, true});
      }
    }
    if (chunks.empty() && finals.empty() && decodes.empty()) break;
    std::vector<Entry> batch;
    for (auto* group : {&chunks, &finals, &decodes}) batch.insert(batch.end(), group->begin(), group->end());
    std::vector<int32_t> tokens;
    std::vector<BatchSegment> segments;
    int64_t first_logit_row = -1;
    for (const Entry& e : batch) {
      const int64_t row0 = static_cast<int64_t>(tokens.size());
      segments.push_back({.row0 = row0, .n_tok = static_cast<int64_t>(e.tokens.size()), .pos0 = e.pos0, .seq = e.seq});
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
      if (e.wants_logits && first_logit_row < 0) first_logit_row = row0 + static_cast<int64_t>(e.tokens.size()) - 1;
    }
    const int64_t n_tok = static_cast<int64_t>(tokens.size());
    const int64_t n_logit_rows = first_logit_row < 0 ? 0 : n_tok - first_logit_row;
    test::Poison(logits);
    r.routings.clear();
    const absl::Status st = r.ex->Forward(tokens, segments, n_logit_rows, logits.data());
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    batch_sizes->push_back(n_tok);
    if (cfg.n_expert > 0) {
      EXPECT_EQ(r.routings.size(), static_cast<size_t>(cfg.n_layer - (n_logit_rows == 0 ? 1 : 0))) << r.m.name;
      for (const auto& [layer, routed] : r.routings) {
        EXPECT_EQ(routed, layer == cfg.n_layer - 1 ? n_logit_rows : n_tok) << r.m.name << " layer " << layer;
      }
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].wants_logits) continue;
      const int64_t row = segments[i].row0 + segments[i].n_tok - 1 - first_logit_row;
      std::vector<float> v(logits.begin() + row * n_vocab, logits.begin() + (row + 1) * n_vocab);
      Transcript& t = out[batch[i].seq];
      t.tokens.push_back(Argmax(v));
      t.rows.push_back(std::move(v));
    }
  }
  return out;
}

class Batched : public ::testing::TestWithParam<Where> {};

// The bound: plans of the GGUF layout run the same per-row kernels whatever the batch, so the rows agree bit for
// bit. The packed CPU kernels group rows of a batch (4 or 16 tokens per tile) and sum in a different order than a
// one-token GEMV: float rounding at most, held to an NMSE of 1e-8 (measured 0 on AVX-512 with VNNI).
TEST_P(Batched, EachSequenceGetsWhatItGetsAlone) {
  const Where where = GetParam();
  for (const auto& [name, path] : Models()) {
    const Model m = Open(name, path);
    if (where == Where::kExpertsSplit && m.schema.cfg.n_expert == 0) continue;
    const std::vector<std::vector<int32_t>> prompts = Prompts(m.schema.cfg.n_vocab);
    Runner alone(m, where, 1), together(m, where, static_cast<int>(prompts.size()));
    ASSERT_TRUE(alone.ex && together.ex) << name;
    const std::vector<Transcript> want = RunAlone(alone, prompts);
    std::vector<int64_t> batch_sizes;
    const std::vector<Transcript> got = RunBatched(together, prompts, &batch_sizes);
    for (size_t q = 0; q < prompts.size(); ++q) {
      ASSERT_EQ(got[q].rows.size(), want[q].rows.size()) << name << " sequence " << q;
      EXPECT_EQ(got[q].tokens, want[q].tokens) << name << " sequence " << q;
      for (size_t i = 0; i < want[q].rows.size(); ++i) {
        const double nmse = test::Nmse(got[q].rows[i], want[q].rows[i]);

        if (where == Where::kCpuPacked) {
          EXPECT_LT(nmse, 1e-8) << name << " sequence " << q << " row " << i;
        } else {
          EXPECT_EQ(got[q].rows[i], want[q].rows[i]) << name << " sequence " << q << " row " << i << " NMSE " << nmse;
        }
      }
    }
    // Some steps did mix sequences: more tokens than any one sequence feeds.
    EXPECT_GT(*std::max_element(batch_sizes.begin(), batch_sizes.end()), kChunk) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, Batched,
                         ::testing::Values(Where::kCpuPacked, Where::kCpuGguf, Where::kGpu, Where::kStreamed,
                                           Where::kExpertsSplit),
                         [](const ::testing::TestParamInfo<Where>& info) { return WhereName(info.param); });

TEST(Batched, BadBatchesAreRefused) {
  const Model m = Open("stories260K", test::ModelPath("stories260K.gguf"));
  Runner r(m, Where::kCpuGguf, 2);
  ASSERT_TRUE(r.ex);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<float> logits(4 * static_cast<size_t>(m.schema.cfg.n_vocab));
  struct Case {
    std::vector<BatchSegment> segments;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{}, "sequences"},
      {{{0, 2, 0, 0}, {2, 2, 0, 0}}, "twice"},
      {{{0, 2, 0, 0}, {2, 2, 0, 2}}, "sequence 2 of 2"},
      {{{0, 2, 0, 0}, {3, 1, 0, 1}}, "does not follow"},
      {{{0, 2, 0, 0}, {2, 1, 0, 1}}, "cover 3 of 4"},
      {{{0, 2, 0, 0}, {2, 2, 63, 1}}, "context full"},
      {{{0, 1, 0, 0}, {1, 1, 0, 1}, {2, 2, 0, 0}}, "3 sequences"},
  };
  for (const Case& c : cases) {
    const absl::Status st = r.ex->Forward(tokens, c.segments, 1, logits.data());
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(Message(st).find(c.says), std::string::npos) << Message(st);
  }
  // And the executor still runs a good batch afterwards.
  const BatchSegment good[] = {{0, 3, 0, 0}, {3, 1, 0, 1}};
  EXPECT_TRUE(r.ex->Forward(tokens, good, 2, logits.data()).ok());
}

// The plan holds one KV cache per sequence, and says when N of them do not fit.
TEST(Batched, ThePlanHoldsAKvCachePerSequence) {
  const std::string path = test::DataPath("models/tiny-mixtral-Q4_0.gguf");
  std::unique_ptr<GgufFile> file = GgufFile::Open(path).value();
  const ModelConfig cfg = LoadModelConfig(*file).value();
  const DeviceSetup dev = SetupDevice("none", DeviceSetupOptions{.open_backend = false}).value();
  const PlanOptions one{.n_ctx = 256, .n_batch = 64, .n_seq = 1};
  PlanOptions four = one;
  four.n_seq = 4;
  const Plan p1 = PlanModel(*file, cfg, dev, PlacementRequest{}, one).value();
  const Plan p4 = PlanModel(*file, cfg, dev, PlacementRequest{}, four).value();
  EXPECT_EQ(p4.n_seq, 4);
  uint64_t kv1 = 0, kv4 = 0;
  for (const UnitPlan& u : p1.units) kv1 += u.kv_bytes;
  for (const UnitPlan& u : p4.units) kv4 += u.kv_bytes;
  EXPECT_GT(kv1, 0u);
  EXPECT_EQ(kv4, 4 * kv1);
  // RAM for one sequence's cache but not for four.
  PlacementRequest tight;
  tight.host_ram = kv1 * 2;
  EXPECT_TRUE(PlanModel(*file, cfg, dev, tight, one).ok());
  const absl::StatusOr<Plan> refused = PlanModel(*file, cfg, dev, tight, four);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(Message(refused.status()).find("for 4 sequences"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace tandem
