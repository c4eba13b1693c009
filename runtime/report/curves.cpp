// The SVG of the loss and accuracy curves: two panels (loss, accuracy) with axes, ticks, a legend.
#include "runtime/report/curves.h"

#include "core/file.h"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace pt {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

std::string num(double v) {
  char b[32];
  if (v == std::round(v) && std::fabs(v) < 1e9) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// "Nice" tick step for a range (1, 2 or 5 times a power of ten).
double tick_step(double range, int target) {
  if (range <= 0) return 1;
  double raw = range / target, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

struct Panel {
  double x0, y0, w, h;       // pixel box of the plot area
  double xmin, xmax, ymin, ymax;
  double px(double x) const { return x0 + (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5) * w; }
  double py(double y) const { return y0 + h - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0.5) * h; }
};

void axes(std::ostream& o, const Panel& p, const std::string& ylabel) {
  o << "<rect x='" << p.x0 << "' y='" << p.y0 << "' width='" << p.w << "' height='" << p.h
    << "' fill='#fff' stroke='#ccc'/>\n";
  const double xs = tick_step(p.xmax - p.xmin, 6), ys = tick_step(p.ymax - p.ymin, 5);
  for (double x = std::ceil(p.xmin / xs) * xs; x <= p.xmax + 1e-9; x += xs)
    o << "<line x1='" << p.px(x) << "' y1='" << p.y0 << "' x2='" << p.px(x) << "' y2='" << p.y0 + p.h
      << "' stroke='#eee'/><text x='" << p.px(x) << "' y='" << p.y0 + p.h + 16
      << "' font-size='11' text-anchor='middle' fill='#555'>" << num(x) << "</text>\n";
  for (double y = std::ceil(p.ymin / ys) * ys; y <= p.ymax + 1e-9; y += ys)
    o << "<line x1='" << p.x0 << "' y1='" << p.py(y) << "' x2='" << p.x0 + p.w << "' y2='" << p.py(y)
      << "' stroke='#eee'/><text x='" << p.x0 - 6 << "' y='" << p.py(y) + 4
      << "' font-size='11' text-anchor='end' fill='#555'>" << num(y) << "</text>\n";
  o << "<text x='" << p.x0 + p.w / 2 << "' y='" << p.y0 + p.h + 34
    << "' font-size='12' text-anchor='middle' fill='#333'>step</text>\n";
  o << "<text x='" << p.x0 - 44 << "' y='" << p.y0 + p.h / 2 << "' font-size='12' fill='#333' "
    << "text-anchor='middle' transform='rotate(-90 " << p.x0 - 44 << " " << p.y0 + p.h / 2 << ")'>" << ylabel
    << "</text>\n";
}

void line(std::ostream& o, const Panel& p, const std::vector<CurvePoint>& pts, const char* colour,
          bool markers) {
  if (pts.empty()) return;
  o << "<polyline fill='none' stroke='" << colour << "' stroke-width='1.6' points='";
  for (const auto& q : pts) o << p.px(q.step) << "," << p.py(q.value) << " ";
  o << "'/>\n";
  if (markers)
    for (const auto& q : pts)
      o << "<circle cx='" << p.px(q.step) << "' cy='" << p.py(q.value) << "' r='3' fill='" << colour << "'><title>step "
        << num(q.step) << ": " << num(q.value) << "</title></circle>\n";
}

// The training loss (its points, then the pending steps' mean when there are any) smoothed over a
// window, so that the trend shows through mini-batch noise; about 50 points.
std::vector<CurvePoint> smooth(const Curves& c) {
  const size_t n = c.train_loss.size() + (c.pending_n > 0 ? 1 : 0);
  auto at = [&](size_t i) {
    return i < c.train_loss.size() ? c.train_loss[i]
                                   : CurvePoint{c.pending_step, c.pending_sum / static_cast<double>(c.pending_n)};
  };
  const size_t w = std::max<size_t>(1, n / 50);
  std::vector<CurvePoint> out;
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    s += at(i).value;
    if (i >= w) s -= at(i - w).value;
    if ((i + 1) % w == 0 || i + 1 == n) out.push_back({at(i).step, s / static_cast<double>(std::min(w, i + 1))});
  }
  return out;
}

