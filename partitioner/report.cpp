// The terminal report (one row per stage, then the pipeline numbers), the helpers every report
// format shares, and write_reports, which writes all of them atomically into the run folder.
#include "partitioner/report.h"

#include "core/file.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "partitioner/layout.h"
#include "partitioner/report_util.h"

namespace pt {
namespace report_detail {

Summary summarize(const Plan& p) {
  Summary s;
  s.stages = static_cast<int>(p.stages.size());
  double sum = 0;
  for (int k = 0; k < s.stages; ++k) {
    const double ms = p.stages[k].stage_ms();
    sum += ms;
    if (ms > p.stages[s.bottleneck_stage].stage_ms()) s.bottleneck_stage = k;
    s.measured = s.measured || is_measured(p.stages[k]);
  }
  const double max_ms = s.stages ? p.stages[s.bottleneck_stage].stage_ms() : 0;
  s.bottleneck_ms = p.bottleneck_ms > 0 ? p.bottleneck_ms : max_ms;
  s.imbalance = p.imbalance > 0 ? p.imbalance : (sum > 0 ? max_ms / (sum / s.stages) : 0);
  const double batch = static_cast<double>(p.batch_size > 0 ? p.batch_size : 1) * std::max(1, p.graph_replicas);
  s.samples_per_s = p.predicted_samples_per_s > 0 ? p.predicted_samples_per_s
                    : s.bottleneck_ms > 0         ? batch * 1e3 / s.bottleneck_ms
                                                  : 0;
  s.single_device_samples_per_s = p.single_device_samples_per_s;
  s.measured_samples_per_s = p.measured_samples_per_s;
  s.measured_steady_samples_per_s = p.measured_steady_samples_per_s;
  s.speedup = s.single_device_samples_per_s > 0 ? s.samples_per_s / s.single_device_samples_per_s : 0;
  return s;
}

bool is_measured(const StagePlan& s) { return s.measured_fwd_ms >= 0 && s.measured_bwd_ms >= 0; }

double measured_error(const StagePlan& s, double device_share) {
  if (!is_measured(s)) return 0;
  // The whole stage, updates included: a stage that updates in its backward measures them with it
  // (measured_update_ms 0), one that updates after it apart.
  double meas = s.measured_fwd_ms + s.measured_bwd_ms + s.measured_update_ms;
  // On shared cores the plan prices each stage `share` times its time alone; a stage's wall time
  // depends on what ran beside it, its CPU time does not.
  if (device_share > 1.05 && s.measured_cpu_ms > 0) meas = s.measured_cpu_ms * device_share;
  const double pred = s.fwd_ms + s.bwd_ms + s.update_ms;
  return meas > 0 ? (pred - meas) / meas : 0;
}

std::string first_node(const StagePlan& s) { return s.forward_nodes.empty() ? "-" : s.forward_nodes.front()->name; }
std::string last_node(const StagePlan& s) { return s.forward_nodes.empty() ? "-" : s.forward_nodes.back()->name; }

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < static_cast<int>(sizeof buf)) return std::string(buf, std::max(0, n));
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.resize(static_cast<size_t>(n));
  return big;
}

std::string human_count(double n) {
  if (n >= 1e9) return format("%.2fG", n / 1e9);
  if (n >= 1e6) return format("%.2fM", n / 1e6);
  if (n >= 1e3) return format("%.1fK", n / 1e3);
  return format("%.0f", n);
}

std::string human_bytes(double b) {
  if (b >= 1e9) return format("%.2f GB", b / 1e9);
  if (b >= 1e6) return format("%.1f MB", b / 1e6);
  if (b >= 1e3) return format("%.1f KB", b / 1e3);
  return format("%.0f B", b);
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string truncate(const std::string& s, size_t width) {
  if (s.size() <= width || width < 4) return s;
  return s.substr(0, width - 3) + "...";
}

const char* stage_color(int k) {
  static const char* kPalette[] = {"#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69",
                                   "#fccde5", "#ffed6f", "#bc80bd", "#ccebc5", "#d9d9d9", "#e5c494"};
  constexpr int n = sizeof kPalette / sizeof kPalette[0];
  return kPalette[((k % n) + n) % n];
}

const SimResult& simulation_of(const ReportInputs& r, SimResult& storage) {
  if (r.sim) return *r.sim;
  const int n = static_cast<int>(r.plan->stages.size());
  storage = simulate(*r.plan, std::max(8, 3 * n));
  return storage;
}

}  // namespace report_detail

