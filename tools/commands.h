// One function per subcommand. Each gets the arguments after the subcommand name and returns the exit code.
#pragma once

#include <span>
#include <string>

namespace tandem::cli {

int CmdInspect(std::span<const std::string> args);
int CmdTokenize(std::span<const std::string> args);
int CmdRun(std::span<const std::string> args);
int CmdPlan(std::span<const std::string> args);
int CmdBench(std::span<const std::string> args);
int CmdSynth(std::span<const std::string> args);
int CmdCalibrate(std::span<const std::string> args);
int CmdSweep(std::span<const std::string> args);
int CmdServe(std::span<const std::string> args);
int CmdChat(std::span<const std::string> args);
int CmdQuantize(std::span<const std::string> args);

}  // namespace tandem::cli
