// CPU kernels: free functions with explicit sizes. One op per .cc file; each has a naive reference beside it
// (the *Ref functions) that tests hold the fast path against. Activations are row-major float32:
// a batch of n_tok rows, each of `n` contiguous elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace tandem::cpu {

// The CPU's own weight layout (Backend::PrepareMatMulWeights): the 16-row interleaved copy of repack.h. Only the
// CPU backend reads or frees it.
inline constexpr WeightLayout kPackedLayout = 1;
inline bool IsPacked(const WeightMatrix& w) { return w.layout == kPackedLayout; }

// ---- matmul.cc: y[t][r] = dot(W[r], x[t]) ----
// x is quantized to VecDotType(w.type) first, exactly as llama.cpp does, into `scratch`.
size_t MatMulScratchBytes(DType wtype, int64_t cols, int64_t n_tok);
// Where the rows of a repacked matrix live on a multi-socket machine (graph/numa_plan.h places them), and which
// node each OpenMP thread runs on: with it, each thread computes the row groups in its own node's memory.
struct RowNodeRange {
  int64_t group_begin = 0, group_end = 0;  // row groups of 16 (repack.h)
  int node = 0;
};
// Plain pointers and counts: this header is also compiled as C++17 by nvcc, which has no std::span.
struct MatMulAffinity {
  const RowNodeRange* ranges = nullptr;  // together they cover every row group once
  size_t n_ranges = 0;
  const int* thread_node = nullptr;      // OpenMP thread i runs on node thread_node[i]
  size_t n_thread_nodes = 0;
};
// Threads come from OpenMP. Rows are split across threads; x is quantized once. With an affinity (packed weights
// only), a thread takes row groups on its own node first. Results do not depend on who computes what.
void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, void* scratch,
            const MatMulAffinity* affinity = nullptr);
// ---- matmul_batch.cc: several products of repacked weights (kPackedLayout) in one parallel region ----
// Each job has its own activations, output and node ranges. All x are quantized first (once for consecutive jobs
// that share x), then the row groups of every job are shared out: a thread takes those of its own node
// (thread_node[i] is OpenMP thread i's; may be null) and of no node first, then those of nodes without threads.
// Experts of an MoE layer that live on different nodes so run at the same time, and the batch pays one fork and
// join. Each product equals MatMul's, bit for bit. MatMul of a packed matrix is a batch of one.
struct MatMulJob {
  const WeightMatrix* w = nullptr;       // packed
  const float* x = nullptr;              // [n_tok][w->cols]
  int64_t n_tok = 0;                     // > 0
  float* y = nullptr;                    // [n_tok][w->rows]
  const RowNodeRange* ranges = nullptr;  // where w's row groups live (covering each once); null: no node
  size_t n_ranges = 0;
};
constexpr size_t kMaxBatchJobs = 32;
constexpr size_t kMaxBatchRanges = 64;  // over all jobs; a job without ranges counts one
size_t MatMulBatchScratchBytes(const MatMulJob* jobs, size_t n_jobs);
void MatMulBatch(const MatMulJob* jobs, size_t n_jobs, void* scratch, const int* thread_node, size_t n_thread_nodes);
// The work order MatMul follows under an affinity: for each thread, the ranges it serves, own node first; a range
// whose node has no thread is served by every thread. Exposed for tests.
std::vector<std::vector<int>> AffinityRangeOrder(const MatMulAffinity& a, int n_threads);
// Naive reference: dequantize W with core::DequantizeRow, round x through the same activation type with the
// core quantizers and dequantize it back, accumulate in double.
void MatMulRef(const WeightMatrix& w, const float* x, int64_t n_tok, float* y);

// Kernel-path switch for tests and benchmarks: which ISA the fast kernels may use.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
Isa DetectedIsa();        // best the CPU supports
Isa ActiveIsa();          // what MatMul uses now (env TANDEM_ISA=scalar|avx2|avx512 caps it)
void SetIsa(Isa isa);     // capped at DetectedIsa()
// How far ahead of each run of weights the one-token kernels (packed and GGUF layout) prefetch, in bytes; 0 for
// none. Intel cores keep too few misses in flight on their own (without it Q4_K decode read 69-77 % of the probe
// on our Intel host, with it 89-92 %); on Zen 4 the same prefetch read 57-65 % against 88-90 %
// (docs/performance.md). So 4096 on Intel, 0 elsewhere; env TANDEM_DECODE_PREFETCH=BYTES or SetDecodePrefetchBytes
// overrides. Products are the same either way.
size_t DecodePrefetchBytes();
void SetDecodePrefetchBytes(size_t bytes);
// How far ahead the one-token kernels that do not prefetch within a row (the float types, and the others in file
// layout) prefetch each next row, in bytes; 0 for none. Apart from DecodePrefetchBytes because hosts disagree: a
// Xeon VM whose Q4_K decode wanted 2048 read a BF16 GEMV at 95 % of the probe without the row prefetch and at 70 %
// with it. Default: DecodePrefetchBytes's vendor default; env TANDEM_ROW_PREFETCH=BYTES or SetRowPrefetchBytes
// overrides. Products are the same either way.
size_t RowPrefetchBytes();
void SetRowPrefetchBytes(size_t bytes);

