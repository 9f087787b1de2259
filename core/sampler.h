// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition/presence/frequency penalties, seeded.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tandem {

struct SamplerOptions {
  float temp = 0.8f;          // 0 = greedy argmax, ties to the lowest id
  int top_k = 40;             // <= 0 disables
  float top_p = 0.95f;        // 1 disables
  float min_p = 0.05f;        // 0 disables
  float repeat_penalty = 1.0f;  // 1 disables
  int repeat_last_n = 64;     // window of recent tokens the penalties look at
  // OpenAI's (and llama.cpp's) additive penalties over the same window: a token seen c times there loses
  // c * frequency_penalty + (c > 0) * presence_penalty from its logit. 0 disables.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0xFFFFFFFF;  // fixed default so runs repeat
};

class Sampler {
 public:
  // n_vocab sizes the scratch buffers once, so Sample never allocates.
  Sampler(const SamplerOptions& opts, int n_vocab);
  // `logits` may be modified (penalty applied in place). `history` is the tokens so far.
  int32_t Sample(std::span<float> logits, std::span<const int32_t> history);

 private:
  SamplerOptions opts_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // n_vocab capacity
  std::vector<int32_t> seen_;                    // [n_vocab] counts in the window, all 0 between calls
};

// Greedy argmax with ties to the lowest id.
int32_t Argmax(std::span<const float> logits);

}  // namespace tandem
