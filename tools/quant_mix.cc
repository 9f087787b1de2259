// The type mixes of llama.cpp's file types, as its quantizer picks them (facts from its src/llama-quant.cpp; see
// quant_mix.h). Categories go by name in llama.cpp's order: output, token_embd, the attention-V family (attn_qkv,
// attn_kv_b, attn_v), attn_k, attn_q, attn_output, ffn_up, ffn_gate, ffn_down.
#include "tools/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "arch/tensor_names.h"
#include "core/status.h"

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
// few small, positional or multimodal tables. The rest keep their type.
bool Quantized(const QuantMixTensor& t) {
  if (t.n_dims < 2 || !t.name.ends_with("weight") || Has(t.name, LayerPart(tn::kFfnGateInp))) return false;
  static constexpr std::string_view kSkip[] = {
      "_norm.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
      "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
      "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
      "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
      "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
      "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
      "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
      "mm.a.code_embd"};
  for (std::string_view skip : kSkip) {
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

// llama.cpp's categories, in its order of matching names.
enum class Category { kOutput, kTokenEmbd, kAttnV, kAttnK, kAttnQ, kAttnOutput, kFfnUp, kFfnGate, kFfnDown, kOther };

Category CategoryOf(std::string_view name) {
  if (name == tn::kOutput) return Category::kOutput;
  if (name == tn::kTokenEmbd || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  // The attention-V family: fused QKV, MLA's compressed KV, and V itself.
  if (Has(name, "attn_qkv.weight") || Has(name, "attn_kv_b.weight") || Has(name, LayerPart(tn::kAttnV))) {
    return Category::kAttnV;
  }
  if (Has(name, LayerPart(tn::kAttnK))) return Category::kAttnK;
  if (Has(name, LayerPart(tn::kAttnQ))) return Category::kAttnQ;
  if (Has(name, LayerPart(tn::kAttnOutput))) return Category::kAttnOutput;
  // Experts' stacks and shared experts included (ffn_up_exps, ffn_down_shexp).
  if (Has(name, Stem(tn::kFfnUp))) return Category::kFfnUp;
  if (Has(name, Stem(tn::kFfnGate))) return Category::kFfnGate;
  if (Has(name, Stem(tn::kFfnDown))) return Category::kFfnDown;
  return Category::kOther;
}

DType BaseType(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ4_K_M: return DType::kQ4_K;
    case QuantMix::kQ5_K_M: return DType::kQ5_K;
    case QuantMix::kQ4_0: return DType::kQ4_0;
    case QuantMix::kQ8_0: return DType::kQ8_0;
    case QuantMix::kQ6_K: return DType::kQ6_K;
    case QuantMix::kMXFP4_MOE: return DType::kMXFP4;
  }
  return DType::kQ8_0;
}

// A type whose block does not divide the row falls back to one of blocks of 32, and to F16 where even that fails.
// Q8_0 and Q4_0 have no fallback: llama.cpp stops.
QuantMixChoice Fallback(DType type, int64_t row_elems) {
  QuantMixChoice c{.type = type, .wanted = type, .quantized = true};
  if (row_elems % Traits(type).block_elems == 0) return c;
  switch (type) {
    case DType::kQ4_K: c.type = DType::kQ5_0; break;
    case DType::kQ5_K: c.type = DType::kQ5_1; break;
    case DType::kQ6_K: c.type = DType::kQ8_0; break;
    default:
      c.type = DType::kF16;
      c.no_fallback = true;
      return c;
  }
  if (row_elems % Traits(c.type).block_elems != 0) c.type = DType::kF16;
  return c;
}

std::string Upper(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

// "blk.N." -> N, as llama.cpp's sscanf reads it; -1 without.
int LayerOfName(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  int layer = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
    layer = layer * 10 + (name[i] - '0');
    if (layer > (1 << 20)) return -1;
  }
  return layer;
}

// ggml_n_dims: the dimensions up to the last one above 1.
int NDims(const std::array<int64_t, 4>& ne) {
  int n = 1;
  for (int d = 1; d < 4; ++d) {
    if (ne[d] > 1) n = d + 1;
  }
  return n;
}

}  // namespace

std::optional<QuantMix> QuantMixFromName(std::string_view name) {
  const std::string upper = Upper(name);
  if (upper == "Q4_K_M") return QuantMix::kQ4_K_M;
  if (upper == "Q5_K_M") return QuantMix::kQ5_K_M;
  if (upper == "MXFP4_MOE") return QuantMix::kMXFP4_MOE;
  return std::nullopt;
}

std::optional<QuantMix> QuantizeTypeFromName(std::string_view name) {
  const std::string upper = Upper(name);
  for (QuantMix mix : {QuantMix::kQ4_K_M, QuantMix::kQ5_K_M, QuantMix::kQ4_0, QuantMix::kQ8_0, QuantMix::kQ6_K,
                       QuantMix::kMXFP4_MOE}) {
    if (upper == QuantMixName(mix) || upper == std::to_string(QuantMixFileType(mix))) return mix;
  }
  if (upper == "Q4_K") return QuantMix::kQ4_K_M;  // llama-quantize's aliases
  if (upper == "Q5_K") return QuantMix::kQ5_K_M;
  return std::nullopt;
}

std::string_view QuantMixName(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ4_K_M: return "Q4_K_M";
    case QuantMix::kQ5_K_M: return "Q5_K_M";
    case QuantMix::kQ4_0: return "Q4_0";
    case QuantMix::kQ8_0: return "Q8_0";
    case QuantMix::kQ6_K: return "Q6_K";
    case QuantMix::kMXFP4_MOE: return "MXFP4_MOE";
  }
  return "?";
}

