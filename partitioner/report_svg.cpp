// The four SVG pictures of partition.html: stacked per-stage time bars, memory bars against each
// device's memory, the simulated pipeline timeline (a Gantt chart), and the stage assignment drawn
// over the strip of forward nodes. Every text that comes from the model is escaped.
#include <algorithm>
#include <cmath>

#include "partitioner/report_util.h"

namespace pt::report_detail {
namespace {

constexpr double kWidth = 1160;   // viewBox width of every picture
constexpr double kLabelW = 170;   // left column of stage labels

// A tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks up to `max`.
double nice_step(double max, int ticks) {
  if (max <= 0) return 1;
  const double raw = max / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (raw <= f * mag) return f * mag;
  return 10 * mag;
}

std::string svg_open(const char* id, double height, const std::string& aria) {
  return format("<svg id=\"%s\" viewBox=\"0 0 %.0f %.0f\" width=\"100%%\" "
                "role=\"img\" aria-label=\"%s\" font-family=\"system-ui, -apple-system, 'Segoe UI', Helvetica, "
                "Arial, sans-serif\" font-size=\"12\">\n",
                id, kWidth, height, html_escape(aria).c_str());
}

std::string rect(double x, double y, double w, double h, const char* fill, const std::string& title,
                 const char* extra = "") {
  std::string s = format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s>", x, y,
                         std::max(0.0, w), h, fill, extra);
  if (!title.empty()) s += "<title>" + html_escape(title) + "</title>";
  return s + "</rect>\n";
}

std::string text(double x, double y, const std::string& t, const char* attrs = "") {
  return format("<text x=\"%.1f\" y=\"%.1f\"%s>", x, y, attrs) + html_escape(t) + "</text>\n";
}

std::string legend(double x, double y, const std::vector<std::pair<const char*, std::string>>& items) {
  std::string s;
  for (const auto& [color, label] : items) {
    s += rect(x, y - 10, 12, 12, color, "", " rx=\"2\"");
    s += text(x + 17, y, label, " fill=\"#333\"");
    x += 30 + 7.0 * static_cast<double>(label.size());
  }
  return s;
}

// Vertical grid lines and labels of a time axis from x0 (value 0) at `scale` px per unit.
std::string axis(double x0, double x1, double y_top, double y_bottom, double max, double scale, const char* unit) {
  std::string s;
  const double step = nice_step(max, 8);
  for (double v = 0; v <= max * 1.0001; v += step) {
    const double x = x0 + v * scale;
    if (x > x1 + 0.5) break;
    s += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", x, y_top, x, y_bottom);
    const int digits = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
    std::string label = format("%.*f", digits, v);
    if (v == 0) label += std::string(" ") + unit;
    s += text(x, y_bottom + 14, label, " text-anchor=\"middle\" fill=\"#777\" font-size=\"11\"");
  }
  return s;
}

std::string stage_label(double y, int k, const StagePlan& s) {
  std::string out = rect(0, y - 11, 10, 22, stage_color(k), "", " rx=\"2\"");
  out += text(16, y - 1, format("stage %d", k), " font-weight=\"600\" fill=\"#222\"");
  out += text(16, y + 12, truncate(s.device.name, 24), " fill=\"#777\" font-size=\"10.5\"");
  return out;
}

}  // namespace

