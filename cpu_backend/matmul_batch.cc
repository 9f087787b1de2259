// The packed-weight MatMul driver (repack.h), for one product or several in one parallel region. Activations are
// quantized into 16-token tiles; row groups are split across threads in chunks that stay in L2 while the tiles
// pass over them. A batch shares its ranges of row groups out by node: a thread takes its own node's first, so the
// experts of an MoE layer that live on different sockets are computed at the same time, each by its own socket.
//
// One token (decode) is different: the weights stream once, so chunks are long runs, and every thread quantizes
// the token into a tile of its own. A shared tile costs more than the quantization: each region's writes must
// first invalidate the copies the other cores read in the region before (on our host, 19 us a region against
// 4.7 with a tile per thread, in the regime where it reads about 63 GB/s; docs/performance.md).
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
// Weight bytes a thread takes at a time from a one-token job: long runs keep the hardware prefetchers streaming
// (in whole-model decode 2, 8 and 32 MiB measured alike, and an eighth of a thread's share 2-4 % of the probe
// lower), and the guided split below shortens them where a region ends.
constexpr size_t kDecodeChunkBytes = size_t{8} << 20;

// One copy of a job's tiles.
size_t TileBytes(const MatMulJob& j) {
  const bool one = j.n_tok == 1;
  const int64_t tiles = (j.n_tok + internal::kPackedTokTile - 1) / internal::kPackedTokTile;
  const size_t bytes = static_cast<size_t>(tiles) *
                       internal::PackedActTileBytes(j.w->type, j.w->cols, one ? 1 : internal::kPackedTokTile);
  return (bytes + kTileAlign - 1) / kTileAlign * kTileAlign;
}

// A one-token job keeps a copy of its tile per thread.
size_t JobScratchBytes(const MatMulJob& j) {
  return TileBytes(j) * static_cast<size_t>(j.n_tok == 1 ? std::max(omp_get_max_threads(), 1) : 1);
}

// A job reads the same tiles as the one before it when both take the same activations (an expert's gate and up).
bool SameActivations(const MatMulJob& a, const MatMulJob& b) {
  return a.x == b.x && a.n_tok == b.n_tok && a.w->type == b.w->type && a.w->cols == b.w->cols;
}

