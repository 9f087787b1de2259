// GGUF's tensor names, once for every family (as llama.cpp's converter writes them). {L} stands for the layer and
// {E} for the expert. Families build their schemas (arch/schema.h) from these; nothing else spells a tensor name.
#pragma once

#include <string_view>

namespace tandem::tensor_names {

inline constexpr std::string_view kTokenEmbd = "token_embd.weight";
inline constexpr std::string_view kOutputNorm = "output_norm.weight";
inline constexpr std::string_view kOutput = "output.weight";
inline constexpr std::string_view kRopeFreqs = "rope_freqs.weight";

inline constexpr std::string_view kAttnNorm = "blk.{L}.attn_norm.weight";
inline constexpr std::string_view kAttnQ = "blk.{L}.attn_q.weight";
inline constexpr std::string_view kAttnK = "blk.{L}.attn_k.weight";
inline constexpr std::string_view kAttnV = "blk.{L}.attn_v.weight";
inline constexpr std::string_view kAttnOutput = "blk.{L}.attn_output.weight";
inline constexpr std::string_view kAttnQBias = "blk.{L}.attn_q.bias";
inline constexpr std::string_view kAttnKBias = "blk.{L}.attn_k.bias";
inline constexpr std::string_view kAttnVBias = "blk.{L}.attn_v.bias";
inline constexpr std::string_view kAttnQNorm = "blk.{L}.attn_q_norm.weight";  // per head, over head_dim
inline constexpr std::string_view kAttnKNorm = "blk.{L}.attn_k_norm.weight";
inline constexpr std::string_view kAttnOutputBias = "blk.{L}.attn_output.bias";
inline constexpr std::string_view kAttnSinks = "blk.{L}.attn_sinks.weight";  // a logit per head (gpt-oss)
inline constexpr std::string_view kAttnPostNorm = "blk.{L}.post_attention_norm.weight";

inline constexpr std::string_view kFfnNorm = "blk.{L}.ffn_norm.weight";
inline constexpr std::string_view kFfnGate = "blk.{L}.ffn_gate.weight";
inline constexpr std::string_view kFfnUp = "blk.{L}.ffn_up.weight";
inline constexpr std::string_view kFfnDown = "blk.{L}.ffn_down.weight";

inline constexpr std::string_view kFfnGateInp = "blk.{L}.ffn_gate_inp.weight";  // the MoE router
inline constexpr std::string_view kFfnGateExps = "blk.{L}.ffn_gate_exps.weight";
inline constexpr std::string_view kFfnUpExps = "blk.{L}.ffn_up_exps.weight";
inline constexpr std::string_view kFfnDownExps = "blk.{L}.ffn_down_exps.weight";
inline constexpr std::string_view kFfnGateInpBias = "blk.{L}.ffn_gate_inp.bias";
inline constexpr std::string_view kFfnGateExpsBias = "blk.{L}.ffn_gate_exps.bias";  // [n_ff_expert, n_expert]
inline constexpr std::string_view kFfnUpExpsBias = "blk.{L}.ffn_up_exps.bias";
inline constexpr std::string_view kFfnDownExpsBias = "blk.{L}.ffn_down_exps.bias";  // [n_embd, n_expert]
// A shared expert every token runs (Qwen2-MoE, DeepSeek), and its sigmoid gate (Qwen2-MoE).
inline constexpr std::string_view kFfnGateInpShexp = "blk.{L}.ffn_gate_inp_shexp.weight";
inline constexpr std::string_view kFfnGateShexp = "blk.{L}.ffn_gate_shexp.weight";
inline constexpr std::string_view kFfnUpShexp = "blk.{L}.ffn_up_shexp.weight";
inline constexpr std::string_view kFfnDownShexp = "blk.{L}.ffn_down_shexp.weight";
// Older files keep each expert's matrix as a tensor of its own.
inline constexpr std::string_view kFfnGateExpert = "blk.{L}.ffn_gate.{E}.weight";
inline constexpr std::string_view kFfnUpExpert = "blk.{L}.ffn_up.{E}.weight";
inline constexpr std::string_view kFfnDownExpert = "blk.{L}.ffn_down.{E}.weight";

}  // namespace tandem::tensor_names
