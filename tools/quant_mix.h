// A llama.cpp file-type mix such as Q4_K_M: which type each tensor gets. The rule is llama.cpp's quantizer's
// (src/llama-quant.cpp at the peers' commit, docs/performance.md), restated for the two mixes tandem writes, so
// that a synthetic file has the type mix a real Q4_K_M or Q5_K_M download has.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace tandem::cli {

enum class QuantMix { kQ4_K_M, kQ5_K_M };

// One tensor as the rule sees it. The layer counts stand for llama.cpp's running counters: it numbers attention-V
// tensors (attn_v, attn_qkv, attn_kv_b) and a dense model's ffn_down tensors in file order, which equals the layer
// when every layer has one of each, written layer by layer (Llama, Mixtral, Qwen3-MoE).
struct QuantMixTensor {
  std::string_view name;      // GGUF name: "blk.3.ffn_down.weight", "output.weight"
  int layer = -1;             // -1 if none
  int n_layer = 0;
  int n_expert = 0;           // 0 = dense
  int n_head = 0;
  int n_head_kv = 0;
  int64_t row_elems = 0;      // ne[0]: the length of a row, which the type's block must divide
  int n_dims = 2;             // 1-D tensors (norms) are never quantized
  std::string_view arch = "llama";  // general.architecture (Falcon's rules differ; a Llama of 80 layers is "70B")
  bool tied_output = false;   // no output.weight: token_embd is the head and is typed as one
  DType source = DType::kF32;  // what a tensor the mix does not quantize keeps
};

// "Q4_K_M", "Q5_K_M" (case-insensitive), else nullopt.
std::optional<QuantMix> QuantMixFromName(std::string_view name);
std::string_view QuantMixName(QuantMix mix);
// The type the mix gives the tensor, after llama.cpp's fallback for rows its block does not divide (Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 where 32 does not divide either).
DType QuantMixType(QuantMix mix, const QuantMixTensor& t);
// general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M (15) or _Q5_K_M (17).
uint32_t QuantMixFileType(QuantMix mix);

}  // namespace tandem::cli
