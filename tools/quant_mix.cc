// The Q4_K_M and Q5_K_M type mixes, as llama.cpp's quantizer picks them (facts from its src/llama-quant.cpp; see
// quant_mix.h). Categories go by name in llama.cpp's order: output, token_embd, the attention-V family (attn_qkv,
// attn_kv_b, attn_v), attn_k, attn_q, attn_output, ffn_up, ffn_gate, ffn_down.
#include "tools/quant_mix.h"

#include <cctype>
#include <initializer_list>
#include <string>

#include "arch/tensor_names.h"

namespace tandem::cli {
namespace {

namespace tn = tensor_names;

bool Has(std::string_view name, std::string_view part) { return name.find(part) != std::string_view::npos; }

// What every layer's tensor of a schema name holds: "attn_v.weight" of "blk.{L}.attn_v.weight"; the stem drops
// ".weight" too, to match the expert stacks and per-expert spellings ("ffn_down" of ffn_down_exps, ffn_down.3).
std::string_view LayerPart(std::string_view pattern) { return pattern.substr(pattern.find("}.") + 2); }
std::string_view Stem(std::string_view pattern) {
  const std::string_view part = LayerPart(pattern);
  return part.substr(0, part.rfind(".weight"));
}

// The tensors llama.cpp quantizes at all: matrices (2-D and up) named *weight, save norms, the MoE router and a
// few small or positional tables. The rest keep their type.
bool Quantized(const QuantMixTensor& t) {
  if (t.n_dims < 2 || !t.name.ends_with("weight")) return false;
  for (std::string_view skip : std::initializer_list<std::string_view>{"_norm.weight", LayerPart(tn::kFfnGateInp),
                                "ffn_gate_tid2eid.weight", "altup", "laurel",
                                "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "attn_rel_b.weight"}) {
    if (Has(t.name, skip)) return false;
  }
  return t.name != "position_embd.weight" && t.name != "token_types.weight";
}

// The layers that get more bits: the first and last eighth, and every third layer between them.
bool UseMoreBits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// llama.cpp's LLM_TYPE_70B, the one model size its K-quant mixes look at (attn_v gets Q5_K for Q4_K).
bool Is70B(const QuantMixTensor& t) {
  if (t.n_layer != 80) return false;
  if (t.arch == "llama") return t.n_head != t.n_head_kv;  // 80 layers without GQA is the 65B
  return t.arch == "qwen2" || t.arch == "deci" || t.arch == "olmo";
}

// A type whose block does not divide the row falls back to one of blocks of 32 (llama.cpp stops where even that
// fails for Q8_0, which has no fallback; F16 here).
DType Fallback(DType type, int64_t row_elems) {
  if (row_elems % Traits(type).block_elems == 0) return type;
  DType f = DType::kF16;
  switch (type) {
    case DType::kQ4_K: f = DType::kQ5_0; break;
    case DType::kQ5_K: f = DType::kQ5_1; break;
    case DType::kQ6_K: f = DType::kQ8_0; break;
    default: break;
  }
  return row_elems % Traits(f).block_elems == 0 ? f : DType::kF16;
}

}  // namespace

std::optional<QuantMix> QuantMixFromName(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "Q4_K_M") return QuantMix::kQ4_K_M;
  if (upper == "Q5_K_M") return QuantMix::kQ5_K_M;
  return std::nullopt;
}

std::string_view QuantMixName(QuantMix mix) { return mix == QuantMix::kQ4_K_M ? "Q4_K_M" : "Q5_K_M"; }

uint32_t QuantMixFileType(QuantMix mix) { return mix == QuantMix::kQ4_K_M ? 15 : 17; }

DType QuantMixType(QuantMix mix, const QuantMixTensor& t) {
  if (!Quantized(t)) return t.source;
  const bool q4 = mix == QuantMix::kQ4_K_M;
  const bool falcon = t.arch == "falcon";
  const DType base = q4 ? DType::kQ4_K : DType::kQ5_K;
  const bool embd = t.name == tn::kTokenEmbd || t.name == "per_layer_token_embd.weight";
  DType type = base;
  if (t.name == tn::kOutput || (embd && t.tied_output)) {
    // The head: Q6_K, or Q8_0 where a super-block does not divide its rows (and always for Falcon).
    type = falcon || t.row_elems % 256 != 0 ? DType::kQ8_0 : DType::kQ6_K;
  } else if (embd) {
    // the mix's base type
  } else if (Has(t.name, "attn_qkv.weight") || Has(t.name, "attn_kv_b.weight") || Has(t.name, LayerPart(tn::kAttnV))) {
    if (UseMoreBits(t.layer, t.n_layer)) type = DType::kQ6_K;
    if (Is70B(t) && type == DType::kQ4_K) type = DType::kQ5_K;  // 8 heads share each V row
    if (t.n_expert == 8) type = DType::kQ8_0;  // Mixtral-like: small next to the experts
  } else if (Has(t.name, LayerPart(tn::kAttnK))) {
    if (t.n_expert == 8) type = DType::kQ8_0;
  } else if (Has(t.name, LayerPart(tn::kAttnQ))) {
    // base
  } else if (Has(t.name, LayerPart(tn::kAttnOutput))) {
    if (q4 && !falcon && t.n_expert == 8) type = DType::kQ5_K;
  } else if (Has(t.name, Stem(tn::kFfnUp)) || Has(t.name, Stem(tn::kFfnGate))) {
    // base
  } else if (Has(t.name, Stem(tn::kFfnDown))) {
    // Experts' down projections included (ffn_down_exps), by their layer.
    const bool more = UseMoreBits(t.layer, t.n_layer);
    if (q4 && falcon) {
      type = t.layer < t.n_layer / 16 ? DType::kQ6_K : more ? DType::kQ5_K : DType::kQ4_K;
    } else if (more) {
      type = DType::kQ6_K;
    }
  }
  return Fallback(type, t.row_elems);
}

}  // namespace tandem::cli
