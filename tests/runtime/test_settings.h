// What the runtime tests train with. Under separate_host_tests (tests/CMakeLists.txt runs
// runtime_tests with PIPETRAIN_TEST_SEPARATE_HOST=1) every executor these options reach keeps its
// host copies apart from its buffers, as on CUDA, so that a missing upload or download changes what
// the pipeline, checkpoint and shared-weight tests compare. Only test code reads the variable.
#pragma once

#include <memory>

#include "runtime/exec/executor.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/single/trainer.h"

namespace pt::testing {

bool separate_host_run();           // PIPETRAIN_TEST_SEPARATE_HOST is set (and not "0")
ExecSettings test_exec_settings();  // separate_host = separate_host_run()
PipelineOptions test_pipeline_options();
Trainer::Options test_trainer_options();
// Trainer::create on the CPU with test_trainer_options().
Expected<std::unique_ptr<Trainer>> test_cpu_trainer(const Graph& g, const TrainingGraph& tg);

}  // namespace pt::testing