// What the threads need of one job, worked out before the parallel region.
struct JobPlan {
  internal::PackedKernelFn kernel = nullptr;
  internal::PackedDecode decode;  // one token: decode.streams groups side by side
  int64_t nb = 0;                 // blocks (super-blocks for Q4_K) per row
  size_t group_bytes = 0;
  int capacity = 0;       // token slots per tile: 1 for a single token, else kPackedTokTile
  size_t tile_bytes = 0;
  int64_t tile_len = 0;   // tokens per tile: tiles of equal length
  int64_t chunk = 0;      // row groups a thread takes at a time, at most
  uint8_t* xq = nullptr;  // its tiles in the scratch
  size_t copy_bytes = 0;  // one token: thread t's tile is at xq + t * copy_bytes; else 0 (one shared copy)
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
  int64_t work = 0, shared_tok = 0;  // tokens quantized into shared tiles
  auto* next_xq = static_cast<uint8_t*>(scratch);
  for (size_t i = 0; i < n_jobs; ++i) {
    const MatMulJob& j = jobs[i];
    const WeightMatrix& w = *j.w;
    TANDEM_CHECK(IsPacked(w) && w.rows % kPackRows == 0 && j.n_tok > 0 && scratch != nullptr);
    JobPlan& p = plan[i];
    p.kernel = isa == Isa::kAvx512 ? internal::Avx512PackedKernel(w.type) : nullptr;
    if (p.kernel == nullptr) p.kernel = internal::ScalarPackedKernel(w.type);
    TANDEM_CHECK(p.kernel != nullptr);
    if (isa == Isa::kAvx512 && j.n_tok == 1) p.decode = internal::Avx512PackedDecode(w.type);
    p.nb = w.cols / Traits(w.type).block_elems;
    p.group_bytes = static_cast<size_t>(p.nb) * internal::PackedBlockBytes(w.type);
    p.capacity = j.n_tok == 1 ? 1 : internal::kPackedTokTile;
    p.tile_bytes = internal::PackedActTileBytes(w.type, w.cols, p.capacity);
    // Tiles of equal length: 130 tokens go as 9 tiles of 14 or 15, not 8 of 16 and a tail of 2, which would pay
    // a whole pass over the weights for two tokens.
    const int64_t n_tiles = (j.n_tok + internal::kPackedTokTile - 1) / internal::kPackedTokTile;
    p.tile_len = (j.n_tok + n_tiles - 1) / n_tiles;
    p.quantize = i == 0 || !SameActivations(j, jobs[i - 1]);
    p.copy_bytes = j.n_tok == 1 ? TileBytes(j) : 0;
    if (p.quantize) {
      p.xq = next_xq;
      next_xq += JobScratchBytes(j);
      if (j.n_tok > 1) shared_tok += j.n_tok;
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
  const size_t prefetch = DecodePrefetchBytes();
  for (size_t i = 0; i < n_jobs; ++i) {
    JobPlan& p = plan[i];
    if (jobs[i].n_tok == 1) {
      // Whole calls of the decode function: groups left over from a call run through the one-group kernel, one
      // run alone, which reads slower (Q4_K: 65 % of the probe on one thread against 94 % with two runs).
      const int64_t s = std::max(p.decode.streams, 1);
      p.chunk = std::max<int64_t>(s, static_cast<int64_t>(kDecodeChunkBytes / p.group_bytes) / s * s);
    } else {  // about 8 chunks per thread, each small enough to stay in L2 while the tiles pass over it
      const int64_t n_groups = jobs[i].w->rows / kPackRows;
      p.chunk = std::max<int64_t>(1, n_groups / (static_cast<int64_t>(n_threads) * 8));
      p.chunk = std::min<int64_t>(p.chunk, std::max<size_t>(1, internal::kChunkBytesPrefill / p.group_bytes));
    }
  }
  // Guided chunks: a thread takes a share of the bytes left in this range and the ranges after it, at most its
  // job's chunk, so the last chunks of a region are short and the threads reach the barrier together.
  std::atomic<int64_t> next_group[kMaxBatchRanges];
  size_t bytes_after[kMaxBatchRanges];
  for (size_t r = n_ranges; r-- > 0;) {
    next_group[r].store(ranges[r].group_begin, std::memory_order_relaxed);
    bytes_after[r] = 0;
    if (r + 1 < n_ranges) {
      const auto groups = static_cast<size_t>(ranges[r + 1].group_end - ranges[r + 1].group_begin);
      bytes_after[r] = bytes_after[r + 1] + groups * plan[range_job[r + 1]].group_bytes;
    }
  }
  const MatMulAffinity affinity{.ranges = ranges, .n_ranges = n_ranges, .thread_node = thread_node,
                                .n_thread_nodes = thread_node == nullptr ? 0 : n_thread_nodes};

#pragma omp parallel num_threads(n_threads)
  {
    const int tid = omp_get_thread_num();
    for (size_t i = 0; i < n_jobs; ++i) {  // one-token jobs: this thread's own tile
      const JobPlan& p = plan[i];
      if (p.quantize && p.copy_bytes > 0) {
        internal::QuantizePackedAct(jobs[i].w->type, jobs[i].x, jobs[i].w->cols, p.xq + tid * p.copy_bytes, 1, 0,
                                    isa);
      }
    }
    // Shared tiles are complete only after the loop's barrier. One-token jobs quantize into tiles of their own, so a
    // decode region has no barrier before its weights start streaming.
    if (shared_tok > 0) {
#pragma omp for schedule(static)
      for (int64_t k = 0; k < shared_tok; ++k) {  // the k-th token of the many-token jobs that quantize
        size_t i = 0;
        int64_t t = k;
        while (!plan[i].quantize || plan[i].copy_bytes > 0 || t >= jobs[i].n_tok) {
          if (plan[i].quantize && plan[i].copy_bytes == 0) t -= jobs[i].n_tok;
          ++i;
        }
        const JobPlan& p = plan[i];
        const MatMulJob& j = jobs[i];
        internal::QuantizePackedAct(j.w->type, j.x + t * j.w->cols, j.w->cols,
                                    p.xq + static_cast<size_t>(t / p.tile_len) * p.tile_bytes, p.capacity,
                                    static_cast<int>(t % p.tile_len), isa);
      }
    }

    // Row groups [g0, g1) of job i: every token tile over each group, tiles outermost so the groups stay in L2.
    auto run_groups = [&](size_t i, int64_t g0, int64_t g1) {
      const JobPlan& p = plan[i];
      const MatMulJob& j = jobs[i];
      const int64_t rows = j.w->rows;
      const auto* wbase = static_cast<const uint8_t*>(j.w->data);
      const uint8_t* xq = p.xq + tid * p.copy_bytes;
      if (p.decode.fn != nullptr) {  // one token: the range as decode.streams runs read side by side
        const int kS = p.decode.streams;
        const int64_t run = (g1 - g0) / kS;
        for (int64_t k = 0; k < run; ++k) {
          const uint8_t* groups[internal::kMaxDecodeStreams];
          float* ys[internal::kMaxDecodeStreams];
          for (int s = 0; s < kS; ++s) {
            const int64_t g = g0 + s * run + k;
            groups[s] = wbase + static_cast<size_t>(g) * p.group_bytes;
            ys[s] = j.y + g * kPackRows;
          }
          p.decode.fn(groups, p.nb, xq, ys, prefetch);
        }
        g0 += kS * run;
      }
      for (int64_t t0 = 0; t0 < j.n_tok; t0 += p.tile_len) {
        const int n_x = static_cast<int>(std::min<int64_t>(p.tile_len, j.n_tok - t0));
        const uint8_t* tile = xq + static_cast<size_t>(t0 / p.tile_len) * p.tile_bytes;
        for (int64_t g = g0; g < g1; ++g) {
          p.kernel(wbase + static_cast<size_t>(g) * p.group_bytes, p.nb, tile, p.capacity, n_x,
                   j.y + t0 * rows + g * kPackRows, static_cast<size_t>(rows));
        }
      }
    };

    // A thread serves its own node's ranges and those of no node, then those of nodes without threads. A team
    // smaller than planned (nested in another parallel region) serves all.
    const bool full_team = omp_get_num_threads() == n_threads;
    for (int pass = 0; pass < 2; ++pass) {
      for (int r = 0; r < static_cast<int>(n_ranges); ++r) {
        if (full_team ? !internal::ServesRange(affinity, n_threads, tid, r, pass) : pass == 1) continue;
        const size_t i = static_cast<size_t>(range_job[r]);
        const JobPlan& p = plan[i];
        const int64_t end = ranges[r].group_end;
        const int64_t shortest = p.decode.fn != nullptr ? p.decode.streams : 1;
        int64_t g0 = next_group[r].load(std::memory_order_relaxed);
        while (g0 < end) {
          const size_t left = static_cast<size_t>(end - g0) * p.group_bytes + bytes_after[r];
          const auto share = static_cast<int64_t>(left / p.group_bytes / (2 * static_cast<size_t>(n_threads)));
          const int64_t take = std::clamp(share, shortest, std::max(p.chunk, shortest)) / shortest * shortest;
          if (next_group[r].compare_exchange_weak(g0, g0 + take, std::memory_order_relaxed)) {
            run_groups(i, g0, std::min(end, g0 + take));
            g0 = next_group[r].load(std::memory_order_relaxed);
          }
        }
      }
    }
  }
}

}  // namespace tandem::cpu