std::string svg_stage_times(const Plan& p) {
  const Summary sum = summarize(p);
  const int n = sum.stages;
  const double row = sum.measured ? 50 : 36, top = 34, x0 = kLabelW + 10, x1 = kWidth - 190;
  double max_ms = 0, total = 0;
  for (const StagePlan& s : p.stages) {
    max_ms = std::max(max_ms, s.stage_ms());
    total += s.stage_ms();
    if (is_measured(s)) max_ms = std::max(max_ms, s.measured_fwd_ms + s.measured_bwd_ms + s.update_ms + s.comm_ms);
  }
  const double scale = max_ms > 0 ? (x1 - x0) / max_ms : 0;
  const double bottom = top + n * row;
  std::string s = svg_open("svg-stage-times", bottom + 26, "predicted time per stage and mini-batch");
  std::vector<std::pair<const char*, std::string>> items = {
      {kFwdColor, "forward"}, {kBwdColor, "backward"}, {kUpdateColor, "update"}, {kCommColor, "communication"}};
  if (sum.measured) items.push_back({"#333333", "measured forward + backward"});
  s += legend(x0, 14, items);
  s += axis(x0, x1, top - 6, bottom, max_ms, scale, "ms");
  for (int k = 0; k < n; ++k) {
    const StagePlan& st = p.stages[k];
    const double y = top + k * row + 16;
    s += stage_label(y, k, st);
    double x = x0;
    const std::pair<double, std::pair<const char*, const char*>> parts[] = {
        {st.fwd_ms, {kFwdColor, "forward"}},
        {st.bwd_ms, {kBwdColor, "backward"}},
        {st.update_ms, {kUpdateColor, "update"}},
        {st.comm_ms, {kCommColor, "communication"}}};
    for (const auto& [ms, what] : parts) {
      if (ms <= 0) continue;
      s += rect(x, y - 11, ms * scale, 22, what.first, format("stage %d %s: %.3f ms", k, what.second, ms));
      x += ms * scale;
    }
    const bool worst = k == sum.bottleneck_stage && n > 1;
    s += text(x + 8, y + 4, format("%.3f ms", st.stage_ms()), worst ? " font-weight=\"700\" fill=\"#c0392b\"" : " fill=\"#333\"");
    if (worst) s += text(x + 80, y + 4, "bottleneck", " fill=\"#c0392b\" font-size=\"11\"");
    if (is_measured(st)) {
      const double meas = st.measured_fwd_ms + st.measured_bwd_ms;
      s += rect(x0, y + 14, meas * scale, 7, "#333333", format("stage %d measured forward + backward: %.3f ms", k, meas));
      s += text(x0 + meas * scale + 8, y + 21,
                format("measured %.3f ms, prediction %+.1f%%", meas, 100 * measured_error(st, p.device_share)),
                " fill=\"#555\" font-size=\"10.5\"");
    }
  }
  if (n > 1 && total > 0) {
    const double xm = x0 + total / n * scale;
    s += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"4 3\"/>\n", xm,
                top - 6, xm, bottom);
    s += text(xm + 4, top + 2, "mean", " fill=\"#555\" font-size=\"10.5\"");
  }
  return s + "</svg>\n";
}

