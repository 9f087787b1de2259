// The tokenizers of GGUF vocabularies, as llama.cpp runs them: SentencePiece (tokenizer.ggml.model = "llama") and
// byte-level BPE ("gpt2", core/tokenizer_bpe.h).
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
  std::string model = "llama";       // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
  std::string pre;                   // BPE pre-tokenizer (tokenizer.ggml.pre); "" = llama.cpp's "default"
  std::vector<std::string> merges;   // BPE merges "left right", rank = index
  std::vector<std::string> pieces;   // id -> piece text; SPM writes spaces as U+2581, BPE uses GPT-2's byte map
  std::vector<float> scores;         // merge priority; empty = all 0
  std::vector<int32_t> token_types;  // GGUF token_type (1 normal, 2 unknown, 3 control, 4 user-defined,
                                     // 5 unused, 6 byte); empty = all normal
  int32_t bos_id = 1;                // BPE: -1 = none
  int32_t eos_id = 2;                // BPE: -1 = none
  int32_t unk_id = 0;                // BPE: -1 = none
  int32_t pad_id = -1;               // -1 = none
  std::vector<int32_t> extra_eog_ids;  // end-of-generation ids besides EOS (EOT, EOM); more are found by text
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;
};

struct TokenizeOptions {
  bool add_bos = true;         // add BOS (and EOS) where the vocab asks for them (llama.cpp's add_special)
  bool parse_special = false;  // treat control-token text such as "<s>" as that token
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from a model or vocab-only file; validates ids, scores and types.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromVocab(TokenizerVocab vocab);

  std::vector<int32_t> Encode(std::string_view text, const TokenizeOptions& opts = {}) const;
  // The bytes of one token as it appears in text: "▁" becomes a space, <0x0A> becomes "\n", a BPE token's
  // GPT-2 code points become their bytes (perhaps part of a UTF-8 character); control tokens give "" unless
  // `render_special`.
  std::string Piece(int32_t id, bool render_special = false) const;
  // Joins pieces; SentencePiece drops one leading space of the first piece when it follows BOS/start, like
  // llama.cpp. BPE joins bytes as they are (no clean-up of spaces), so Decode(Encode(text)) == text.
  std::string Decode(const std::vector<int32_t>& ids) const;
  // The raw vocab string (with "▁", or GPT-2's "Ġ"), for display.
  const std::string& RawPiece(int32_t id) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when the vocab has none
  int32_t eos_id() const;
  bool add_bos() const;           // Encode with add_bos starts with BOS
  bool add_space_prefix() const;  // the text is encoded after a space (SentencePiece), so a first piece has one
  bool IsEog(int32_t id) const;   // end of generation: EOS, EOT, EOM, and end tokens llama.cpp knows by text

  ~Tokenizer();

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
