// A Jinja interpreter for chat templates: parse a template once, render it many times against a context of
// values. It follows jinja2 3.1 as Hugging Face's apply_chat_template configures it (trim_blocks and
// lstrip_blocks on, loop controls, an immutable sandbox, json.dumps for `tojson`, raise_exception and
// strftime_now), so a template renders byte for byte as it does in Python.
//
// A template is untrusted input (it comes from a model file): every failure, of syntax or at run time, is an
// absl::Status whose message starts with the line and column ("12:5: ..."), and Limits bound the work, the
// nesting and the output of one render.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/jinja_value.h"

namespace tandem::jinja {

struct Limits {
  size_t max_output_bytes = 16u << 20;   // the rendered text, and any one string made on the way
  int64_t max_loop_iterations = 1'000'000;  // all for loops of one render together
  int max_depth = 400;                   // nested evaluation: statements, expressions and macro calls together
  int64_t max_steps = 50'000'000;        // nodes evaluated plus values visited (see Budget)
};

struct RenderOptions {
  Limits limits;
  // The time strftime_now() formats; unset, the local time now. Tests pin it.
  std::function<std::tm()> now;
};

// Template variables by name, in the order given.
using Context = std::vector<std::pair<std::string, Value>>;

struct Stmt;

class Template {
 public:
  // Syntax errors, unknown tags, filters and tests, and nesting past kMaxParseDepth fail here.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Errors: raise_exception(msg) gives "L:C: msg"; mistakes at run time (a missing variable used, a type
  // error) name the expression; running past a limit is ResourceExhausted.
  absl::StatusOr<std::string> Render(const Context& context, const RenderOptions& opts = {}) const;

 private:
  using Body = std::vector<std::unique_ptr<Stmt>>;
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;  // shared: a Template copies cheaply and renders from several threads
};

}  // namespace tandem::jinja
