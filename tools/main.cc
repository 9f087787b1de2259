// tandem: the command line. The only code that parses flags; everything else takes option structs.
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tools/cli_util.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage = R"(tandem: run large language models split between GPU and CPU

usage: tandem <command> [options]

commands:
  run        generate text (default model: the bundled stories260K)
  plan       show where each layer runs and what it will cost
  inspect    show a GGUF file's metadata, tensors and bytes per group
  tokenize   show the token ids of a text
  bench      measure prefill and decode tokens/s
  sweep      measure tokens/s over GPU layers from none to all, next to the plan; writes CSV and SVG
  synth      write a random-weight GGUF of real model shapes
  quantize   write a GGUF in another llama.cpp file type (Q4_K_M, Q8_0, ...), as llama-quantize does
  calibrate  measure this machine for the cost model
  serve      serve the OpenAI API over HTTP (/v1/completions, /v1/chat/completions, /health, /metrics)
  chat       a conversation in the terminal, with the model's chat template

  tandem <command> --help   shows the options of a command (or tandem help <command>)
  tandem --version
)";

int Dispatch(std::string_view cmd, std::span<const std::string> args) {
  using namespace tandem::cli;
  if (cmd == "inspect") return CmdInspect(args);
  if (cmd == "tokenize") return CmdTokenize(args);
  if (cmd == "run") return CmdRun(args);
  if (cmd == "plan") return CmdPlan(args);
  if (cmd == "bench") return CmdBench(args);
  if (cmd == "synth") return CmdSynth(args);
  if (cmd == "calibrate") return CmdCalibrate(args);
  if (cmd == "sweep") return CmdSweep(args);
  if (cmd == "serve") return CmdServe(args);
  if (cmd == "chat") return CmdChat(args);
  if (cmd == "quantize") return CmdQuantize(args);
  return Fail("unknown command '" + std::string(cmd) + "' (see tandem --help)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem::cli;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 1;
  }
  const std::string_view cmd = argv[1];
  if ((cmd == "help" || cmd == "--help" || cmd == "-h") && argc > 2) {  // `tandem help run`: run's own help
    const std::vector<std::string> help{std::string(argv[2]), "--help"};
    return Dispatch(help[0], std::span<const std::string>(help).subspan(1));
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("tandem %s (commit %s)\n", TANDEM_VERSION, kBuildCommit);
    return 0;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  return Dispatch(cmd, args);
}
