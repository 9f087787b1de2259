#include "cpu_backend/host_block.h"

#include <sys/mman.h>

#include <cstdlib>
#include <string_view>

namespace tandem::cpu {

void* AllocHostBlock(size_t bytes) {
  static const bool huge = [] {
    const char* env = std::getenv("TANDEM_THP");
    return env == nullptr || std::string_view(env) != "0";
  }();
  // aligned_alloc wants a multiple of the alignment: the block is reserved in whole huge pages.
  void* p = std::aligned_alloc(kHugePage, (bytes + kHugePage - 1) / kHugePage * kHugePage);
  if (p != nullptr && huge && bytes >= kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  return p;
}

}  // namespace tandem::cpu