// ---- get_rows.cc: y[t] = dequantized row ids[t] of the embedding table ----
void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y);

// ---- rms_norm.cc: y = x / sqrt(mean(x^2) + eps) * w (w may be null: no scale) ----
void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y);
void RmsNormRef(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y);

// ---- rope.cc: in place, the math of runtime/ops.h's RopeParams. x is [n_tok][n_head * head_dim]. ----
void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p);
void RopeRef(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p);

// ---- kv_cache.cc / attention.cc ----
// Writes rows pos0..pos0+n_tok-1 from k and v ([n_tok][row_elems] each).
void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0);

// The math of runtime/ops.h's AttentionParams. q is [n_tok][n_head*head_dim], out likewise. scratch holds
// AttentionScratchBytes bytes for the scores.
size_t AttentionScratchBytes(int64_t n_ctx, int n_head, int n_threads);
void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
               float* out, void* scratch);
void AttentionRef(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                  float* out);

// ---- glu.cc: y = act(g) * u elementwise over n values (runtime/ops.h's GluParams; u may be null) ----
void Glu(const float* g, const float* u, int64_t n, const GluParams& p, float* y);
void GluRef(const float* g, const float* u, int64_t n, const GluParams& p, float* y);
// ---- add.cc: y = a + b over n values (y may alias a); y[t] = x[t] + b for each of n_tok rows of n ----
void Add(const float* a, const float* b, int64_t n, float* y);
void AddBias(const float* x, const float* b, int64_t n_tok, int64_t n, float* y);
// y[t][i] = x[t][i] * f(s[t]) (runtime/ops.h's RowScale; y may alias x)
void ScaleRows(const float* x, const float* s, int64_t n_tok, int64_t n, RowScale f, float* y);

// ---- moe_route.cc: the routing of runtime/ops.h's MoeRouteParams. logits [n_tok][n_expert] -> ids, weights
// [n_tok][k]. ----
void MoeRoute(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights);
void MoeRouteRef(const float* logits, int64_t n_tok, const MoeRouteParams& p, int32_t* ids, float* weights);

// ---- moe_experts.cc: the (token, slot) pairs grouped by expert, then each expert's FFN ----
// Which tokens each expert takes: a counting sort of ids [n_tok][k], tokens in order within an expert. Buffers are
// sized by MoeGroupingBytes and carved by the caller; nothing is allocated.
struct ExpertGroups {
  int32_t* rows = nullptr;          // [n_tok * k] token rows, grouped by expert
  int32_t* slot_rows = nullptr;     // [n_tok * k] their rows in the output (slot * n_tok + token)
  float* row_weights = nullptr;     // [n_tok * k] their routing weights
  int64_t* expert_begin = nullptr;  // [n_expert + 1] expert e's entries are [expert_begin[e], expert_begin[e + 1])
};
size_t MoeGroupingBytes(int64_t max_tokens, int n_expert, int k);
ExpertGroups CarveExpertGroups(void* block, int64_t max_tokens, int n_expert, int k);
void GroupByExpert(const int32_t* ids, const float* weights, int64_t n_tok, int k, int n_expert, ExpertGroups& g);
// Masked calls (runtime/ops.h): whether the call skips expert e; the first expert it computes (-1: none); the width
// of x's and out's rows, from that expert or else a.n_embd (0 when every expert is skipped and n_embd is not given:
// the caller's error); and out's rows of the pairs routed to skipped experts, zeroed (nothing else is written).
inline bool SkipsExpert(const MoeExpertsArgs& a, int e) { return a.experts[e].gate == nullptr; }
int FirstComputedExpert(const MoeExpertsArgs& a);
int64_t MoeOutWidth(const MoeExpertsArgs& a);
void ZeroSkippedSlots(const MoeExpertsArgs& a, const ExpertGroups& g, int64_t n_embd);
// Pieces of expert m's FFN over its grouped pairs [begin, end), shared by the CPU backend and the simulated GPU.
// xe[i] = x[rows[i]], times the routing weight when it applies to the input.
void GatherExpertInputs(const MoeExpertsArgs& a, const ExpertMatrices& m, const ExpertGroups& g, int64_t begin,
                        int64_t end, float* xe);
void AddExpertGateUpBiases(const ExpertMatrices& m, int64_t n, float* gate, float* up);
// out[slot_rows[i]] = w_i * (y[i] + down_bias) (w_i = 1 when the weight applied to the input); y gets the bias.
void ScatterExpertOutputs(const MoeExpertsArgs& a, const ExpertMatrices& m, const ExpertGroups& g, int64_t begin,
                          int64_t end, float* y);
// Every expert with pairs, one after another through MatMul with `matmul_scratch` (MatMulScratchBytes for
// buf.rows tokens), in passes of buf.rows pairs: the path for any weight layout. Skipped experts' slots get zeros.
void MoeExpertsOneByOne(const MoeExpertsArgs& a, const ExpertGroups& g, void* matmul_scratch);
// The naive reference of MoeExpertsArgs' math: every (token, slot) on its own, dequantized weights, double sums
// (activations rounded as MatMulRef rounds them).
void MoeExpertsRef(const MoeExpertsArgs& a);

}  // namespace tandem::cpu
