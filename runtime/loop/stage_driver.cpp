// The one training loop (runtime/loop/stage_set.h): it drives a stage set segment by segment and keeps
// the run's books through TrainingLoop; what processes tell each other goes through the
// RankCoordinator.
#include "runtime/loop/stage_set.h"

namespace pt {

Status drive_stages(StageSet& S, RankCoordinator& co, TrainingLoop& loop, const Dataset* val, int M,
                    const std::function<Status(int64_t step, StageSet::Tensors tensors)>& save) {
  const int64_t total = loop.total();
  const bool lead = co.leads();
  TrainResult& r = loop.result();
  auto launch = [&](int64_t first) { S.launch(first, loop.segment_end_after(first)); };
  if (loop.start() < total) launch(loop.start());

  Status failure = Status::ok();
  bool stopping = false;
  auto give_up = [&](Status s) {
    failure = std::move(s);
    S.fail(failure);
  };
  // A checkpoint of the drained stages: the leader gathers every process's part and writes the
  // one file (the same format whatever ran it, so it resumes on any --gpus).
  auto checkpoint = [&](int64_t step) -> Status {
    ASSIGN_OR_RETURN(StageSet::Tensors t, S.checkpoint_tensors());
    RETURN_IF_ERROR(co.gather_checkpoint(step, &t));
    return lead ? save(step, std::move(t)) : Status::ok();
  };
  // At the end of a segment: join the stages, checkpoint, start the next segment. True when the
  // run ends here. The leader says whether the run stops here.
  auto end_segment = [&](int64_t step) -> bool {
    S.join();
    if (!S.error().is_ok()) return true;
    if (Status as = co.agree_segment_end(&step, &stopping); !as.is_ok()) {
      give_up(as);
      return true;
    }
    const bool stop_here = stopping && step < total;
    if (loop.checkpoint_due(step, stop_here)) {
      if (Status cs = checkpoint(step); !cs.is_ok()) {
        give_up(cs);
        return true;
      }
    }
    if (stop_here) {
      r.interrupted = true;
      return true;
    }
    if (step < total) launch(step);
    return false;
  };
  for (int64_t step = loop.start() + 1; step <= total && failure.is_ok(); ++step) {
    const int64_t s0 = step - 1;
    co.at_step(step);
    std::vector<double> step_losses(M, 0.0);
    if (!lead) {
      // The leader decides where a stopped segment ends; this process's stage hears it when it
      // asks to start the mini-batch, so wait for that before waiting for the mini-batch's results.
      const StageSet::Settled st = S.settle(s0);
      if (st == StageSet::Settled::kAborted) break;
      if (st == StageSet::Settled::kPastEnd) {
        r.steps = s0;
        if (end_segment(s0)) break;
        PT_CHECK(false) << "the segment ended at step " << s0 << " but the run goes on";
      }
    }
    if (!S.losses(s0, &step_losses)) break;
    if (Status ps = co.pass_losses(s0, &step_losses); !ps.is_ok()) {
      S.fail(ps);
      break;
    }
    if (!lead) {  // the followers only send their weights for validation
      if (S.snapshot_due(s0)) {
        RankCoordinator::Snapshot snap;
        if (!S.take_snapshot(s0, &snap)) break;
        if (Status ss = co.send_snapshot(s0, snap); !ss.is_ok()) {
          S.fail(ss);
          break;
        }
      }
      r.steps = step;
      if (step == S.segment_end() && end_segment(step)) break;
      continue;
    }
    double l = 0;
    for (int j = 0; j < M; ++j) l += step_losses[j];
    l /= M;
    if (Status ls = loop.record_loss(step, l); !ls.is_ok()) {
      give_up(ls);
      break;
    }
    EvalResult ev;
    if (S.snapshot_due(s0)) {
      // The weights after this step's update at every stage.
      if (!S.take_snapshot(s0, nullptr)) break;
      if (Status gs = co.gather_snapshots(s0); !gs.is_ok()) {
        give_up(gs);
        break;
      }
      auto e = S.evaluate_snapshot(*val);
      if (!e) {
        give_up(e.status());
        break;
      }
      ev = *e;
      if (Status es = loop.record_eval(step, ev); !es.is_ok()) {
        give_up(es);
        break;
      }
    }
    if (Status ms = loop.end_step(step, l, ev); !ms.is_ok()) {
      give_up(ms);
      break;
    }
    if (!stopping && loop.stop_requested(step)) {
      stopping = true;  // finish the mini-batches already started, then drain
      S.stop_early();
    }
    if (step == S.segment_end() && end_segment(step)) break;
  }
  S.join();
  loop.stop_clock();
  S.account(&r);
  if (!failure.is_ok()) return failure;
  RETURN_IF_ERROR(S.error());
  RETURN_IF_ERROR(co.gather_final());
  if (!lead) return Status::ok();
  RETURN_IF_ERROR(loop.finish());
  RETURN_IF_ERROR(S.add_scalars(loop, r.steps));
  return loop.close();
}

}  // namespace pt
