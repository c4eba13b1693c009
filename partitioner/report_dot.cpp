// partition.dot: the forward graph for Graphviz, one cluster and fill colour per stage, the
// tensors that cross a cut drawn as thick red edges labelled with their size, and a legend.
// Graph inputs, labels and parameters are left out: the stages are the point.
#include <map>
#include <set>

#include "partitioner/report.h"
#include "partitioner/report_util.h"

namespace pt {

using namespace report_detail;

namespace {

// A DOT double-quoted string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string report_dot(const ReportInputs& r) {
  PT_CHECK(r.plan != nullptr) << "report_dot needs a plan";
  const Plan& p = *r.plan;
  std::map<const Node*, int> stage_of;
  std::map<const Node*, std::string> id_of;
  std::vector<const Node*> order;
  for (size_t k = 0; k < p.stages.size(); ++k) {
    for (const Node* n : p.stages[k].forward_nodes) {
      if (stage_of.count(n)) continue;
      stage_of[n] = static_cast<int>(k);
      id_of[n] = format("n%zu", order.size());
      order.push_back(n);
    }
  }
  std::vector<const Node*> unassigned;  // forward nodes of the graph no stage claims
  if (r.graph) {
    for (const auto& n : r.graph->nodes()) {
      if ((n->phase != Phase::kForward && n->phase != Phase::kLoss) || id_of.count(n.get())) continue;
      id_of[n.get()] = format("n%zu", order.size() + unassigned.size());
      unassigned.push_back(n.get());
    }
  }

  std::string out = "digraph partition {\n";
  out += "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, label=" +
         quoted(format("%s: %zu stages, %s, bottleneck %.3f ms", p.model.empty() ? "model" : p.model.c_str(),
                       p.stages.size(), schedule_name(p.schedule), summarize(p).bottleneck_ms)) +
         ", labelloc=t, nodesep=0.3, ranksep=0.35];\n";
  out += "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, color=\"#555555\"];\n";
  out += "  edge [color=\"#777777\", arrowsize=0.6, fontname=\"Helvetica\"];\n";
  for (size_t k = 0; k < p.stages.size(); ++k) {
    const StagePlan& s = p.stages[k];
    out += format("  subgraph cluster_stage%zu {\n", k);
    out += "    label=" + quoted(format("stage %zu: %s (%.3f ms)", k, s.device.name.c_str(), s.stage_ms())) +
           "; style=\"rounded,dashed\"; color=\"#999999\";\n";
    for (const Node* n : s.forward_nodes) {
      if (stage_of[n] != static_cast<int>(k)) continue;
      out += "    " + id_of[n] + " [label=" + quoted(n->name + "\n" + n->op_type) + ", fillcolor=\"" +
             stage_color(static_cast<int>(k)) + "\", tooltip=" + quoted(n->describe()) + "];\n";
    }
    out += "  }\n";
  }
  for (const Node* n : unassigned)
    out += "  " + id_of[n] + " [label=" + quoted(n->name + "\n" + n->op_type) + ", fillcolor=\"#ffffff\"];\n";

  // One edge per producer/consumer pair; a cut edge names the tensors that cross it.
  std::set<std::pair<std::string, std::string>> seen;
  std::vector<const Node*> all = order;
  all.insert(all.end(), unassigned.begin(), unassigned.end());
  for (const Node* n : all) {
    for (const Value* v : n->inputs) {
      if (!v || !v->producer || !id_of.count(v->producer)) continue;
      const std::string& from = id_of[v->producer];
      if (!seen.insert({from, id_of[n]}).second) continue;
      const auto a = stage_of.find(v->producer), b = stage_of.find(n);
      const bool cut = a != stage_of.end() && b != stage_of.end() && a->second != b->second;
      out += "  " + from + " -> " + id_of[n];
      if (cut)
        out += " [color=\"#d62728\", penwidth=2.5, fontcolor=\"#d62728\", fontsize=9, label=" +
               quoted(v->name + "\n" + human_bytes(static_cast<double>(v->bytes()))) + "]";
      out += ";\n";
    }
  }

  out += "  subgraph cluster_legend {\n    label=\"legend\"; style=\"rounded\"; color=\"#bbbbbb\"; fontsize=10;\n";
  for (size_t k = 0; k < p.stages.size(); ++k)
    out += format("    legend_s%zu [label=", k) +
           quoted(format("stage %zu: %zu nodes", k, p.stages[k].forward_nodes.size())) + ", fillcolor=\"" +
           stage_color(static_cast<int>(k)) + "\"];\n";
  if (p.stages.size() > 1) {
    out += "    legend_a [label=\"\", shape=point, width=0.05]; legend_b [label=\"tensor sent\\nto the next stage\", "
           "shape=plaintext, style=\"\"];\n";
    out += "    legend_a -> legend_b [color=\"#d62728\", penwidth=2.5];\n";
  }
  for (size_t k = 1; k < p.stages.size(); ++k)
    out += format("    legend_s%zu -> legend_s%zu [style=invis];\n", k - 1, k);
  out += "  }\n}\n";
  return out;
}

}  // namespace pt