std::string svg_memory(const Plan& p, const SimResult& sim) {
  const int n = static_cast<int>(p.stages.size());
  const double row = 36, x0 = kLabelW + 10, x1 = kWidth - 250;
  double max_used = 0, max_frac = 0;
  for (const StagePlan& s : p.stages) {
    const double used = static_cast<double>(s.memory_bytes);
    max_used = std::max(max_used, used);
    if (s.device.memory_bytes > 0) max_frac = std::max(max_frac, used / s.device.memory_bytes);
  }
  for (size_t k = 0; k < sim.peak_memory_bytes.size(); ++k)
    max_used = std::max(max_used, static_cast<double>(sim.peak_memory_bytes[k]));
  // Small stages on big devices would be invisible slivers: zoom the axis to the stages then,
  // and say so; the text keeps the fraction of the device.
  bool all_known = true;
  for (const StagePlan& s : p.stages) all_known = all_known && s.device.memory_bytes > 0;
  const bool zoom = !all_known || max_frac < 0.1;
  const double axis_cap = zoom ? nice_step(std::max(1.0, max_used) * 1.15, 1) : 0;
  const double top = zoom ? 50 : 34;
  const double bottom = top + n * row;
  std::string s = svg_open("svg-memory", bottom + (zoom ? 26 : 8), "predicted peak memory per stage against device memory");
  s += legend(x0, 14, {{"#4caf50", "under 70% of the device"}, {"#f0ad4e", "70-90%"}, {"#d9534f", "over 90%"},
                       {"#222222", "simulated peak"}});
  if (zoom) {
    s += text(x0, 34, format("axis zoomed to 0-%s: every stage is far below its device memory", human_bytes(axis_cap).c_str()),
              " fill=\"#777\" font-size=\"11\"");
    const double step = nice_step(axis_cap, 5);
    for (double v = 0; v <= axis_cap * 1.0001; v += step) {
      const double x = x0 + (x1 - x0) * v / axis_cap;
      s += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", x, top - 6, x, bottom);
      s += text(x, bottom + 14, v == 0 ? "0" : human_bytes(v), " text-anchor=\"middle\" fill=\"#777\" font-size=\"11\"");
    }
  }
  for (int k = 0; k < n; ++k) {
    const StagePlan& st = p.stages[k];
    const double y = top + k * row + 16;
    const double cap = st.device.memory_bytes;
    const double used = static_cast<double>(st.memory_bytes);
    const double frac = cap > 0 ? used / cap : 0;
    const double scale_to = zoom ? axis_cap : cap;
    const double w = (x1 - x0) * std::min(1.0, used / scale_to);
    s += stage_label(y, k, st);
    s += rect(x0, y - 11, x1 - x0, 22, zoom ? "#f4f5f7" : "#e9ecef",
              cap > 0 ? format("%s memory: %s", st.device.name.c_str(), human_bytes(cap).c_str()) : "", " rx=\"3\"");
    const char* color = frac < 0.7 ? "#4caf50" : frac < 0.9 ? "#f0ad4e" : "#d9534f";
    s += rect(x0, y - 11, std::max(w, used > 0 ? 2.0 : 0.0), 22, color,
              format("stage %d predicted peak: %s", k, human_bytes(used).c_str()), " rx=\"3\"");
    if (k < static_cast<int>(sim.peak_memory_bytes.size())) {
      const double peak = static_cast<double>(sim.peak_memory_bytes[k]);
      const double xs = x0 + (x1 - x0) * std::min(1.0, peak / scale_to);
      s += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" stroke-width=\"2\">", xs, y - 14,
                  xs, y + 14);
      s += "<title>" + html_escape(format("stage %d simulated peak: %s", k, human_bytes(peak).c_str())) + "</title></line>\n";
    }
    const std::string pct = frac >= 0.1 ? format("%.0f%%", 100 * frac) : format("%.2g%%", 100 * frac);
    s += text(x1 + 10, y + 4,
              cap > 0 ? format("%s of %s (%s)", human_bytes(used).c_str(), human_bytes(cap).c_str(), pct.c_str())
                      : human_bytes(used) + " (device memory unknown)",
              frac > 1 ? " fill=\"#c0392b\" font-weight=\"700\"" : " fill=\"#333\"");
  }
  return s + "</svg>\n";
}

