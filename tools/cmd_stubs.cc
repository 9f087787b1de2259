// Subcommands not yet written. Each file that implements one removes it from here.
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace tandem::cli {

int CmdBench(std::span<const std::string>) { return Fail("bench: not implemented yet"); }
int CmdSynth(std::span<const std::string>) { return Fail("synth: not implemented yet"); }

}  // namespace tandem::cli
