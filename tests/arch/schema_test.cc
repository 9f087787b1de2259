// The family schemas against every model the tests use and every `tandem synth` output: each tensor is claimed by
// exactly one schema entry and owned by exactly one placement unit. And the schema is the one place that spells a
// tensor name: no other source file repeats them.
#include "arch/schema.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "arch/arch.h"
#include "core/gguf.h"
#include "graph/partitioner.h"
#include "tests/core/tiny_gguf.h"
#include "tests/testutil.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

// Every entry of the file's schema, one at a time: the claims must be exactly one.
int EntriesClaiming(Schema schema, const std::string& name) {
  int n = 0;
  for (size_t e = 0; e < schema.size(); ++e) n += ClaimTensorName(schema.subspan(e, 1), name).has_value();
  return n;
}

void ExpectEachTensorClaimedOnce(const GgufFile& file, const std::string& what) {
  SCOPED_TRACE(what);
  absl::StatusOr<ModelSchema> model = ReadModelSchema(file);
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, int> owners;
  for (const UnitSpec& u : BuildUnits(*model)) {
    for (size_t i = 0; i < u.owned_tensors; ++i) ++owners[u.tensors[i]];
    for (size_t i = u.owned_tensors; i < u.tensors.size(); ++i) {
      EXPECT_EQ(std::find(u.tensors.begin(), u.tensors.begin() + u.owned_tensors, u.tensors[i]),
                u.tensors.begin() + u.owned_tensors)
          << u.name << " reads " << u.tensors[i] << " twice";
    }
  }
  for (const GgufTensorInfo& t : file.tensors()) {
    EXPECT_EQ(EntriesClaiming(model->arch->schema(), t.name), 1) << t.name;
    EXPECT_EQ(owners[t.name], 1) << t.name << " is owned by " << owners[t.name] << " units";
  }
  EXPECT_EQ(owners.size(), file.tensors().size());
}

std::vector<std::string> ModelFiles() {
  std::vector<std::string> out;
  for (const std::string& dir : {test::ModelPath(""), test::DataPath("models")}) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Schema, EveryTestModelHasEachTensorClaimedOnce) {
  const std::vector<std::string> files = ModelFiles();
  ASSERT_GE(files.size(), 8u);
  for (const std::string& path : files) {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ExpectEachTensorClaimedOnce(**f, path);
  }
}

TEST(Schema, EverySynthOutputHasEachTensorClaimedOnce) {
  const std::string dir = ::testing::TempDir() + "/tandem_schema_synth";
  fs::create_directories(dir);
  const char* kSmall = "--layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2";
  // The real-vocabulary shapes read their vocab from the build (TANDEM_VOCAB_DIR); the others take a small one.
  for (const std::string arch :
       {"llama", "mixtral", "llama3", "llama-3.2-1b", "qwen2", "qwen3", "qwen3moe", "qwen2moe", "gpt-oss"}) {
    const bool moe = arch == "mixtral" || arch == "qwen3moe" || arch == "qwen2moe" || arch == "gpt-oss";
    const bool real_vocab = arch != "llama" && arch != "mixtral";
    for (const std::string type : {"F16", "Q8_0", "Q4_K", "Q4_K_M"}) {
      const std::string out = Cat(dir, "/", arch, "-", type, ".gguf");
      const test::CmdResult r = test::RunCommand(
          Cat("TANDEM_VOCAB_DIR=", TANDEM_VOCAB_DIR, " ", test::TandemBin(), " synth --arch ", arch, " ", kSmall,
              arch.starts_with("qwen") || arch == "gpt-oss" ? " --head-dim 64" : "", real_vocab ? "" : " --vocab 512",
              moe ? " --experts 4 --experts-used 2 --expert-ff 256" : "", " --type ", type, " -o ", out));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(out);
      ASSERT_TRUE(f.ok()) << f.status();
      ExpectEachTensorClaimedOnce(**f, out);
    }
  }
}

// Older Mixtral files: one tensor per expert, claimed by the same entries as the stacks; a tied head.
TEST(Schema, PerExpertTensorsAndTiedHeadAreClaimedOnce) {
  for (const bool legacy : {false, true}) {
    test::TinySpec s;
    s.n_expert = 4;
    s.n_expert_used = 2;
    s.legacy_experts = legacy;
    s.tied_output = true;
    const test::TinyModel m = test::MakeTinyModel(s);
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(m.Bytes());
    ASSERT_TRUE(f.ok()) << f.status();
    ExpectEachTensorClaimedOnce(**f, legacy ? "per-expert tensors" : "stacked experts");
  }
}

