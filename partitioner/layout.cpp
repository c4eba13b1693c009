// Hybrid layouts: partition and simulate each stages x replicas factorization of a device count.
#include "partitioner/layout.h"

namespace pt {

Expected<std::vector<LayoutOption>> evaluate_layouts(const Graph& g, int devices, const LayoutOptionsFn& options_for,
                                                     std::vector<Plan>* plans) {
  std::vector<LayoutOption> out;
  if (plans) plans->clear();
  const int d = std::max(1, devices);
  int best = -1;
  for (int n = d; n >= 1; --n) {
    if (d % n != 0) continue;
    LayoutOption L;
    L.stages = n;
    L.replicas = d / n;
    ASSIGN_OR_RETURN(PartitionOptions o, options_for(L.stages, L.replicas));
    Expected<Plan> p = partition(g, o);
    if (!p) {
      L.why_not = p.status().message();
      if (plans) plans->emplace_back();
    } else {
      const SimResult s = simulate(*p, 4 * n + 4);
      L.fits = true;
      L.samples_per_s = s.samples_per_s;
      L.bubble_fraction = s.bubble_fraction;
      for (int64_t b : s.peak_memory_bytes) L.peak_memory_bytes = std::max(L.peak_memory_bytes, b);
      for (const StagePlan& st : p->stages) L.allreduce_ms = std::max(L.allreduce_ms, st.allreduce_ms);
      if (best < 0 || L.samples_per_s > out[best].samples_per_s) best = static_cast<int>(out.size());
      if (plans) plans->push_back(std::move(*p));
    }
    out.push_back(std::move(L));
  }
  if (best >= 0) out[best].chosen = true;
  return out;
}

int chosen_layout(const std::vector<LayoutOption>& layouts) {
  for (size_t i = 0; i < layouts.size(); ++i)
    if (layouts[i].chosen) return static_cast<int>(i);
  return -1;
}

std::string layout_name(int stages, int replicas) {
  const std::string nxr = std::to_string(stages) + "x" + std::to_string(replicas);
  if (replicas == 1) return "pipeline " + nxr;
  if (stages == 1) return "data-parallel " + nxr;
  return "hybrid " + nxr;
}

}  // namespace pt
