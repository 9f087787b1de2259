// Subcommands not yet written. Each file that implements one removes it from here.
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace tandem::cli {


}  // namespace tandem::cli