// A tensor no entry claims is an error that names it; so is one of a layer past the last.
TEST(Schema, UnclaimedTensorsAreErrorsThatNameThem) {
  test::TinyModel m = test::MakeTinyModel();
  m.SetTensor("blk.0.attn_sinks.weight", DType::kF32, {4});
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(m.Bytes());
  ASSERT_TRUE(f.ok());
  const absl::StatusOr<ModelSchema> model = ReadModelSchema(**f);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(std::string(model.status().message()).find("'blk.0.attn_sinks.weight'"), std::string::npos)
      << model.status();
}

// ---- One place per fact: the llama schema's tensor names in at most two non-test source files ----

// The string literals of a C++ source, comments skipped (raw strings included).
std::vector<std::string> StringLiterals(const std::string& src) {
  std::vector<std::string> out;
  for (size_t i = 0; i < src.size();) {
    if (src.compare(i, 2, "//") == 0) {
      i = src.find('\n', i);
      if (i == std::string::npos) break;
    } else if (src.compare(i, 2, "/*") == 0) {
      i = src.find("*/", i + 2);
      if (i == std::string::npos) break;
      i += 2;
    } else if (src[i] == '\'') {  // a character literal, maybe '"'
      i = src.find('\'', i + (src[i + 1] == '\\' ? 3 : 2)) + 1;
    } else if (src.compare(i, 2, "R\"") == 0) {
      const size_t open = src.find('(', i);
      std::string close = ")";
      close.append(src, i + 2, open - i - 2);
      close.push_back('"');
      const size_t end = src.find(close, open);
      out.push_back(src.substr(open + 1, end - open - 1));
      i = end + close.size();
    } else if (src[i] == '"') {
      std::string lit;
      for (++i; i < src.size() && src[i] != '"'; ++i) {
        if (src[i] == '\\') ++i;
        lit += src[i];
      }
      out.push_back(lit);
      ++i;
    } else {
      ++i;
    }
  }
  return out;
}

TEST(Schema, TensorNamesAreSpelledInAtMostTwoSourceFiles) {
  ASSERT_GE(Architectures().size(), 4u);
  // The distinctive part of each name: "attn_q" of "blk.{L}.attn_q.weight"; "output.weight" whole, as "output"
  // alone is also a unit's name.
  std::set<std::string> names;
  for (const Architecture* arch : Architectures()) {
    for (const TensorEntry& e : arch->schema()) {
      for (std::string_view pattern : {e.name, e.per_expert_name}) {
      if (pattern.empty()) continue;
      std::string n(pattern);
      if (n.rfind("blk.{L}.", 0) == 0) n = n.substr(8);
      n = std::regex_replace(n, std::regex(R"(\.\{E\})"), "");
      if (n != "output.weight" && n.ends_with(".weight")) n = n.substr(0, n.rfind(".weight"));
      names.insert(n);
      }
    }
  }
  ASSERT_GE(names.size(), 20u);
  std::map<std::string, std::set<std::string>> files_of;
  const fs::path root = TANDEM_SOURCE_DIR;
  for (const char* dir : {"core", "runtime", "cpu_backend", "gpu_backend", "sim_backend", "arch", "graph", "tools",
                          "bench"}) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      std::stringstream ss;
      ss << std::ifstream(e.path()).rdbuf();
      for (const std::string& lit : StringLiterals(ss.str())) {
        for (const std::string& n : names) {
          const std::regex word("(^|[^A-Za-z0-9_])" + std::regex_replace(n, std::regex(R"(\.)"), R"(\.)") +
                                "($|[^A-Za-z0-9_])");
          if (std::regex_search(lit, word)) files_of[n].insert(fs::relative(e.path(), root).string());
        }
      }
    }
  }
  for (const std::string& n : names) {
    std::string where;
    for (const std::string& f : files_of[n]) where.append(" ").append(f);
    EXPECT_LE(files_of[n].size(), 2u) << n << " is spelled in" << where;
    EXPECT_GE(files_of[n].size(), 1u) << n;  // the schema's own file at least
  }
}

}  // namespace
}  // namespace tandem
