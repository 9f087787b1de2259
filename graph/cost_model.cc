#include "graph/cost_model.h"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace {

constexpr double kGiga = 1e9;

// Kernel calls per unit, as the executor issues them (norm, matmuls, rope, cache store, attention, adds...).
constexpr int kAttnOps = 10;        // norm, q, k, v, rope q, rope k, kv store, attention, out, residual add
constexpr int kAttnCacheOps = 5;    // norm, k, v, rope k, kv store: a layer whose outputs no token needs
constexpr int kDenseFfnOps = 6;     // norm, gate, up, swiglu, down, residual add
constexpr int kMoeFixedOps = 4;     // norm, router matmul, top-k, residual add
constexpr int kPerExpertOps = 6;    // gather, gate, up, swiglu, down, scatter-add
constexpr int kOutputOps = 2;       // norm, head matmul

}  // namespace

double ExpectedExpertsHit(int e, int k, int64_t n_tok) {
  if (e <= 0 || k <= 0 || n_tok <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(std::min(k, e)) / e;
  return e * (1.0 - std::pow(miss, static_cast<double>(n_tok)));
}

UnitWork WorkOf(const UnitSpec& u, int64_t n_tok, double ctx, int kv_elem_bytes, int64_t n_live) {
  UnitWork w;
  const double n = static_cast<double>(std::max<int64_t>(n_tok, 1));
  const double live = n_live < 0 ? n : static_cast<double>(std::min(n_live, std::max<int64_t>(n_tok, 1)));
  switch (u.kind) {
    case UnitKind::kEmbd: {
      // A lookup reads one row per token.
      const double rows = static_cast<double>(std::max<int64_t>(u.rows, 1));
      w.weight_bytes_read = std::min(n, rows) / rows * static_cast<double>(u.weight_bytes);
      w.n_ops = 1;
      return w;
    }
    case UnitKind::kAttn: {
      // Every token's K and V are cached; queries, attention and `wo` run for the live tokens only.
      const double kv_share = u.dense_params > 0 ? std::min(1.0, u.kv_params / u.dense_params) : 0;
      w.weight_bytes_read = static_cast<double>(u.weight_bytes) * (live > 0 ? 1.0 : kv_share);
      w.flops = 2.0 * (n * u.kv_params + live * (u.dense_params - u.kv_params));
      if (live == 0) {
        w.n_ops = kAttnCacheOps;
        return w;
      }
      // The live tokens are the batch's last: they attend to about as many rows as the batch's average does.
      const double rows_touched = ctx + (n - 1) / 2;
      w.kv_bytes_read = 2.0 * rows_touched * static_cast<double>(u.n_embd_kv) * kv_elem_bytes;
      w.attn_flops = 4.0 * live * ctx * u.n_head * u.head_dim;
      w.n_ops = kAttnOps;
      return w;
    }
    case UnitKind::kFfn:
    case UnitKind::kExpert: {
      if (live == 0) return w;  // nothing goes on past the cache store
      const double dense_bytes = static_cast<double>(u.weight_bytes - u.expert_bytes);
      if (u.n_expert > 0) {
        const double hit = ExpectedExpertsHit(u.n_expert, u.n_expert_used, static_cast<int64_t>(live));
        w.weight_bytes_read = dense_bytes + static_cast<double>(u.expert_bytes) * hit / u.n_expert;
        w.flops = 2.0 * live * (u.dense_params + std::min(u.n_expert_used, u.n_expert) * u.expert_params);
        w.n_ops = kMoeFixedOps + kPerExpertOps * static_cast<int>(std::ceil(hit));
      } else {
        w.weight_bytes_read = dense_bytes;
        w.flops = 2.0 * live * u.dense_params;
        w.n_ops = kDenseFfnOps;
      }
      return w;
    }
    case UnitKind::kOutput:
      if (live == 0) return w;
      w.weight_bytes_read = static_cast<double>(u.weight_bytes);
      w.flops = 2.0 * live * u.dense_params;
      w.n_ops = kOutputOps;
      return w;
  }
  return w;
}

double UnitSeconds(const UnitSpec& u, Placement p, const CostQuery& q, const MachineProfile& prof) {
  const UnitWork w = WorkOf(u, q.n_tok, q.ctx, q.kv_elem_bytes, q.n_live);
  if (p == Placement::kCpu) {
    const double read_s = w.weight_bytes_read / (prof.CpuGemvGbps(u.main_type) * kGiga);
    const double math_s = w.flops / (prof.CpuGemmGflops(u.main_type) * kGiga);
    // One token is a GEMV: the measured GEMV rate already includes its arithmetic.
    const double mm_s = q.n_tok <= 1 ? read_s : std::max(read_s, math_s);
    const double attn_s = std::max(w.kv_bytes_read / (prof.CpuGemvGbps(DType::kF16) * kGiga),
                                   w.attn_flops / (prof.cpu_attn_gflops * kGiga));
    return mm_s + attn_s + w.n_ops * prof.cpu_op_overhead_s;
  }
  const double mm_s = std::max(w.weight_bytes_read / (prof.gpu_gemv_gbps * kGiga),
                               w.flops / (prof.gpu_gemm_gflops * kGiga));
  const double attn_s = std::max(w.kv_bytes_read / (prof.gpu_gemv_gbps * kGiga),
                                 w.attn_flops / (prof.gpu_gemm_gflops * kGiga));
  const double launch_s = w.n_ops * prof.gpu_launch_s;
  if (p == Placement::kGpu) return mm_s + attn_s + launch_s;
  // Streamed: the whole unit is copied (routing is not known before the copy starts).
  const double copy_s = static_cast<double>(u.weight_bytes) / (prof.h2d_gbps * kGiga);
  return std::max(copy_s, mm_s + attn_s) + launch_s + prof.gpu_sync_s;
}

double TransferSeconds(uint64_t bytes, const MachineProfile& prof) {
  return static_cast<double>(bytes) / (prof.h2d_gbps * kGiga) + prof.gpu_sync_s;
}

}  // namespace tandem