uint32_t QuantMixFileType(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ4_K_M: return 15;
    case QuantMix::kQ5_K_M: return 17;
    case QuantMix::kQ4_0: return 2;
    case QuantMix::kQ8_0: return 7;
    case QuantMix::kQ6_K: return 18;
    case QuantMix::kMXFP4_MOE: return 38;
  }
  return 0;
}

QuantMixChoice QuantMixChoose(QuantMix mix, const QuantMixTensor& t) {
  if (!Quantized(t)) return {.type = t.source, .wanted = t.source};
  // MXFP4_MOE: a stack of experts (a third dimension over 1) is MXFP4, every other matrix Q8_0, the head and the
  // token embeddings included; no per-category rule applies.
  if (mix == QuantMix::kMXFP4_MOE) return Fallback(t.n_dims >= 3 ? DType::kMXFP4 : DType::kQ8_0, t.row_elems);
  const bool k_mix = mix == QuantMix::kQ4_K_M || mix == QuantMix::kQ5_K_M;
  const bool falcon = t.arch == "falcon";
  const DType base = BaseType(mix);
  const Category cat = CategoryOf(t.name);
  DType type = base;
  if (cat == Category::kOutput || (cat == Category::kTokenEmbd && t.tied_output)) {
    // The head: Q6_K, or Q8_0 where the base type's block does not divide its rows (and always for Falcon).
    if (falcon || t.row_elems % Traits(base).block_elems != 0) {
      type = DType::kQ8_0;
    } else if (base != DType::kQ8_0) {
      type = DType::kQ6_K;
    }
  } else if (cat == Category::kAttnV) {
    if (k_mix && UseMoreBits(t.layer, t.n_attn_v > 0 ? t.n_attn_v : t.n_layer)) type = DType::kQ6_K;
    if (Is70B(t) && type == DType::kQ4_K) type = DType::kQ5_K;  // 8 heads share each V row
    if (t.n_expert == 8) type = DType::kQ8_0;  // Mixtral-like: small next to the experts
  } else if (cat == Category::kAttnK) {
    if (t.n_expert == 8) type = DType::kQ8_0;
  } else if (cat == Category::kAttnOutput) {
    if (mix == QuantMix::kQ4_K_M && !falcon && t.n_expert == 8) type = DType::kQ5_K;
  } else if (cat == Category::kFfnDown && k_mix) {
    // Experts' down projections included (ffn_down_exps), by their layer.
    const bool more = UseMoreBits(t.layer, t.n_layer);
    if (mix == QuantMix::kQ4_K_M && falcon) {
      type = t.layer < t.n_layer / 16 ? DType::kQ6_K : more ? DType::kQ5_K : DType::kQ4_K;
    } else if (more) {
      type = DType::kQ6_K;
    }
  }
  // token_embd (untied), attn_q, ffn_up, ffn_gate and the rest: the base type.
  return Fallback(type, t.row_elems);
}

DType QuantMixType(QuantMix mix, const QuantMixTensor& t) { return QuantMixChoose(mix, t).type; }

absl::StatusOr<std::vector<QuantMixChoice>> QuantMixChooseFile(QuantMix mix, const QuantMixModel& model,
                                                               std::span<const QuantMixFileTensor> tensors) {
  // llama.cpp's order: by layer (none first), then by name.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<int> layer_of(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) layer_of[i] = LayerOfName(tensors[i].name);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (layer_of[a] != layer_of[b]) return layer_of[a] < layer_of[b];
    return tensors[a].name < tensors[b].name;
  });
  bool tied = true;
  int n_attn_v = 0;
  for (const QuantMixFileTensor& t : tensors) {
    const Category cat = CategoryOf(t.name);
    if (cat == Category::kOutput) tied = false;
    if (cat == Category::kAttnV) ++n_attn_v;
  }
  const bool moe = model.n_expert > 1;
  std::vector<QuantMixChoice> out(tensors.size());
  int i_attn_v = 0, i_ffn_down = 0;
  for (size_t i : order) {
    const QuantMixFileTensor& f = tensors[i];
    QuantMixTensor t{.name = f.name, .layer = layer_of[i], .n_layer = model.n_layer, .n_expert = model.n_expert,
                     .n_head = model.n_head, .n_head_kv = model.n_head_kv, .row_elems = f.ne[0],
                     .n_dims = NDims(f.ne), .arch = model.arch, .tied_output = tied, .source = f.type,
                     .n_attn_v = n_attn_v};
    // The counters advance only for the tensors the rule reaches: quantized ones of their category.
    const Category cat = Quantized(t) ? CategoryOf(f.name) : Category::kOther;
    if (cat == Category::kAttnV) t.layer = i_attn_v++;
    if (cat == Category::kFfnDown && !moe) t.layer = i_ffn_down++;
    if (cat == Category::kFfnUp || cat == Category::kFfnGate || cat == Category::kFfnDown) {
      if (moe && (t.layer < 0 || t.layer >= model.n_layer)) {
        return InvalidArgument("cannot tell the layer of tensor ", f.name, " of a model of ", model.n_layer,
                               " layers (want blk.N. with N below that)");
      }
    }
    out[i] = QuantMixChoose(mix, t);
  }
  return out;
}

}  // namespace tandem::cli
