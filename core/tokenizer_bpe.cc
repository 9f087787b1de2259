// Byte-level BPE: pre-tokenizer regexes (PCRE2), GPT-2 byte alphabet, rank-ordered pair merging.
#include "core/tokenizer_bpe.h"

#include <algorithm>
#include <utility>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/status.h"

namespace tandem::bpe {
namespace {

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// ---- pre-tokenizers ----
// The regexes are those of each model's tokenizer.json (as listed by llama.cpp's vocab loader), in PCRE2 syntax.
// A matched span is a word, and so is each unmatched gap between matches.

// GPT-2's own split, which many later vocabs reuse.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (tiktoken cl100k style): letters with one leading non-letter, digits in threes.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|)"
    R"(\s+(?!\S)|\s+)";
// Qwen 2/3: as Llama 3 but digits one at a time.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|)"
    R"(\s+(?!\S)|\s+)";
// o200k (GPT-4o): words split at case changes, contractions kept on the word, "/" kept with punctuation.
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK, Hangul and the block between them, as DeepSeek's tokenizers isolate them.
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct PreEntry {
  std::vector<std::string_view> names;  // the first is canonical
  std::vector<const char*> regexes;
  bool ignore_merges = false;
  bool add_bos = false;
};

const std::vector<PreEntry>& PreTable() {
  static const std::vector<PreEntry> table = {
      // tokenizer.ggml.pre absent or "default": llama.cpp's fallback split.
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano",
        "dbrx", "smaug-bpe"},
       {kLlama3},
       /*ignore_merges=*/true,
       /*add_bos=*/true},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"}, {kQwen2}},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}},
      {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
        "a.x-4.0", "mellum", "modern-bert", "exaone4", "trillion", "granite-docling"},
       {kGpt2}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"(\p{N})", kGpt2}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
      {{"deepseek-llm"},
       {R"([\r\n])",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-)"
        R"(\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-)"
        R"(\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-)"
        R"(\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})"
        R"(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-)"
        R"(\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-)"
        R"(\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
        R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128})"
        R"(\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
        R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-)"
        R"(\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})"
        R"(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-)"
        R"(\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        // "\s+$" (trailing whitespace) written so that a long inner run is not rescanned from every position.
        R"((?<!\s)\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
  };
  return table;
}

// ---- GPT-2 byte alphabet ----

struct ByteAlphabet {
  std::array<std::string, 256> text;
  absl::flat_hash_map<uint32_t, uint8_t> byte_of;  // code point -> byte
};

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* a = [] {
    auto* r = new ByteAlphabet;
    // Bytes that print as themselves in Latin-1 keep their value; the others take U+0100 onwards, in byte order,
    // so that no token text holds a space or a control character.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      r->text[b] = Utf8(cp);
      r->byte_of[cp] = static_cast<uint8_t>(b);
    }
    return r;
  }();
  return *a;
}

// The code point at s[i] (advancing i), or -1 for a byte that does not start a well-formed sequence (i += 1).
int32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) {
    ++i;
    return c;
  } else if (c >= 0xC2 && c < 0xE0) {
    n = 1, cp = c & 0x1F;
  } else if (c >= 0xE0 && c < 0xF0) {
    n = 2, cp = c & 0x0F;
  } else if (c >= 0xF0 && c < 0xF5) {
    n = 3, cp = c & 0x07;
  } else {
    ++i;
    return -1;
  }
  for (size_t k = 1; k <= n; ++k) {
    if (i + k >= s.size() || (b(i + k) & 0xC0) != 0x80) {
      ++i;
      return -1;
    }
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  i += n + 1;
  return static_cast<int32_t>(cp);
}

}  // namespace

absl::StatusOr<PreTokenizer> FindPreTokenizer(std::string_view name) {
  const std::string_view wanted = name.empty() ? "default" : name;
  std::string known;
  for (const PreEntry& e : PreTable()) {
    for (std::string_view n : e.names) {
      if (n == wanted) {
        PreTokenizer p;
        p.name = std::string(e.names.front());
        p.regexes.assign(e.regexes.begin(), e.regexes.end());
        p.ignore_merges = e.ignore_merges;
        p.add_bos = e.add_bos;
        return p;
      }
      absl::StrAppend(&known, known.empty() ? "" : ", ", AbslView(n));
    }
  }
  return Unimplemented("tokenizer: pre-tokenizer '", name, "' (tokenizer.ggml.pre) is not supported; supported: ",
                       known);
}

const std::string& ByteToText(uint8_t b) { return Alphabet().text[b]; }

int TextToByte(std::string_view text) {
  size_t i = 0;
  if (text.empty()) return -1;
  const int32_t cp = NextCodePoint(text, i);
  if (cp < 0 || i != text.size()) return -1;
  const auto& m = Alphabet().byte_of;
  const auto it = m.find(static_cast<uint32_t>(cp));
  return it == m.end() ? -1 : it->second;
}