std::string svg_timeline(const Plan& p, const SimResult& sim) {
  const int n = static_cast<int>(p.stages.size());
  // Interleaved stages and ZB-V: one row per device, its chunks' passes in it (chunk 1 and up paler).
  const int V = std::max(1, p.virtual_stages), rows = V > 1 && n % V == 0 ? n / V : n;
  auto row_of = [&](int stage) { return rows == n ? stage : virtual_device(stage, rows, p.schedule == Schedule::kZBV); };
  auto opacity = [&](int stage) { return rows != n && stage >= rows ? std::string(" fill-opacity=\"0.6\"") : std::string(); };
  const bool gpipe = synchronous(p.schedule, p.weights);
  int mini = 0;
  for (const SimEvent& e : sim.events) mini = std::max(mini, e.mini_batch + 1);
  const int show = std::min(mini, gpipe ? 2 : n + 4);
  double end = 0;
  for (const SimEvent& e : sim.events)
    if (e.mini_batch < show) end = std::max(end, e.end_ms);
  const double row = 30, link = 10, top = 34, x0 = kLabelW + 10, x1 = kWidth - 10;
  const double pitch = row + link;
  const double bottom = top + rows * pitch - link;
  const double scale = end > 0 ? (x1 - x0) / end : 0;
  std::string s = svg_open("svg-timeline", bottom + 26, "simulated pipeline timeline");
  std::vector<std::pair<const char*, std::string>> keys = {{kFwdColor, "forward"}, {kBwdColor, "backward"}};
  for (const SimEvent& e : sim.events)
    if (e.kind == SimEvent::kWeightGrad) {
      keys = {{kFwdColor, "forward"}, {kBwdColor, "backward I (input gradients)"}, {kWgradColor, "W (weight gradients)"}};
      break;
    }
  keys.push_back({kUpdateColor, "update"});
  keys.push_back({kCommColor, "transfer (activations / gradients)"});
  s += legend(x0, 14, keys);
  s += format("<clipPath id=\"tl-clip\"><rect x=\"%.1f\" y=\"0\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n", x0,
              x1 - x0, bottom + 4);
  s += axis(x0, x1, top - 4, bottom, end, scale, "ms");
  for (int k = 0; k < rows; ++k) {
    if (rows == n) {
      s += stage_label(top + k * pitch + row / 2, k, p.stages[k]);
      continue;
    }
    std::string which;  // the device's stages
    for (int v = 0; v < n; ++v)
      if (row_of(v) == k) which.append(which.empty() ? "stages " : ", ").append(std::to_string(v));
    const double y = top + k * pitch + row / 2;
    s += rect(0, y - 11, 10, 22, stage_color(k), "", " rx=\"2\"");
    s += text(16, y - 1, format("device %d", k), " font-weight=\"600\" fill=\"#222\"");
    s += text(16, y + 12, which, " fill=\"#777\" font-size=\"10.5\"");
  }
  s += "<g clip-path=\"url(#tl-clip)\">\n";
  for (const SimEvent& e : sim.events) {
    if (e.start_ms >= end || e.stage >= n) continue;
    const double x = x0 + e.start_ms * scale, w = (e.end_ms - e.start_ms) * scale;
    std::string id = std::to_string(e.mini_batch);
    if (gpipe) id += format(".%d", e.micro_batch);
    const double ys = top + row_of(e.stage) * pitch;
    switch (e.kind) {
      case SimEvent::kForward:
      case SimEvent::kBackward:
      case SimEvent::kInputGrad:
      case SimEvent::kWeightGrad: {
        const bool f = e.kind == SimEvent::kForward;
        const char* what = f ? "forward" : e.kind == SimEvent::kInputGrad ? "input-gradient part I"
                                       : e.kind == SimEvent::kWeightGrad  ? "weight-gradient part W"
                                                                          : "backward";
        s += rect(x, ys + 1, w, row - 2, f ? kFwdColor : e.kind == SimEvent::kWeightGrad ? kWgradColor : kBwdColor,
                  format("stage %d %s of mini-batch %d%s: %.3f-%.3f ms", e.stage, what,
                         e.mini_batch, gpipe ? format(", micro-batch %d", e.micro_batch).c_str() : "", e.start_ms,
                         e.end_ms),
                  (" stroke=\"#fff\" stroke-width=\"1\"" + opacity(e.stage)).c_str());
        // The full label when it fits, else the mini-batch number alone.
        const std::string mb = std::to_string(e.mini_batch);
        const std::string label = w >= 7.0 * static_cast<double>(id.size()) + 4 ? id
                                  : w >= 7.0 * static_cast<double>(mb.size()) + 3 ? mb
                                                                                 : "";
        if (!label.empty())
          s += text(x + w / 2, ys + row / 2 + 4, label, " text-anchor=\"middle\" fill=\"#fff\" font-size=\"11\" font-weight=\"600\"");
        break;
      }
      case SimEvent::kUpdate:
        s += rect(x, ys + 1, std::max(w, 1.5), row - 2, kUpdateColor, format("stage %d update after mini-batch %d", e.stage, e.mini_batch));
        break;
      case SimEvent::kSend:
      case SimEvent::kRecv: {
        const bool act = e.kind == SimEvent::kSend;
        const double yl = top + row_of(e.stage) * pitch + row + (act ? 1 : 5);
        s += rect(x, yl, std::max(w, 1.0), 4, act ? "#8a8a8a" : "#c4c4c4",
                  format("%s %d -> %d, mini-batch %d: %.3f ms", act ? "activations" : "gradients",
                         act ? e.stage : e.stage + 1, act ? e.stage + 1 : e.stage, e.mini_batch, e.end_ms - e.start_ms));
        break;
      }
      case SimEvent::kAllReduce:
        s += rect(x, ys + row - 5, std::max(w, 1.0), 4, "#5a5a8a",
                  format("stage %d all-reduce across replicas, mini-batch %d: %.3f ms", e.stage, e.mini_batch,
                         e.end_ms - e.start_ms));
        break;
      case SimEvent::kGap:  // idle, as the bubble counts it
        break;
    }
  }
  s += "</g>\n";
  return s + "</svg>\n";
}

