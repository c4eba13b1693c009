// --clip-grad-norm in a pipeline (runtime/pipeline/stage.h): GPipe sums every stage's squared
// gradient norm of a mini-batch (shared memory in one process, rank 0 under MPI) before any stage
// scales; asynchronous 1F1B clips each stage by its own norm (no update there sees every stage's
// gradient of one mini-batch).
#include "runtime/exec/optimizer.h"
#include "runtime/pipeline/stage.h"

namespace pt {

void RunShared::post_norm_part(int64_t step, int stage, int num_stages, double local) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& [parts, readers] = norm_parts[step];
    if (parts.empty()) {
      parts.assign(num_stages, -1.0);
      readers = num_stages;
    }
    parts[stage] = local;
  }
  cv.notify_all();
}

Expected<std::vector<double>> RunShared::wait_norm_parts(int64_t step) {
  std::unique_lock<std::mutex> lock(mu);
  auto& [parts, readers] = norm_parts[step];
  cv.wait(lock, [&, &parts = parts] {  // named: clang 14 cannot capture a structured binding
    if (abort) return true;
    for (double p : parts)
      if (p < 0) return false;
    return !parts.empty();
  });
  if (abort) return Status(StatusCode::kInternal, "pipeline aborted");
  std::vector<double> out = parts;
  if (--readers == 0) norm_parts.erase(step);
  return out;
}

Expected<double> RunShared::sum_over_stages(int64_t step) {
  ASSIGN_OR_RETURN(const std::vector<double> parts, wait_norm_parts(step));
  double total = 0;
  for (double p : parts) total += p;
  return total;
}

Expected<double> RunShared::rank_norm_total(int64_t step, double local) {
  if (rank_stages <= 1) return sum_across_ranks(step, {local});
  ASSIGN_OR_RETURN(const std::vector<double> parts, wait_norm_parts(step));  // this rank's, in stage order
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = rank_totals.find(step); it != rank_totals.end()) {
      const double total = it->second.first;
      if (--it->second.second == 0) rank_totals.erase(it);
      return total;
    }
  }
  ASSIGN_OR_RETURN(const double total, sum_across_ranks(step, parts));
  std::lock_guard<std::mutex> lock(mu);
  rank_totals[step] = {total, rank_stages - 1};
  return total;
}

Status Stage::post_norm_part(RunShared& sh, int64_t step) {
  ASSIGN_OR_RETURN(norm_sq_, grad_sum_squares(*ex, grads));
  if (sync() && num_stages > 1 && !sh.sum_across_ranks)  // per replica
    sh.post_norm_part(step * sh.local_replicas + replica % sh.local_replicas, index, num_stages, norm_sq_);
  else if (sync() && num_stages > 1 && sh.rank_stages > 1)  // this rank's stages meet first
    sh.post_norm_part(step, sh.rank_position.at(static_cast<size_t>(index)), sh.rank_stages, norm_sq_);
  return Status::ok();
}

Status Stage::clip_gradients(RunShared& sh, int64_t step) {
  double sq = norm_sq_;
  if (sync() && num_stages > 1) {
    if (sh.sum_across_ranks) {
      ASSIGN_OR_RETURN(sq, sh.rank_norm_total(step, sq));
    } else {
      ASSIGN_OR_RETURN(sq, sh.sum_over_stages(step * sh.local_replicas + replica % sh.local_replicas));
    }
  }
  return scale_grads(*ex, grads, clip_coefficient(sh.clip_grad_norm, sq));
}

}  // namespace pt