void AppendDecoded(std::string_view text, std::string& out) {
  const auto& m = Alphabet().byte_of;
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const int32_t cp = NextCodePoint(text, i);
    const auto it = cp < 0 ? m.end() : m.find(static_cast<uint32_t>(cp));
    if (it != m.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(text.substr(start, i - start));
    }
  }
}

// ---- encoder ----

// Bounds one regex search. Only a pathological input reaches it (the supported regexes scan each character a
// bounded number of times); then the rest of that span is left as one word, which BPE still encodes exactly.
constexpr uint32_t kMatchLimit = 50'000'000;

struct Encoder::Regex {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  ~Regex() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

// Per-call working memory, reused across the words of one text.
struct Encoder::Scratch {
  struct Span {
    size_t off, len;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes; 0 once merged into the left neighbour
  };
  // A queued merge of `left` with its right neighbour; `len` is their combined length when queued, and a
  // different sum later means one of them has changed since (lengths only grow).
  struct Candidate {
    int32_t rank, left;
    uint32_t len;
    int32_t id;
  };
  std::vector<Span> spans, next;
  std::vector<Symbol> sym;
  std::vector<Candidate> heap;
  std::string mapped;
  pcre2_match_data* match = nullptr;
  Scratch() : match(pcre2_match_data_create(1, nullptr)) {}
  ~Scratch() { pcre2_match_data_free(match); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

Encoder::Encoder() = default;
Encoder::~Encoder() = default;

absl::StatusOr<std::unique_ptr<Encoder>> Encoder::Create(const PreTokenizer& pre, const PieceMap& pieces,
                                                         const std::vector<std::string>& texts,
                                                         const std::vector<int32_t>& types,
                                                         const std::vector<std::string>& merges) {
  std::unique_ptr<Encoder> e(new Encoder());
  e->pieces_ = &pieces;
  for (size_t i = 0; i < texts.size() && i < types.size(); ++i) {
    const bool ordinary = types[i] == 1 || types[i] == 6;  // normal or byte
    const auto it = pieces.find(texts[i]);
    if (ordinary && it != pieces.end() && it->second != static_cast<int32_t>(i)) {
      const size_t last = static_cast<size_t>(it->second);
      if (last < types.size() && types[last] != 1 && types[last] != 6) e->ordinary_[texts[i]] = static_cast<int32_t>(i);
    }
  }
  e->ignore_merges_ = pre.ignore_merges;
  for (const std::string& pattern : pre.regexes) {
    auto re = std::make_unique<Regex>();
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // UCP: \s, \p{..} and classes follow Unicode. MATCH_INVALID_UTF: malformed bytes never match and are left
    // in the gaps between words instead of failing the search. DOLLAR_ENDONLY: "$" is the end of the span only.
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &err_off,
                             nullptr);
    if (re->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return absl::InternalError(Cat("tokenizer: pre-tokenizer '", pre.name, "' regex does not compile at offset ",
                                     err_off, ": ", reinterpret_cast<const char*>(msg)));
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // optional: without JIT the interpreter runs it
    re->context = pcre2_match_context_create(nullptr);
    if (re->context == nullptr) return ResourceExhausted("tokenizer: out of memory for a regex match context");
    pcre2_set_match_limit(re->context, kMatchLimit);
    e->regexes_.push_back(std::move(re));
  }

  const auto lookup = [&](std::string_view s) { return e->Lookup(s); };
  for (int b = 0; b < 256; ++b) {
    // Only an ordinary token stands for a byte: an added token of the same text decodes to that text instead.
    int32_t id = lookup(ByteToText(static_cast<uint8_t>(b)));
    if (id >= 0 && static_cast<size_t>(id) < types.size() && types[id] != 1 && types[id] != 6) id = -1;
    e->byte_id_[b] = id;
    e->all_bytes_ &= e->byte_id_[b] >= 0;
  }

  e->merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    // The separator is the first space after the first character: a left side may itself be a space.
    const size_t cut = m.size() < 2 ? std::string::npos : m.find(' ', 1);
    if (cut == std::string::npos || cut + 1 >= m.size()) {
      return InvalidArgument("tokenizer: merge ", rank, " '", m, "' is not two tokens separated by a space");
    }
    const std::string_view left = std::string_view(m).substr(0, cut), right = std::string_view(m).substr(cut + 1);
    const int32_t l = lookup(left), r = lookup(right);
    if (l < 0 || r < 0) {
      return InvalidArgument("tokenizer: merge ", rank, " '", m, "' names '", l < 0 ? left : right,
                             "', which is not a token");
    }
    joined.assign(left).append(right);
    const int32_t id = lookup(joined);
    if (id < 0) return InvalidArgument("tokenizer: merge ", rank, " '", m, "' makes '", joined, "', not a token");
    if (rank > static_cast<size_t>(INT32_MAX)) return InvalidArgument("tokenizer: too many merges");
    // A repeated pair keeps its first (best) rank.
    e->merges_.try_emplace((uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r),
                           Merge{static_cast<int32_t>(rank), id});
  }
  return e;
}

int32_t Encoder::Lookup(std::string_view text) const {
  if (!ordinary_.empty()) {
    const auto it = ordinary_.find(AbslView(text));
    if (it != ordinary_.end()) return it->second;
  }
  const auto it = pieces_->find(AbslView(text));
  return it == pieces_->end() ? -1 : it->second;
}

void Encoder::Split(const Regex& re, std::string_view text, Scratch& s) const {
  s.next.clear();
  for (const Scratch::Span& span : s.spans) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + span.off);
    size_t gap = 0;  // start of the text not yet given to a word
    size_t from = 0;
    while (from < span.len) {
      const int rc = pcre2_match(re.code, subject, span.len, from, 0, s.match, re.context);
      // No match, or a search that gave up (match limit, JIT stack): the rest is one unmatched gap.
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.match);
      const size_t begin = ov[0], end = ov[1];
      if (end <= begin) {  // an empty match: step over one byte (none of the tables' regexes does this)
        from = begin + 1;
        continue;
      }
      if (begin > gap) s.next.push_back({span.off + gap, begin - gap});
      s.next.push_back({span.off + begin, end - begin});
      gap = from = end;
    }
    if (gap < span.len) s.next.push_back({span.off + gap, span.len - gap});
  }
  s.spans.swap(s.next);
}

