// Rotary position embedding in place (runtime/ops.h's RopeParams): kNorm turns the pairs (2i, 2i+1) of each head's
// first n_rot dims, kNeox the pairs (i, i + n_rot/2); frequency factors and YaRN change the angles. One thread per
// (token, head, pair).
//
// The angles are float and formed in the order of the CPU's kernel (cpu_backend/rope.cc), so the two agree to a
// few ulp: the ratio between successive pair frequencies is one host powf, pair i's unscaled angle is the position
// multiplied by it i times, its factor divides, freq_scale multiplies, then YaRN's mix. The products that nvcc
// would fuse into FMAs (the CPU's are not fused) are spelled with round-to-nearest intrinsics.
#include <algorithm>
#include <cmath>

#include "gpu_backend/cuda_common.cuh"
#include "gpu_backend/launch.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;

struct RopeArgs {
  int n_head = 0;
  int head_dim = 0;
  int n_rot = 0;
  bool neox = false;
  float theta_ratio = 1.0f;  // freq_base^(-2 / n_rot)
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // [n_rot / 2] device, or null
  bool yarn = false;
  float ext_factor = 0.0f;
  float corr_lo = 0.0f;  // YaRN's correction range, in pairs
  float corr_hi = 0.0f;
  float mscale = 1.0f;
};

__global__ void RopeKernel(float* x, int64_t n_tok, const int32_t* pos_dev, const IndexChunk chunk, const RopeArgs a) {
  const int half = a.n_rot / 2;
  const int64_t total = n_tok * a.n_head * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const int64_t th = idx / half;
    const int h = static_cast<int>(th % a.n_head);
    const int64_t t = th / a.n_head;
    float theta_unscaled = static_cast<float>(pos_dev != nullptr ? pos_dev[t] : chunk.idx[t]);
    for (int j = 0; j < i; ++j) theta_unscaled = __fmul_rn(theta_unscaled, a.theta_ratio);
    const float extrap = a.freq_factors != nullptr ? theta_unscaled / a.freq_factors[i] : theta_unscaled;
    float theta = __fmul_rn(a.freq_scale, extrap);
    if (a.yarn) {
      const float y = (static_cast<float>(i) - a.corr_lo) / fmaxf(0.001f, a.corr_hi - a.corr_lo);
      const float ramp = __fmul_rn(1.0f - fminf(1.0f, fmaxf(0.0f, y)), a.ext_factor);
      theta = __fadd_rn(__fmul_rn(theta, 1.0f - ramp), __fmul_rn(extrap, ramp));
    }
    float c = cosf(theta);
    float s = sinf(theta);
    if (a.mscale != 1.0f) {
      c *= a.mscale;
      s *= a.mscale;
    }
    float* head = x + t * (static_cast<int64_t>(a.n_head) * a.head_dim) + static_cast<int64_t>(h) * a.head_dim;
    float* p0 = head + (a.neox ? i : 2 * i);
    float* p1 = head + (a.neox ? i + half : 2 * i + 1);
    const float x0 = *p0;
    const float x1 = *p1;
    *p0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *p1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
}

// The host half of the angles, in the CPU's float expressions (cpu_backend/rope.cc).
RopeArgs ArgsOf(const RopeParams& p) {
  RopeArgs a;
  a.n_head = p.n_head;
  a.head_dim = p.head_dim;
  a.n_rot = p.n_rot;
  a.neox = p.mode == RopeMode::kNeox;
  a.theta_ratio = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  a.freq_scale = p.freq_scale;
  a.freq_factors = p.freq_factors;
  a.yarn = p.ext_factor != 0.0f;
  a.ext_factor = p.ext_factor;
  a.mscale = p.attn_factor;
  if (a.yarn) {
    auto corr_dim = [&](float beta) {
      return static_cast<float>(p.n_rot) *
             std::log(static_cast<float>(p.n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) /
             (2.0f * std::log(p.freq_base));
    };
    a.corr_lo = std::max(0.0f, std::floor(corr_dim(p.beta_fast)));
    a.corr_hi = std::min(static_cast<float>(p.n_rot - 1), std::ceil(corr_dim(p.beta_slow)));
    a.mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  }
  return a;
}

}  // namespace

cudaError_t LaunchRope(float* x, int64_t n_tok, const int32_t* pos_dev, const IndexChunk& chunk,
                       const RopeParams& p, cudaStream_t s) {
  const int64_t total = n_tok * p.n_head * (p.n_rot / 2);
  if (total <= 0) return cudaSuccess;
  RopeKernel<<<GridFor(total, kThreads), kThreads, 0, s>>>(x, n_tok, pos_dev, chunk, ArgsOf(p));
  return cudaGetLastError();
}

}  // namespace tandem::gpu
