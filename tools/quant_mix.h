// A llama.cpp file type such as Q4_K_M: which type each tensor gets. The rule is llama.cpp's quantizer's
// (src/llama-quant.cpp at the peers' commit, docs/performance.md), restated for the file types tandem writes, so
// that a synthetic file has the type mix a real Q4_K_M or Q5_K_M download has, and `tandem quantize` types each
// tensor as llama-quantize does. The plain types have rules too: Q4_0 gives the head Q6_K, and with 8 experts
// every type gives attn_k and attn_v Q8_0.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace tandem::cli {

// kMXFP4_MOE is llama.cpp's MXFP4_MOE (gpt-oss's downloads): MXFP4 expert stacks, Q8_0 for every other matrix.
enum class QuantMix { kQ4_K_M, kQ5_K_M, kQ4_0, kQ8_0, kQ6_K, kMXFP4_MOE };

// One tensor as the rule sees it. The layer counts stand for llama.cpp's running counters: it numbers attention-V
// tensors (attn_v, attn_qkv, attn_kv_b) and a dense model's ffn_down tensors in its order (by layer, then name),
// which equals the layer when every layer has one of each (Llama, Mixtral, Qwen3-MoE). QuantMixChooseFile counts
// them for a whole file.
struct QuantMixTensor {
  std::string_view name;      // GGUF name: "blk.3.ffn_down.weight", "output.weight"
  int layer = -1;             // -1 if none
  int n_layer = 0;
  int n_expert = 0;           // 0 = dense
  int n_head = 0;
  int n_head_kv = 0;
  int64_t row_elems = 0;      // ne[0]: the length of a row, which the type's block must divide
  int n_dims = 2;             // 1-D tensors (norms) are never quantized; trailing dimensions of 1 do not count
  std::string_view arch = "llama";  // general.architecture (Falcon's rules differ; a Llama of 80 layers is "70B")
  bool tied_output = false;   // no output.weight: token_embd is the head and is typed as one
  DType source = DType::kF32;  // what a tensor the mix does not quantize keeps
  int n_attn_v = 0;           // attention-V tensors in the file (llama.cpp's n_attention_wv); 0: n_layer
};

// "Q4_K_M", "Q5_K_M", "MXFP4_MOE" (case-insensitive), else nullopt: the mixes `tandem synth --type` names.
std::optional<QuantMix> QuantMixFromName(std::string_view name);
// llama-quantize's TYPE argument, case-insensitive: Q4_0, Q8_0, Q6_K, Q4_K_M, Q5_K_M, MXFP4_MOE, the aliases Q4_K
// and Q5_K (= Q4_K_M, Q5_K_M), or the file type's number (2, 7, 18, 15, 17, 38); else nullopt.
std::optional<QuantMix> QuantizeTypeFromName(std::string_view name);
std::string_view QuantMixName(QuantMix mix);
// general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_*: Q4_0 2, Q8_0 7, Q4_K_M 15, Q5_K_M 17, Q6_K 18.
uint32_t QuantMixFileType(QuantMix mix);

// What the rule gives a tensor.
struct QuantMixChoice {
  DType type = DType::kF32;  // what the tensor gets
  DType wanted = DType::kF32;  // the rule's type before the fallback for rows its block does not divide
  bool quantized = false;    // the rule applies at all (not a norm, router, 1-D tensor, ...)
  // The row fits neither `wanted` nor a fallback: llama.cpp has no fallback for Q8_0 and Q4_0 and stops there.
  // `type` is then F16.
  bool no_fallback = false;
  bool fell_back() const { return quantized && type != wanted; }
};
// The type the mix gives the tensor, after llama.cpp's fallback for rows its block does not divide (Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 where 32 does not divide either).
QuantMixChoice QuantMixChoose(QuantMix mix, const QuantMixTensor& t);
// QuantMixChoose(...).type: F16 where llama.cpp would stop.
DType QuantMixType(QuantMix mix, const QuantMixTensor& t);

// A whole file's tensors, in any order, and the model facts the rule reads from the metadata.
struct QuantMixModel {
  std::string_view arch;  // general.architecture
  int n_layer = 0;        // <arch>.block_count
  int n_expert = 0;       // <arch>.expert_count, 0 if none
  int n_head = 0;
  int n_head_kv = 0;
};
struct QuantMixFileTensor {
  std::string_view name;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  DType type = DType::kF32;
};
// The choice for each tensor (same order), with llama.cpp's counters: attention-V tensors numbered in its order,
// a dense model's ffn_down tensors too, an MoE's ffn_down by the layer in its name; a tied head where there is no
// output.weight. Error: an MoE ffn_down tensor whose name holds no layer in range (llama.cpp stops there too).
absl::StatusOr<std::vector<QuantMixChoice>> QuantMixChooseFile(QuantMix mix, const QuantMixModel& model,
                                                               std::span<const QuantMixFileTensor> tensors);

}  // namespace tandem::cli
