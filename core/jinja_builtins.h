// Helpers shared by the built-in filters (jinja_filters.cc), methods (jinja_methods.cc), tests and globals
// (jinja_builtins.cc). Internal to the Jinja interpreter.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/jinja_eval.h"

namespace tandem::jinja {

// Binds positional then keyword arguments to `params` as Python does; a parameter not passed is Undefined.
absl::StatusOr<std::vector<Value>> Bind(std::string_view fn, CallArgs& args,
                                        std::initializer_list<std::string_view> params);

// An integer argument (a bool counts); nullopt for anything else.
std::optional<int64_t> AsInt(const Value& v);
// A string argument, or an error naming what `fn` wanted.
absl::StatusOr<std::string> StringArg(std::string_view fn, const Value& v);

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0, each as getitem; `fallback` replaces an
// undefined result when it is defined itself.
absl::StatusOr<Value> GetPath(Renderer& r, const Value& item, const Value& path, const Value& fallback);

// Python's % formatting ("%s is %d" % (a, b)) and str.format ("{} is {:>5}".format(a, b)).
absl::StatusOr<std::string> PercentFormat(Renderer& r, std::string_view fmt, const Value& args);
absl::StatusOr<std::string> StrFormat(Renderer& r, std::string_view fmt, CallArgs& args);

// The filters' and methods' tables.
FilterFn FindFilterIn(std::string_view name);
MethodFn FindStringMethod(std::string_view name);
MethodFn FindListMethod(std::string_view name);
MethodFn FindDictMethod(std::string_view name);

}  // namespace tandem::jinja
