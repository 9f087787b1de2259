// The packed-weight MatMul driver (repack.h), for one product or several in one parallel region. Activations are
// quantized into 16-token tiles; row groups are split across threads in chunks that stay in L2 while the tiles
// pass over them. A batch shares its ranges of row groups out by node: a thread takes its own node's first, so the
// experts of an MoE layer that live on different sockets are computed at the same time, each by its own socket.
#include <omp.h>

#include <algorithm>
#include <atomic>

#include "core/status.h"
#include "cpu_backend/kernels.h"
#include "cpu_backend/repack.h"
#include "cpu_backend/vec_dot.h"

namespace tandem::cpu {
namespace {

constexpr size_t kTileAlign = 64;  // each job's tiles start on a cache line

size_t JobScratchBytes(const MatMulJob& j) {
  const int64_t tiles = (j.n_tok + internal::kPackedTokTile - 1) / internal::kPackedTokTile;
  const size_t bytes =
      static_cast<size_t>(tiles) * internal::PackedActTileBytes(j.w->type, j.w->cols, internal::kPackedTokTile);
  return (bytes + kTileAlign - 1) / kTileAlign * kTileAlign;
}

// A job reads the same tiles as the one before it when both take the same activations (an expert's gate and up).
bool SameActivations(const MatMulJob& a, const MatMulJob& b) {
  return a.x == b.x && a.n_tok == b.n_tok && a.w->type == b.w->type && a.w->cols == b.w->cols;
}

// What the threads need of one job, worked out before the parallel region.
struct JobPlan {
  internal::PackedKernelFn kernel = nullptr;
  internal::PackedDecodeFn decode = nullptr;  // one token: kDecodeStreams groups side by side
  int64_t nb = 0;                             // blocks (super-blocks for Q4_K) per row
  size_t group_bytes = 0;
  int capacity = 0;       // token slots per tile: 1 for a single token, else kPackedTokTile
  size_t tile_bytes = 0;
  int64_t tile_len = 0;   // tokens per tile: tiles of equal length
  int64_t chunk = 0;      // row groups a thread takes at a time
  uint8_t* xq = nullptr;  // its tiles in the scratch
  bool quantize = false;  // false: the previous job's tiles serve
};

}  // namespace

size_t MatMulBatchScratchBytes(const MatMulJob* jobs, size_t n_jobs) {
  size_t bytes = 0;
  for (size_t i = 0; i < n_jobs; ++i) {
    if (i == 0 || !SameActivations(jobs[i], jobs[i - 1])) bytes += JobScratchBytes(jobs[i]);
  }
  return bytes;
}

void MatMulBatch(const MatMulJob* jobs, size_t n_jobs, void* scratch, const int* thread_node,
                 size_t n_thread_nodes) {
  TANDEM_CHECK(n_jobs <= kMaxBatchJobs);
  const Isa isa = ActiveIsa();
  JobPlan plan[kMaxBatchJobs];
  // The work: ranges of row groups, each with its job, its node (-1: anyone's) and a counter of chunks handed out.
  RowNodeRange ranges[kMaxBatchRanges];
  int range_job[kMaxBatchRanges];
  size_t n_ranges = 0;
  int64_t work = 0, total_tok = 0;
  auto* next_xq = static_cast<uint8_t*>(scratch);
  for (size_t i = 0; i < n_jobs; ++i) {
    const MatMulJob& j = jobs[i];
    const WeightMatrix& w = *j.w;
    TANDEM_CHECK(w.packed && w.rows % kPackRows == 0 && j.n_tok > 0 && scratch != nullptr);
    JobPlan& p = plan[i];
    p.kernel = isa == Isa::kAvx512 ? internal::Avx512PackedKernel(w.type) : nullptr;
    if (p.kernel == nullptr) p.kernel = internal::ScalarPackedKernel(w.type);
    TANDEM_CHECK(p.kernel != nullptr);
    p.decode = isa == Isa::kAvx512 && j.n_tok == 1 ? internal::Avx512PackedDecode(w.type) : nullptr;
    p.nb = w.cols / Traits(w.type).block_elems;
    p.group_bytes = static_cast<size_t>(p.nb) * internal::PackedBlockBytes(w.type);
    p.capacity = j.n_tok == 1 ? 1 : internal::kPackedTokTile;
    p.tile_bytes = internal::PackedActTileBytes(w.type, w.cols, p.capacity);
    // Tiles of equal length: 130 tokens go as 9 tiles of 14 or 15, not 8 of 16 and a tail of 2, which would pay
    // a whole pass over the weights for two tokens.
    const int64_t n_tiles = (j.n_tok + internal::kPackedTokTile - 1) / internal::kPackedTokTile;
    p.tile_len = (j.n_tok + n_tiles - 1) / n_tiles;
    p.quantize = i == 0 || !SameActivations(j, jobs[i - 1]);
    if (p.quantize) {
      p.xq = next_xq;
      next_xq += JobScratchBytes(j);
      total_tok += j.n_tok;
    } else {
      p.xq = plan[i - 1].xq;
    }
    work += w.rows * w.cols * j.n_tok;

    const int64_t n_groups = w.rows / kPackRows;
    if (j.ranges == nullptr) {
      TANDEM_CHECK(n_ranges < kMaxBatchRanges);
      range_job[n_ranges] = static_cast<int>(i);
      ranges[n_ranges++] = RowNodeRange{.group_begin = 0, .group_end = n_groups, .node = -1};
    } else {
      for (size_t r = 0; r < j.n_ranges; ++r) {
        TANDEM_CHECK(n_ranges < kMaxBatchRanges);
        range_job[n_ranges] = static_cast<int>(i);
        ranges[n_ranges++] = j.ranges[r];
      }
    }
  }
  const int n_threads = work >= internal::kMinParallelWork ? omp_get_max_threads() : 1;
  for (size_t i = 0; i < n_jobs; ++i) {
    // About 8 chunks per thread balances a noisy machine; with many tokens a chunk also stays in L2.
    const int64_t n_groups = jobs[i].w->rows / kPackRows;
    plan[i].chunk = std::max<int64_t>(1, n_groups / (static_cast<int64_t>(n_threads) * 8));
    if (jobs[i].n_tok > 1) {
      plan[i].chunk =
          std::min<int64_t>(plan[i].chunk, std::max<size_t>(1, internal::kChunkBytesPrefill / plan[i].group_bytes));
    }
  }
  std::atomic<int64_t> next_chunk[kMaxBatchRanges];
  for (size_t r = 0; r < n_ranges; ++r) next_chunk[r].store(0, std::memory_order_relaxed);
  const MatMulAffinity affinity{.ranges = ranges, .n_ranges = n_ranges, .thread_node = thread_node,
                                .n_thread_nodes = thread_node == nullptr ? 0 : n_thread_nodes};

#pragma omp parallel num_threads(n_threads)
  {
#pragma omp for schedule(static)
    for (int64_t k = 0; k < total_tok; ++k) {  // the k-th token of the jobs that quantize
      size_t i = 0;
      int64_t t = k;
      while (!plan[i].quantize || t >= jobs[i].n_tok) {
        if (plan[i].quantize) t -= jobs[i].n_tok;
        ++i;
      }
      const JobPlan& p = plan[i];
      const MatMulJob& j = jobs[i];
      internal::QuantizePackedAct(j.w->type, j.x + t * j.w->cols, j.w->cols,
                                  p.xq + static_cast<size_t>(t / p.tile_len) * p.tile_bytes, p.capacity,
                                  static_cast<int>(t % p.tile_len), isa);
    }

    // Row groups [g0, g1) of job i: every token tile over each group, tiles outermost so the groups stay in L2.
    auto run_groups = [&](size_t i, int64_t g0, int64_t g1) {
      const JobPlan& p = plan[i];
      const MatMulJob& j = jobs[i];
      const int64_t rows = j.w->rows;
      const auto* wbase = static_cast<const uint8_t*>(j.w->data);
      if (p.decode != nullptr) {  // one token: the range as kDecodeStreams runs read side by side
        constexpr int kS = internal::kDecodeStreams;
        const int64_t run = (g1 - g0) / kS;
        for (int64_t k = 0; k < run; ++k) {
          const uint8_t* groups[kS];
          float* ys[kS];
          for (int s = 0; s < kS; ++s) {
            const int64_t g = g0 + s * run + k;
            groups[s] = wbase + static_cast<size_t>(g) * p.group_bytes;
            ys[s] = j.y + g * kPackRows;
          }
          p.decode(groups, p.nb, p.xq, ys);
        }
        g0 += kS * run;
      }
      for (int64_t t0 = 0; t0 < j.n_tok; t0 += p.tile_len) {
        const int n_x = static_cast<int>(std::min<int64_t>(p.tile_len, j.n_tok - t0));
        const uint8_t* tile = p.xq + static_cast<size_t>(t0 / p.tile_len) * p.tile_bytes;
        for (int64_t g = g0; g < g1; ++g) {
          p.kernel(wbase + static_cast<size_t>(g) * p.group_bytes, p.nb, tile, p.capacity, n_x,
                   j.y + t0 * rows + g * kPackRows, static_cast<size_t>(rows));
        }
      }
    };

    // A thread serves its own node's ranges and those of no node, then those of nodes without threads. A team
    // smaller than planned (nested in another parallel region) serves all.
    const int tid = omp_get_thread_num();
    const bool full_team = omp_get_num_threads() == n_threads;
    for (int pass = 0; pass < 2; ++pass) {
      for (int r = 0; r < static_cast<int>(n_ranges); ++r) {
        if (full_team ? !internal::ServesRange(affinity, n_threads, tid, r, pass) : pass == 1) continue;
        const size_t i = static_cast<size_t>(range_job[r]);
        const int64_t chunk = plan[i].chunk;
        for (;;) {
          const int64_t c = next_chunk[r].fetch_add(1, std::memory_order_relaxed);
          const int64_t g0 = ranges[r].group_begin + c * chunk;
          if (g0 >= ranges[r].group_end) break;
          run_groups(i, g0, std::min(ranges[r].group_end, g0 + chunk));
        }
      }
    }
  }
}

}  // namespace tandem::cpu
