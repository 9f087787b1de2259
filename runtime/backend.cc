#include "runtime/backend.h"

namespace tandem {

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kGetRows: return "GetRows";
    case Op::kRmsNorm: return "RmsNorm";
    case Op::kMatMul: return "MatMul";
    case Op::kAddBias: return "AddBias";
    case Op::kRope: return "Rope";
    case Op::kKvStore: return "KvStore";
    case Op::kAttention: return "Attention";
    case Op::kGlu: return "Glu";
    case Op::kAdd: return "Add";
    case Op::kScaleRows: return "ScaleRows";
    case Op::kMoeRoute: return "MoeRoute";
    case Op::kMoeExperts: return "MoeExperts";
  }
  return "?";
}

}  // namespace tandem
