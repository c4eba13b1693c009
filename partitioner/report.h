// The automatic partition report: a terminal table, partition.json (schema in docs/), a
// self-contained partition.html with SVG pictures, and partition.dot (stages as colours).
#pragma once

#include <string>

#include "partitioner/plan.h"
#include "partitioner/simulator.h"

namespace pt {

struct ReportInputs {
  const Plan* plan = nullptr;
  const Plan* automatic = nullptr;  // when `plan` is manual: the automatic plan to compare with
  const SimResult* sim = nullptr;   // for the timeline
  const Graph* graph = nullptr;     // for the DOT and the layer picture
  bool write_trace = true;          // false: keep the trace.json a real run recorded (--trace)
};

std::string report_text(const ReportInputs& r);
// The layouts a plan was chosen from (Plan::layouts), one line each, the chosen one marked; ""
// when there are fewer than two. Part of report_text.
std::string layouts_text(const std::vector<LayoutOption>& layouts);
// One line: the schedule's program, its simulated bubble (and the equal-stage formula's), the
// passes each stage keeps in flight. Part of report_text.
std::string schedule_summary(const Plan& p, const SimResult& sim);
std::string report_json(const ReportInputs& r);
std::string report_html(const ReportInputs& r);
std::string report_dot(const ReportInputs& r);

// Writes partition.{txt,json,html,dot} and trace.json into `dir`, each atomically.
Status write_reports(const ReportInputs& r, const std::string& dir);

}  // namespace pt
