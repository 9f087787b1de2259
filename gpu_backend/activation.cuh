// The gated activations of runtime/ops.h's GluParams for one element, shared by the elementwise Glu and the MoE
// experts' gate/up epilogue. Float, in the CPU's operation order (cpu_backend/glu.cc); min and clamp are written as
// std::min and std::clamp compare, so a NaN input goes through as it does on the CPU.
#pragma once

#include <cuda_runtime.h>

#include "runtime/ops.h"

namespace tandem::gpu {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCoef = 0.044715f;

// act(g) * u; has_u false: act(g) (kSwigluOai always has u).
__device__ __forceinline__ float GluOne(const GluParams& p, float g, float u, bool has_u) {
  switch (p.act) {
    case Activation::kSilu: {
      const float a = g / (1.0f + expf(-g));
      return has_u ? a * u : a;
    }
    case Activation::kGelu: {
      const float a = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kGeluCoef * g * g)));
      return has_u ? a * u : a;
    }
    case Activation::kSwigluOai: {
      const float x = p.limit < g ? p.limit : g;
      const float up = u < -p.limit ? -p.limit : (p.limit < u ? p.limit : u);
      return x / (1.0f + expf(p.alpha * -x)) * (up + 1.0f);
    }
  }
  return 0.0f;
}

}  // namespace tandem::gpu
