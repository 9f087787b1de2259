// Subcommands not yet written. Each file that implements one removes it from here.
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace tandem::cli {

int CmdInspect(std::span<const std::string>) { return Fail("inspect: not implemented yet"); }
int CmdTokenize(std::span<const std::string>) { return Fail("tokenize: not implemented yet"); }
int CmdRun(std::span<const std::string>) { return Fail("run: not implemented yet"); }
int CmdPlan(std::span<const std::string>) { return Fail("plan: not implemented yet"); }
int CmdBench(std::span<const std::string>) { return Fail("bench: not implemented yet"); }
int CmdSynth(std::span<const std::string>) { return Fail("synth: not implemented yet"); }
int CmdCalibrate(std::span<const std::string>) { return Fail("calibrate: not implemented yet"); }

}  // namespace tandem::cli