using namespace report_detail;

std::string layouts_text(const std::vector<LayoutOption>& layouts) {
  if (layouts.size() < 2) return "";  // one device: nothing to choose from
  const int devices = layouts.front().stages * layouts.front().replicas;
  std::string out = format("layouts of %d devices (stages x replicas, predicted):\n", devices);
  out += format("  %-20s %12s %8s %12s %13s\n", "layout", "samples/s", "bubble", "peak mem MB", "all-reduce ms");
  for (const LayoutOption& L : layouts) {
    const std::string name = layout_name(L.stages, L.replicas);
    if (!L.fits) {
      out += format("  %-20s %s\n", name.c_str(), ("does not fit: " + truncate(L.why_not, 90)).c_str());
      continue;
    }
    out += format("  %-20s %12.1f %7.1f%% %12.1f %13.3f%s\n", name.c_str(), L.samples_per_s, 100 * L.bubble_fraction,
                  static_cast<double>(L.peak_memory_bytes) / 1e6, L.allreduce_ms, L.chosen ? "  <- chosen" : "");
  }
  return out;
}

std::string schedule_summary(const Plan& p, const SimResult& sim) {
  const int n = static_cast<int>(p.stages.size());
  if (n < 2 && !synchronous(p.schedule, p.weights)) return "";
  const ScheduleIR ir = plan_schedule(p);
  const double m = ir.micro_batches;
  // On shared cores the simulation shares them among the stages, and what is lost is their idle time.
  const bool shared = p.device_share > 1.0 + 1e-9;
  std::string out = format("schedule %s: predicted bubble %.1f%% of the %s time", ir.name.c_str(), 100 * sim.bubble_fraction,
                           shared ? "shared cores'" : "stages'");
  if (ir.synchronous && n > 1 && !ir.v_shape) {
    // The textbook idle fractions with equal stages: (p-1)/(m+p-1) for GPipe and 1F1B; ZB-H1 cuts
    // the bubble to a third ((p-1)/3 passes' worth) when F, I and W take equal time.
    // Interleaved stages: (p-1)/V passes' worth over p devices of V chunks each.
    const double d = static_cast<double>(ir.stages.size());
    const double f = ir.splits_backward() ? (n - 1) / 3.0 / (m + (n - 1) / 3.0)
                     : ir.chunks > 1      ? (d - 1) / ir.chunks / (m + (d - 1) / ir.chunks)
                                          : (n - 1) / (m + n - 1);
    out += format(" (equal stages: %.1f%%)", 100 * f);
  }
  out += "; passes in flight per stage:";
  for (int k = 0; k < n; ++k) out += format(" %d", program_in_flight(ir, k));
  if (ir.splits_backward()) {
    out += " (of which waiting for W:";
    for (int k = 0; k < n; ++k) out += format(" %d", w_state_in_flight(ir, k));
    out += ")";
  }
  if (shared)
    out += format("; the stages share their cores %.1f to 1, so a stage's idle time lets the others run (the cores' "
                  "idle time is the bubble)", p.device_share);
  return out + "\n";
}

