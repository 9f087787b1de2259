// libFuzzer target over the tokenizers: any bytes, under every vocabulary the tests hold (llama.cpp's BPE vocabs,
// the bundled SentencePiece model, and vocabularies of bytes alone for the pre-tokenizers those lack), give ids
// inside the vocabulary, and byte-level BPE gives the input back from its tokens.
//   input[0]: which vocabulary; input[1] bit 0: parse_special, bit 1: add BOS/EOS; the rest is the text.
// The vocab files come from TANDEM_FUZZ_VOCABS (compiled in: the build tree's unpacked llama.cpp vocabs and
// models/stories260K.gguf); a vocabulary that does not load stops the run, so a broken setup cannot pass quietly.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "core/tokenizer_bpe.h"

namespace {

using namespace tandem;

struct Vocab {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
  bool byte_level = false;     // gpt2 model: Decode(Encode(text)) == text for bytes that have a token
  bool has_byte[256] = {};     // bytes whose GPT-2 code point is a token
};

void Die(const std::string& what) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\n", what.c_str());
  std::abort();
}

void MarkBytes(Vocab& v) {
  for (int b = 0; b < 256; ++b) {
    const std::vector<int32_t> ids = v.tok->Encode(std::string(1, static_cast<char>(b)), {.add_bos = false});
    v.has_byte[b] = ids.size() == 1 && v.tok->Piece(ids[0]) == std::string(1, static_cast<char>(b));
  }
}

// A vocabulary of the 256 bytes plus a few merges, under pre-tokenizer `pre`.
std::unique_ptr<Tokenizer> ByteVocab(const std::string& pre) {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.bos_id = v.eos_id = v.unk_id = -1;
  v.add_bos = false;
  v.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) v.pieces.push_back(bpe::ByteToText(static_cast<uint8_t>(b)));
  for (std::string_view pair : {"t h", "th e", "Ġ th", "Ġth e", "i n", "Ġ a", "e r", "1 2", "12 3"}) {
    const size_t sp = pair.find(' ');
    v.merges.emplace_back(pair);
    v.pieces.push_back(std::string(pair.substr(0, sp)) + std::string(pair.substr(sp + 1)));
  }
  v.pieces.push_back("<|special|>");
  v.token_types.assign(v.pieces.size(), 1);
  v.token_types.back() = 3;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromVocab(std::move(v));
  if (!t.ok()) Die("byte vocab '" + pre + "': " + std::string(t.status().message()));
  return *std::move(t);
}

std::vector<Vocab>& Vocabs() {
  static std::vector<Vocab>* vocabs = [] {
    auto* out = new std::vector<Vocab>;
    std::string list = TANDEM_FUZZ_VOCABS;
    if (const char* env = std::getenv("TANDEM_FUZZ_VOCABS"); env != nullptr) list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(':', start), list.size());
      const std::string path = list.substr(start, end - start);
      start = end + 1;
      if (path.empty()) continue;
      absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
      if (!file.ok()) Die(path + ": " + std::string(file.status().message()));
      absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
      if (!tok.ok()) Die(path + ": " + std::string(tok.status().message()));
      const GgufValue* model = (*file)->Find("tokenizer.ggml.model");
      Vocab v{.name = path, .tok = *std::move(tok)};
      v.byte_level = model != nullptr && model->AsString() != nullptr && *model->AsString() == "gpt2";
      out->push_back(std::move(v));
    }
    for (const char* pre : {"llama-bpe", "qwen2", "gpt-4o", "default"}) {
      out->push_back(Vocab{.name = pre, .tok = ByteVocab(pre), .byte_level = true});
    }
    for (Vocab& v : *out) MarkBytes(v);
    return out;
  }();
  return *vocabs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::vector<Vocab>& vocabs = Vocabs();
  const Vocab& v = vocabs[data[0] % vocabs.size()];
  const TokenizeOptions opts{.add_bos = (data[1] & 2) != 0, .parse_special = (data[1] & 1) != 0};
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  const std::vector<int32_t> ids = v.tok->Encode(text, opts);
  for (int32_t id : ids) {
    if (id < 0 || id >= v.tok->n_vocab()) Die(v.name + ": id out of range");
  }
  const std::string decoded = v.tok->Decode(ids);
  if (!v.byte_level || opts.parse_special || opts.add_bos) return 0;
  // Every byte that has a token comes back; one that has none reads as U+FFFD, as llama.cpp reads bad UTF-8.
  for (unsigned char c : text) {
    if (!v.has_byte[c]) return 0;
  }
  if (decoded != text) Die(v.name + ": decode differs from the input");
  return 0;
}
