#include "runtime/ops.h"

namespace tandem {

const char* RopeModeName(RopeMode m) { return m == RopeMode::kNeox ? "neox" : "norm"; }

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGelu: return "gelu";
    case Activation::kSwigluOai: return "swiglu_oai";
  }
  return "?";
}

const char* MoeGatingName(MoeGating g) {
  switch (g) {
    case MoeGating::kSoftmax: return "softmax";
    case MoeGating::kSigmoid: return "sigmoid";
    case MoeGating::kSoftmaxTopK: return "softmax_topk";
  }
  return "?";
}

}  // namespace tandem
