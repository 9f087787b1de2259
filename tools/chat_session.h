// One conversation with a model in one KV sequence, for `tandem chat`. Each user turn renders the whole
// conversation with the chat template, feeds only the tokens past the longest prefix the KV cache already
// holds, and samples the answer, which then joins the conversation (even when cut short).
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chat_template.h"
#include "core/sampler.h"
#include "graph/engine.h"
#include "nlohmann/json.hpp"
#include "tools/run_report.h"

namespace tandem::cli {

struct ChatSessionOptions {
  SamplerOptions sampling;    // its seed already chosen
  int max_tokens = -1;        // per answer; -1: until the end of the turn or a full context
  bool ignore_eos = false;
  std::string system_prompt;  // empty: none
};

// One answer's numbers.
struct ChatTurn {
  std::string text;          // the answer, without its end-of-turn token
  int64_t prompt_fed = 0;    // tokens prefilled for it: the conversation past what the KV cache held
  int64_t reused = 0;        // tokens of the rendered conversation already in the KV cache
  int generated = 0;         // tokens sampled, an end-of-turn token included
  double prompt_ms = 0;      // prefill
  double ttft_ms = 0;        // from the start of the turn to the first token
  double decode_ms = 0;      // from the first token to the last
  int64_t n_decoded = 0;     // tokens that needed a decode step
  StopReason stop = StopReason::kLimit;
};

class ChatSession {
 public:
  // The engine runs KV sequence 0; its context holds the whole conversation.
  ChatSession(Engine& engine, ChatTemplate tmpl, ChatSessionOptions opts);

  // Adds the user's message and answers it, passing each piece of text to `on_text` as it comes. A nonzero
  // `*interrupt` (Ctrl-C) ends the answer at the next token. A conversation the context cannot hold is
  // InvalidArgument with the numbers, and leaves the conversation as it was.
  absl::StatusOr<ChatTurn> Reply(std::string_view user, const std::function<void(std::string_view)>& on_text,
                                 const volatile std::sig_atomic_t* interrupt);
  // Forgets the conversation (the system prompt stays).
  void Clear();

  const nlohmann::ordered_json& messages() const { return messages_; }

 private:
  Engine& engine_;
  const ChatTemplate template_;
  const ChatSessionOptions opts_;
  Sampler sampler_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::vector<int32_t> kv_;       // the tokens whose keys and values are in the cache, from position 0
  std::vector<int32_t> history_;  // kv_ and the tokens sampled since; capacity n_ctx + 1
  std::vector<float> logits_;     // [n_vocab]
  std::vector<int32_t> eog_ids_;  // masked before every sample with ignore_eos
};

}  // namespace tandem::cli
