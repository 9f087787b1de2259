#include "graph/plan.h"

namespace tandem {

const char* PlacementName(Placement p) {
  switch (p) {
    case Placement::kCpu:
      return "cpu";
    case Placement::kGpu:
      return "gpu";
    case Placement::kStream:
      return "stream";
  }
  return "?";
}

}  // namespace tandem
