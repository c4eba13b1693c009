// Weights shared across pipeline stages: a parameter has one owner stage (the one that updates
// it, with its master copy and momentum); every other stage that reads it receives, for each pass,
// the version it would use if the weight were its own, over a Link keyed by mini-batch. The
// readers' gradient contributions reach the owner's update through the graph's own sum of
// gradients (its Add nodes live with the earliest reader, the owner), over the gradient links.
#include <algorithm>

#include "partitioner/partition.h"
#include "runtime/exec/optimizer.h"
#include "runtime/pipeline/stage.h"

namespace pt {

namespace {

Status link_failed(const Link* l) {
  return l->error().is_ok() ? Status(StatusCode::kInternal, "pipeline aborted") : l->error();
}

}  // namespace

void Stage::begin_shared_segment(int64_t first) {
  segment_first_ = first;
  forwarded_end_ = first;
  for (WeightLink& w : weights_out) w.next = two_bw_predict() ? shared_message(first, false) : first;
}

// The owner's version that reader w.reader uses in its pass of mini-batch `step` (the sequential
// schedule's count of updates when that pass runs, by the rule the reader's stage uses for its
// own weights).
int64_t Stage::shared_version_for(const WeightLink& w, int64_t step) const {
  if (sync()) return step;
  if (two_bw()) return std::max<int64_t>(0, step - 1);  // every pass of mini-batch i: version i-1
  const int64_t fwd = std::max(segment_first_, step - (num_stages - w.reader - 1));
  if (!w.backward || opts.weights == WeightMode::kStash) return fwd;
  return step;
}

// Puts the version of w's parameters that the reader uses for `step` into this stage's buffers of
// those parameters (the master itself when the mode keeps no separate copy: stale and GPipe send
// the current weights).
Status Stage::load_version_for(RunShared& sh, const WeightLink& w, int64_t step) {
  if (two_bw()) {  // the master, or the version before the latest update (serve_readers checked which)
    const bool master = shared_version_for(w, step) == version_;
    for (size_t j : w.params) RETURN_IF_ERROR(master ? use_master(j) : use_working(j));
    buf_is_master_ = false;  // other parameters may hold the other version
    return Status::ok();
  }
  if (!separate_master_) return Status::ok();
  const int s = opts.weights == WeightMode::kSpecTrain ? spectrain_staleness(w.reader, num_stages, w.backward, opts.staleness) : 0;
  if (s == 0) {
    for (size_t j : w.params) RETURN_IF_ERROR(use_master(j));
    return Status::ok();  // other parameters may still hold a predicted or stashed version
  }
  RETURN_IF_ERROR(set_lr(sh, step));  // the prediction's rate is that of the reader's step
  working_prediction_ = -1;
  for (size_t j : w.params) {  // along the parameter's own optimizer step, as load_predicted does
    RETURN_IF_ERROR(use_working(j));
    RETURN_IF_ERROR(predict_weights(*ex, *updates[j], ex->view(params[j]), master_view(j), lr, s));
  }
  buf_is_master_ = false;
  return Status::ok();
}

// 2BW-predict, owner side: the messages of w in order, each once the mini-batch is forwarded here
// and this stage holds the version it is made of (version i-1 for the prediction of version i).
// A reader on the last stage never predicts (its forwards all follow its update): no predictions.
Status Stage::serve_two_bw_predict(RunShared& sh, WeightLink& w) {
  const bool reader_predicts = num_stages - w.reader - 1 > 0;
  while (w.next / 2 < forwarded_end_) {
    const int64_t step = w.next / 2;
    const bool predicted = w.next % 2 == 0;
    if (predicted && !reader_predicts) {
      ++w.next;
      continue;
    }
    const int64_t need = predicted ? step - 1 : step;
    if (need > version_) break;
    PT_CHECK(need == version_) << "stage " << index << ": version " << need << " of a shared weight for stage " << w.reader
                               << " mini-batch " << step << " is gone (now " << version_ << ")";
    if (predicted) {  // one step along the direction of update step-1, at the rate of the reader's step
      RETURN_IF_ERROR(set_lr(sh, step));
      working_prediction_ = -1;
      for (size_t j : w.params) {
        RETURN_IF_ERROR(use_working(j));
        RETURN_IF_ERROR(predict_weights(*ex, *updates[j], ex->view(params[j]), master_view(j), lr, 1));
      }
      buf_is_master_ = false;
    } else {
      for (size_t j : w.params) RETURN_IF_ERROR(use_master(j));
    }
    if (!w.link->send(w.next, *ex)) return link_failed(w.link);
    RETURN_IF_ERROR(w.link->fence(*ex));  // what was sent may still be copied from these buffers
    ++w.next;
  }
  return Status::ok();
}

Status Stage::serve_readers(RunShared& sh) {
  for (WeightLink& w : weights_out) {
    if (two_bw_predict()) {
      RETURN_IF_ERROR(serve_two_bw_predict(sh, w));
      continue;
    }
    // Only mini-batches this stage has forwarded (so every stage runs them in this segment).
    while (w.next < forwarded_end_) {
      const int64_t need = shared_version_for(w, w.next);
      if (need > version_) break;
      PT_CHECK(need == version_ || (two_bw() && need == version_ - 1)) << "stage " << index << ": version " << need << " of a shared weight for stage "
                                 << w.reader << " mini-batch " << w.next << " is gone (now " << version_ << ")";
      RETURN_IF_ERROR(load_version_for(sh, w, w.next));
      if (!w.link->send(w.next, *ex)) return link_failed(w.link);
      // What was sent may still be copied from these buffers: the next version waits for it.
      RETURN_IF_ERROR(w.link->fence(*ex));
      ++w.next;
    }
  }
  return Status::ok();
}

// 2BW-predict, reader side: the message the pass of `key` reads (by this stage's own updates, as
// load_two_bw_predict chooses for its own weights), received by the first pass that needs it and
// kept for the mini-batch's other passes (a prediction and a version are in use at once).
Status Stage::recv_two_bw_predict(int64_t key) {
  if (shared_versions_.empty()) return Status::ok();
  const int64_t step = key / micro();
  if (version_ != step && version_ != step - 1)
    return internal_error("stage " + std::to_string(index) + ": 2BW pass of mini-batch " + std::to_string(step) + " with " +
                          std::to_string(version_) + " updates done");
  const int64_t m = shared_message(step, version_ != step);
  if (shared_loaded_ == m) return Status::ok();
  const size_t b = static_cast<size_t>(m % 2);
  std::vector<DeviceBuffer>& set = shared_versions_[b];
  const Device& dev = *ex->device();
  if (shared_held_[b] == m) {
    for (size_t i = 0; i < shared_in_.size(); ++i) RETURN_IF_ERROR(ex->copy_in(shared_in_[i], set[i].view(), dev));
  } else {
    for (Link* l : weights_fwd_in)
      if (!l->recv(m, *ex)) return link_failed(l);
    for (size_t i = 0; i < shared_in_.size(); ++i) RETURN_IF_ERROR(ex->copy_out(shared_in_[i], set[i].view(), dev));
    shared_held_[b] = m;
  }
  shared_loaded_ = m;
  return Status::ok();
}

Status Stage::recv_weights(int64_t key, bool backward) {
  if (two_bw_predict()) return recv_two_bw_predict(key);
  const int64_t step = key / micro();
  if ((sync() || two_bw()) && (backward || key % micro() != 0)) {  // one version per mini-batch
    if (shared_versions_.empty() || shared_loaded_ == step) return Status::ok();
    // 2BW: the passes of mini-batches i and i+1 overlap; each loads its own mini-batch's version
    // (when the executor holds the other one).
    shared_loaded_ = step;
    const std::vector<DeviceBuffer>& set = shared_versions_[static_cast<size_t>(step % 2)];
    for (size_t i = 0; i < shared_in_.size(); ++i) RETURN_IF_ERROR(ex->copy_in(shared_in_[i], set[i].view(), *ex->device()));
    return Status::ok();
  }
  for (Link* l : backward ? weights_bwd_in : weights_fwd_in)
    if (!l->recv(step, *ex)) return link_failed(l);
  if (!shared_versions_.empty()) {  // 2BW: kept for the mini-batch's other passes
    shared_loaded_ = step;
    std::vector<DeviceBuffer>& set = shared_versions_[static_cast<size_t>(step % 2)];
    for (size_t i = 0; i < shared_in_.size(); ++i) RETURN_IF_ERROR(ex->copy_out(shared_in_[i], set[i].view(), *ex->device()));
  }
  return Status::ok();
}

}  // namespace pt
