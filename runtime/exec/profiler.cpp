// Node profiling for --profile, and its JSON cache.
#include "runtime/exec/profiler.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/hash.h"
#include "runtime/exec/executor.h"

namespace pt {

namespace {

Expected<Profile> read_cache(const ProfileOptions& o) {
  std::ifstream in(o.cache_path);
  if (!in) return invalid_input("no cache");
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("key", "") != o.key) return invalid_input("stale cache");
    Profile p;
    for (auto& [k, v] : j.at("fwd_s").items()) p.fwd_s[k] = v.get<double>();
    for (auto& [k, v] : j.at("bwd_s").items()) p.bwd_s[k] = v.get<double>();
    return p;
  } catch (const std::exception&) {
    return invalid_input("unreadable cache");
  }
}

// A hash of what the profile measured: every node's op, name, phase and its values' dtypes and
// shapes, so that a cache made for another training graph of the same model (another precision,
// optimizer, fusion or recompute choice, frozen weights) is not taken for this one.
std::string graph_fingerprint(const Graph& g) {
  uint64_t h = fnv1a64(std::string("pipetrain-profile-1"));
  auto add_value = [&h](const Value* v) {
    if (!v) {
      h = fnv1a64(std::string("-"), h);
      return;
    }
    const int t = static_cast<int>(v->dtype);
    h = fnv1a64(&t, sizeof t, h);
    for (int64_t d : v->dims) h = fnv1a64(&d, sizeof d, h);
  };
  for (const auto& n : g.nodes()) {
    h = fnv1a64(n->op_type + "|" + n->name + "|" + phase_name(n->phase), h);
    for (const Value* v : n->inputs) add_value(v);
    for (const Value* v : n->outputs) add_value(v);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void write_cache(const ProfileOptions& o, const Profile& p, const Graph& g, const std::vector<double>& median) {
  nlohmann::json j;
  j["key"] = o.key;
  j["fwd_s"] = p.fwd_s;
  j["bwd_s"] = p.bwd_s;
  // Every node's own time, in the graph's order (for reading where a step's time goes; the
  // partitioner reads fwd_s and bwd_s): name, op, phase, the forward node a backward node serves.
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : g.nodes()) {
    nlohmann::json r = {{"name", n->name}, {"op", n->op_type}, {"phase", phase_name(n->phase)},
                        {"dtype", dtype_name(n->kernel_dtype())}, {"s", median[n->id]}};
    if (n->forward) r["serves"] = n->forward->name;
    nodes.push_back(std::move(r));
  }
  j["nodes"] = std::move(nodes);
  const std::string tmp = o.cache_path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) return;  // a cache that cannot be written is not an error
  }
  std::error_code ec;
  std::filesystem::rename(tmp, o.cache_path, ec);
}

void fill_random(HostTensor& t, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  if (t.dtype() == DType::kFloat32)
    for (int64_t i = 0; i < t.size(); ++i) t.as<float>()[i] = normal(rng);
}

}  // namespace

Expected<std::vector<double>> median_node_seconds(const Graph& g, DeviceKind device, int warmup, int repeats) {
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(g, device));
  std::mt19937_64 rng(1);
  for (Value* v : g.inputs) {
    fill_random(ex->host(v), rng);
    RETURN_IF_ERROR(ex->upload(v));
  }
  for (Value* v : g.values_of_kind(ValueKind::kHyper)) {
    HostTensor& t = ex->host(v);
    if (t.dtype() == DType::kFloat32) t.as<float>()[0] = 1e-4f;  // a tiny learning rate
    if (t.dtype() == DType::kInt64) t.as<int64_t>()[0] = 1;       // the step counter
    RETURN_IF_ERROR(ex->upload(v));
  }
  // Labels stay zero: class 0 is valid for every classifier.
  std::vector<std::vector<double>> runs;
  for (int r = 0; r < warmup + repeats; ++r) {
    std::vector<double> s(g.nodes().size(), 0.0);
    RETURN_IF_ERROR(ex->run_timed(&s));
    if (r >= warmup) runs.push_back(std::move(s));
  }
  std::vector<double> median(g.nodes().size(), 0.0);
  for (size_t id = 0; id < median.size(); ++id) {
    std::vector<double> v;
    for (auto& r : runs) v.push_back(r[id]);
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    median[id] = v[v.size() / 2];
  }
  return median;
}

Expected<Profile> profile_graph(const Graph& g, DeviceKind device, const ProfileOptions& opts_in) {
  ProfileOptions opts = opts_in;
  opts.key += "/graph " + graph_fingerprint(g);
  if (!opts.cache_path.empty()) {
    auto cached = read_cache(opts);
    if (cached) return cached;
  }
  ASSIGN_OR_RETURN(std::vector<double> median, median_node_seconds(g, device, opts.warmup, opts.repeats));
  Profile p;
  for (auto& n : g.nodes()) {
    const double t = median[n->id];
    if (n->phase == Phase::kForward || n->phase == Phase::kLoss) p.fwd_s[n->name] += t;
    else if (n->phase == Phase::kBackward && n->forward) p.bwd_s[n->forward->name] += t;
  }
  if (!opts.cache_path.empty()) write_cache(opts, p, g, median);
  return p;
}

}  // namespace pt
