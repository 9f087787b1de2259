#include "tools/sweep_svg.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/strip.h"
#include "core/status.h"
#include "graph/placement.h"

namespace tandem::cli {
namespace {

constexpr double kWidth = 960, kLeft = 90, kRight = 30, kTop = 136, kPanelHeight = 170, kPanelGap = 46;
constexpr const char* kAutoColor = "#d62728";

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string Num(double v) { return absl::StrFormat("%.1f", v); }

// Tick values 0, step, 2*step, ... covering [0, hi], with step 1, 2 or 5 times a power of ten.
std::vector<double> NiceTicks(double hi, int max_ticks = 5) {
  if (!(hi > 0)) hi = 1;
  const double raw = hi / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (int i = 0; i * step < hi + step * 0.999; ++i) ticks.push_back(i * step);
  return ticks;
}

// Powers of ten covering [lo, hi] (both > 0), with 2 and 5 between them when the range is narrow.
std::vector<double> LogTicks(double lo, double hi) {
  const int a = static_cast<int>(std::floor(std::log10(lo))), b = static_cast<int>(std::ceil(std::log10(hi)));
  std::vector<double> ticks;
  for (int e = a; e <= b; ++e) {
    for (double m : b - a <= 2 ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
      const double t = m * std::pow(10.0, e);
      if (t >= std::pow(10.0, a) && t <= std::pow(10.0, b)) ticks.push_back(t);
    }
  }
  return ticks;
}

std::string TickLabel(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e7) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.3g", v);
}

struct Series {
  std::string id;      // "decode-measured"
  bool predicted = false;
  std::function<double(const SweepResult&)> value;
};

struct Panel {
  std::string title;
  std::string color;
  std::vector<Series> series;  // measured first, then predicted
  double budget = 0;           // a dotted horizontal line (VRAM budget), in the panel's unit; 0: none
};

// Bytes in the unit that suits the largest value: GiB, MiB or KiB.
struct ByteUnit {
  const char* name;
  double bytes;
};
ByteUnit UnitFor(double max_bytes) {
  if (max_bytes >= 1024.0 * 1024 * 1024) return {"GiB", 1024.0 * 1024 * 1024};
  if (max_bytes >= 1024.0 * 1024) return {"MiB", 1024.0 * 1024};
  return {"KiB", 1024.0};
}

class Writer {
 public:
  explicit Writer(const SweepReport& r) : r_(r) {
    x_max_ = std::max(1, r.n_layer);
    plot_width_ = kWidth - kLeft - kRight;
  }
  double X(double x) const { return kLeft + plot_width_ * x / x_max_; }
  std::string& out() { return out_; }

