// The coordinator of a run whose stages all live in this process: everything is already here.
#include "runtime/loop/rank_coordinator.h"

namespace pt {

namespace {

class LocalCoordinator final : public RankCoordinator {
 public:
  explicit LocalCoordinator(int stages) : RankCoordinator(true), stages_(stages) {}
  bool distributed() const override { return false; }
  int local_stages() const override { return stages_; }
  Status agree_data(int64_t*, bool*) override { return Status::ok(); }
  Status share_resume(const Status& resumed, int64_t*, const Tensors&) override { return resumed; }
  void relay_claims(RunShared&) override {}
  Status agree_segment_end(int64_t*, bool*) override { return Status::ok(); }
  Status gather_checkpoint(int64_t, Tensors*) override { return Status::ok(); }
  Status pass_losses(int64_t, std::vector<double>*) override { return Status::ok(); }
  Status send_snapshot(int64_t, const Snapshot&) override { return Status::ok(); }
  Status gather_snapshots(int64_t) override { return Status::ok(); }
  Status gather_final() override { return Status::ok(); }

 private:
  int stages_;
};

}  // namespace

std::unique_ptr<RankCoordinator> make_local_coordinator(int stages) { return std::make_unique<LocalCoordinator>(stages); }

}  // namespace pt
