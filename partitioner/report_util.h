// Helpers shared by the report writers (text, JSON, HTML/SVG, DOT): the summary numbers with their
// fallbacks, number formatting, escaping and the stage palette. Internal to the partitioner.
#pragma once

#include <cstdint>
#include <string>

#include "partitioner/report.h"

namespace pt::report_detail {

// The plan's pipeline-level numbers, computed from the stages where the plan left them at zero.
struct Summary {
  int stages = 0;
  int bottleneck_stage = 0;
  double bottleneck_ms = 0;
  double imbalance = 0;
  double samples_per_s = 0;
  double single_device_samples_per_s = 0;
  double speedup = 0;  // 0 when the one-device figure is unknown
  bool measured = false;  // some stage has measured times
  double measured_samples_per_s = 0;  // the trained run's throughput; 0 before training
  double measured_steady_samples_per_s = 0;  // ... after its warm-up, without validations; 0: unknown
};
Summary summarize(const Plan& p);

// The cost model's relative error on stage s ((predicted - measured) / measured, whole stages); on
// cores shared `device_share` to 1, against its CPU time x share where measured.
double measured_error(const StagePlan& s, double device_share);
bool is_measured(const StagePlan& s);

std::string first_node(const StagePlan& s);
std::string last_node(const StagePlan& s);

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string human_count(double n);  // 1234567 -> "1.23M"
std::string human_bytes(double b);  // 1.5e9 -> "1.50 GB"
std::string html_escape(const std::string& s);
std::string truncate(const std::string& s, size_t width);  // with "..." when cut

// Fill colour of stage k (a qualitative palette that cycles).
const char* stage_color(int k);
// Colours of the pass kinds, shared by the bars and the timeline.
inline constexpr const char* kFwdColor = "#4e79a7";
inline constexpr const char* kBwdColor = "#f28e2b";
inline constexpr const char* kWgradColor = "#b07aa1";  // the weight-gradient part W of a split backward
inline constexpr const char* kUpdateColor = "#59a14f";
inline constexpr const char* kCommColor = "#9c9c9c";

// The simulation to draw: r.sim, or one run into `storage` when the caller gave none.
const SimResult& simulation_of(const ReportInputs& r, SimResult& storage);

// The SVG pictures of partition.html (each an <svg> element with the id named in its comment).
std::string svg_stage_times(const Plan& p);                   // id svg-stage-times
std::string svg_memory(const Plan& p, const SimResult& sim);  // id svg-memory
std::string svg_timeline(const Plan& p, const SimResult& sim);  // id svg-timeline
std::string svg_layers(const Plan& p);                        // id svg-layers

}  // namespace pt::report_detail
