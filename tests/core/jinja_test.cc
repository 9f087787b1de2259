// The Jinja interpreter: jinja2's own output for 300 expressions and statements
// (tests/data/chat_templates/engine_cases.json, made by make_refs.py), then what jinja2 cannot tell us: our
// error messages and their positions, the limits on hostile templates, and the API.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "core/jinja.h"
#include "core/status.h"
#include "tests/testutil.h"

namespace tandem::jinja {
namespace {

using Json = nlohmann::ordered_json;

// 2024-07-26 10:30:00, a Friday: what make_refs.py pins strftime_now to.
std::tm PinnedNow() {
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 10;
  tm.tm_min = 30;
  const std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);
  return tm;
}

RenderOptions Pinned() {
  RenderOptions o;
  o.now = PinnedNow;
  return o;
}

Context ContextFromJson(const Json& j) {
  Context ctx;
  for (const auto& [key, value] : j.items()) {
    absl::StatusOr<Value> v = Value::FromJson(value);
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) ctx.emplace_back(key, *std::move(v));
  }
  return ctx;
}

absl::StatusOr<std::string> Render(std::string_view source, const Context& ctx = {},
                                   const RenderOptions& opts = Pinned()) {
  TANDEM_ASSIGN_OR_RETURN(Template t, Template::Parse(source));
  return t.Render(ctx, opts);
}

std::string ErrorOf(std::string_view source, const Context& ctx = {}, const RenderOptions& opts = Pinned()) {
  absl::StatusOr<std::string> r = Render(source, ctx, opts);
  if (r.ok()) return "no error, rendered: " + *r;
  return std::string(r.status().message());
}

TEST(JinjaEngine, MatchesJinja2OnEngineCases) {
  const Json refs = Json::parse(test::ReadFile(test::DataPath("chat_templates/engine_cases.json")));
  const Context ctx = ContextFromJson(refs["context"]);
  ASSERT_GE(refs["cases"].size(), 300u);
  int rendered = 0;
  int refused = 0;
  for (const Json& c : refs["cases"]) {
    const std::string src = c["template"].get<std::string>();
    SCOPED_TRACE(test::EscapeBytes(src));
    absl::StatusOr<std::string> out = Render(src, ctx);
    if (c.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(test::EscapeBytes(*out), test::EscapeBytes(c["expected"].get<std::string>()));
      ++rendered;
    } else {
      EXPECT_FALSE(out.ok()) << "jinja2 failed with " << c["error_kind"].get<std::string>() << ": "
                             << c["error"].get<std::string>() << "; we rendered " << test::EscapeBytes(*out);
      ++refused;
    }
  }
  EXPECT_GT(rendered, 200);
  EXPECT_GT(refused, 50);
}

// ---- errors name the line and column ----

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(ErrorOf("{{ 1 + }}"), "1:8: unexpected '}}'");
  EXPECT_EQ(ErrorOf("line one\n  {% if x %}\n  {% endfor %}"), "3:6: unknown tag 'endfor'");
  EXPECT_EQ(ErrorOf("a\n{% for x in y %}\nno end"), "2:4: the 'for' tag is never closed (expected 'endfor')");
  EXPECT_EQ(ErrorOf("{{ 'abc }}"), "1:4: unexpected character '''");
  EXPECT_EQ(ErrorOf("{{ (1 }}"), "1:7: unexpected '}', expected ')'");
  EXPECT_EQ(ErrorOf("x\n\n  {{ y|nosuch }}"), "3:8: no filter named 'nosuch'");
  EXPECT_EQ(ErrorOf("{{ y is nosuch }}"), "1:9: no test named 'nosuch'");
  EXPECT_EQ(ErrorOf("{% include 'x' %}"), "1:4: the 'include' tag is not supported in chat templates");
  EXPECT_EQ(ErrorOf("{% break %}"), "1:4: 'break' outside of a loop");
  EXPECT_EQ(ErrorOf("{# open"), "1:1: missing end of comment tag");
  EXPECT_EQ(ErrorOf("ok\n{% raw %}open"), "2:1: missing end of raw directive");
  EXPECT_EQ(ErrorOf("{{ 'é' $ }}"), "1:8: unexpected character '$'");  // columns count code points
}