std::string svg_layers(const Plan& p) {
  struct Cell { const Node* node; int stage; };
  std::vector<Cell> cells;
  for (size_t k = 0; k < p.stages.size(); ++k)
    for (const Node* n : p.stages[k].forward_nodes) cells.push_back({n, static_cast<int>(k)});
  const double x0 = 10, x1 = kWidth - 10, avail = x1 - x0;
  const size_t count = std::max<size_t>(1, cells.size());
  const double cell_w = std::clamp(std::floor(avail / static_cast<double>(count)), 5.0, 40.0);
  const size_t per_row = std::max<size_t>(1, static_cast<size_t>(avail / cell_w));
  const size_t rows = (cells.size() + per_row - 1) / per_row;
  const double cell_h = cell_w >= 14 ? 64 : 28, pitch = cell_h + 30, top = 52;
  const double height = top + std::max<size_t>(1, rows) * pitch;
  std::string s = svg_open("svg-layers", height, "stage assignment over the forward nodes");
  // The stage legend: colour, device and node count.
  double lx = x0;
  for (size_t k = 0; k < p.stages.size(); ++k) {
    const std::string label = format("stage %zu · %s · %zu nodes", k, truncate(p.stages[k].device.name, 20).c_str(),
                                     p.stages[k].forward_nodes.size());
    if (lx + 7.0 * static_cast<double>(label.size()) > x1) break;
    s += rect(lx, 8, 12, 12, stage_color(static_cast<int>(k)), "", " rx=\"2\" stroke=\"#888\" stroke-width=\"0.5\"");
    s += text(lx + 17, 18, label, " fill=\"#333\"");
    lx += 36 + 6.6 * static_cast<double>(label.size());
  }
  s += text(x0, 40, "forward nodes in execution order (hover for names); heavy lines mark the cuts",
            " fill=\"#777\" font-size=\"11\"");
  const size_t max_chars = static_cast<size_t>((cell_h - 8) / 6.2);
  for (size_t i = 0; i < cells.size(); ++i) {
    const size_t r = i / per_row, c = i % per_row;
    const double x = x0 + static_cast<double>(c) * cell_w, y = top + static_cast<double>(r) * pitch;
    const Cell& cell = cells[i];
    s += rect(x, y, cell_w - (cell_w >= 8 ? 1 : 0), cell_h, stage_color(cell.stage),
              format("%s (%s) - stage %d", cell.node->name.c_str(), cell.node->op_type.c_str(), cell.stage));
    if (cell_w >= 14) {
      const double tx = x + cell_w / 2 + 3.5, ty = y + cell_h - 5;
      s += format("<text transform=\"translate(%.1f %.1f) rotate(-90)\" fill=\"#222\" font-size=\"10\" pointer-events=\"none\">",
                  tx, ty) +
           html_escape(truncate(cell.node->op_type, max_chars)) + "</text>\n";
    }
    if (i > 0 && cells[i - 1].stage != cell.stage && c > 0)
      s += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" stroke-width=\"3\"/>\n", x - 0.5,
                  y - 4, x - 0.5, y + cell_h + 4);
  }
  // Brackets under each row: one per run of a stage within the row.
  for (size_t r = 0; r < rows; ++r) {
    const size_t a = r * per_row, b = std::min(cells.size(), a + per_row);
    size_t i = a;
    while (i < b) {
      size_t j = i;
      while (j < b && cells[j].stage == cells[i].stage) ++j;
      const double xa = x0 + static_cast<double>(i - a) * cell_w + 1, xb = x0 + static_cast<double>(j - a) * cell_w - 2;
      const double y = top + static_cast<double>(r) * pitch + cell_h + 6;
      s += format("<path d=\"M%.1f %.1f v5 H%.1f v-5\" fill=\"none\" stroke=\"#666\"/>\n", xa, y, xb);
      const std::string label = format("stage %d", cells[i].stage);
      const std::string shown = xb - xa > 7.0 * static_cast<double>(label.size()) ? label
                                : xb - xa > 12                                      ? std::to_string(cells[i].stage)
                                                                                    : "";
      if (!shown.empty()) s += text((xa + xb) / 2, y + 18, shown, " text-anchor=\"middle\" fill=\"#333\" font-size=\"11\"");
      i = j;
    }
  }
  return s + "</svg>\n";
}

}  // namespace pt::report_detail
