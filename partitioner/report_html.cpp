// partition.html: one self-contained page (inline CSS and SVG, no scripts, nothing fetched) with
// the headline numbers, the four pictures of report_svg.cpp and the stage tables.
#include <algorithm>
#include <cmath>

#include "partitioner/layout.h"
#include "partitioner/report.h"
#include "partitioner/report_util.h"

namespace pt {

using namespace report_detail;

namespace {

constexpr const char* kCss = R"(
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f3f4f7; color: #1f2328;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 24px 40px; }
h1 { font-size: 24px; margin: 0 0 4px; font-weight: 650; }
h1 code { font-size: 22px; background: none; padding: 0; }
h2 { font-size: 16px; margin: 0 0 4px; font-weight: 650; }
.sub { color: #59636e; margin: 0 0 20px; }
.note { color: #6b7480; margin: 0 0 12px; font-size: 13px; }
.kpis { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; margin-bottom: 18px; }
.kpi { background: #fff; border-radius: 10px; padding: 14px 16px; box-shadow: 0 1px 2px rgba(0,0,0,.06), 0 0 0 1px rgba(0,0,0,.04); }
.kpi .v { font-size: 24px; font-weight: 650; font-variant-numeric: tabular-nums; }
.kpi .l { color: #6b7480; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.kpi .d { color: #6b7480; font-size: 12px; }
section { background: #fff; border-radius: 10px; padding: 18px 20px; margin-bottom: 18px;
  box-shadow: 0 1px 2px rgba(0,0,0,.06), 0 0 0 1px rgba(0,0,0,.04); }
.banner { border-left: 4px solid #f0ad4e; }
.banner.good { border-left-color: #4caf50; }
svg { display: block; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 6px 8px; border-bottom: 1px solid #eceef1; text-align: left; vertical-align: top; }
th { color: #59636e; font-weight: 600; background: #f8f9fb; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.nw { white-space: nowrap; }
.scroll { overflow-x: auto; }
tr.worst td { background: #fff4f2; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12px;
  background: #f1f3f5; padding: 1px 4px; border-radius: 4px; }
.sw { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
.err-hi { color: #c0392b; } .err-lo { color: #2e7d32; }
footer { color: #8a929b; font-size: 12px; text-align: center; margin-top: 8px; }
)";

std::string kpi(const std::string& label, const std::string& value, const std::string& detail) {
  return "<div class=\"kpi\"><div class=\"l\">" + html_escape(label) + "</div><div class=\"v\">" + html_escape(value) +
         "</div><div class=\"d\">" + html_escape(detail) + "</div></div>\n";
}

std::string td(const std::string& s, bool numeric = false) {
  return std::string(numeric ? "<td class=\"n\">" : "<td>") + html_escape(s) + "</td>";
}

std::string tensor_list(const std::vector<const Value*>& values) {
  if (values.empty()) return "-";
  std::string out;
  for (size_t i = 0; i < values.size() && i < 4; ++i) {
    if (i) out += ", ";
    out += values[i]->name;
  }
  if (values.size() > 4) out += format(" and %zu more", values.size() - 4);
  return out;
}

std::string stage_table(const Plan& p, const Summary& sum) {
  std::string s = "<div class=\"scroll\"><table>\n<tr><th>stage</th><th>device</th><th>first &rarr; last node</th>"
                  "<th class=\"n\">nodes</th><th class=\"n\">params</th><th class=\"n\">fwd ms</th>"
                  "<th class=\"n\">bwd ms</th><th class=\"n\">update</th><th class=\"n\">comm</th>"
                  "<th class=\"n\">stage ms</th><th class=\"n\">memory</th><th class=\"n\">sent</th>";
  if (sum.measured) s += "<th class=\"n\">meas. fwd</th><th class=\"n\">meas. bwd</th><th class=\"n\">error</th>";
  bool mem_measured = false;  // measured memory per stage (after training)
  for (const StagePlan& st : p.stages) mem_measured = mem_measured || st.measured_memory_bytes >= 0;
  if (mem_measured) s += "<th class=\"n\">meas. memory</th>";
  s += "</tr>\n";
  for (size_t k = 0; k < p.stages.size(); ++k) {
    const StagePlan& st = p.stages[k];
    const bool worst = static_cast<int>(k) == sum.bottleneck_stage && p.stages.size() > 1;
    s += worst ? "<tr class=\"worst\">" : "<tr>";
    s += format("<td><span class=\"sw\" style=\"background:%s\"></span>%zu</td>", stage_color(static_cast<int>(k)), k);
    s += "<td class=\"nw\">" + html_escape(st.device.name) + "</td>";
    s += "<td class=\"nw\"><code>" + html_escape(truncate(first_node(st), 28)) + "</code> &rarr; <code>" +
         html_escape(truncate(last_node(st), 28)) + "</code></td>";
    s += td(std::to_string(st.forward_nodes.size()), true);
    s += td(human_count(static_cast<double>(st.param_count)), true);
    s += td(format("%.3f", st.fwd_ms), true) + td(format("%.3f", st.bwd_ms), true);
    s += td(format("%.3f", st.update_ms), true) + td(format("%.3f", st.comm_ms), true);
    s += td(format("%.3f", st.stage_ms()), true);
    // A recomputing stage (--recompute) is marked beside its memory.
    s += td(human_bytes(static_cast<double>(st.memory_bytes)) + (st.recompute ? " (recompute)" : ""), true);
    s += td(human_bytes(static_cast<double>(st.send_bytes)), true);
    if (sum.measured) {
      if (is_measured(st)) {
        const double e = measured_error(st, p.device_share);
        s += td(format("%.3f", st.measured_fwd_ms), true) + td(format("%.3f", st.measured_bwd_ms), true);
        s += format("<td class=\"n %s\">%+.1f%%</td>", std::abs(e) > 0.25 ? "err-hi" : "err-lo", 100 * e);
      } else {
        s += td("-", true) + td("-", true) + td("-", true);
      }
    }
    if (mem_measured)
      s += td(st.measured_memory_bytes >= 0 ? human_bytes(static_cast<double>(st.measured_memory_bytes)) : "-", true);
    s += "</tr>\n";
  }
  return s + "</table></div>\n";
}

std::string boundary_table(const Plan& p) {
  std::string s = "<table>\n<tr><th>stage</th><th>receives</th><th class=\"n\">bytes in</th><th>sends</th>"
                  "<th class=\"n\">bytes out</th><th>parameters</th></tr>\n";
  for (size_t k = 0; k < p.stages.size(); ++k) {
    const StagePlan& st = p.stages[k];
    s += format("<tr><td><span class=\"sw\" style=\"background:%s\"></span>%zu</td>", stage_color(static_cast<int>(k)), k);
    s += td(tensor_list(st.recv)) + td(human_bytes(static_cast<double>(st.recv_bytes)), true);
    s += td(tensor_list(st.send)) + td(human_bytes(static_cast<double>(st.send_bytes)), true);
    s += td(format("%zu tensors, %s", st.params.size(), human_bytes(static_cast<double>(st.param_bytes)).c_str()));
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

}  // namespace

std::string report_html(const ReportInputs& r) {
  PT_CHECK(r.plan != nullptr) << "report_html needs a plan";
  const Plan& p = *r.plan;
  SimResult storage;
  const SimResult& sim = simulation_of(r, storage);
  const Summary sum = summarize(p);
  const std::string model = p.model.empty() ? "model" : p.model;
  const bool gpipe = p.schedule == Schedule::kGPipe;

  std::string sub = format("%d stage%s", sum.stages, sum.stages == 1 ? "" : "s");
  sub += gpipe ? format(" · GPipe, %d micro-batches (synchronous)", p.micro_batches) : " · 1F1B (asynchronous, PipeDream)";
  sub += std::string(" · ") + weight_mode_name(p.weights) + " weights";
  if (p.batch_size > 0) sub += format(" · batch %lld", static_cast<long long>(p.batch_size));
  if (!p.link.name.empty() && sum.stages > 1)
    sub += format(" · link %s (%.1f GB/s, %.1f µs)", p.link.name.c_str(), p.link.bandwidth / 1e9, p.link.latency_s * 1e6);
  if (p.num_nodes > 1) {
    sub += format(" · %d nodes", p.num_nodes);
    for (const StagePlan& st : p.stages)
      if (st.cut_crosses_nodes)
        sub += format(" · cut %d|%d crosses nodes (%s)", st.index - 1, st.index, st.link_in.name.c_str());
  }
  if (p.manual) sub += " · manual split";

  int64_t peak = 0;
  for (const StagePlan& st : p.stages) peak = std::max(peak, st.memory_bytes);

  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>Partition of " + html_escape(model) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n<main>\n";
  h += "<h1>Partition of <code>" + html_escape(model) + "</code></h1>\n<p class=\"sub\">" + html_escape(sub) + "</p>\n";

  h += "<div class=\"kpis\">\n";
  h += kpi("throughput", format("%.0f", sum.samples_per_s), "samples/s, predicted");
  if (sum.measured_samples_per_s > 0)
    h += kpi("measured", format("%.0f", sum.measured_samples_per_s),
             format("samples/s in training (%.2f× the prediction)",
                    sum.samples_per_s > 0 ? sum.measured_samples_per_s / sum.samples_per_s : 0.0));
  h += kpi("speedup", sum.speedup > 0 ? format("%.2f×", sum.speedup) : "-",
           sum.single_device_samples_per_s > 0 ? format("over one device (%.0f samples/s)", sum.single_device_samples_per_s)
                                               : "one-device figure unknown");
  h += kpi("bottleneck", format("%.3f ms", sum.bottleneck_ms), format("stage %d, per mini-batch", sum.bottleneck_stage));
  h += kpi("imbalance", format("%.2f", sum.imbalance), "slowest / mean stage time");
  h += kpi("bubble", sim.events.empty() ? "-" : format("%.1f%%", 100 * sim.bubble_fraction), "idle time, simulated steady state");
  h += kpi("peak memory", human_bytes(static_cast<double>(peak)), "largest stage, predicted");
  h += "</div>\n";

  if (r.automatic) {
    const Summary a = summarize(*r.automatic);
    const double ratio = a.bottleneck_ms > 0 ? sum.bottleneck_ms / a.bottleneck_ms : 0;
    h += std::string("<section class=\"banner") + (ratio <= 1.0005 ? " good" : "") + "\"><h2>Manual plan against the automatic one</h2>\n";
    h += "<p class=\"note\" style=\"margin:0\">" +
         html_escape(format("Bottleneck %.3f ms (manual) vs %.3f ms (automatic): the manual split is %.2f× %s. "
                            "The automatic plan predicts %.0f samples/s, imbalance %.2f.",
                            sum.bottleneck_ms, a.bottleneck_ms, ratio >= 1 ? ratio : (ratio > 0 ? 1 / ratio : 0),
                            ratio > 1.0005 ? "slower" : ratio < 0.9995 ? "faster" : "as fast (equal)", a.samples_per_s,
                            a.imbalance)) +
         "</p></section>\n";
  }

  if (p.replicas > 1 || !p.layouts.empty()) {
    h += "<section><h2>Stages x replicas</h2><p class=\"note\">" +
         html_escape(format("This plan: %d stage%s x %d replica%s; each replica runs on 1/%d of the mini-batch and each "
                            "stage all-reduces its gradients across its replicas over %s (ring) before its update.",
                            sum.stages, sum.stages == 1 ? "" : "s", p.replicas, p.replicas == 1 ? "" : "s", p.replicas,
                            p.replica_link.name.empty() ? p.link.name.c_str() : p.replica_link.name.c_str())) +
         "</p>\n";
    if (!p.layouts.empty()) {
      h += "<table>\n<tr><th>layout</th><th>samples/s</th><th>bubble</th><th>peak memory</th><th>all-reduce ms</th>"
           "<th></th></tr>\n";
      for (const LayoutOption& L : p.layouts) {
        h += "<tr>" + td(layout_name(L.stages, L.replicas));
        if (L.fits)
          h += td(format("%.1f", L.samples_per_s)) + td(format("%.1f%%", 100 * L.bubble_fraction)) +
               td(human_bytes(static_cast<double>(L.peak_memory_bytes))) + td(format("%.3f", L.allreduce_ms)) +
               td(L.chosen ? "chosen" : "");
        else
          h += "<td colspan=\"5\">" + html_escape("does not fit: " + L.why_not) + "</td>";
        h += "</tr>\n";
      }
      h += "</table>\n";
    }
    h += "</section>\n";
  }

  h += "<section><h2>Time per stage</h2><p class=\"note\">Predicted milliseconds per mini-batch. The slowest stage "
       "bounds the pipeline's throughput; the dashed line is the mean.</p>\n";
  h += svg_stage_times(p) + "</section>\n";

  h += "<section><h2>Memory per stage</h2><p class=\"note\">Predicted peak (parameters, gradients, optimizer state, "
       "weight copies, activations in flight, workspace) against each device's memory; the black tick is the "
       "simulated peak.</p>\n";
  h += svg_memory(p, sim) + "</section>\n";

  int mini = 0;
  for (const SimEvent& e : sim.events) mini = std::max(mini, e.mini_batch + 1);
  h += "<section><h2>Pipeline timeline</h2><p class=\"note\">" +
       html_escape(format("The first %d mini-batches of the simulated %s schedule; numbers are mini-batch indices%s. "
                          "Thin bars under a stage are its link to the next stage.",
                          std::min(mini, gpipe ? 2 : sum.stages + 4),
                          gpipe ? "GPipe" : "asynchronous 1F1B", gpipe ? " (mini-batch.micro-batch)" : "")) +
       "</p>\n";
  h += svg_timeline(p, sim) + "</section>\n";

  h += "<section><h2>Stage assignment over the model's layers</h2>\n" + svg_layers(p) + "</section>\n";

  h += "<section><h2>Stages</h2>\n" + stage_table(p, sum) + "</section>\n";
  h += "<section><h2>Boundaries</h2><p class=\"note\">Tensors crossing each cut, per mini-batch (gradients travel "
       "back the same way).</p>\n" + boundary_table(p) + "</section>\n";

  if (!sim.events.empty()) {
    h += "<section><h2>Simulation</h2>\n<table>\n";
    h += "<tr><th>makespan</th>" + td(format("%.3f ms for %d mini-batches", sim.makespan_ms, mini)) + "</tr>\n";
    h += "<tr><th>steady-state throughput</th>" + td(format("%.1f samples/s", sim.samples_per_s)) + "</tr>\n";
    h += "<tr><th>bubble</th>" + td(format("%.1f%% of stage time idle", 100 * sim.bubble_fraction)) + "</tr>\n";
    std::string peaks;
    for (size_t k = 0; k < sim.peak_memory_bytes.size(); ++k)
      peaks += (k ? ", " : "") + format("stage %zu: %s", k, human_bytes(static_cast<double>(sim.peak_memory_bytes[k])).c_str());
    h += "<tr><th>peak memory</th>" + td(peaks) + "</tr>\n</table>\n</section>\n";
  }
  h += "<footer>onnx-pipetrain partition report · partition.json holds the same numbers · trace.json opens in "
       "Perfetto</footer>\n</main>\n</body>\n</html>\n";
  return h;
}

}  // namespace pt
