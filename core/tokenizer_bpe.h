// Byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"), internal to core/tokenizer.cc.
//   1. the pre-tokenizer named by tokenizer.ggml.pre cuts the text into words with a list of regexes (PCRE2);
//   2. each word's bytes become GPT-2's visible code points (a byte-level alphabet of 256 tokens);
//   3. the lowest-ranked adjacent pair is merged until no ranked pair is left.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace tandem::bpe {

// What a tokenizer.ggml.pre name stands for.
struct PreTokenizer {
  std::string name;                  // canonical name, for messages
  std::vector<std::string> regexes;  // applied in turn; each splits the words the previous one left
  bool ignore_merges = false;        // a word that is already a token is taken whole (Llama 3)
  bool add_bos = false;              // default when tokenizer.ggml.add_bos_token is absent
};

// The pre-tokenizer for `name`. An empty name (the key is absent) means "default", as in llama.cpp.
absl::StatusOr<PreTokenizer> FindPreTokenizer(std::string_view name);

// GPT-2's byte -> code point map, as UTF-8: printable bytes stand for themselves, the rest move to U+0100...
const std::string& ByteToText(uint8_t b);
// The byte that a token text of one mapped code point stands for; -1 otherwise.
int TextToByte(std::string_view text);
// A token's text back to bytes. Code points outside the map (added tokens written plainly) stay as they are.
void AppendDecoded(std::string_view text, std::string& out);

using PieceMap = absl::flat_hash_map<std::string, int32_t>;

class Encoder {
 public:
  // `pieces` maps token text to id (the last id of a repeated text), `texts` and `types` (GGUF token types) are
  // per id; all three must outlive the encoder. Merges are "left right" (rank = index); each side and their
  // join must be tokens.
  static absl::StatusOr<std::unique_ptr<Encoder>> Create(const PreTokenizer& pre, const PieceMap& pieces,
                                                         const std::vector<std::string>& texts,
                                                         const std::vector<int32_t>& types,
                                                         const std::vector<std::string>& merges);
  ~Encoder();

  // Appends the tokens of raw text that holds no special tokens. Any bytes, valid UTF-8 or not.
  void Encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  Encoder();
  struct Regex;
  struct Scratch;
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };

  int32_t Lookup(std::string_view text) const;
  void Split(const Regex& re, std::string_view text, Scratch& s) const;
  void EncodeWord(std::string_view word, Scratch& s, std::vector<int32_t>& out) const;

  std::vector<std::unique_ptr<Regex>> regexes_;
  const PieceMap* pieces_ = nullptr;
  // Texts that are both a special token (the id `pieces_` holds) and an ordinary one, such as DeepSeek's added
  // "ÿ": byte-level BPE means the ordinary token, whose bytes decode back to the input.
  PieceMap ordinary_;
  bool all_bytes_ = true;  // every byte has a token
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_id_{};                // token of each byte's code point; -1 when absent
  absl::flat_hash_map<uint64_t, Merge> merges_;       // (left id << 32 | right id) -> merge
};

}  // namespace tandem::bpe
