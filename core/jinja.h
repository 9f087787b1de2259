// A Jinja interpreter for chat templates: parse a template once, render it many times against a context of
// values. It follows jinja2 3.1 as Hugging Face's apply_chat_template configures it (trim_blocks and
// lstrip_blocks on, loop controls, an immutable sandbox, json.dumps for `tojson`, raise_exception and
// strftime_now), so a template renders byte for byte as it does in Python.
//
// A template is untrusted input (it comes from a model file): every failure, of syntax or at run time, is an
// absl::Status whose message starts with the line and column ("12:5: ..."), and Limits bound the work, the
// nesting and the output of one render.
//
// Supported: {{ }}, {% %}, {# #}, - and + whitespace control; if/elif/else, for (loop.*, else, "if" filter,
// unpacking, break/continue), set (also block set with filters, and namespace attributes), macro with
// defaults, varargs, kwargs and caller, call blocks, filter blocks, with, raw, Hugging Face's generation;
// Python's operators, comparisons (chained), in, ~, inline if, subscripts and slices; the filters and tests of
// jinja2 3.1 that chat templates use (jinja_filters.cc, jinja_builtins.cc), the methods of str, list and
// dict (jinja_methods.cc), range, dict, namespace, joiner, raise_exception and strftime_now.
// Not supported: extends, block, include, import, recursive loops, *args and **kwargs in calls, integers past
// 64 bits (an error), and Python's lazy generators (map, select ... give lists that print as
// "<generator object>"). Letter case changes cover Latin, Greek and Cyrillic only.
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
