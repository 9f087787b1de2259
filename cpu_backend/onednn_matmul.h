// Float-weight products of many tokens through oneDNN's matmul. oneDNN reads the weights where they are, the
// file's rows ([rows][cols], row-major, as its "ba" weights [cols, rows] with the row stride), so nothing is
// reordered or copied and the decode kernels keep reading the same bytes. On the AMX host oneDNN's brgemm on those
// plain rows ran as fast as on its own blocked layout (bench/gemm_peak_bench.cc, docs/performance.md).
//
// Activations are rounded as llama.cpp rounds them for the weight type (bf16 for BF16 weights, f16 for F16) and
// products accumulate in f32, so results differ from MatMul's only in summation order (and for F16 on AMX by a
// dropped term under 2^-16 of each product). Primitives are made at plan time (Prepare, SetMaxTokens): one for
// batches of exactly max_tokens (brgemm, AMX where the CPU has it) and one for any other count (runtime M).
// Products of up to kOneDnnMaxDecodeTokens stay on the bandwidth-bound kernels. On AMX, quantized weights can take
// this route too, dequantized to bf16 tiles (OneDnnQuantMinTokens).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/tensor.h"

namespace tandem::cpu {

// Batches this small are decode (one or a few streams): MatMul's kernels, which read the weights once.
constexpr int64_t kOneDnnMaxDecodeTokens = 8;

// Matrices with fewer output rows stay on MatMul's kernels. An MoE router (one row per expert: 8 to 256 in the
// families we load) feeds a discrete top-k choice, which must not hang on the batch size: oneDNN sums in another
// order than the one-token kernels, and on a near-tie that picked another expert (tiny-mixtral-Q4_K_M's F32
// router, NMSE 1e-4 between a prompt run in 3-token batches and in one). Products that small gain little anyway.
constexpr int64_t kOneDnnMinRows = 512;

// Whether float weights go through oneDNN: env TANDEM_ONEDNN=0|1; by default yes, unless TANDEM_ISA caps our
// kernels (such a run is one of our kernels: ONEDNN_MAX_CPU_ISA caps oneDNN's).
bool OneDnnEnabled();
// The weight types the route takes: F32, BF16, and F16, which oneDNN 2.6 has no matmul for on CPUs: its rows are
// converted a tile at a time, to f32 (products of the same operands as MatMul's F16 kernels) or, when asked for
// (TANDEM_ONEDNN_F16=split), each value to two bf16 that sum to it exactly, for three bf16 products.
bool OneDnnTakesType(DType type);

// Quantized weights on oneDNN's route, for CPUs where oneDNN's bf16 matmul runs on AMX: the packed rows (repack.h)
// are dequantized a tile at a time to bf16 (cpu_backend/packed_dequant.h) and multiplied with the activations
// rounded to bf16, where MatMul's kernels multiply them as integers with the activations quantized to 8 bits as
// llama.cpp does. The dequantization costs the same whatever the batch, so the route wins only from some batch
// size on (on the AMX Xeon, Q4_K at 4096 x 4096: 0.63x MatMul's kernels at 128 tokens, 1.13x at 256, 1.63x at
// 512). Per type, the smallest batch that takes it, 0 for none: none unless `tandem calibrate` measured it
// faster (SetOneDnnQuantMinTokens, from the profile), or every prefill batch of the types env
// TANDEM_ONEDNN_QUANT=all|none|Q4_K,Q6_K,... names (the env wins).
int64_t OneDnnQuantMinTokens(DType type);
struct OneDnnQuantSetting {
  DType type;
  int64_t min_tokens;  // > kOneDnnMaxDecodeTokens
};
// The types the route is on for, from which batch (others off); ignored where TANDEM_ONEDNN_QUANT is set.
void SetOneDnnQuantMinTokens(std::span<const OneDnnQuantSetting> settings);
// The types the route can take (those repack.h packs).
bool OneDnnQuantTakesType(DType type);

// Multiply-adds times two a core does per cycle on oneDNN's route for `type` at its best: AMX's tile unit for BF16
// where oneDNN runs it (2048), a third of that for F16 there (three products), else 0 (the AVX-512 or AVX2 peak of
// our own kernels bounds it). Quantized types count as BF16 (their route is oneDNN's bf16 matmul).
double OneDnnPeakOpsPerCycle(DType type);

// How F16 rows are converted for oneDNN (onednn_matmul.cc): to f32, or to two bf16 for three bf16 products.
// kAuto: env TANDEM_ONEDNN_F16=split|f32, else f32 (on AMX as fast as the split, and exact).
enum class OneDnnF16 { kAuto, kF32, kBf16Split };

// Which packed quantized matrices Prepare takes: as OneDnnQuantMinTokens says, all it can (any batch above
// decode), or none.
enum class OneDnnQuant { kAuto, kAll, kNone };

struct OneDnnOptions {
  OneDnnF16 f16 = OneDnnF16::kAuto;
  OneDnnQuant quant = OneDnnQuant::kAuto;
  size_t f16_tile_bytes = 0;    // F16 rows are converted in tiles of about this many bytes; 0: 16 MiB
  size_t quant_tile_bytes = 0;  // quantized rows are dequantized in tiles of about this many bytes; 0: 4 MiB
};

class OneDnnMatMuls {
 public:
  explicit OneDnnMatMuls(const OneDnnOptions& options = {});
  ~OneDnnMatMuls();
  OneDnnMatMuls(const OneDnnMatMuls&) = delete;
  OneDnnMatMuls& operator=(const OneDnnMatMuls&) = delete;

  // Makes the primitives for products with w's shape, once per shape. w is float in the file's layout, or packed
  // quantized (options.quant). False (and nothing kept) when the type is not one the route takes, w has fewer
  // than kOneDnnMinRows rows, or oneDNN has only its reference implementation for it on this CPU.
  absl::StatusOr<bool> Prepare(const WeightMatrix& w);
  // The batch size the fixed-size primitives are made for (the workspace's max_tokens); remakes them.
  absl::Status SetMaxTokens(int64_t max_tokens);
  // Workspace a product of up to max_tokens needs: the converted activations and oneDNN's scratchpad.
  size_t ScratchBytes(int64_t max_tokens) const;
  // What one product of n_tok tokens with w needs of it.
  size_t ScratchFor(const WeightMatrix& w, int64_t n_tok) const;
  // Whether a product of n_tok tokens with w runs here (a prepared shape, a batch above decode; for quantized
  // rows, one from OneDnnQuantMinTokens on).
  bool Takes(const WeightMatrix& w, int64_t n_tok) const;
  // y[t][r] = dot(W[r], x[t]) for n_tok tokens; Takes(w, n_tok) must hold. scratch holds ScratchBytes.
  absl::Status MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, void* scratch) const;
  // oneDNN's implementation for w's batches of max_tokens and of other sizes (e.g. "brg:avx512_core_amx_bf16").
  std::string ImplOf(const WeightMatrix& w) const;

 private:
  bool Routable(const WeightMatrix& w) const;  // a type, layout and shape Prepare takes
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cpu