  void DrawPanel(const Panel& p, int index, bool x_labels) {
    const double top = kTop + index * (kPanelHeight + kPanelGap), bottom = top + kPanelHeight;
    double hi = p.budget, lo = std::numeric_limits<double>::infinity();
    for (const Series& s : p.series) {
      for (const SweepResult& res : r_.results) {
        if (!res.ok) continue;
        hi = std::max(hi, s.value(res));
        if (s.value(res) > 0) lo = std::min(lo, s.value(res));
      }
    }
    // A log scale when the values span more than 10x (a prediction far from the measurement), so the measured
    // curve keeps its shape instead of lying flat along the bottom.
    const bool log = std::isfinite(lo) && hi / lo > 10;
    const std::vector<double> ticks = log ? LogTicks(lo, hi) : NiceTicks(hi * 1.05);
    const double y_max = ticks.back() > 0 ? ticks.back() : 1;
    const double log_lo = log ? std::log10(ticks.front()) : 0, log_hi = log ? std::log10(ticks.back()) : 1;
    auto Y = [&](double v) {
      if (!log) return bottom - kPanelHeight * v / y_max;
      if (v <= 0) return bottom;
      return bottom - kPanelHeight * (std::log10(v) - log_lo) / (log_hi - log_lo);
    };
    out_ += Cat("<g id=\"panel-", index, "\">\n");
    out_ += Cat("<text x=\"", Num(kLeft), "\" y=\"", Num(top - 8), "\" class=\"panel-title\">", Escape(p.title),
                log ? " (log scale)" : "", "</text>\n");
    for (double t : ticks) {
      out_ += Cat("<line x1=\"", Num(kLeft), "\" y1=\"", Num(Y(t)), "\" x2=\"", Num(kLeft + plot_width_), "\" y2=\"",
                  Num(Y(t)), "\" class=\"grid\"/>\n");
      out_ += Cat("<text x=\"", Num(kLeft - 6), "\" y=\"", Num(Y(t) + 4), "\" text-anchor=\"end\">", TickLabel(t),
                  "</text>\n");
    }
    for (const SweepResult& res : r_.results) {
      if (res.point.is_auto) continue;
      out_ += Cat("<line x1=\"", Num(X(res.x)), "\" y1=\"", Num(bottom), "\" x2=\"", Num(X(res.x)), "\" y2=\"",
                  Num(bottom + 5), "\" class=\"axis\"/>\n");
      if (x_labels) {
        out_ += Cat("<text x=\"", Num(X(res.x)), "\" y=\"", Num(bottom + 19), "\" text-anchor=\"middle\">",
                    res.point.count, "</text>\n");
      }
    }
    out_ += Cat("<rect x=\"", Num(kLeft), "\" y=\"", Num(top), "\" width=\"", Num(plot_width_), "\" height=\"",
                Num(kPanelHeight), "\" class=\"frame\"/>\n");
    if (p.budget > 0) {
      out_ += Cat("<g id=\"vram-budget\"><line x1=\"", Num(kLeft), "\" y1=\"", Num(Y(p.budget)), "\" x2=\"",
                  Num(kLeft + plot_width_), "\" y2=\"", Num(Y(p.budget)), "\" class=\"budget\"/>");
      out_ += Cat("<text x=\"", Num(kLeft + plot_width_ - 4), "\" y=\"", Num(Y(p.budget) - 4),
                  "\" text-anchor=\"end\" class=\"note\">VRAM budget</text></g>\n");
    }
    // Predicted first, so that where the two agree the measured line is the one on top.
    for (auto s = p.series.rbegin(); s != p.series.rend(); ++s) DrawSeries(*s, p.color, Y);
    DrawAuto(p, Y);
    DrawInfeasible(bottom);
    out_ += "</g>\n";
  }

  void DrawKnee(int n_panels) {
    if (!r_.knee) return;
    const SweepResult& k = r_.results[*r_.knee];
    const double bottom = kTop + n_panels * kPanelHeight + (n_panels - 1) * kPanelGap;
    out_ += Cat("<g id=\"knee\"><line x1=\"", Num(X(k.x)), "\" y1=\"", Num(kTop), "\" x2=\"", Num(X(k.x)), "\" y2=\"",
                Num(bottom), "\" class=\"knee\"/>");
    const bool near_right = X(k.x) > kLeft + plot_width_ - 140;  // the label goes left of the line there
    out_ += Cat("<text x=\"", Num(X(k.x) + (near_right ? -5 : 5)), "\" y=\"", Num(kTop + 14), "\" text-anchor=\"",
                near_right ? "end" : "start", "\" class=\"note\">knee: ", Escape(k.point.label), "</text></g>\n");
  }

 private:
  template <typename YFn>
  void DrawSeries(const Series& s, const std::string& color, YFn Y) {
    out_ += Cat("<g id=\"", s.id, "\" class=\"series\">");
    std::string pts;
    std::string dots;
    for (const SweepResult& res : r_.results) {
      if (!res.ok || res.point.is_auto) continue;
      const double v = s.value(res);
      pts += Cat(Num(X(res.x)), ",", Num(Y(v)), " ");
      dots += Cat("<circle cx=\"", Num(X(res.x)), "\" cy=\"", Num(Y(v)), "\" r=\"3.5\" fill=\"",
                  s.predicted ? "white" : color, "\" stroke=\"", color, "\"><title>", Escape(res.point.label), ": ",
                  TickLabel(std::round(v * 100) / 100), "</title></circle>");
    }
    out_ += Cat("<polyline points=\"", pts, "\" fill=\"none\" stroke=\"", color, "\" stroke-width=\"2\"",
                s.predicted ? " stroke-dasharray=\"6 4\"" : "", "/>", dots, "</g>\n");
  }

