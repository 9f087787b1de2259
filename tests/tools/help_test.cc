// Every command's --help names every flag its parser accepts: the flags are read from the parser's own source
// (each `flag == "--name"` comparison), so a flag added without help text fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testutil.h"

namespace tandem {
namespace {

std::string SourceFile(const std::string& rel) {
  std::ifstream in(test::DataPath("../../" + rel));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The flags a parser compares its arguments with.
std::set<std::string> ParsedFlags(const std::string& source) {
  static const std::regex kFlag(R"re(\b(?:flag|a|arg) == "(-{1,2}[A-Za-z][A-Za-z0-9-]*)")re");
  std::set<std::string> flags;
  for (std::sregex_iterator it(source.begin(), source.end(), kFlag), end; it != end; ++it) flags.insert((*it)[1]);
  return flags;
}

TEST(Help, EveryCommandNamesEveryFlagItParses) {
  const std::vector<std::pair<std::string, std::string>> commands = {
      {"run", "tools/run_flags.cc"},         {"bench", "tools/cmd_bench.cc"},
      {"plan", "tools/cmd_plan.cc"},         {"calibrate", "tools/cmd_calibrate.cc"},
      {"synth", "tools/cmd_synth.cc"},       {"sweep", "tools/cmd_sweep.cc"},
      {"tokenize", "tools/cmd_tokenize.cc"}, {"inspect", "tools/cmd_inspect.cc"},
      {"quantize", "tools/cmd_quantize.cc"}, {"serve", "tools/serve_flags.cc"},
      {"chat", "tools/chat_flags.cc"},       {"run", "tools/sampling_flags.cc"},
      {"chat", "tools/sampling_flags.cc"}};
  for (const auto& [command, source] : commands) {
    SCOPED_TRACE(command);
    const std::set<std::string> flags = ParsedFlags(SourceFile(source));
    ASSERT_GE(flags.size(), 2u) << "no flags found in " << source;
    for (const char* help : {" --help", " -h"}) {
      const test::CmdResult r = test::RunCommand(test::TandemBin() + " " + command + help);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      for (const std::string& flag : flags) {
        // A flag counts as named when it appears as a word: followed by a space, comma, '=', ']' or line end.
        const std::regex named("(^|[\\s\\[,|(])" + std::regex_replace(flag, std::regex("-"), "\\-") +
                               "($|[\\s,=\\]|)])");
        EXPECT_TRUE(std::regex_search(r.out, named)) << flag << " is parsed but not in `" << command << help << "`";
      }
    }
  }
}

}  // namespace
}  // namespace tandem
