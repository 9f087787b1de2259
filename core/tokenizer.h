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

// A vocabulary given directly rather than read from a file (tests, converters). Same validation as FromGguf.
struct TokenizerVocab {
  std::vector<std::string> pieces;   // id -> piece text, spaces written as U+2581
  std::vector<float> scores;         // merge priority; empty = all 0
  std::vector<int32_t> token_types;  // GGUF token_type (1 normal, 2 unknown, 3 control, 4 user-defined,
                                     // 5 unused, 6 byte); empty = all normal
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;
  std::vector<int32_t> extra_eog_ids;  // end-of-generation ids besides EOS (EOT, EOM)
  bool add_bos = true;
  bool add_space_prefix = true;
};

struct TokenizeOptions {
  bool add_bos = true;         // prepend BOS (llama.cpp's SPM default)
  bool parse_special = false;  // treat control-token text such as "<s>" as that token
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from a model or vocab-only file; validates ids, scores and types.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromVocab(TokenizerVocab vocab);

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
