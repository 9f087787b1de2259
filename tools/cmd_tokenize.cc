// tandem tokenize: the token ids of a text, with their pieces, as llama-tokenize shows them.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/status.h"
#include "core/tokenizer.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace tandem::cli {
namespace {

constexpr const char* kUsage = R"(usage: tandem tokenize [-m MODEL] [--no-bos] [--parse-special] [--ids] TEXT | -f FILE

Prints the token ids of TEXT, one `id -> 'piece'` line per token, or with --ids a bare list such as
[1, 15043, 3186]. Works on any GGUF with tokenizer metadata, vocab-only files included.

options:
  -m, --model MODEL  the GGUF file (default: the bundled stories260K model)
  -p, --prompt TEXT  the text, for a TEXT that starts with '-' (or put it after --)
  -f, --file FILE    the text is FILE's bytes
  --no-bos           do not add the BOS token (added by default when the vocab asks for it)
  --parse-special    treat control-token text such as <s> as that token (default: plain text)
  --ids              print only the list of ids
  -h, --help         show this help
)";

// Printable form of a piece: valid UTF-8 as is, control characters and stray bytes escaped.
std::string Printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
      ++i;
      continue;
    }
    if (c == '\t') {
      out += "\\t";
      ++i;
      continue;
    }
    if (c == '\\' || c == '\'') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    size_t len = 0;  // length of a well-formed UTF-8 sequence starting here, 0 if none
    if (c >= 0x20 && c < 0x7f) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xF4) {
      const size_t want = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      if (i + want <= s.size()) {
        len = want;
        for (size_t k = 1; k < want; ++k) {
          if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) len = 0;
        }
      }
    }
    if (len == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

}  // namespace

int CmdTokenize(std::span<const std::string> args) {
  ArgReader ar(args);
  std::string model_path;
  std::optional<std::string> text;
  TokenizeOptions opts;  // BOS (and EOS) where the vocab asks for them, special text plain
  bool ids_only = false;
  bool flags_done = false;
  const auto set_text = [&](const std::string& t) -> bool {
    if (text.has_value()) return false;
    text = t;
    return true;
  };
  while (!ar.Done()) {
    const std::string& a = ar.Next();
    if (flags_done || a.empty() || a[0] != '-' || a == "-") {
      if (!set_text(a)) return Fail("tokenize: more than one TEXT given (quote the text as one argument)");
      continue;
    }
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--") {
      flags_done = true;
    } else if (a == "-m" || a == "--model") {
      absl::StatusOr<std::string> v = ar.Value(a);
      if (!v.ok()) return Fail(Cat("tokenize: ", Message(v.status())));
      model_path = *v;
    } else if (a == "-p" || a == "--prompt") {
      absl::StatusOr<std::string> v = ar.Value(a);
      if (!v.ok()) return Fail(Cat("tokenize: ", Message(v.status())));
      if (!set_text(*v)) return Fail("tokenize: more than one TEXT given (quote the text as one argument)");
    } else if (a == "-f" || a == "--file") {
      absl::StatusOr<std::string> v = ar.Value(a);
      if (!v.ok()) return Fail(Cat("tokenize: ", Message(v.status())));
      std::ifstream in(*v, std::ios::binary);
      if (!in) return Fail(Cat("tokenize: cannot read '", *v, "'"));
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!set_text(bytes)) return Fail("tokenize: more than one TEXT given (quote the text as one argument)");
    } else if (a == "--no-bos") {
      opts.add_bos = false;
    } else if (a == "--parse-special") {
      opts.parse_special = true;
    } else if (a == "--ids") {
      ids_only = true;
    } else {
      return Fail(Cat("tokenize: unknown flag '", a, "' (see tandem tokenize --help)"));
    }
  }
  if (!text.has_value()) return Fail("tokenize: missing TEXT (see tandem tokenize --help)");
  if (model_path.empty()) model_path = DefaultModelPath();

  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(model_path);
  if (!file.ok()) return Fail(file.status());  // names the path already
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) return Fail(Cat(model_path, ": ", Message(tok.status())));

  const std::vector<int32_t> ids = (*tok)->Encode(*text, opts);
  std::string out;
  if (ids_only) {
    out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += Cat(i ? ", " : "", ids[i]);
    out += "]\n";
  } else {
    for (int32_t id : ids) out += Cat(id, " -> '", Printable((*tok)->Piece(id, /*render_special=*/true)), "'\n");
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace tandem::cli