TEST(JinjaErrors, RuntimeErrorsNameTheExpression) {
  const Context ctx = ContextFromJson(Json::parse(R"({"m": {"role": "user"}, "xs": [1, 2]})"));
  // Reading a missing key gives an undefined value; using it fails, at the use.
  EXPECT_EQ(ErrorOf("\n  {{ m.content.text }}", ctx), "2:15: 'dict object' has no attribute 'content'");
  EXPECT_EQ(ErrorOf("{{ nothing.here }}", ctx), "1:11: 'nothing' is undefined");
  EXPECT_EQ(ErrorOf("{{ m.role + 1 }}", ctx), "1:11: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(ErrorOf("{% for x in xs %}{{ x / 0 }}{% endfor %}", ctx), "1:23: division by zero");
  EXPECT_EQ(ErrorOf("{{ xs.append(3) }}", ctx), "1:13: access to attribute 'append' of 'list' object is unsafe");
  EXPECT_EQ(ErrorOf("{% for a, b in xs %}{% endfor %}", ctx), "1:4: 'int' object is not iterable");
  EXPECT_EQ(ErrorOf("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
            "1:42: macro 'm' takes not more than 1 argument(s)");
  // An error inside a macro names its place in the macro, not the call.
  EXPECT_EQ(ErrorOf("{% macro m() %}\n{{ 1 // 0 }}{% endmacro %}{{ m() }}"),
            "2:6: integer division or modulo by zero");
}

TEST(JinjaErrors, RaiseExceptionCarriesTheTemplatesMessage) {
  absl::StatusOr<std::string> r = Render("{% if true %}\n  {{ raise_exception('Roles must alternate!') }}{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "2:21: Roles must alternate!");
}

// ---- limits: hostile templates end in an error, not a crash or a hang ----

TEST(JinjaLimits, OutputSize) {
  RenderOptions o = Pinned();
  o.limits.max_output_bytes = 1000;
  absl::StatusOr<std::string> r = Render("{% for i in range(200) %}0123456789{% endfor %}", {}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Render("{% for i in range(99) %}0123456789{% endfor %}", {}, o).ok());
}

TEST(JinjaLimits, StringsThatDoubleStopAtTheSizeLimit) {
  RenderOptions o = Pinned();
  o.limits.max_output_bytes = 1 << 20;
  absl::StatusOr<std::string> r = Render(
      "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", {}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(ErrorOf("{{ 'x' * 100000000 }}", {}, o), "1:8: a string would exceed the limit of 1048576 bytes");
  // 1001 insertions of 2000 bytes.
  r = Render("{{ ('a' * 1000)|replace('', 'x' * 2000) }}", {}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
}

TEST(JinjaLimits, LoopIterations) {
  RenderOptions o = Pinned();
  o.limits.max_loop_iterations = 5000;
  EXPECT_TRUE(Render("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}", {}, o).ok());
  absl::StatusOr<std::string> r =
      Render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", {}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "1:29: loops ran more than 5000 iterations");
}

TEST(JinjaLimits, StepsBoundWorkWithoutLoops) {
  // Each level calls the next twice: 2^40 calls without a single long loop.
  RenderOptions o = Pinned();
  o.limits.max_steps = 100000;
  absl::StatusOr<std::string> r =
      Render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}", {}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  // Comparing a wide structure made of shared parts also spends steps.
  r = Render(
      "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(30) %}{% set ns.a = [ns.a, ns.a] %}"
      "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
      {}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JinjaLimits, RecursionDepth) {
  absl::StatusOr<std::string> r = Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("nests deeper than 400"), std::string_view::npos) << r.status();
  // Recursion that ends is fine.
  EXPECT_EQ(*Render("{% macro f(n) %}{{ n }}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(20) }}"),
            "20191817161514131211109876543210");
}

TEST(JinjaLimits, DeepSourceNestingIsASyntaxError) {
  const std::string deep_parens = std::string(100000, '(') + "1" + std::string(100000, ')');
  EXPECT_NE(ErrorOf("{{ " + deep_parens + " }}").find("the template nests more than 128 deep"), std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(ErrorOf(deep_ifs).find("nests more than 128 deep"), std::string::npos);
  EXPECT_NE(ErrorOf("{{ " + std::string(50000, '-') + "1 }}").find("nests more than"), std::string::npos);
  EXPECT_NE(ErrorOf("{{ " + std::string(50000, '[') + "1" + std::string(50000, ']') + " }}").find("nests more than"),
            std::string::npos);
}

TEST(JinjaLimits, DeepValuesAreRefused) {
  absl::StatusOr<std::string> r = Render(
      "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested more than 256 levels"), std::string_view::npos) << r.status();
  // A namespace that holds itself prints to the depth limit, then fails.
  r = Render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  ASSERT_FALSE(r.ok());
  Json deep = Json::array();
  for (int i = 0; i < 1000; ++i) deep = Json::array({deep});
  EXPECT_FALSE(Value::FromJson(deep).ok());
}

// ---- the API ----

TEST(JinjaTemplate, ParsesOnceRendersMany) {
  absl::StatusOr<Template> t = Template::Parse("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  ASSERT_TRUE(t.ok()) << t.status();
  const Template copy = *t;  // copies share the parsed template
  EXPECT_EQ(*t->Render(ContextFromJson(Json::parse(R"({"messages": [{"role": "user", "content": "a"}]})"))),
            "user:a;");
  EXPECT_EQ(*copy.Render(ContextFromJson(Json::parse(R"({"messages": [{"role": "x", "content": 1.0}]})"))),
            "x:1.0;");
  EXPECT_EQ(*t->Render({}), "");
}

TEST(JinjaTemplate, JsonKeepsKeyOrderAndTypes) {
  const Context ctx = ContextFromJson(Json::parse(R"({"v": {"z": 1, "a": [true, null, 2.5, "é"], "m": {}}})"));
  EXPECT_EQ(*Render("{{ v|tojson }}", ctx), R"({"z": 1, "a": [true, null, 2.5, "é"], "m": {}})");
  EXPECT_EQ(*Render("{{ v }}", ctx), "{'z': 1, 'a': [True, None, 2.5, 'é'], 'm': {}}");
  EXPECT_EQ(*Render("{{ v.keys()|list }}", ctx), "['z', 'a', 'm']");
}

TEST(JinjaTemplate, TemplateVariablesShadowTheContextAndGlobals) {
  const Context ctx = ContextFromJson(Json::parse(R"({"messages": [1, 2, 3], "range": "mine"})"));
  EXPECT_EQ(*Render("{% set messages = messages[1:] %}{{ messages }}{{ range }}", ctx), "[2, 3]mine");
}

TEST(JinjaTemplate, StrftimeNowUsesTheInjectedClock) {
  EXPECT_EQ(*Render("{{ strftime_now('%d %b %Y, %A %H:%M') }}"), "26 Jul 2024, Friday 10:30");
  RenderOptions o;
  o.now = [] {
    std::tm tm{};
    tm.tm_year = 99;
    tm.tm_mon = 11;
    tm.tm_mday = 31;
    return tm;
  };
  EXPECT_EQ(*Render("{{ strftime_now('%Y-%m-%d') }}", {}, o), "1999-12-31");
  // Unpinned, it is today.
  std::tm today{};
  const std::time_t now = std::time(nullptr);
  localtime_r(&now, &today);
  EXPECT_EQ(*Render("{{ strftime_now('%Y') }}", {}, RenderOptions{}), std::to_string(1900 + today.tm_year));
}

TEST(JinjaTemplate, AnyBytesComeBackOut) {
  // Bytes that are not UTF-8 pass through text, slicing and case changes unchanged.
  const std::string bad = "a\xff\xfe" "b";
  Context ctx;
  ctx.emplace_back("s", Value::String(bad));
  EXPECT_EQ(*Render("{{ s }}|{{ s[1:3] }}|{{ s|length }}|{{ s|upper }}", ctx), bad + "|\xff\xfe|4|A\xff\xfe" "B");
}

// ---- Python's printing ----

TEST(JinjaValue, FloatReprIsPythons) {
  EXPECT_EQ(FloatRepr(1.0), "1.0");
  EXPECT_EQ(FloatRepr(0.1), "0.1");
  EXPECT_EQ(FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(FloatRepr(1e-4), "0.0001");
  EXPECT_EQ(FloatRepr(1e-5), "1e-05");
  EXPECT_EQ(FloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(FloatRepr(-2.5e300), "-2.5e+300");
  EXPECT_EQ(FloatRepr(-0.0), "-0.0");
  EXPECT_EQ(FloatRepr(123456.789), "123456.789");
  EXPECT_EQ(FloatRepr(1.0 / 0.0), "inf");
  EXPECT_EQ(FloatRepr(-1.0 / 0.0), "-inf");
}

TEST(JinjaValue, StringReprIsPythons) {
  EXPECT_EQ(StringRepr("plain"), "'plain'");
  EXPECT_EQ(StringRepr("it's"), "\"it's\"");
  EXPECT_EQ(StringRepr("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(StringRepr("tab\tnl\n\\ \x01 \x7f"), "'tab\\tnl\\n\\\\ \\x01 \\x7f'");
  EXPECT_EQ(StringRepr("é 你好 🦙"), "'é 你好 🦙'");
  EXPECT_EQ(StringRepr("\u00a0\u2028"), "'\\xa0\\u2028'");
}

TEST(JinjaValue, PythonEquality) {
  Budget b;
  EXPECT_TRUE(*Equal(Value::Int(1), Value::Float(1.0), b));
  EXPECT_TRUE(*Equal(Value::Bool(true), Value::Int(1), b));
  EXPECT_FALSE(*Equal(Value::String("1"), Value::Int(1), b));
  EXPECT_FALSE(*Equal(*Value::List({Value::Int(1)}, true), *Value::List({Value::Int(1)}), b));  // (1,) != [1]
  EXPECT_TRUE(*Equal(Value(), Value(), b));
  EXPECT_FALSE(*Equal(Value(), Value::None(), b));
  EXPECT_FALSE(Less(Value::Int(1), Value::String("a"), b).ok());
}

}  // namespace
}  // namespace tandem::jinja
