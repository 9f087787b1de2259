// CPU kernels: free functions with explicit sizes. One op per .cc file; each has a naive reference beside it
// (the *Ref functions) that tests hold the fast path against. Activations are row-major float32:
// a batch of n_tok rows, each of `n` contiguous elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tandem::cpu {

// A weight matrix as stored in GGUF: `rows` output rows, each of `cols` elements (ggml ne0 = cols,
// ne1 = rows), in `type` blocks; row r starts at data + r * row_stride bytes.
struct WeightMatrix {
  DType type = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;        // outputs
  int64_t cols = 0;        // inputs (contiguous)
  size_t row_stride = 0;   // bytes between rows (RowBytes(type, cols) when packed)
  // CPU only: the data is the 16-row interleaved copy of cpu_backend/repack.h, not GGUF rows (row_stride unused).
  bool packed = false;
};

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
// ---- matmul_batch.cc: several products of repacked weights (WeightMatrix::packed) in one parallel region ----
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

// ---- get_rows.cc: y[t] = dequantized row ids[t] of the embedding table ----
void GetRows(const WeightMatrix& table, const int32_t* ids, int64_t n_tok, float* y);

// ---- rms_norm.cc: y = x / sqrt(mean(x^2) + eps) * w (w may be null: no scale) ----
void RmsNorm(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y);
void RmsNormRef(const float* x, const float* w, int64_t n_tok, int64_t n, float eps, float* y);

// ---- rope.cc: in place, llama.cpp "NORM" mode: adjacent pairs (2i, 2i+1) of the first n_rot dims of each
// head rotate by theta = pos * freq_scale * freq_base^(-2i/n_rot). x is [n_tok][n_head * head_dim]. ----
struct RopeParams {
  int n_head = 0;
  int head_dim = 0;
  int n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
};
void Rope(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p);
void RopeRef(float* x, int64_t n_tok, const int32_t* pos, const RopeParams& p);

// ---- kv_cache.cc / attention.cc ----
// One layer's cache: K and V each [n_ctx][row_elems] in F32 or F16, row_elems = n_head_kv * head_dim.
struct KvLayer {
  DType type = DType::kF16;
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_ctx = 0;
  int64_t row_elems = 0;
};
// Writes rows pos0..pos0+n_tok-1 from k and v ([n_tok][row_elems] each).
void KvStore(const KvLayer& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0);

struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;  // query head h reads KV head h / (n_head / n_head_kv)
  int head_dim = 0;
  float scale = 0.0f;  // 1/sqrt(head_dim)
};
// Causal: query t (at position pos0 + t) attends to cache rows 0..pos0+t. q is [n_tok][n_head*head_dim],
// out likewise. scratch holds AttentionScratchBytes floats' bytes for the scores.
size_t AttentionScratchBytes(int64_t n_ctx, int n_head, int n_threads);
void Attention(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
               float* out, void* scratch);
void AttentionRef(const float* q, const KvLayer& kv, int64_t n_tok, int64_t pos0, const AttentionParams& p,
                  float* out);

// ---- swiglu.cc: y = silu(g) * u, elementwise over n values ----
void SwiGlu(const float* g, const float* u, int64_t n, float* y);
// ---- add.cc: y = a + b over n values (y may alias a) ----
void Add(const float* a, const float* b, int64_t n, float* y);

// ---- moe_route.cc: softmax over the router logits, top-k by probability (ties to the lower id),
// the k weights renormalized to sum to 1. logits [n_tok][n_expert] -> ids, weights [n_tok][k]. ----
void MoeRoute(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids, float* weights);
void MoeRouteRef(const float* logits, int64_t n_tok, int n_expert, int k, int32_t* ids, float* weights);

}  // namespace tandem::cpu
