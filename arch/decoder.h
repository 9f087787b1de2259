// What the decoder-only families (llama.cc, qwen.cc) share before their forward passes differ: the hyper-parameter
// keys they spell alike, and the checks and defaults that follow from them.
#pragma once

#include <span>

#include "absl/status/status.h"
#include "arch/hparams.h"
#include "arch/model_config.h"
#include "core/gguf.h"

namespace tandem {

// block_count, embedding_length, feed_forward_length, the head counts and widths, context_length, the RMS epsilon,
// RoPE's base and linear scale, and the expert counts.
std::span<const HParam> DecoderHParams();

// The derived defaults (n_head_kv = n_head, head_dim = n_embd / n_head, n_rot = head_dim, n_ff_expert = n_ff), the
// divisibility checks, RoPE scaling ("linear", "yarn" or "none"; other kinds are refused rather than ignored) and
// the expert counts' consistency.
absl::Status FinishDecoderHParams(const GgufFile& file, ModelConfig& c);

}  // namespace tandem
