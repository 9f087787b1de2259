// Python's two string formatting languages, "%s" % x and "{}".format(x), over Jinja values.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/jinja_builtins.h"
#include "core/jinja_text.h"
#include "core/status.h"

namespace tandem::jinja {
namespace {

// One format spec, [[fill]align][sign][#][0][width][,][.precision][type], applied as Python's format().
absl::StatusOr<std::string> FormatWithSpec(Renderer& r, const Value& v, std::string_view spec) {
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1]) && static_cast<unsigned char>(spec[0]) < 0x80) {
    fill = std::string(1, spec[0]);
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = '-';
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false;
  if (i < spec.size() && spec[i] == '#') {
    alt = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (align == 0) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && width < 100000) {
    width = width * 10 + (spec[i++] - '0');
  }
  bool group = false;
  if (i < spec.size() && spec[i] == ',') {
    group = true;
    ++i;
  }
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && precision < 1000) {
      precision = precision * 10 + (spec[i++] - '0');
    }
  }
  char type = 0;
  if (i < spec.size()) type = spec[i++];
  if (i != spec.size()) return InvalidArgument("Invalid format specifier '", spec, "'");

  std::string body;
  std::string prefix;  // the sign, which '=' alignment pads after
  if (v.is_string() || (!v.is_number() && type == 0)) {
    if (type != 0 && type != 's') return InvalidArgument("Unknown format code '", std::string(1, type), "' for str");
    TANDEM_ASSIGN_OR_RETURN(body, ToStr(v, r.budget()));
    if (precision >= 0) {
      const std::u32string cps = text::Decode(body);
      if (static_cast<size_t>(precision) < cps.size()) {
        body = text::Encode(std::u32string_view(cps).substr(0, precision));
      }
    }
    if (align == 0) align = '<';
  } else if (v.is_number()) {
    const bool is_int = v.kind() != Kind::kFloat;
    if (is_int && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' ||
                   type == 'c')) {
      const int64_t n = v.int_value();
      uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
      if (type == 'c') {
        text::AppendUtf8(body, static_cast<char32_t>(n));
      } else {
        const int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
        const char* digits = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
        do {
          body.insert(body.begin(), digits[mag % base]);
          mag /= base;
        } while (mag > 0);
        if (group && base == 10) {
          for (int k = static_cast<int>(body.size()) - 3; k > 0; k -= 3) body.insert(body.begin() + k, ',');
        }
        if (alt && base != 10) prefix = type == 'o' ? "0o" : type == 'b' ? "0b" : type == 'X' ? "0X" : "0x";
      }
      if (n < 0) {
        prefix.insert(0, "-");
      } else if (sign != '-') {
        prefix.insert(0, 1, sign);
      }
    } else {
      double f = v.float_value();
      if (type == 0 && precision < 0) {
        body = is_int ? std::to_string(v.int_value()) : FloatRepr(std::fabs(f));
        if (is_int && v.int_value() < 0) body.erase(0, 1);
      } else {
        char t = type == 0 ? 'g' : type;
        if (t == '%') f *= 100;
        if (t != 'f' && t != 'F' && t != 'e' && t != 'E' && t != 'g' && t != 'G' && t != '%') {
          return InvalidArgument("Unknown format code '", std::string(1, t), "' for ", v.TypeName());
        }
        char fmt[16];
        std::snprintf(fmt, sizeof(fmt), "%%%s.%d%c", alt ? "#" : "", precision < 0 ? 6 : std::min(precision, 340),
                      t == '%' ? 'f' : t);
        char buf[512];
        std::snprintf(buf, sizeof(buf), fmt, std::fabs(f));
        body = buf;
        if (t == '%') body += "%";
        if (group) {
          const size_t dot = std::min(body.find('.'), body.find_first_not_of("0123456789"));
          for (int k = static_cast<int>(dot) - 3; k > 0; k -= 3) body.insert(body.begin() + k, ',');
        }
      }
      // (Not assigned from a literal: GCC 12's -Wrestrict misfires on that here.)
      if (std::signbit(f) && !std::isnan(f)) {
        prefix = std::string(1, '-');
      } else if (sign != '-') {
        prefix = std::string(1, sign);
      }
    }
    if (align == 0) align = '>';
  } else {
    return InvalidArgument("unsupported format string passed to ", v.TypeName(), ".__format__");
  }
  const auto len = static_cast<int64_t>(text::Length(prefix) + text::Length(body));
  if (width <= len) return prefix + body;
  TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(static_cast<size_t>(width) * fill.size()));
  const int64_t pad = width - len;
  std::string pads;
  auto padding = [&](int64_t n) {
    std::string p;
    for (int64_t k = 0; k < n; ++k) p += fill;
    return p;
  };
  switch (align) {
    case '<': return prefix + body + padding(pad);
    case '>': return padding(pad) + prefix + body;
    case '=': return prefix + padding(pad) + body;
    default: return padding(pad / 2) + prefix + body + padding(pad - pad / 2);
  }
}

}  // namespace