  // The auto plan: a filled red diamond at its measured value, a hollow one at its predicted value.
  template <typename YFn>
  void DrawAuto(const Panel& p, YFn Y) {
    if (!r_.auto_index || !r_.results[*r_.auto_index].ok) return;
    const SweepResult& a = r_.results[*r_.auto_index];
    out_ += "<g class=\"auto-plan\">";
    for (auto it = p.series.rbegin(); it != p.series.rend(); ++it) {  // measured on top, as for the lines
      const Series& s = *it;
      const double cx = X(a.x), cy = Y(s.value(a));
      out_ += Cat("<path d=\"M", Num(cx), " ", Num(cy - 7), " L", Num(cx + 7), " ", Num(cy), " L", Num(cx), " ",
                  Num(cy + 7), " L", Num(cx - 7), " ", Num(cy), " Z\" fill=\"", s.predicted ? "white" : kAutoColor,
                  "\" stroke=\"", kAutoColor, "\" stroke-width=\"1.5\"><title>auto plan, ",
                  s.predicted ? "predicted" : "measured", ": ", TickLabel(std::round(s.value(a) * 100) / 100),
                  "</title></path>");
      if (!s.predicted) {
        out_ += Cat("<text x=\"", Num(cx + 10), "\" y=\"", Num(cy - 8), "\" class=\"note\" fill=\"", kAutoColor,
                    "\">auto</text>");
      }
    }
    out_ += "</g>\n";
  }

  void DrawInfeasible(double bottom) {
    for (const SweepResult& res : r_.results) {
      if (res.ok || res.point.is_auto) continue;
      const double cx = X(res.x), cy = bottom - 10;
      out_ += Cat("<g class=\"infeasible\"><path d=\"M", Num(cx - 5), " ", Num(cy - 5), " L", Num(cx + 5), " ",
                  Num(cy + 5), " M", Num(cx - 5), " ", Num(cy + 5), " L", Num(cx + 5), " ", Num(cy - 5),
                  "\" stroke=\"#777\" stroke-width=\"2\"/><title>", Escape(res.point.label), ": ", Escape(res.note),
                  "</title></g>\n");
    }
  }

  const SweepReport& r_;
  double x_max_ = 1, plot_width_ = 0;
  std::string out_;
};

void DrawLegend(std::string& out, bool any_infeasible) {
  const double y = 100;
  double x = kLeft;
  out += "<g id=\"legend\">";
  // Each item: its symbol in 24 px, then its label; the next starts after the label (about 6.2 px a character).
  auto item = [&](const std::string& symbol, const std::string& label) {
    out += symbol + Cat("<text x=\"", Num(x + 30), "\" y=\"", Num(y + 4), "\">", label, "</text>");
    x += 30 + 6.2 * label.size() + 16;
  };
  item(Cat("<line x1=\"", Num(x), "\" y1=\"", Num(y), "\" x2=\"", Num(x + 24), "\" y2=\"", Num(y),
           "\" stroke=\"#333\" stroke-width=\"2\"/><circle cx=\"", Num(x + 12), "\" cy=\"", Num(y),
           "\" r=\"3.5\" fill=\"#333\"/>"),
       "measured");
  item(Cat("<line x1=\"", Num(x), "\" y1=\"", Num(y), "\" x2=\"", Num(x + 24), "\" y2=\"", Num(y),
           "\" stroke=\"#333\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/><circle cx=\"", Num(x + 12), "\" cy=\"",
           Num(y), "\" r=\"3.5\" fill=\"white\" stroke=\"#333\"/>"),
       "predicted by the planner");
  item(Cat("<path d=\"M", Num(x + 12), " ", Num(y - 7), " L", Num(x + 19), " ", Num(y), " L", Num(x + 12), " ",
           Num(y + 7), " L", Num(x + 5), " ", Num(y), " Z\" fill=\"", kAutoColor, "\"/>"),
       "auto plan");
  item(Cat("<line x1=\"", Num(x + 12), "\" y1=\"", Num(y - 8), "\" x2=\"", Num(x + 12), "\" y2=\"", Num(y + 8),
           "\" class=\"knee\"/>"),
       "knee: fewest layers within 5% of best decode");
  if (any_infeasible) {
    item(Cat("<path d=\"M", Num(x + 7), " ", Num(y - 5), " L", Num(x + 17), " ", Num(y + 5), " M", Num(x + 7), " ",
             Num(y + 5), " L", Num(x + 17), " ", Num(y - 5), "\" stroke=\"#777\" stroke-width=\"2\"/>"),
         "did not fit");
  }
  out += "</g>\n";
}

}  // namespace

