// The tokenizers as llama.cpp runs them. Both first split out special-token text (user-defined always,
// control/unknown only with parse_special). Then, for tokenizer.ggml.model = "llama" (SentencePiece):
//   each remaining fragment: optional space prefix, ' ' -> U+2581, then greedy best-score pair merging;
//   symbols that are not pieces fall back to <0xXX> byte tokens.
// For "gpt2" (byte-level BPE), core/tokenizer_bpe.cc encodes each fragment.
#include "core/tokenizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "core/tokenizer_bpe.h"

namespace tandem {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space
constexpr size_t kMaxFragmentBytes = size_t{1} << 30;

// GGUF tokenizer.ggml.token_type values.
enum TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Byte length of the UTF-8 sequence that starts with `lead`, judged by its high nibble only; stray
// continuation bytes count as one-byte symbols (malformed text is still tokenized, via byte fallback).
size_t Utf8SeqLen(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// "<0x41>" -> 0x41; -1 when the text is not a byte piece.
int ParseBytePiece(const std::string& s) {
  if (s.size() != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

// Token texts that end generation, as llama.cpp recognises them (whatever the GGUF's ids say).
bool IsEogText(std::string_view s) {
  static constexpr std::string_view kTexts[] = {
      "<|eot_id|>", "<|im_end|>",     "<|end|>",        "<|return|>",          "<|call|>",
      "<|flush|>",  "<|calls|>",      "<end_of_turn>",  "<|endoftext|>",       "</s>",
      "<|eom_id|>", "<EOT>",          "_<EOT>",         "[EOT]",               "[EOS]",
      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",             "<|tool_response>",
      "<｜end▁of▁sentence｜>", "[e~["};
  return std::find(std::begin(kTexts), std::end(kTexts), s) != std::end(kTexts);
}

// A run of the input: either raw text [off, off+len) or an already-resolved special token.
struct Fragment {
  int32_t token = -1;  // >= 0: a special token
  size_t off = 0;
  size_t len = 0;
};

// One symbol of the merge list: a byte range of the escaped text, doubly linked to its neighbours.
struct Symbol {
  int prev = -1;
  int next = -1;
  size_t off = 0;
  size_t len = 0;  // 0 once merged into its left neighbour
};

// A queued merge of symbol `left` with its right neighbour. 12 bytes: long texts queue one per character, and the
// heap's cache misses dominate the time.
struct Candidate {
  float score = 0;
  int32_t left = 0;
  uint32_t len = 0;  // combined length when queued; a different sum later means the pair is stale
};

// Highest score first; equal scores go to the leftmost pair.
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

struct Tokenizer::Impl {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<int16_t> byte_value;  // per id: the byte a kByte token stands for, else -1
  absl::flat_hash_map<std::string, int32_t> piece_to_id;
  std::array<int32_t, 256> byte_token{};  // byte -> id used for fallback
  std::vector<int32_t> specials;          // splittable tokens, longest text first
  std::vector<int32_t> eog_ids;
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;
  std::unique_ptr<bpe::Encoder> bpe;  // set for byte-level BPE vocabs

  int32_t Lookup(std::string_view s) const {
    const auto it = piece_to_id.find(AbslView(s));
    return it == piece_to_id.end() ? -1 : it->second;
  }

  std::vector<Fragment> Partition(std::string_view text, bool parse_special) const;
  void EncodeFragment(std::string_view escaped, std::vector<int32_t>& out) const;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocab(TokenizerVocab v) {
  const bool is_bpe = v.model == "gpt2";
  if (!is_bpe && v.model != "llama") {
    return Unimplemented("tokenizer: model '", v.model, "' is not supported (only 'llama', SentencePiece, and ",
                         "'gpt2', byte-level BPE)");
  }
  const size_t n = v.pieces.size();
  if (n == 0) return InvalidArgument("tokenizer: the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgument("tokenizer: too many tokens (", n, ")");
  if (v.scores.empty()) v.scores.assign(n, 0.0f);
  if (v.token_types.empty()) v.token_types.assign(n, kNormal);
  if (v.scores.size() != n) {
    return InvalidArgument("tokenizer: ", v.scores.size(), " scores for ", n, " tokens");
  }
  if (v.token_types.size() != n) {
    return InvalidArgument("tokenizer: ", v.token_types.size(), " token types for ", n, " tokens");
  }
  // BPE vocabs may lack BOS, EOS or an unknown token (-1); SentencePiece needs all three.
  const auto check_id = [n, is_bpe](std::string_view what, int32_t id) -> absl::Status {
    if (is_bpe && id == -1) return absl::OkStatus();
    if (id < 0 || static_cast<size_t>(id) >= n) {
      return InvalidArgument("tokenizer: ", what, " id ", id, " is outside the vocabulary of ", n, " tokens");
    }
    return absl::OkStatus();
  };
  TANDEM_RETURN_IF_ERROR(check_id("BOS", v.bos_id));
  TANDEM_RETURN_IF_ERROR(check_id("EOS", v.eos_id));
  TANDEM_RETURN_IF_ERROR(check_id("unknown", v.unk_id));
  if (v.pad_id != -1) TANDEM_RETURN_IF_ERROR(check_id("padding", v.pad_id));
  for (int32_t id : v.extra_eog_ids) TANDEM_RETURN_IF_ERROR(check_id("end-of-generation", id));
  if (v.add_bos && v.bos_id < 0) return InvalidArgument("tokenizer: the vocab asks for BOS but has no BOS id");
  if (v.add_eos && v.eos_id < 0) return InvalidArgument("tokenizer: the vocab asks for EOS but has no EOS id");

  auto impl = std::make_unique<Impl>();
  impl->byte_value.assign(n, -1);
  impl->piece_to_id.reserve(n);
  bool has_return = false, has_call = false;
  for (size_t i = 0; i < n; ++i) {
    int32_t& type = v.token_types[i];
    if (type < kUndefined || type > kByte) {
      return InvalidArgument("tokenizer: token ", i, " has unknown token type ", type);
    }
    // The merge queue orders by score; a NaN would break that ordering.
    if (std::isnan(v.scores[i])) return InvalidArgument("tokenizer: token ", i, " has a NaN score");
    const std::string& piece = v.pieces[i];
    if (type == kByte) {
      // A BPE byte token is written as its GPT-2 code point, or like SentencePiece's.
      int b = ParseBytePiece(piece);
      if (b < 0 && is_bpe) b = bpe::TextToByte(piece);
      if (b < 0) return InvalidArgument("tokenizer: byte token ", i, " is '", piece, "', not <0xXX>");
      impl->byte_value[i] = static_cast<int16_t>(b);
    }
    // Like llama.cpp: end-of-generation texts are control tokens whatever their type says, and gpt-oss's
    // channel markers are user-defined (always split out, always printed).
    if (IsEogText(piece)) {
      impl->eog_ids.push_back(static_cast<int32_t>(i));
      if (type != kControl) type = kControl;
      has_return |= piece == "<|return|>";
      has_call |= piece == "<|call|>" || piece == "<|calls|>";
    }
    if (piece == "<|channel|>" || piece == "<|message|>" || piece == "<|start|>" || piece == "<|constrain|>") {
      type = kUserDefined;
    }
    // A repeated piece resolves to its last id, as in llama.cpp.
    impl->piece_to_id[piece] = static_cast<int32_t>(i);
  }
  // gpt-oss (and solar-open) end a message with <|end|> but generation only with <|return|>/<|call|>.
  if (has_return || has_call) {
    const auto has = [&](std::string_view t) {
      return std::any_of(impl->eog_ids.begin(), impl->eog_ids.end(), [&](int32_t id) { return v.pieces[id] == t; });
    };
    if ((has_return && has_call) || (has_call && has("<|flush|>"))) {
      for (int32_t id : impl->eog_ids) {
        if (v.pieces[id] == "<|end|>") v.token_types[id] = kUserDefined;
      }
      std::erase_if(impl->eog_ids, [&](int32_t id) { return v.pieces[id] == "<|end|>"; });
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = v.token_types[i];
    if ((type == kControl || type == kUnknown || type == kUserDefined) && !v.pieces[i].empty()) {
      impl->specials.push_back(static_cast<int32_t>(i));
    }
  }
  impl->pieces = std::move(v.pieces);
  impl->scores = std::move(v.scores);
  impl->types = std::move(v.token_types);
  std::stable_sort(impl->specials.begin(), impl->specials.end(), [&](int32_t a, int32_t b) {
    return impl->pieces[a].size() > impl->pieces[b].size();
  });
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    int32_t id = impl->Lookup(hex);
    if (id < 0) id = impl->Lookup(std::string(1, static_cast<char>(b)));
    impl->byte_token[b] = id >= 0 ? id : v.unk_id;
  }
  impl->bos = v.bos_id;
  impl->eos = v.eos_id;
  impl->unk = v.unk_id;
  for (int32_t id : v.extra_eog_ids) impl->eog_ids.push_back(id);
  if (v.eos_id >= 0) impl->eog_ids.push_back(v.eos_id);
  std::sort(impl->eog_ids.begin(), impl->eog_ids.end());
  impl->eog_ids.erase(std::unique(impl->eog_ids.begin(), impl->eog_ids.end()), impl->eog_ids.end());
  impl->add_bos = v.add_bos;
  impl->add_eos = v.add_eos;
  impl->add_space_prefix = !is_bpe && v.add_space_prefix;
  if (is_bpe) {
    TANDEM_ASSIGN_OR_RETURN(const bpe::PreTokenizer pre, bpe::FindPreTokenizer(v.pre));
    TANDEM_ASSIGN_OR_RETURN(impl->bpe, bpe::Encoder::Create(pre, impl->piece_to_id, impl->pieces, impl->types, v.merges));
  }

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->impl_ = std::move(impl);
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  const auto array_of = [&](std::string_view key, GgufType elem,
                            bool required) -> absl::StatusOr<const GgufArray*> {
    const GgufValue* val = file.Find(key);
    if (val == nullptr) {
      if (required) return InvalidArgument("tokenizer: missing key ", key);
      return nullptr;
    }
    const GgufArray* arr = val->AsArray();
    if (arr == nullptr) return InvalidArgument("tokenizer: ", key, " is ", GgufTypeName(val->type), ", not an array");
    if (!arr->items.empty() && arr->elem_type != elem) {
      return InvalidArgument("tokenizer: ", key, " holds ", GgufTypeName(arr->elem_type), ", expected ",
                             GgufTypeName(elem));
    }
    return arr;
  };
  const auto int_key = [&](std::string_view key, int32_t& dst) -> absl::Status {
    const GgufValue* val = file.Find(key);
    if (val == nullptr) return absl::OkStatus();
    const std::optional<int64_t> i = val->AsInt();
    if (!i || *i < INT32_MIN || *i > INT32_MAX) {
      return InvalidArgument("tokenizer: ", key, " is not a valid token id");
    }
    dst = static_cast<int32_t>(*i);
    return absl::OkStatus();
  };
  const auto bool_key = [&](std::string_view key, bool& dst) -> absl::Status {
    const GgufValue* val = file.Find(key);
    if (val == nullptr) return absl::OkStatus();
    const std::optional<int64_t> i = val->AsInt();
    if (val->type != GgufType::kBool || !i) return InvalidArgument("tokenizer: ", key, " is not a bool");
    dst = *i != 0;
    return absl::OkStatus();
  };

  const GgufValue* model = file.Find("tokenizer.ggml.model");
  if (model == nullptr) return InvalidArgument("tokenizer: missing key tokenizer.ggml.model");
  if (model->AsString() == nullptr) return InvalidArgument("tokenizer: tokenizer.ggml.model is not a string");
  TokenizerVocab v;
  v.model = *model->AsString();
  if (v.model != "llama" && v.model != "gpt2") {
    return Unimplemented("tokenizer: model '", v.model, "' is not supported (only 'llama', SentencePiece, and ",
                         "'gpt2', byte-level BPE)");
  }
  const bool is_bpe = v.model == "gpt2";
  bpe::PreTokenizer pre;
  if (is_bpe) {
    // Like llama.cpp, a missing tokenizer.ggml.pre means its "default" split (old conversions); an unknown one
    // is refused rather than tokenized wrongly.
    const GgufValue* pre_key = file.Find("tokenizer.ggml.pre");
    if (pre_key != nullptr && pre_key->AsString() == nullptr) {
      return InvalidArgument("tokenizer: tokenizer.ggml.pre is not a string");
    }
    if (pre_key != nullptr) v.pre = *pre_key->AsString();
    TANDEM_ASSIGN_OR_RETURN(pre, bpe::FindPreTokenizer(v.pre));
    TANDEM_ASSIGN_OR_RETURN(const GgufArray* merges,
                            array_of("tokenizer.ggml.merges", GgufType::kString, true));
    v.merges.reserve(merges->items.size());
    for (const GgufValue& item : merges->items) {
      const std::string* m = item.AsString();
      if (m == nullptr) return InvalidArgument("tokenizer: tokenizer.ggml.merges holds a non-string");
      v.merges.push_back(*m);
    }
  }
  TANDEM_ASSIGN_OR_RETURN(const GgufArray* tokens, array_of("tokenizer.ggml.tokens", GgufType::kString, true));
  TANDEM_ASSIGN_OR_RETURN(const GgufArray* scores, array_of("tokenizer.ggml.scores", GgufType::kFloat32, false));
  TANDEM_ASSIGN_OR_RETURN(const GgufArray* types, array_of("tokenizer.ggml.token_type", GgufType::kInt32, false));
  v.pieces.reserve(tokens->items.size());
  for (const GgufValue& item : tokens->items) {
    const std::string* s = item.AsString();
    if (s == nullptr) return InvalidArgument("tokenizer: tokenizer.ggml.tokens holds a non-string");
    v.pieces.push_back(*s);
  }
  if (scores != nullptr) {
    v.scores.reserve(scores->items.size());
    for (const GgufValue& item : scores->items) {
      const std::optional<double> f = item.AsFloat();
      if (!f) return InvalidArgument("tokenizer: tokenizer.ggml.scores holds a non-number");
      v.scores.push_back(static_cast<float>(*f));
    }
    // An empty array would otherwise read as "absent"; a present array must have one score per token.
    if (v.scores.empty()) return InvalidArgument("tokenizer: tokenizer.ggml.scores is empty");
  }
  if (types != nullptr) {
    v.token_types.reserve(types->items.size());
    for (const GgufValue& item : types->items) {
      const std::optional<int64_t> t = item.AsInt();
      if (!t || *t < INT32_MIN || *t > INT32_MAX) {
        return InvalidArgument("tokenizer: tokenizer.ggml.token_type holds a non-integer");
      }
      v.token_types.push_back(static_cast<int32_t>(*t));
    }
    if (v.token_types.empty()) return InvalidArgument("tokenizer: tokenizer.ggml.token_type is empty");
  }
  if (is_bpe) {
    // llama.cpp's BPE defaults: BOS = EOS = 11 where the vocab is that large, no unknown token, BOS as the
    // pre-tokenizer's model family expects.
    const int32_t fallback = v.pieces.size() > 11 ? 11 : -1;
    v.bos_id = v.eos_id = fallback;
    v.unk_id = -1;
    v.add_bos = pre.add_bos;
  }
  TANDEM_RETURN_IF_ERROR(int_key("tokenizer.ggml.bos_token_id", v.bos_id));
  TANDEM_RETURN_IF_ERROR(int_key("tokenizer.ggml.eos_token_id", v.eos_id));
  TANDEM_RETURN_IF_ERROR(int_key("tokenizer.ggml.unknown_token_id", v.unk_id));
  // Like llama.cpp, an unusable padding id (stories260K stores 0xFFFFFFFF) just means none.
  if (const GgufValue* pad = file.Find("tokenizer.ggml.padding_token_id"); pad != nullptr) {
    const std::optional<int64_t> i = pad->AsInt();
    if (i && *i >= 0 && static_cast<uint64_t>(*i) < v.pieces.size()) v.pad_id = static_cast<int32_t>(*i);
  }
  // llama.cpp also ends generation at the fill-in-the-middle pad, repo and separator tokens.
  for (std::string_view key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
                               "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                               "tokenizer.ggml.fim_sep_token_id"}) {
    int32_t id = -1;
    TANDEM_RETURN_IF_ERROR(int_key(key, id));
    if (id != -1) v.extra_eog_ids.push_back(id);
  }
  TANDEM_RETURN_IF_ERROR(bool_key("tokenizer.ggml.add_bos_token", v.add_bos));
  TANDEM_RETURN_IF_ERROR(bool_key("tokenizer.ggml.add_eos_token", v.add_eos));
  TANDEM_RETURN_IF_ERROR(bool_key("tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  return FromVocab(std::move(v));
}

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::vector<Fragment> Tokenizer::Impl::Partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  // Longest special text first, over the whole input, so "</s>" is not cut by a shorter match.
  std::vector<Fragment> next;
  for (int32_t id : specials) {
    const int32_t type = types[id];
    if (!parse_special && (type == kControl || type == kUnknown)) continue;
    const std::string& needle = pieces[id];
    next.clear();
    bool changed = false;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view hay = text.substr(f.off, f.len);
      size_t pos = 0;
      for (size_t hit; (hit = hay.find(needle, pos)) != std::string_view::npos; pos = hit + needle.size()) {
        if (hit > pos) next.push_back({-1, f.off + pos, hit - pos});
        next.push_back({id, 0, 0});
        changed = true;
      }
      if (pos < hay.size()) next.push_back({-1, f.off + pos, hay.size() - pos});
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

void Tokenizer::Impl::EncodeFragment(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(Utf8SeqLen(static_cast<uint8_t>(text[off])), text.size() - off);
    Symbol s;
    s.prev = static_cast<int>(sym.size()) - 1;
    s.next = static_cast<int>(sym.size()) + 1;
    s.off = off;
    s.len = len;
    sym.push_back(s);
    off += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  const auto offer = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = sym[left].len + sym[right].len;
    const int32_t id = Lookup(text.substr(sym[left].off, len));
    if (id < 0) return;
    queue.push({scores[id], left, static_cast<uint32_t>(len)});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) offer(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    // Stale entries: the left symbol was merged away or grew (then its right neighbour changed too), or the right
    // one grew. Lengths only grow, so comparing the sum with the queued one catches every case.
    if (l.len == 0 || l.next < 0 || l.len + sym[l.next].len != c.len) continue;
    Symbol& r = sym[l.next];
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    offer(l.prev, c.left);
    offer(c.left, l.next);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].off, sym[i].len);
    const int32_t id = Lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char ch : piece) out.push_back(byte_token[static_cast<uint8_t>(ch)]);
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const TokenizeOptions& opts) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  if (opts.add_bos && m.add_bos) out.push_back(m.bos);
  if (m.bpe != nullptr) {
    for (const Fragment& f : m.Partition(text, opts.parse_special)) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        m.bpe->Encode(text.substr(f.off, f.len), out);
      }
    }
    if (opts.add_bos && m.add_eos) out.push_back(m.eos);
    return out;
  }
  bool after_special = true;  // the start of the text counts as following a special token
  std::string escaped;
  for (const Fragment& f : m.Partition(text, opts.parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    escaped.clear();
    if (m.add_space_prefix && after_special) escaped.append(kSpaceMark);
    for (char ch : text.substr(f.off, f.len)) {
      if (ch == ' ') {
        escaped.append(kSpaceMark);
      } else {
        escaped.push_back(ch);
      }
    }
    // Symbol indices are int: a fragment over 1 GiB is cut at a character boundary (only merges across the
    // cut are lost, which no real prompt comes near).
    std::string_view rest = escaped;
    while (rest.size() > kMaxFragmentBytes) {
      size_t cut = kMaxFragmentBytes;
      while (cut > 0 && (static_cast<uint8_t>(rest[cut]) & 0xC0) == 0x80) --cut;
      if (cut == 0) cut = kMaxFragmentBytes;  // no character boundary at all: any cut will do
      m.EncodeFragment(rest.substr(0, cut), out);
      rest.remove_prefix(cut);
    }
    m.EncodeFragment(rest, out);
    after_special = false;
  }
  if (opts.add_bos && m.add_eos) out.push_back(m.eos);
  return out;
}

std::string Tokenizer::Piece(int32_t id, bool render_special) const {
  const Impl& m = *impl_;
  if (id < 0 || id >= n_vocab()) return "";
  const std::string& raw = m.pieces[id];
  switch (m.types[id]) {
    case kNormal: {
      std::string s;
      s.reserve(raw.size());
      if (m.bpe != nullptr) {
        bpe::AppendDecoded(raw, s);
        return s;
      }
      for (size_t i = 0; i < raw.size();) {
        if (std::string_view(raw).substr(i, kSpaceMark.size()) == kSpaceMark) {
          s.push_back(' ');
          i += kSpaceMark.size();
        } else {
          s.push_back(raw[i++]);
        }
      }
      return s;
    }
    case kByte:
      return std::string(1, static_cast<char>(m.byte_value[id]));
    case kUserDefined:
      return raw;
    case kControl:
    case kUnknown:
      return render_special ? raw : "";
    default:  // unused and undefined tokens print nothing
      return "";
  }
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  // The encoder put a space in front of the text; the first real piece gives it back.
  bool strip_space = impl_->add_space_prefix;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i == 0 && ids[i] == impl_->bos && impl_->bpe == nullptr) continue;
    std::string piece = Piece(ids[i]);
    if (strip_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    strip_space = false;
    text += piece;
  }
  return text;
}

const std::string& Tokenizer::RawPiece(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= n_vocab()) return kEmpty;
  return impl_->pieces[id];
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->pieces.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }
bool Tokenizer::IsEog(int32_t id) const {
  return std::find(impl_->eog_ids.begin(), impl_->eog_ids.end(), id) != impl_->eog_ids.end();
}

}  // namespace tandem