absl::StatusOr<std::string> PercentFormat(Renderer& r, std::string_view fmt, const Value& args) {
  std::vector<Value> values;
  const Value* mapping = nullptr;
  if (args.kind() == Kind::kList && args.list().tuple) {
    values = args.list().items;
  } else if (args.kind() == Kind::kDict) {
    mapping = &args;
  } else {
    values.push_back(args);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) return InvalidArgument("incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string_view::npos || mapping == nullptr) return InvalidArgument("format requires a mapping");
      const Value* v = mapping->dict().Find(fmt.substr(i + 1, close - i - 1));
      if (v == nullptr) return InvalidArgument("KeyError: '", fmt.substr(i + 1, close - i - 1), "'");
      arg = v;
      i = close + 1;
      if (i >= fmt.size()) return InvalidArgument("incomplete format");
    }
    // flags, width, precision, conversion: mapped onto a format() spec.
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    std::string width;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width += fmt[i++];
    std::string precision;
    if (i < fmt.size() && fmt[i] == '.') {
      precision = ".";
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) precision += fmt[i++];
      if (precision == ".") precision = ".0";
    }
    if (i >= fmt.size()) return InvalidArgument("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (arg == nullptr) {
      if (mapping != nullptr) {
        arg = mapping;
      } else {
        if (next >= values.size()) return InvalidArgument("not enough arguments for format string");
        arg = &values[next++];
      }
    }
    // As a format() spec: printf pads on the left unless "-", with zeros for numbers under "0".
    const bool numeric = conv != 's' && conv != 'r' && conv != 'a' && conv != 'c';
    const bool zero = flags.find('0') != std::string::npos && numeric && flags.find('-') == std::string::npos;
    std::string spec = zero ? "" : flags.find('-') != std::string::npos ? "<" : ">";
    if (numeric && flags.find('+') != std::string::npos) {
      spec += "+";
    } else if (numeric && flags.find(' ') != std::string::npos) {
      spec += " ";
    }
    if (zero) spec += "0";
    spec += width;
    Value subject = *arg;
    switch (conv) {
      case 's': {
        TANDEM_ASSIGN_OR_RETURN(std::string s, ToStr(subject, r.budget()));
        subject = Value::String(std::move(s));
        spec += precision;
        break;
      }
      case 'r':
      case 'a': {
        TANDEM_ASSIGN_OR_RETURN(std::string s, ToRepr(subject, r.budget()));
        subject = Value::String(std::move(s));
        spec += precision;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
        if (!subject.is_number()) {
          return InvalidArgument("%d format: a real number is required, not ", subject.TypeName());
        }
        subject = Value::Int(subject.kind() == Kind::kFloat ? static_cast<int64_t>(subject.float_value())
                                                            : subject.int_value());
        spec += "d";
        break;
      case 'x':
      case 'X':
      case 'o':
        if (!AsInt(subject)) return InvalidArgument("%", std::string(1, conv), " format: an integer is required");
        if (flags.find('#') != std::string::npos) spec.insert(0, "#");
        spec += conv;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!subject.is_number()) return InvalidArgument("must be real number, not ", subject.TypeName());
        subject = Value::Float(subject.float_value());
        spec += (precision.empty() ? ".6" : precision) + std::string(1, conv);
        break;
      case 'c':
        spec += "c";
        break;
      default: return InvalidArgument("unsupported format character '", std::string(1, conv), "'");
    }
    const bool integer = conv == 'd' || conv == 'i' || conv == 'u' || conv == 'x' || conv == 'X' || conv == 'o';
    if (integer && !precision.empty()) {
      // printf's precision of an integer is its least number of digits (and the 0 flag is then ignored).
      std::string number_spec;
      if (flags.find('+') != std::string::npos) number_spec += "+";
      if (flags.find('#') != std::string::npos && conv != 'd' && conv != 'i' && conv != 'u') number_spec += "#";
      number_spec += (conv == 'i' || conv == 'u') ? 'd' : conv;
      TANDEM_ASSIGN_OR_RETURN(std::string number, FormatWithSpec(r, subject, number_spec));
      size_t digits_at = number.find_first_not_of("+- ");
      if (number.compare(digits_at, 1, "0") == 0 && number.size() > digits_at + 1 &&
          std::isalpha(static_cast<unsigned char>(number[digits_at + 1]))) {
        digits_at += 2;  // past "0x" / "0o"
      }
      const size_t min_digits = std::min<size_t>(std::stoul(precision.substr(1)), 4096);
      const size_t have = number.size() - digits_at;
      if (have < min_digits) number.insert(digits_at, min_digits - have, '0');
      subject = Value::String(std::move(number));
      spec = std::string(flags.find('-') != std::string::npos ? "<" : ">") + width;
    }
    TANDEM_ASSIGN_OR_RETURN(std::string piece, FormatWithSpec(r, subject, spec));
    out += piece;
    TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
  }
  if (mapping == nullptr && next < values.size()) {
    return InvalidArgument("not all arguments converted during string formatting");
  }
  return out;
}

