// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"), as llama.cpp runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/gguf.h"

namespace tandem {

struct TokenizeOptions {
  bool add_bos = true;         // prepend BOS (llama.cpp's SPM default)
  bool parse_special = false;  // treat control-token text such as "<s>" as that token
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from a model or vocab-only file; validates ids, scores and types.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  std::vector<int32_t> Encode(std::string_view text, const TokenizeOptions& opts = {}) const;
  // The bytes of one token as it appears in text: "▁" becomes a space, <0x0A> becomes "\n",
  // control tokens give "" unless `render_special`.
  std::string Piece(int32_t id, bool render_special = false) const;
  // Joins pieces; like llama.cpp, drops one leading space of the first piece when it follows BOS/start.
  std::string Decode(const std::vector<int32_t>& ids) const;
  // The raw vocab string (with "▁"), for display.
  const std::string& RawPiece(int32_t id) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool IsEog(int32_t id) const;  // end of generation (EOS)

  ~Tokenizer();

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