void write_svg(std::ostream& o, const Curves& c) {
  const bool acc = !c.val_accuracy.empty();
  const double W = 900, H = acc ? 560 : 330;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H
    << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='#fafafa'/>\n";
  o << "<text x='20' y='26' font-size='16' font-weight='bold' fill='#222'>" << esc(c.title) << "</text>\n";
  const std::vector<CurvePoint> tl = smooth(c);
  double xmax = 1, ymin = 0, ymax = 1;
  bool any = false;
  for (const auto* v : {&tl, &c.val_loss})
    for (const auto& q : *v) {
      xmax = std::max(xmax, q.step);
      if (!any) ymin = ymax = q.value;
      ymin = std::min(ymin, q.value);
      ymax = std::max(ymax, q.value);
      any = true;
    }
  ymin = std::min(0.0, ymin);
  if (ymax <= ymin) ymax = ymin + 1;
  Panel lp{70, 50, W - 100, 230, 0, xmax, ymin, ymax * 1.05};
  axes(o, lp, "loss");
  line(o, lp, tl, "#4e79a7", false);
  line(o, lp, c.val_loss, "#e15759", true);
  o << "<g font-size='12'><rect x='" << W - 250 << "' y='58' width='12' height='3' fill='#4e79a7'/><text x='" << W - 232
    << "' y='63'>training loss (smoothed)</text>";
  if (!c.val_loss.empty())
    o << "<circle cx='" << W - 244 << "' cy='78' r='3' fill='#e15759'/><text x='" << W - 232 << "' y='82'>validation loss</text>";
  o << "</g>\n";
  if (acc) {
    Panel ap{70, 330, W - 100, 180, 0, xmax, 0, 1};
    axes(o, ap, "validation accuracy");
    line(o, ap, c.val_accuracy, "#59a14f", true);
    const CurvePoint& last = c.val_accuracy.back();
    char b[64];
    std::snprintf(b, sizeof b, "%.2f%%", 100 * last.value);
    o << "<text x='" << ap.px(last.step) - 6 << "' y='" << ap.py(last.value) - 8
      << "' font-size='12' text-anchor='end' fill='#59a14f'>" << b << "</text>\n";
  }
  o << "</svg>\n";
}

}  // namespace

std::string curves_svg(const Curves& c) {
  std::ostringstream o;
  write_svg(o, c);
  return o.str();
}

void Curves::add_train_loss(double step, double value) {
  pending_sum += value;
  pending_step = step;
  if (++pending_n < train_stride) return;
  train_loss.push_back({step, pending_sum / static_cast<double>(pending_n)});
  pending_sum = 0;
  pending_n = 0;
  if (train_loss.size() < kMaxTrainPoints) return;
  // Halve: each pair of points becomes one, at the later step, with their mean.
  const size_t half = train_loss.size() / 2;
  for (size_t i = 0; i < half; ++i)
    train_loss[i] = {train_loss[2 * i + 1].step, 0.5 * (train_loss[2 * i].value + train_loss[2 * i + 1].value)};
  train_loss.resize(half);
  train_stride *= 2;
}

void Curves::add_validation(double step, double loss, double accuracy) {
  if (val_last_extra) {  // replaced by the newer one
    if (!val_accuracy.empty() && val_accuracy.back().step == val_loss.back().step) val_accuracy.pop_back();
    val_loss.pop_back();
  }
  const bool on_stride = val_count % val_stride == 0;
  if (on_stride && val_loss.size() >= kMaxValPoints) {
    // Keep validations 0, 2s, 4s, ...: every other point.
    const size_t half = (val_loss.size() + 1) / 2;
    for (size_t i = 0; i < half; ++i) val_loss[i] = val_loss[2 * i];
    val_loss.resize(half);
    if (!val_accuracy.empty()) {
      for (size_t i = 0; i < half; ++i) val_accuracy[i] = val_accuracy[2 * i];
      val_accuracy.resize(half);
    }
    val_stride *= 2;
  }
  val_last_extra = val_count % val_stride != 0;
  ++val_count;
  val_loss.push_back({step, loss});
  if (accuracy >= 0) val_accuracy.push_back({step, accuracy});
}

Status write_curves_svg(const Curves& c, const std::string& path) {
  std::ostringstream out;
  write_svg(out, c);
  return write_file_atomic(path, out.str());
}

// The curves of the steps before a resume, from their metrics.csv rows
// (step,epoch,loss,lr,samples_per_s,val_loss,val_accuracy).
void curves_from_metrics_rows(const std::vector<std::string>& rows, Curves* c) {
  for (const std::string& row : rows) {
    std::vector<std::string> f;
    std::stringstream ss(row);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    if (f.size() < 3) continue;
    const double step = std::strtod(f[0].c_str(), nullptr);
    c->add_train_loss(step, std::strtod(f[2].c_str(), nullptr));
    if (f.size() > 5 && !f[5].empty())
      c->add_validation(step, std::strtod(f[5].c_str(), nullptr),
                        f.size() > 6 && !f[6].empty() ? std::strtod(f[6].c_str(), nullptr) : -1);
  }
}


}  // namespace pt