absl::StatusOr<std::string> StrFormat(Renderer& r, std::string_view fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return InvalidArgument("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) return InvalidArgument("Single '{' encountered in format string");
    std::string_view field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) return InvalidArgument("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    if (field.find_first_of(".[") != std::string_view::npos) {
      return InvalidArgument("attribute and item lookups in format fields are not supported");
    }
    Value arg;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = auto_index++;
      if (!field.empty()) {
        index = 0;
        for (char d : field) index = index * 10 + (d - '0');
      }
      if (index >= args.args.size()) return InvalidArgument("Replacement index ", index, " out of range");
      arg = args.args[index];
    } else {
      bool found = false;
      for (const auto& [k, v] : args.kwargs) {
        if (k == field) {
          arg = v;
          found = true;
        }
      }
      if (!found) return InvalidArgument("KeyError: '", field, "'");
    }
    if (conversion == 'r' || conversion == 'a') {
      TANDEM_ASSIGN_OR_RETURN(std::string s, ToRepr(arg, r.budget()));
      arg = Value::String(std::move(s));
    } else if (conversion == 's') {
      TANDEM_ASSIGN_OR_RETURN(std::string s, ToStr(arg, r.budget()));
      arg = Value::String(std::move(s));
    } else if (conversion != 0) {
      return InvalidArgument("Unknown conversion specifier ", std::string(1, conversion));
    }
    TANDEM_ASSIGN_OR_RETURN(std::string piece, FormatWithSpec(r, arg, spec));
    out += piece;
    TANDEM_RETURN_IF_ERROR(r.budget().CheckSize(out.size()));
  }
  return out;
}

}  // namespace tandem::jinja