std::string report_text(const ReportInputs& r) {
  PT_CHECK(r.plan != nullptr) << "report_text needs a plan";
  const Plan& p = *r.plan;
  const Summary sum = summarize(p);
  std::string out;
  out += format("Partition of %s: %d stage%s, %s schedule, %s weights", p.model.empty() ? "model" : p.model.c_str(),
                sum.stages, sum.stages == 1 ? "" : "s", schedule_name(p.schedule), weight_mode_name(p.weights));
  if (p.virtual_stages > 1 && p.schedule == Schedule::kZBV)
    out += format(" (%d devices in a V: stage k on device k, stage %d - k on device k)", sum.stages / 2, sum.stages - 1);
  else if (p.virtual_stages > 1)
    out += format(" (%d devices, %d virtual stages each: stage k on device k %% %d)", sum.stages / p.virtual_stages,
                  p.virtual_stages, sum.stages / p.virtual_stages);
  if (synchronous(p.schedule, p.weights)) out += format(", %d micro-batches", p.micro_batches);
  if (p.batch_size > 0) out += format(", batch %lld", static_cast<long long>(p.batch_size * std::max(1, p.graph_replicas)));
  if (p.replicas > 1) out += format(", %d replicas (%d devices)", p.replicas, sum.stages * p.replicas);
  if (!p.link.name.empty() && sum.stages > 1)
    out += format(", link %s (%.1f GB/s, %.1f us)", p.link.name.c_str(), p.link.bandwidth / 1e9, p.link.latency_s * 1e6);
  if (p.num_nodes > 1) out += format(", %d nodes", p.num_nodes);
  out += p.manual ? " [manual]\n" : "\n";
  {
    SimResult storage;
    out += schedule_summary(p, simulation_of(r, storage));
  }

  size_t dev_w = 6, node_w = 10;
  for (const StagePlan& s : p.stages) {
    dev_w = std::max(dev_w, std::min<size_t>(18, s.device.name.size()));
    node_w = std::max(node_w, std::min<size_t>(40, first_node(s).size() + last_node(s).size() + 4));
  }
  const int dw = static_cast<int>(dev_w), nw = static_cast<int>(node_w);
  out += format("%5s  %-*s  %-*s %9s %9s %9s %10s %9s", "stage", dw, "device", nw, "first -> last node", "params",
                "fwd ms", "bwd ms", "memory MB", "sent MB");
  if (sum.measured) out += format(" %10s %10s %8s", "meas fwd", "meas bwd", "error");
  bool mem_measured = false;  // measured memory per stage (after training)
  for (const StagePlan& s : p.stages) mem_measured = mem_measured || s.measured_memory_bytes >= 0;
  if (mem_measured) out += format(" %10s", "meas MB");
  out += "\n";
  for (const StagePlan& s : p.stages) {
    const std::string nodes = truncate(first_node(s) + " -> " + last_node(s), node_w);
    out += format("%5d  %-*s  %-*s %9s %9.3f %9.3f %10.1f %9.2f", s.index, dw, truncate(s.device.name, dev_w).c_str(),
                  nw, nodes.c_str(), human_count(static_cast<double>(s.param_count)).c_str(), s.fwd_ms, s.bwd_ms,
                  static_cast<double>(s.memory_bytes) / 1e6, static_cast<double>(s.send_bytes) / 1e6);
    if (is_measured(s))
      out += format(" %10.3f %10.3f %+7.1f%%", s.measured_fwd_ms, s.measured_bwd_ms, 100 * measured_error(s, p.device_share));
    else if (sum.measured)
      out += format(" %10s %10s %8s", "-", "-", "-");
    if (s.measured_memory_bytes >= 0) out += format(" %10.1f", static_cast<double>(s.measured_memory_bytes) / 1e6);
    else if (mem_measured) out += format(" %10s", "-");
    out += "\n";
  }
  if (p.measured_peak_rss_bytes >= 0) {
    int64_t planned = p.baseline_bytes + p.data_bytes;
    for (const StagePlan& s : p.stages) planned += s.memory_bytes;
    out += format("process memory: peak resident %.1f MB, planned %.1f MB (stages, data %.1f MB, baseline %.1f MB)\n",
                  static_cast<double>(p.measured_peak_rss_bytes) / 1e6, static_cast<double>(planned) / 1e6,
                  static_cast<double>(p.data_bytes) / 1e6, static_cast<double>(p.baseline_bytes) / 1e6);
  }
  for (const StagePlan& s : p.stages) {
    if (s.host_fallback.empty()) continue;
    // The CUDA backend runs these through the CPU kernels (a copy to the host and back, and a
    // synchronisation, per call): name them, as the nodes that cost a GPU stage most.
    std::string names;
    const size_t shown = std::min<size_t>(s.host_fallback.size(), 8);
    for (size_t i = 0; i < shown; ++i)
      names += (i ? ", " : "") + s.host_fallback[i]->name + " (" + s.host_fallback[i]->op_type + ")";
    if (shown < s.host_fallback.size()) names += format(", and %zu more", s.host_fallback.size() - shown);
    out += format("warning: stage %d (%s) runs %zu node%s on the host through the CUDA fallback: %s\n", s.index,
                  s.device.name.c_str(), s.host_fallback.size(), s.host_fallback.size() == 1 ? "" : "s",
                  names.c_str());
  }
  for (const StagePlan& s : p.stages)
    if (s.cut_crosses_nodes) {
      // What the plan charges a pass one way: the activations' bytes over the link (their
      // gradients' the other way), beside what the messages took where they were timed.
      const double bytes = static_cast<double>(s.recv_bytes);
      out += format("cut %d|%d crosses nodes %d -> %d: link %s (%.1f GB/s, %.1f us), %.2f MB per pass, "
                    "%.1f us each way predicted",
                    s.index - 1, s.index, p.stages[s.index - 1].node, s.node, s.link_in.name.c_str(),
                    s.link_in.bandwidth / 1e9, s.link_in.latency_s * 1e6, bytes / 1e6, 1e6 * s.link_in.seconds(bytes));
      if (s.measured_cut_messages > 0) {  // medians, then means (a few slow messages move the mean)
        auto us = [](double v) { return v >= 0 ? format("%.0f us", v) : std::string("-"); };
        out += format("; measured %s forward, %s backward (medians; means %s and %s; %lld messages)",
                      us(s.measured_cut_fwd_median_us).c_str(), us(s.measured_cut_bwd_median_us).c_str(),
                      us(s.measured_cut_fwd_us).c_str(), us(s.measured_cut_bwd_us).c_str(),
                      static_cast<long long>(s.measured_cut_messages));
      }
      out += "\n";
    }
  if (p.recompute != Recompute::kNone) {
    std::string which;
    for (const StagePlan& s : p.stages)
      if (s.recompute) which += (which.empty() ? "" : ", ") + std::to_string(s.index);
    out += format("recompute %s: %s\n", recompute_name(p.recompute),
                  which.empty() ? (p.recompute == Recompute::kAuto
                                       ? "no stage (every stage fits its device without)"
                                       : "no stage (none keeps several passes in flight where rerunning its forward "
                                         "would take less memory)")
                                : (which.find(',') == std::string::npos
                                       ? "stage " + which + " keeps only its inputs per pass and reruns its forward in the backward"
                                       : "stages " + which + " keep only their inputs per pass and rerun their forward in the backward")
                                      .c_str());
    for (const StagePlan& s : p.stages)
      if (s.recompute)
        out += format("  stage %d: inputs %.2f MB x %d in flight + one set of activations %.2f MB, %d forward weight "
                      "cop%s; forward rerun %.3f ms (in bwd ms)\n",
                      s.index, static_cast<double>(s.recompute_input_bytes) / 1e6, s.in_flight,
                      static_cast<double>(s.saved_bytes) / 1e6, s.recompute_weight_copies,
                      s.recompute_weight_copies == 1 ? "y" : "ies", s.recompute_ms);
  }
  for (const StagePlan& s : p.stages) {
    if (s.shared_params.empty()) continue;
    std::string names;
    for (const Value* v : s.shared_params) {
      int owner = -1;
      for (const StagePlan& o : p.stages)
        if (std::find(o.params.begin(), o.params.end(), v) != o.params.end()) owner = o.index;
      names += (names.empty() ? "" : ", ") + v->name + " (stage " + std::to_string(owner) + ")";
    }
    out += format("stage %d reads shared weights %s: %.2f MB received per mini-batch, %.2f MB of copies\n", s.index,
                  names.c_str(), static_cast<double>(s.shared_recv_bytes) / 1e6, static_cast<double>(s.shared_memory_bytes) / 1e6);
  }
  if (p.replicas > 1) {
    double worst = 0;
    int at = 0;
    for (const StagePlan& s : p.stages)
      if (s.allreduce_ms > worst) worst = s.allreduce_ms, at = s.index;
    out += format("replicas: %d copies of each stage, each on 1/%d of the mini-batch (times, memory and sent MB above "
                  "are one replica's); gradients all-reduced per stage over %s (%.1f GB/s, %.1f us, ring): up to "
                  "%.3f ms per mini-batch (stage %d)\n",
                  p.replicas, p.replicas, p.replica_link.name.c_str(), p.replica_link.bandwidth / 1e9,
                  p.replica_link.latency_s * 1e6, worst, at);
  }
  out += format("bottleneck %.3f ms (stage %d), imbalance %.2f (max/mean stage time)\n", sum.bottleneck_ms,
                sum.bottleneck_stage, sum.imbalance);
  if (p.device_share > 1.05) {  // as measured_error
    bool cpu = false;
    for (const StagePlan& s : p.stages) cpu = cpu || (is_measured(s) && s.measured_cpu_ms >= 0);
    out += format("shared cores: the stages' threads outnumber the cores %.1f to 1, so each stage runs %.1fx slower "
                  "than alone (the times above include it)%s\n",
                  p.device_share, p.device_share,
                  cpu ? format("; the error compares them with each stage's CPU time x %.1f (its wall time depends on what "
                               "ran beside it)", p.device_share).c_str()
                      : "");
  }
  out += format("predicted %.1f samples/s", sum.samples_per_s);
  if (sum.measured_samples_per_s > 0)
    out += format(", measured %.1f samples/s (%.2fx the prediction)", sum.measured_samples_per_s,
                  sum.samples_per_s > 0 ? sum.measured_samples_per_s / sum.samples_per_s : 0.0);
  if (sum.measured_steady_samples_per_s > 0)
    out += format(", %.1f in the steady state (%.2fx)", sum.measured_steady_samples_per_s,
                  sum.samples_per_s > 0 ? sum.measured_steady_samples_per_s / sum.samples_per_s : 0.0);
  if (sum.speedup > 0)
    out += format(", %.2fx over one device (%.1f samples/s)", sum.speedup, sum.single_device_samples_per_s);
  out += "\n";
  if (r.sim && !r.sim->events.empty())
    out += format("simulated %s: %.1f samples/s steady state, bubble %.1f%%, makespan %.2f ms\n",
                  plan_schedule(p).name.c_str(), r.sim->samples_per_s, 100 * r.sim->bubble_fraction, r.sim->makespan_ms);
  out += layouts_text(p.layouts);
  if (r.automatic) {
    const Summary a = summarize(*r.automatic);
    const double ratio = a.bottleneck_ms > 0 ? sum.bottleneck_ms / a.bottleneck_ms : 0;
    out += format("manual plan: bottleneck %.3f ms vs automatic %.3f ms (%.2fx%s); automatic predicts %.1f samples/s\n",
                  sum.bottleneck_ms, a.bottleneck_ms, ratio,
                  ratio > 1.0005 ? ", manual is slower" : ratio < 0.9995 ? ", manual is faster" : ", equal",
                  a.samples_per_s);
  }
  return out;
}

Status write_reports(const ReportInputs& r, const std::string& dir) {
  PT_CHECK(r.plan != nullptr) << "write_reports needs a plan";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error(dir + ": cannot create the run folder (" + ec.message() + ")");
  SimResult storage;
  ReportInputs with_sim = r;
  with_sim.sim = &simulation_of(r, storage);
  const std::filesystem::path d(dir);
  const std::pair<const char*, std::string> files[] = {
      {"partition.txt", report_text(with_sim)},
      {"partition.json", report_json(with_sim)},
      {"partition.html", report_html(with_sim)},
      {"partition.dot", report_dot(with_sim)},
      {"trace.json", trace_json(with_sim.sim->events, *r.plan)},
  };
  for (const auto& [name, text] : files) {
    if (!r.write_trace && std::string(name) == "trace.json") continue;
    Status s = write_file_atomic(d / name, text);
    if (!s.is_ok()) return s;
  }
  return Status::ok();
}

}  // namespace pt