void Encoder::EncodeWord(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    s.mapped.clear();
    for (char c : word) s.mapped.append(ByteToText(static_cast<uint8_t>(c)));
    const int32_t id = Lookup(s.mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const int32_t n = static_cast<int32_t>(word.size());
  s.sym.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    s.sym[i] = {byte_id_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, 1};
  }
  // Lowest rank first; the same pair twice goes left first.
  const auto later = [](const Scratch::Candidate& a, const Scratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  s.heap.clear();
  const auto offer = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Scratch::Symbol &l = s.sym[left], &r = s.sym[right];
    if (l.id < 0 || r.id < 0) return;
    const auto it = merges_.find((uint64_t{static_cast<uint32_t>(l.id)} << 32) | static_cast<uint32_t>(r.id));
    if (it == merges_.end()) return;
    s.heap.push_back({it->second.rank, left, l.len + r.len, it->second.id});
    std::push_heap(s.heap.begin(), s.heap.end(), later);
  };
  for (int32_t i = 1; i < n; ++i) offer(i - 1, i);

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const Scratch::Candidate c = s.heap.back();
    s.heap.pop_back();
    Scratch::Symbol& l = s.sym[c.left];
    if (l.len == 0 || l.next < 0 || l.len + s.sym[l.next].len != c.len) continue;  // stale
    Scratch::Symbol& r = s.sym[l.next];
    l.id = c.id;
    l.len = c.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) s.sym[r.next].prev = c.left;
    offer(l.prev, c.left);
    offer(c.left, l.next);
  }
  // Encode() has replaced bytes without a token, unless U+FFFD has none either: then they are dropped.
  for (int32_t i = 0; i >= 0; i = s.sym[i].next) {
    if (s.sym[i].id >= 0) out.push_back(s.sym[i].id);
  }
}

void Encoder::Encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // Some vocabs lack a token for bytes that valid UTF-8 never holds (C0, F5..FF) or for a few control bytes;
  // such a byte reads as U+FFFD, as llama.cpp reads every malformed sequence. Other bytes pass through exactly.
  if (!all_bytes_) {
    const auto missing = [&](char c) { return byte_id_[static_cast<uint8_t>(c)] < 0; };
    const bool can_replace = !missing('\xEF') && !missing('\xBF') && !missing('\xBD');
    if (can_replace && std::any_of(text.begin(), text.end(), missing)) {
      std::string fixed;
      fixed.reserve(text.size() + 16);
      for (char c : text) {
        if (missing(c)) {
          fixed.append("\xEF\xBF\xBD");
        } else {
          fixed.push_back(c);
        }
      }
      Encode(fixed, out);  // holds no missing byte now
      return;
    }
  }
  Scratch s;
  s.spans.push_back({0, text.size()});
  for (const auto& re : regexes_) Split(*re, text, s);
  for (const Scratch::Span& span : s.spans) {
    // Symbol indices are int32: a word over 2 GiB (one unbroken run, never a real prompt) goes in pieces.
    constexpr size_t kMaxWord = size_t{1} << 30;
    for (size_t off = 0; off < span.len; off += kMaxWord) {
      EncodeWord(text.substr(span.off + off, std::min(kMaxWord, span.len - off)), s, out);
    }
  }
}

}  // namespace tandem::bpe
