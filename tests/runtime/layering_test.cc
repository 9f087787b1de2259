// The arrows between the layers run one way (../shared/spec/architecture.md): nothing includes a folder above it.
// The backends stand on runtime/ and never see graph/ or a model family; a CUDA translation unit includes no CPU
// kernel header.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;

// Which folders each folder's sources may include from (besides itself and third-party headers).
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"core", {}},
    {"runtime", {"core"}},
    {"cpu_backend", {"core", "runtime"}},
    {"gpu_backend", {"core", "runtime"}},
    {"sim_backend", {"core", "runtime", "cpu_backend"}},
    {"arch", {"core", "runtime"}},
    {"graph", {"core", "runtime", "arch", "cpu_backend", "gpu_backend", "sim_backend"}},
};

TEST(Layering, NoFolderIncludesOneAboveIt) {
  const fs::path root = TANDEM_SOURCE_DIR;
  const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/[^"]+")re");
  int checked = 0;
  for (const auto& [dir, allowed] : kAllowed) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        const std::string target = m[1];
        if (target == dir || (!kAllowed.count(target) && target != "tools" && target != "tests")) continue;
        ++checked;
        EXPECT_TRUE(allowed.count(target)) << fs::relative(e.path(), root).string() << " includes " << target
                                            << "/: " << line;
      }
    }
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