std::string SweepSvg(const SweepReport& r) {
  double max_vram = 0, max_pcie = 0, budget_bytes = 0;
  for (const SweepResult& res : r.results) {
    max_vram = std::max({max_vram, static_cast<double>(res.peak_vram_bytes),
                         static_cast<double>(res.predicted_vram_bytes)});
    max_pcie = std::max({max_pcie, static_cast<double>(res.pcie_bytes_per_decode_token),
                         static_cast<double>(res.predicted_pcie_bytes_per_decode_token)});
    budget_bytes = std::max(budget_bytes, static_cast<double>(res.vram_budget_bytes));
  }
  // The budget line only when the use comes near it; a 12 GiB line over a few MiB would flatten the curves.
  const bool budget_on_scale = budget_bytes > 0 && budget_bytes <= 1.5 * max_vram;
  const ByteUnit vram = UnitFor(budget_on_scale ? budget_bytes : max_vram), pcie = UnitFor(max_pcie);
  const double budget = budget_on_scale ? budget_bytes / vram.bytes : 0;
  const std::string budget_note =
      budget_bytes > 0 && !budget_on_scale ? Cat("; the budget, ", FormatBytes(budget_bytes), ", is far above") : "";
  const std::vector<Panel> panels = {
      {"decode tokens/s", "#1f77b4",
       {{"decode-measured", false, [](const SweepResult& s) { return s.decode_tps; }},
        {"decode-predicted", true, [](const SweepResult& s) { return s.predicted_decode_tps; }}}},
      {"prefill tokens/s", "#ff7f0e",
       {{"prefill-measured", false, [](const SweepResult& s) { return s.prefill_tps; }},
        {"prefill-predicted", true, [](const SweepResult& s) { return s.predicted_prefill_tps; }}}},
      {Cat("VRAM (", vram.name, "): allocator peak, and the plan's account", budget_note), "#2ca02c",
       {{"vram-measured", false, [=](const SweepResult& s) { return s.peak_vram_bytes / vram.bytes; }},
        {"vram-predicted", true, [=](const SweepResult& s) { return s.predicted_vram_bytes / vram.bytes; }}},
       budget},
      {Cat("PCIe ", pcie.name, " per decoded token"), "#9467bd",
       {{"pcie-measured", false, [=](const SweepResult& s) { return s.pcie_bytes_per_decode_token / pcie.bytes; }},
        {"pcie-predicted", true,
         [=](const SweepResult& s) { return s.predicted_pcie_bytes_per_decode_token / pcie.bytes; }}}},
  };
  const int n = static_cast<int>(panels.size());
  const double height = kTop + n * kPanelHeight + (n - 1) * kPanelGap + 62;

  Writer w(r);
  std::string& out = w.out();
  out += Cat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"",
             Num(kWidth), "\" height=\"", Num(height), "\" viewBox=\"0 0 ", Num(kWidth), " ", Num(height), "\">\n");
  out += "<style>text{font-family:sans-serif;font-size:12px;fill:#222}.title{font-size:17px;font-weight:bold}"
         ".panel-title{font-size:13px;font-weight:bold}.note{font-size:11px}.grid{stroke:#e4e4e4}"
         ".axis{stroke:#444}.frame{fill:none;stroke:#444}.budget{stroke:#444;stroke-dasharray:2 3}"
         ".knee{stroke:#555;stroke-width:1.5;stroke-dasharray:8 4}</style>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += Cat("<text x=\"", Num(kLeft), "\" y=\"30\" class=\"title\" id=\"title\">tandem sweep: ", Escape(r.model),
             " on ", Escape(r.device), "</text>\n");
  out += Cat("<text x=\"", Num(kLeft), "\" y=\"52\">", r.n_layer, " layers; prefill ", r.n_prompt,
             " tokens, decode ", r.n_gen, " tokens; ", r.reps, " repetitions, ", r.n_threads,
             r.n_threads == 1 ? " CPU thread" : " CPU threads", "; mean of the repetitions</text>\n");
  if (r.auto_index) {
    out += Cat("<text x=\"", Num(kLeft), "\" y=\"70\" class=\"note\" id=\"auto-why\">auto plan: ",
               Escape(std::string(absl::StripPrefix(r.results[*r.auto_index].plan_why, "auto: "))), "</text>\n");
  }
  bool any_infeasible = false;
  for (const SweepResult& res : r.results) any_infeasible = any_infeasible || (!res.ok && !res.point.is_auto);
  DrawLegend(out, any_infeasible);
  for (int i = 0; i < n; ++i) w.DrawPanel(panels[i], i, i == n - 1);
  w.DrawKnee(n);
  out += Cat("<text x=\"", Num(kLeft + (kWidth - kLeft - kRight) / 2), "\" y=\"", Num(height - 14),
             "\" text-anchor=\"middle\" id=\"x-label\">", Escape(SweepAxisTitle(r.axis)), "</text>\n");
  out += "</svg>\n";
  return out;
}

}  // namespace tandem::cli
