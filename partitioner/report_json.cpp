// partition.json: the machine-readable partition report. The schema is
// documented field by field in docs/partition-json.md; keep the two in step.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "partitioner/layout.h"
#include "partitioner/report.h"
#include "partitioner/report_util.h"

namespace pt {

using namespace report_detail;
using json = nlohmann::ordered_json;  // keeps the documented field order

namespace {

// "bf16" when the graph holds bfloat16 values (only --precision bf16 makes them,
// importer/precision.h), else "fp32".
const char* graph_precision(const Graph* g) {
  if (g)
    for (const auto& v : g->values())
      if (v->dtype == DType::kBFloat16) return "bf16";
  return "fp32";
}

json node_names_of(const std::vector<const Node*>& nodes) {
  json a = json::array();
  for (const Node* n : nodes) a.push_back(n->name);
  return a;
}

json names_of(const std::vector<const Value*>& values) {
  json out = json::array();
  for (const Value* v : values) out.push_back(v->name);
  return out;
}

json stage_json(const StagePlan& s, double device_share) {
  json nodes = json::array();
  for (const Node* n : s.forward_nodes) nodes.push_back(n->name);
  json j = {
      {"index", s.index},
      {"device", s.device.name},
      {"device_spec",
       {{"name", s.device.name},
        {"kind", s.device.kind == DeviceKind::kCpu ? "cpu" : "cuda"},
        {"peak_flops", s.device.peak_flops},
        {"mem_bandwidth", s.device.mem_bandwidth},
        {"memory_bytes", s.device.memory_bytes},
        {"kernel_overhead_s", s.device.kernel_overhead_s}}},
      {"nodes", nodes},
      {"first_node", first_node(s)},
      {"last_node", last_node(s)},
      {"param_count", s.param_count},
      {"param_bytes", s.param_bytes},
      {"params", names_of(s.params)},
      {"fwd_ms", s.fwd_ms},
      {"fwd_weights_ms", s.fwd_weights_ms},
      {"bwd_weights_ms", s.bwd_weights_ms},
      {"bwd_ms", s.bwd_ms},
      {"update_ms", s.update_ms},
      {"comm_ms", s.comm_ms},
      {"allreduce_ms", s.allreduce_ms},
      {"node", s.node},
      {"cut_crosses_nodes", s.cut_crosses_nodes},
      {"link_in", s.link_in.name},
      {"stage_ms", s.stage_ms()},
      {"memory_bytes", s.memory_bytes},
      {"saved_bytes", s.saved_bytes},
      {"send_bytes", s.send_bytes},
      {"recv_bytes", s.recv_bytes},
      {"send", names_of(s.send)},
      {"recv", names_of(s.recv)},
      {"shared", names_of(s.shared_params)},
      {"shared_recv_bytes", s.shared_recv_bytes},
      {"shared_memory_bytes", s.shared_memory_bytes},
      {"evaluator_bytes", s.evaluator_bytes},
      {"in_flight", s.in_flight},
      {"weight_copies", s.weight_copies},
      {"gradient_accumulators", s.gradient_accumulators},
      {"update_in_backward", s.update_in_backward},
      {"transient_gradient_bytes", s.transient_gradient_bytes},
      {"recompute", s.recompute},
      {"recompute_input_bytes", s.recompute_input_bytes},
      {"recompute_weight_copies", s.recompute_weight_copies},
      {"recompute_ms", s.recompute_ms},
      {"host_fallback", node_names_of(s.host_fallback)},
  };
  if (is_measured(s))
    j["measured"] = {{"fwd_ms", s.measured_fwd_ms},
                     {"bwd_ms", s.measured_bwd_ms},
                     {"update_ms", s.measured_update_ms},
                     {"error", measured_error(s, device_share)}};
  if (is_measured(s) && s.measured_cpu_ms >= 0) j["measured"]["cpu_ms"] = s.measured_cpu_ms;
  if (s.measured_memory_bytes >= 0) j["measured"]["memory_bytes"] = s.measured_memory_bytes;
  if (s.cut_crosses_nodes && s.measured_cut_messages > 0) {
    auto us = [](double v) { return v >= 0 ? json(v) : json(nullptr); };
    j["measured_cut"] = {{"forward_us", us(s.measured_cut_fwd_us)},
                         {"backward_us", us(s.measured_cut_bwd_us)},
                         {"forward_median_us", us(s.measured_cut_fwd_median_us)},
                         {"backward_median_us", us(s.measured_cut_bwd_median_us)},
                         {"messages", s.measured_cut_messages},
                         {"predicted_us", 1e6 * s.link_in.seconds(static_cast<double>(s.recv_bytes))}};
  }
  return j;
}

json summary_json(const Plan& p) {
  const Summary s = summarize(p);
  json stages = json::array();
  for (const StagePlan& st : p.stages)
    stages.push_back({{"index", st.index},
                      {"device", st.device.name},
                      {"first_node", first_node(st)},
                      {"last_node", last_node(st)},
                      {"node_count", st.forward_nodes.size()},
                      {"stage_ms", st.stage_ms()}});
  return {{"bottleneck_ms", s.bottleneck_ms},
          {"bottleneck_stage", s.bottleneck_stage},
          {"imbalance", s.imbalance},
          {"predicted_samples_per_s", s.samples_per_s},
          {"stages", stages}};
}

// The plan's stage layout (partitioner/stage_layout.h): what each stage owns and every link
// between stages with the values it carries, in the order the runtime wires them.
json layout_json(const StageLayout& L) {
  json stages = json::array();
  for (const StageLayoutStage& s : L.stages)
    stages.push_back({{"index", s.index},
                      {"owns", names_of(s.params)},
                      {"state", names_of(s.state)},
                      {"saved", names_of(s.saved)},
                      {"recv", names_of(s.recv)},
                      {"send", names_of(s.send)},
                      {"shared", names_of(s.shared)},
                      {"reads_input", s.reads_input},
                      {"reads_labels", s.reads_labels}});
  auto flows = [](const std::vector<ValueFlow>& fs) {
    json out = json::array();
    for (const ValueFlow& f : fs) out.push_back({{"from", f.from}, {"to", f.to}, {"values", names_of(f.values)}});
    return out;
  };
  json weights = json::array();
  for (const WeightFlow& f : L.weights)
    weights.push_back({{"owner", f.owner}, {"reader", f.reader}, {"backward", f.backward}, {"slots", f.slots},
                       {"values", names_of(f.values)}});
  return {{"stages", stages}, {"activations", flows(L.activations)}, {"gradients", flows(L.gradients)}, {"weights", weights}};
}

}  // namespace

std::string report_json(const ReportInputs& r) {
  PT_CHECK(r.plan != nullptr) << "report_json needs a plan";
  const Plan& p = *r.plan;
  const Summary sum = summarize(p);
  json stages = json::array();
  for (const StagePlan& s : p.stages) stages.push_back(stage_json(s, p.device_share));
  json doc = {
      {"schema_version", 1},
      {"model", p.model},
      {"devices", sum.stages},
      {"schedule", schedule_name(p.schedule)},
      {"weights", weight_mode_name(p.weights)},
      {"recompute", recompute_name(p.recompute)},
      {"precision", graph_precision(r.graph)},
      {"micro_batches", p.micro_batches},
      {"virtual_stages", p.virtual_stages},
      {"batch_size", p.batch_size * std::max(1, p.graph_replicas)},  // the whole mini-batch
      {"link", {{"name", p.link.name}, {"bandwidth", p.link.bandwidth}, {"latency_s", p.link.latency_s}}},
      {"manual", p.manual},
      {"num_nodes", p.num_nodes},
      {"node_order", p.order},
      {"stages", stages},
      {"bottleneck_ms", sum.bottleneck_ms},
      {"bottleneck_stage", sum.bottleneck_stage},
      {"imbalance", sum.imbalance},
      {"predicted_samples_per_s", sum.samples_per_s},
      {"single_device_samples_per_s", sum.single_device_samples_per_s},
      {"speedup", sum.speedup},
      {"device_share", p.device_share},
      {"cost_model", p.calibrated ? "calibrated" : "roofline"},
      {"has_measured", sum.measured},
      {"replicas", p.replicas},
      {"device_count", sum.stages * std::max(1, p.replicas)},
      {"graph_replicas", p.graph_replicas},
  };
  {  // The program every stage runs (partitioner/schedule.h; docs/schedules.md), as action tokens.
    const ScheduleIR ir = plan_schedule(p);
    json programs = json::array();
    for (size_t k = 0; k < ir.stages.size(); ++k) {
      json warm = json::array(), steady = json::array();
      for (const Action& a : ir.stages[k].warmup) warm.push_back(action_token(a));
      for (const Action& a : ir.stages[k].steady) steady.push_back(action_token(a));
      int in_flight = 0, waiting = 0;  // over the device's chunks (interleaved stages; else its one)
      for (int c = 0; c < ir.chunks; ++c) {
        const int v = ir.virtual_of(static_cast<int>(k), c);
        in_flight += program_in_flight(ir, v);
        waiting += w_state_in_flight(ir, v);
      }
      programs.push_back({{"warmup", warm}, {"steady", steady}, {"in_flight", in_flight}, {"waiting_for_w", waiting}});
    }
    doc["program"] = {{"name", ir.name}, {"synchronous", ir.synchronous}, {"micro_batches", ir.micro_batches},
                      {"virtual_stages", ir.chunks}, {"placement", ir.v_shape ? "v" : "loop"}, {"stages", programs}};
  }
  if (p.replicas > 1)
    doc["replica_link"] = {{"name", p.replica_link.name}, {"bandwidth", p.replica_link.bandwidth},
                           {"latency_s", p.replica_link.latency_s}};
  if (!p.layouts.empty()) {
    json layouts = json::array();
    for (const LayoutOption& L : p.layouts) {
      json l = {{"name", layout_name(L.stages, L.replicas)},
                {"stages", L.stages},
                {"replicas", L.replicas},
                {"devices", L.stages * L.replicas},
                {"fits", L.fits},
                {"samples_per_s", L.samples_per_s},
                {"bubble_fraction", L.bubble_fraction},
                {"peak_memory_bytes", L.peak_memory_bytes},
                {"allreduce_ms", L.allreduce_ms},
                {"chosen", L.chosen}};
      if (!L.fits) l["why_not"] = L.why_not;
      layouts.push_back(l);
    }
    doc["layouts"] = layouts;
  }
  if (p.layout.describes(p) && !p.layout.stages.empty()) doc["layout"] = layout_json(p.layout);
  if (sum.measured_samples_per_s > 0) doc["measured_samples_per_s"] = sum.measured_samples_per_s;
  if (sum.measured_steady_samples_per_s > 0) doc["measured_steady_samples_per_s"] = sum.measured_steady_samples_per_s;
  {
    // The process: the stages' predicted memory plus what it holds beside them.
    int64_t planned = p.baseline_bytes + p.data_bytes;
    for (const StagePlan& s : p.stages) planned += s.memory_bytes;
    doc["process_memory"] = {{"baseline_bytes", p.baseline_bytes}, {"data_bytes", p.data_bytes}, {"planned_bytes", planned}};
    if (p.measured_peak_rss_bytes >= 0) doc["process_memory"]["measured_peak_rss_bytes"] = p.measured_peak_rss_bytes;
  }
  if (r.automatic) {
    json a = summary_json(*r.automatic);
    const double ab = a["bottleneck_ms"].get<double>();
    a["manual_over_automatic"] = ab > 0 ? sum.bottleneck_ms / ab : 0.0;
    doc["automatic"] = a;
  }
  if (r.sim && !r.sim->events.empty())
    doc["simulation"] = {{"makespan_ms", r.sim->makespan_ms},
                         {"samples_per_s", r.sim->samples_per_s},
                         {"bubble_fraction", r.sim->bubble_fraction},
                         {"peak_memory_bytes", r.sim->peak_memory_bytes}};
  return doc.dump(2) + "\n";
}

}  // namespace pt
