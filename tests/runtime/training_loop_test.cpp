// The cadence of the one training loop (runtime/loop/training_loop.h): how many steps a run has, where
// its segments end, when it checkpoints and validates, and that a non-finite loss ends it.
#include "runtime/loop/training_loop.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace pt {
namespace {

TEST(TrainingLoop, StepsFromEpochsDropTheLastPartialBatch) {
  TrainConfig cfg;
  cfg.epochs = 3;
  TrainingLoop loop(cfg);
  ASSERT_TRUE(loop.plan(100, 32).is_ok());
  EXPECT_EQ(loop.per_epoch(), 3);  // 100 samples: 3 full batches of 32
  EXPECT_EQ(loop.total(), 9);
  cfg.steps = 7;  // --steps wins over --epochs
  TrainingLoop by_steps(cfg);
  ASSERT_TRUE(by_steps.plan(100, 32).is_ok());
  EXPECT_EQ(by_steps.total(), 7);
}

TEST(TrainingLoop, EpochCountThatOverflowsIsRefused) {
  TrainConfig cfg;
  cfg.epochs = std::numeric_limits<int64_t>::max() / 2;
  TrainingLoop loop(cfg);
  Status s = loop.plan(1000, 1);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--epochs"), std::string::npos) << s.message();
}

TEST(TrainingLoop, SegmentsEndAtCheckpointSteps) {
  TrainConfig cfg;
  cfg.steps = 10;
  cfg.checkpoint.dir = "unused";
  cfg.checkpoint.every = 4;
  TrainingLoop loop(cfg);
  ASSERT_TRUE(loop.plan(64, 8).is_ok());
  EXPECT_EQ(loop.segment_end_after(0), 4);
  EXPECT_EQ(loop.segment_end_after(3), 4);
  EXPECT_EQ(loop.segment_end_after(4), 8);
  EXPECT_EQ(loop.segment_end_after(8), 10);  // the run's end, not 12
  for (int64_t step = 1; step <= 10; ++step)
    EXPECT_EQ(loop.checkpoint_due(step, false), step == 4 || step == 8 || step == 10) << step;
  EXPECT_TRUE(loop.checkpoint_due(5, true));  // a stop checkpoints where it ends the run

  TrainConfig none = cfg;
  none.checkpoint.dir.clear();  // no folder: no checkpoint, not even on a stop; one segment
  TrainingLoop plain(none);
  ASSERT_TRUE(plain.plan(64, 8).is_ok());
  EXPECT_EQ(plain.segment_end_after(0), 10);
  EXPECT_FALSE(plain.checkpoint_due(4, false));
  EXPECT_FALSE(plain.checkpoint_due(5, true));
}

TEST(TrainingLoop, ValidationAtEpochEndsEveryNStepsAndTheLastStep) {
  TrainConfig cfg;
  cfg.epochs = 2;
  cfg.eval_every = 3;
  TrainingLoop loop(cfg);
  ASSERT_TRUE(loop.plan(40, 8).is_ok());  // 5 steps an epoch, 10 in all
  std::vector<int64_t> due;
  for (int64_t step = 1; step <= loop.total(); ++step)
    if (loop.eval_due(step)) due.push_back(step);
  EXPECT_EQ(due, (std::vector<int64_t>{3, 5, 6, 9, 10}));
}

TEST(TrainingLoop, NonFiniteLossEndsTheRunAsDiverged) {
  TrainConfig cfg;
  cfg.steps = 3;
  TrainingLoop loop(cfg);
  ASSERT_TRUE(loop.plan(16, 4).is_ok());
  EXPECT_TRUE(loop.record_loss(1, 2.5).is_ok());
  EXPECT_EQ(loop.result().first_loss, 2.5);
  Status s = loop.record_loss(2, std::nan(""));
  EXPECT_EQ(s.code(), StatusCode::kDiverged);
  EXPECT_NE(s.message().find("step 2"), std::string::npos) << s.message();
  EXPECT_EQ(loop.record_loss(3, INFINITY).code(), StatusCode::kDiverged);
}

}  // namespace
}  // namespace pt
